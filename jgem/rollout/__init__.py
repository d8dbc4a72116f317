"""Multi-turn rollout collection and batching."""
