"""Tiny random HF checkpoints built from transformers' own config classes (no downloads)."""

from __future__ import annotations

import os

import numpy as np

from jgem.models.config import ModelConfig

VOCAB = 96

# Small enough to compile fast, big enough to exercise GQA (4 heads / 2 kv heads), biases, qk-norm, rope scaling.
BASE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
)


def hf_config(family: str, *, tie: bool = False, **kw):
    """A transformers config for a tiny model of `family` (llama gets llama3 rope scaling that matters at 64+)."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

    args = {**BASE, "tie_word_embeddings": tie, **kw}
    if family == "qwen3_moe":  # kw: the MoE fields (num_experts, ...)
        return Qwen3MoeConfig(rope_theta=10000.0, **args)
    if family == "qwen3":
        return Qwen3Config(rope_theta=10000.0, **args)
    if family == "qwen2":
        return Qwen2Config(rope_theta=10000.0, **args)
    if family == "llama":
        rope = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
        return LlamaConfig(rope_parameters=rope, **args)
    raise ValueError(family)


def torch_model(family: str, *, seed: int = 0, tie: bool = False, **kw):
    """A transformers CausalLM with every weight random (norm scales around 1, biases nonzero) so a wrong
    mapping of any tensor shows up in the logits."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(family, tie=tie, **kw)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * (0.1 if "norm" in name else 0.25)
            p.copy_((1.0 + noise) if "norm" in name else noise)
    return model


def save_hf(model, path: str, **kw) -> str:
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path, **kw)
    return path


def torch_logits(model, tokens: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(np.asarray(tokens), dtype=torch.long)).logits.float().numpy()


def tiny_cfg(family: str = "qwen3", **kw) -> ModelConfig:
    """A jgem config with the same shapes as `hf_config` (no torch needed)."""
    rope = {}
    if family == "llama":
        from jgem.models.config import RopeScaling

        rope = dict(rope_theta=500000.0, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 64), rms_norm_eps=1e-6)
    base = dict(
        family=family,
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        qk_norm=family in ("qwen3", "qwen3_moe"),
        qkv_bias=family == "qwen2",
        rope_theta=10000.0,
    )
    return ModelConfig(**{**base, **rope, **kw})
