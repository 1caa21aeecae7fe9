"""The console: every ``/v1/admin/...`` route (admin key or the bootstrap token), the human authority an
agent never has. Not MCP tools (``gateway.mcp`` skips the prefix)."""
