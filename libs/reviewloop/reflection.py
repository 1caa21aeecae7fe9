"""gRPC server reflection, ``v1`` beside ``v1alpha``.

grpcio-reflection ships only ``grpc.reflection.v1alpha`` (grpc/grpc#38576 asks for ``v1``), while newer
clients (grpcurl, Postman, grpcui) ask ``v1`` first. The two protocols are the same messages under another
package, so ``v1`` is served by the package's own servicer: its file descriptor is v1alpha's renamed (so a
client can describe the ``v1`` service too), and the bytes on the wire are read and written with v1alpha's
message classes, whose field numbers are the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2
from grpc_reflection.v1alpha._async import ReflectionServicer

V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
_ALPHA_PACKAGE = reflection_pb2.DESCRIPTOR.package


def _register_v1_descriptor() -> None:
    pool = descriptor_pool.Default()
    try:
        pool.FindServiceByName(V1_SERVICE_NAME)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = "grpc/reflection/v1/reflection.proto"
    proto.package = V1_PACKAGE
    alpha, v1 = f".{_ALPHA_PACKAGE}.", f".{V1_PACKAGE}."
    for message in proto.message_type:
        for field in message.field:
            if field.type_name:  # set only on message and enum fields
                field.type_name = field.type_name.replace(alpha, v1)
    for service in proto.service:
        for method in service.method:
            method.input_type = method.input_type.replace(alpha, v1)
            method.output_type = method.output_type.replace(alpha, v1)
    pool.Add(proto)


def enable(service_names: Sequence[str], server: grpc.aio.Server) -> None:
    """Serve reflection ``v1`` and ``v1alpha`` on ``server``, each listing ``service_names`` and both."""
    _register_v1_descriptor()
    names = (*service_names, reflection.SERVICE_NAME, V1_SERVICE_NAME)
    servicer = ReflectionServicer(names)
    for service in (reflection.SERVICE_NAME, V1_SERVICE_NAME):
        method = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": method}),)
        )
