"""A run with a native tool-call format end to end: the trainer's chat format lists the tools' schemas in the
template's own words, and the run trains (issue 35: "a Qwen3-style run can train and evaluate with the model's own
tool-call format"; the stream's token exactness against the templates is tests/tools/test_native_streams.py)."""

from __future__ import annotations

import math

from jgem.config import EnvConfig, ModelSpec
from jgem.metrics import read_jsonl
from jgem.models.config import PRESETS, preset
from jgem.rollout.config import RolloutConfig
from jgem.train import Trainer
from tests.tools.native_tools import template_tokenizer
from tests.train_utils import small_config

TOOLS_MICRO = "test-micro-tools"  # the micro model with room for the Qwen family's added tokens
PRESETS.setdefault(
    TOOLS_MICRO,
    preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1, vocab_size=1040),
)


def test_a_hermes_run_lists_the_tools_in_the_templates_words_and_trains(tmp_path):
    tok = template_tokenizer("qwen2.5")
    tok.save_pretrained(tmp_path / "tokenizer")
    env = EnvConfig(env_id="math:arithmetic", num_envs=2, backend="inline", tools=("python",), tool_format="hermes")
    cfg = small_config(
        str(tmp_path / "run"),
        steps=1,
        episodes_per_step=2,
        env=env,
        model=ModelSpec(preset=TOOLS_MICRO, tokenizer_path=str(tmp_path / "tokenizer")),
        rollout=RolloutConfig(view="chat", max_new_tokens=6, max_episode_tokens=640),  # the tool block: ~480 tokens
        batch_buckets=(1024,),
    )
    trainer = Trainer(cfg)
    try:
        assert trainer.chat.tools and trainer.chat.tools[0]["function"]["name"] == "python"
        (episode, _) = trainer.collect(0)
        prompt = tok.decode(episode.prompt_ids(0))
        # Qwen2.5's own tool block, with the schema; the gem_tags instructions are not in the observation
        assert "# Tools" in prompt and "<tools>" in prompt and '"name": "python"' in prompt
        assert "<python>" not in prompt
        summary = trainer.run()
    finally:
        trainer.close()
    assert summary["steps"] == 1
    rows = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "train/loss" in r]
    assert len(rows) == 1 and math.isfinite(rows[0]["train/loss"])
