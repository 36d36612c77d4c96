"""The kubelet DRA plugin: registration and the DRAPlugin gRPC services on Unix sockets.

``service`` answers NodePrepareResources / NodeUnprepareResources (through
``kvdev.host.publish.writer``), ``server`` runs the two gRPC servers, ``claimsource`` is the seam
that fetches a claim's objects (from files), ``kube`` the same from the Kubernetes API,
``claimstatus`` applies a prepared claim's ``status.devices``, ``health`` answers probes
(``grpc.health.v1``) by dialing the plugin's own sockets, ``metrics`` counts and serves.
"""
