"""Web environments (WebArena's contract in a real browser)."""
