"""What NodePrepareResources writes: KEP-5304 metadata files, CDI specs, claim device status.

``metadata``, ``cdi`` and ``devicestatus`` are pure (claim + slices in, documents out);
``writer`` puts the files on the host's disk (through ``kvdev.host.fs``).
"""
