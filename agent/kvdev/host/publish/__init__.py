"""What NodePrepareResources writes: KEP-5304 metadata files, CDI specs, claim device status.

``metadata``, ``files`` and ``devicestatus`` are pure (claim + slices in, documents out; the
CDI specs from ``kvdev.host.cdi.spec``); ``writer`` puts the files on the host's disk (through
``kvdev.host.fs``); ``relayed`` makes and reads the node relay's records.
"""
