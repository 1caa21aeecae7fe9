"""The admin plane: every ``/v1/admin/...`` route (admin key or the bootstrap token), the human authority
an agent never has; the console's pages (``gateway.console``) perform the same verbs. Not MCP tools
(``gateway.mcp`` skips the prefix)."""
