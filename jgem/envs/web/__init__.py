"""Web environments: WebArena's observation and action spaces in a real headless Chromium.

`actions` parses WebArena's action grammar, `observation` renders the accessibility tree (or a cheaper text
view) as WebArena's agents see it, and `browser` drives one Chromium per session through Playwright. Importing
this package imports nothing heavy; Playwright is needed only by `browser`.
"""
