"""Flax NNX models, HF checkpoints, tokenizers and the sampler."""
