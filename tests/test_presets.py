"""Every preset builds its Trainer: the presets that need a real checkpoint run on a tiny stand-in one."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from flax import nnx

from experiments.configs import PRESETS
from jgem.models.config import preset
from jgem.models.hf import save_pretrained
from jgem.models.tokenizer import TINY_TOKENIZER_DIR
from jgem.models.transformer import Transformer


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A tiny HF checkpoint directory (weights, config, the shipped tiny tokenizer) and a math data file."""
    root = tmp_path_factory.mktemp("stand_in")
    ckpt = root / "ckpt"
    cfg = preset("tiny")
    save_pretrained(Transformer(cfg, rngs=nnx.Rngs(0)), cfg, ckpt)
    for f in TINY_TOKENIZER_DIR.iterdir():
        shutil.copy(f, ckpt / f.name)
    data = root / "math.jsonl"
    data.write_text(
        "".join(json.dumps({"problem": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(4))
    )
    return ckpt, data


def _first_observation(trainer) -> str:
    trainer.pool.reset([0], [0])
    batch = trainer.pool.recv()
    obs = batch.obs[0]
    if isinstance(obs, dict):  # a multi-agent game: each agent's observation
        return "\n".join(obs.values())
    return obs if isinstance(obs, str) else "\n".join(m["content"] for m in obs)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_its_trainer(name, stand_in, tmp_path):
    from jgem.train import Trainer

    ckpt, data = stand_in
    cfg = PRESETS[name][1]
    env_kwargs = {k: (str(data) if k == "path" else v) for k, v in cfg.env.env_kwargs.items()}
    cfg = dataclasses.replace(
        cfg,
        run_dir=str(tmp_path / "run"),
        # a tiny stand-in for the real checkpoint; only the paths and the pool size change
        model=dataclasses.replace(cfg.model, path=None if cfg.model.path is None else str(ckpt)),
        env=dataclasses.replace(cfg.env, env_kwargs=env_kwargs, num_envs=2),
    )
    trainer = Trainer(cfg)
    try:
        assert trainer.model_cfg.vocab_size == preset("tiny").vocab_size
        obs = _first_observation(trainer)
        if "python" in cfg.env.tools:
            assert "<python>" in obs  # the math task comes wrapped with the Python tool's instructions
    finally:
        trainer.pool.close()


def test_tools_wrap_any_suite_from_the_cli():
    import tyro

    from jgem.config import validate

    argv = ["tiny", "--env.env-id", "math:arithmetic", "--env.tools", "python", "search", "--warm-start.steps", "0"]
    cfg = tyro.extras.overridable_config_cli(PRESETS, args=argv, console_outputs=False)
    assert cfg.env.tools == ("python", "search")
    validate(cfg, 1)

    from jgem.envs.with_tools import tool_wrapper

    (wrap,) = tool_wrapper(cfg.env)
    import jgem

    env = wrap(jgem.make("math:arithmetic"))
    obs, _ = env.reset(seed=0)
    assert "<python>" in obs and "<search>" in obs
    _, r, term, _, info = env.step("<search>capital</search>")
    assert info["use_tool"] and info["tool"] == "search" and r == 0.0 and not term
    with pytest.raises(ValueError, match="unknown tool 'shell'"):
        validate(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, tools=("shell",))), 1)
    with pytest.raises(ValueError, match="mcp-server is not set"):
        validate(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, tools=("mcp",))), 1)
