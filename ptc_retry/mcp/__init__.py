"""ptc-retry over MCP: upstream MCP servers' tools as host tools of a kernel backend."""
