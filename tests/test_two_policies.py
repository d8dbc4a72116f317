"""Two trainable policies in one run, from the CLI's config (LoRA adapters on one base, `--rollout.policies`): each
seat samples with its policy's adapter, each policy trains on its own seat's episodes, in every pipeline mode; the
export writes one HF model per policy. Its own xdist group: the four pipeline modes share their compiled programs on
one worker, apart from the workflows group's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.config import LoraConfig
from jgem.registry import register

pytestmark = pytest.mark.xdist_group("two-policies")
register("test:secrets", "tests.rollout.envs:SecretsEnv", overwrite=True)  # as tests/rollout/test_agents_workflow.py


@pytest.mark.parametrize("pipeline", ["sync", "off_policy", "async", "stream"])
def test_two_policies_each_train_on_their_own_seats_episodes(tmp_path, pipeline):
    """--rollout.policies a b with two LoRA adapters: each seat is sampled with its policy's adapter, each policy's
    loss counts only its own tokens, and each adapter moves; a warm start teaches each its own seat."""
    import json

    from jgem.train import Trainer
    from tests.train_utils import small_config

    cfg = small_config(
        str(tmp_path / "run"),
        steps=2,
        algorithm="rae",
        group_size=2,
        episodes_per_step=4,
        env={"env_id": "test:secrets", "num_envs": 4, "imports": ("tests.rollout.envs",)},
        model={"lora": LoraConfig(rank=4, alpha=8.0, adapters=2)},
        rollout={"workflow": "agents", "policies": ("a", "b"), "eval_opponent": "echo"},
        warm_start={"steps": 1, "episodes_per_step": 4, "teacher": "echo"},
        pipeline={"mode": pipeline},
        learner={"lr": 1e-2},
    )
    trainer = Trainer(cfg)
    played = {True: [], False: []}  # the episodes each update trains on: the warm start's, RL's
    learn = trainer.learner.learn

    def spy(episodes, **kwargs):
        played[kwargs.get("sft", False)].extend(episodes)
        return learn(episodes, **kwargs)

    trainer.learner.learn = spy
    initial = jax.tree.map(np.asarray, trainer.learner.state.params)
    trainer.run()
    final = jax.tree.map(np.asarray, trainer.learner.state.params)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r and r["step"] > 0]
    assert len(train) == 2 and all(r["policy0/tokens"] > 0 and r["policy1/tokens"] > 0 for r in train)
    for episodes in played.values():  # seat a is policy 0's, seat b policy 1's, in the warm start and in RL
        assert {(e.role, e.policy) for e in episodes} == {(0, 0), (1, 1)}
    for a, b in zip(jax.tree.leaves(initial), jax.tree.leaves(final)):
        if a.shape[0] == 2 and np.abs(a).sum():  # every adapter with a nonzero factor moved, each its own way
            assert not np.allclose(a[0], b[0]) and not np.allclose(a[1], b[1])
    if pipeline == "sync":
        # the sampler sampled each seat with its policy's adapter: the learner's log-probs at the sampling params
        # (the first minibatch's) are the sampler's (the adapters differ since the warm start: a wrong one shows)
        assert all(r["train/logprob_diff_max"] < 1e-4 for r in train), [r["train/logprob_diff_max"] for r in train]
        _check_policy_export(trainer, tmp_path / "hf")  # one HF model per policy, each with its own adapter merged
        # one upload, one download: every policy's batch and metrics in the one step program
        from tests.algo_step_trainers import guarded_learn

        trainer.learner.learn = learn
        metrics, counts = guarded_learn(trainer, played[False][-4:])
        assert counts == {"upload": 1, "download": 1} and metrics["policy0/tokens"] > 0 < metrics["policy1/tokens"]


def _check_policy_export(trainer, out):
    import torch
    from transformers import AutoModelForCausalLM

    from experiments import export as export_cli

    files = export_cli.main([trainer.cfg.run_dir, "--out", str(out)])
    assert {"policy0/model.safetensors", "policy1/model.safetensors"} <= set(files)
    ids = np.random.default_rng(0).integers(3, trainer.model_cfg.vocab_size, (1, 12)).astype(np.int32)
    pos = np.arange(12, dtype=np.int32)[None]
    model = trainer.state.model()
    ours = [np.asarray(nnx.jit(lambda m, p: m(ids, pos, adapter_ids=p)[0])(model, jnp.full((1,), p))) for p in (0, 1)]
    assert np.abs(ours[0] - ours[1]).max() > 1e-4  # the policies differ, so each export's adapter is checked
    for p in (0, 1):
        with torch.no_grad():
            hf = AutoModelForCausalLM.from_pretrained(out / f"policy{p}").eval()(torch.tensor(ids, dtype=torch.long))
        np.testing.assert_allclose(hf.logits.float().numpy(), ours[p], atol=1e-4, rtol=1e-4, err_msg=f"policy {p}")
    export_cli.main([trainer.cfg.run_dir, "--out", str(out / "one"), "--adapter", "1"])
    assert (out / "one" / "model.safetensors").read_bytes() == (out / "policy1" / "model.safetensors").read_bytes()
