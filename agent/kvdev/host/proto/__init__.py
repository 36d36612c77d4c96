"""The kubelet plugin wire API: our .proto files and the Python stubs generated from them.

``registration.proto`` is kubelet's plugin registration service, ``dra_v1.proto`` and
``dra_v1beta1.proto`` its DRA node service. The ``*_pb2*.py`` and ``*_pb2*.pyi`` files are
generated (``make proto``, i.e. ``python -m kvdev.host.proto``) and committed; never edit them
by hand. Nothing else lives here.
"""
