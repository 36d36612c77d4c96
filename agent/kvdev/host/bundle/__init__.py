"""Guest bundles: the container-side metadata tree plus kvdev GuestHints, published for the VM.

``build`` (pure) makes the bundle from the tree and where each device sits in the guest, which
``domainxml`` reads from libvirt's domain XML or ``plan`` from a guest-plan file; ``source``
reads the tree (or CDI specs), ``writer`` publishes the bundle as a whole.
"""
