"""gateway: the agent-facing JSON surface (REST, problem+json, OpenAPI, MCP) over the gRPC services."""
