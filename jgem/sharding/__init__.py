"""Meshes and logical-axis sharding rules."""
