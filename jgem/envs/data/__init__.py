"""Shipped data for the task suites (QA corpus and questions, math and code problems)."""
