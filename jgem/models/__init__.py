"""Flax NNX models, HF checkpoints, tokenizers and the vocab head's log-probs (sampling is the rollout engine's)."""
