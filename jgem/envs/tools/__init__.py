"""Agent tools (Python sandbox, BM25 search, MCP) and the ToolEnv wrapper. Import the submodules."""
