"""Task suites (math, code, QA, reasoning-gym): id registrations. Owned by the tools issue."""
