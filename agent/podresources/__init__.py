"""The kubelet's PodResources v1 API (``v1.PodResourcesLister``).

``api_pb2.py``, ``api_pb2.pyi`` and ``api_pb2_grpc.py`` are generated from ``api.proto`` by
``scripts/gen-podresources`` (``python -m grpc_tools.protoc`` from grpcio-tools, with the
``_grpc`` module's import made package-relative). Do not edit them; rerun the script.

Importing this package is free; importing ``api_pb2``/``api_pb2_grpc`` loads protobuf and grpc.
"""
