"""An env's tools as an MCP server: :mod:`.server` (``create_mcp_server``, ``serve_mcp_in_thread``) and
:mod:`.cli` (``stratagym serve mcp``). ``fastmcp`` is imported only when a server is built."""
