"""Agent tools (Python sandbox, BM25 search, MCP), the tool-call formats and the ToolEnv wrapper. Import the
submodules."""
