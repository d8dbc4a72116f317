import jax
import pytest
from flax import nnx

from jgem.models.config import PRESETS, ModelConfig, RopeScaling, preset
from jgem.models.transformer import Transformer

# Published parameter counts (model cards / safetensors totals), in billions.
PUBLISHED = {
    "qwen3-0.6b": 0.596,
    "qwen3-1.7b": 1.72,
    "qwen3-4b": 4.02,
    "qwen3-8b": 8.19,
    "qwen2.5-0.5b": 0.494,
    "qwen2.5-1.5b": 1.54,
    "qwen2.5-3b": 3.09,
    "qwen2.5-7b": 7.62,
    "llama3.2-1b": 1.236,
    "llama3.2-3b": 3.21,
    "qwen3-30b-a3b": 30.5,  # 3.3B active
    "qwen3-235b-a22b": 235.1,  # 22B active
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_param_counts_match_published(name):
    assert preset(name).num_params / 1e9 == pytest.approx(PUBLISHED[name], rel=0.01)


def test_small_presets():
    tiny = preset("tiny")
    assert (tiny.family, tiny.vocab_size) == ("qwen3", 1024)
    assert 0.5e6 < tiny.num_params < 1.5e6
    assert preset("tiny-qwen2").qkv_bias and preset("tiny-llama").rope_scaling is not None
    assert 90e6 < preset("100m").num_params < 110e6


@pytest.mark.parametrize("name", ["tiny", "tiny-qwen2", "tiny-llama"])
def test_num_params_counts_the_real_model(name):
    cfg = preset(name)
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    assert sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))) == cfg.num_params


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_hf_dict_round_trip(name):
    cfg = preset(name)
    assert ModelConfig.from_hf(cfg.to_hf_dict()) == cfg


def test_from_transformers_configs():
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    q3 = ModelConfig.from_hf(Qwen3Config(num_attention_heads=8, num_key_value_heads=2, head_dim=64).to_dict())
    assert q3.qk_norm and not q3.qkv_bias and q3.head_dim == 64 and q3.num_kv_heads == 2
    q2 = ModelConfig.from_hf(Qwen2Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2).to_dict())
    assert q2.qkv_bias and q2.head_dim == 64
    rope = {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    ll = ModelConfig.from_hf(LlamaConfig(rope_parameters=rope, max_position_embeddings=131072).to_dict())
    assert ll.rope_theta == 5e5 and ll.rope_scaling == RopeScaling(32.0, 1.0, 4.0, 8192)


def test_legacy_config_json(tmp_path):
    import json

    # The layout of the published Llama 3.2 config.json (transformers 4.x).
    d = {
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    }
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert ModelConfig.from_hf(tmp_path) == preset("llama3.2-1b")
    assert ModelConfig.from_hf(tmp_path, dtype="bfloat16").dtype == "bfloat16"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model_type": "mistral"}, "mistral"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
        ({"mlp_bias": True}, "mlp_bias"),
    ],
)
def test_unsupported_fields_are_named(change, message):
    d = {**preset("tiny").to_hf_dict(), **change}
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf(d)


def test_bad_values():
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("gpt2")
    with pytest.raises(ValueError, match="num_kv_heads"):
        preset("tiny", num_kv_heads=3)
    with pytest.raises(ValueError, match="dtype"):
        preset("tiny", dtype="float8")
