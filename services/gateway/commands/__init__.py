"""One command per verb the REST routes and the console both perform: the principal and the verb's shape
(the REST body) in, the service's answer out. The route (and so MCP, which runs the routes in-process) and
the console's handler both call the command; neither builds that gRPC request itself. A refusal is the
service's ``grpc.aio.AioRpcError`` or a ``DomainError``, which the route maps to problem+json and the
console to its page again."""
