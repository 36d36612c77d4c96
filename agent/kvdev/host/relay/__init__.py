"""The node relay (``kvdev-host relay``): the drivers' own metadata files, relayed as they are.

``finder`` reads the ``<driver>/metadata`` CDI specs of the node and the files they mount
with ``kvdev.host.cdi`` (I/O, bounded); ``publish/relayed`` turns them into relay records
(pure); ``live`` keeps the node's records in the API server (``kube`` is its wire).
"""
