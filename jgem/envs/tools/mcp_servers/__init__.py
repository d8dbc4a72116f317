"""Small MCP servers shipped with jgem (used by the tests and examples)."""
