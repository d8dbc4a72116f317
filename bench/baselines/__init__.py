"""Peers that bench/ measures jgem against, kept here rather than in jgem/ (jgem has one generation path)."""
