"""LoRA through the trainer: only the adapters train and hold optimizer state, the sampler and the learner see the
same adapted model while the KL reference stays the base, a LoRA run resumes exactly, and exports merge the
adapters into weights transformers loads (also for a run started from a tiny HF checkpoint)."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest
from flax import nnx

from experiments import export as export_cli
from jgem.checkpoint import CheckpointConfig, Checkpointer, ConfigMismatchError
from jgem.models.config import LoraConfig, preset
from jgem.models.head import token_logprobs
from jgem.models.tokenizer import TINY_TOKENIZER_DIR
from jgem.models.transformer import Transformer
from jgem.train import Trainer, train
from jgem.train.loop import params_digest
from tests.train_utils import MICRO, perturbed, small_config

LORA = LoraConfig(rank=4, alpha=8.0)
# a supervised step moves the adapters for sure (RL may not), and by enough to show in the logits; one setting for
# every LoRA test here, so that they share its compiled step
WARM = {"steps": 1, "episodes_per_step": 4, "lr": 1e-2}


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x) for x in jax.tree.leaves(jax.device_get(tree))]


def _equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(_leaves(a), _leaves(b), strict=True))


def _logprobs(model, batch) -> np.ndarray:
    lp = jax.jit(lambda t, p, s: token_logprobs(model, t, p, s)[0])(batch.tokens, batch.positions, batch.segment_ids)
    return np.asarray(lp)


def test_only_the_adapters_train_and_hold_optimizer_state(tmp_path):
    # two supervised steps: the first moves only B (A's gradient is zero while B is), the second A too
    tr = Trainer(small_config(str(tmp_path), model={"lora": LORA}, warm_start={**WARM, "steps": 2}))
    mcfg = tr.model_cfg
    names = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(tr.state.params)}
    assert names and all(n.endswith((".lora_a", ".lora_b")) for n in names)
    # AdamW's two moments over the adapters and nothing else (plus scalar step counts)
    moments = sum(x.size for x in _leaves(tr.state.opt_state) if x.ndim)
    assert moments == 2 * mcfg.num_lora_params
    base, adapters = params_digest(tr.state.model_state), jax.device_get(tr.state.params)
    tr.warm_start(lambda step, metrics: None)
    tr.pool.close()
    assert params_digest(tr.state.model_state) == base, "the base weights must stay bit-identical"
    after = jax.device_get(tr.state.params)
    for path, var in nnx.to_flat_state(after):
        assert not np.array_equal(var[...], dict(nnx.to_flat_state(adapters))[path][...]), path


@pytest.mark.slow
def test_ppo_with_lora_trains_the_critics_adapters_and_value_head(tmp_path):
    tr = Trainer(small_config(str(tmp_path), algorithm="ppo", steps=1, model={"lora": LORA}))
    names = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(tr.state.critic_params)}
    assert {"value_w", "value_b"} <= names
    assert all(n.endswith((".lora_a", ".lora_b")) for n in names - {"value_w", "value_b"})
    frozen, trained = params_digest(tr.state.critic_state), params_digest(tr.state.critic_params)
    metrics = tr.train_step(0)  # one RL step, as a run makes it (without its checkpoint and logs)
    tr.close()
    assert params_digest(tr.state.critic_state) == frozen
    assert params_digest(tr.state.critic_params) != trained
    assert np.isfinite(metrics["train/value_loss"])


def test_a_run_from_before_lora_resumes_and_a_changed_lora_is_refused(tmp_path, monkeypatch):
    """A checkpoint whose config predates `model.lora` resumes without adapters (the field's default), and a resume
    that would add them is refused, naming the field, before any state is restored (the adapted state does not
    fit the checkpoint's: it was set aside as corrupt)."""
    train(small_config(str(tmp_path), steps=1))
    host = tmp_path / "checkpoints" / "1" / "host" / "metadata"
    doc = json.loads(host.read_text())
    doc["config"] = {k: v for k, v in doc["config"].items() if not k.startswith("model.lora.")}
    host.write_text(json.dumps(doc))
    with pytest.raises(ConfigMismatchError, match="model.lora.rank: checkpoint='<missing>' now=4"):
        train(small_config(str(tmp_path), steps=2, model={"lora": LORA}))
    assert host.is_file() and not (tmp_path / "checkpoints.corrupt").exists()
    steps = []
    real = Trainer.train_step
    monkeypatch.setattr(Trainer, "train_step", lambda self, step: steps.append(step) or real(self, step))
    assert train(small_config(str(tmp_path), steps=2))["steps"] == 2
    assert steps == [1], "the run resumes after its checkpointed step"


def test_sampler_and_learner_see_the_adapted_model_and_the_reference_is_the_base(tmp_path):
    """Adapters moved off their init: the learner's recomputed log-probs equal the sampler's on every action token
    (and differ from the base's), while the KL reference's log-probs are the base model's, before and after an
    update. With remat, as the large presets train."""
    cfg = small_config(str(tmp_path), steps=1, model={"lora": LORA, "remat": "full"}, learner={"kl_coef": 0.1})
    tr = Trainer(cfg)
    tr.state = tr.state.replace(params=perturbed(tr.state.params, 0.3, seed=1))
    episodes = tr.collect(0)
    batch, _ = tr.learner.make_batch(episodes)
    mask = np.asarray(batch.loss_mask)
    assert mask.sum() > 0
    learner = _logprobs(tr.state.model(), batch)
    np.testing.assert_allclose(learner[mask], np.asarray(batch.old_logprobs)[mask], atol=2e-4)
    base = _logprobs(Transformer(preset(MICRO), rngs=nnx.Rngs(tr.cfg.seed)), batch)
    assert np.abs(learner - base)[mask].max() > 1e-2, "the adapters must change what is sampled and learned"
    np.testing.assert_allclose(np.asarray(batch.ref_logprobs)[mask], base[mask], atol=1e-5)
    m = tr.learn(episodes)
    assert m["logprob_diff_max"] < 2e-4 and m["kl"] > 0
    after, _ = tr.learner.make_batch(episodes)  # the reference's log-probs after the update: still the base model's
    np.testing.assert_allclose(np.asarray(after.ref_logprobs)[mask], base[mask], atol=1e-5)


ARGS = dict(model={"lora": LORA}, warm_start=WARM)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Trainer:
    """A LoRA run, never interrupted: the warm start's supervised step, then 2 RL steps (checkpoints 0, 1, 2)."""
    straight = Trainer(small_config(str(tmp_path_factory.mktemp("lora") / "a"), steps=2, **ARGS))
    straight.run()
    return straight


@pytest.mark.xdist_group("lora-run")  # with the export test: one lora_run
def test_a_lora_run_resumes_exactly(tmp_path, lora_run):
    """The adapters and their optimizer state restore bit-exactly, and a run resumed after step 1 ends where one
    never interrupted does."""
    straight = lora_run
    first = Trainer(small_config(str(tmp_path / "b"), steps=1, **ARGS))
    first.run()
    resumed = Trainer(small_config(str(tmp_path / "b"), steps=2, **ARGS))
    with Checkpointer(CheckpointConfig(str(tmp_path / "b" / "checkpoints"))) as ckpt:
        restored = ckpt.restore_latest(resumed.state).state
    for field in ("params", "opt_state", "model_state", "step", "rng"):
        assert _equal(getattr(restored, field), getattr(first.state, field)), field

    def no_warm_start(log):
        raise AssertionError("a resumed run must not repeat the warm start")

    resumed.warm_start = no_warm_start
    resumed.run()
    for field in ("params", "opt_state", "model_state"):
        assert _equal(getattr(resumed.state, field), getattr(straight.state, field)), field


def _hf_logits(path, ids: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path).eval()
    with torch.no_grad():
        return model(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()


def _ids(path) -> np.ndarray:
    from transformers import AutoTokenizer

    return np.array([AutoTokenizer.from_pretrained(path)("Guess a number between 1 and 4. \\boxed{3}")["input_ids"]])


@nnx.jit
def _forward(model, ids, positions):
    return model(ids, positions)[0]


def _logits(model, ids: np.ndarray) -> np.ndarray:
    """The model's logits on `ids` [1, T] (one compiled program, not one per operation)."""
    return np.asarray(_forward(model, ids.astype(np.int32), np.arange(ids.shape[1], dtype=np.int32)[None]))


def _jgem_logits(trainer: Trainer, ids: np.ndarray) -> np.ndarray:
    return _logits(trainer.state.model(), ids)


@pytest.mark.parity
@pytest.mark.xdist_group("lora-run")  # with the resume test: one lora_run
def test_an_exported_lora_run_loads_in_transformers_with_the_adapted_logits(tmp_path, lora_run):
    # the LoRA run's latest checkpoint: its warm start's supervised step and 2 RL steps trained the adapters
    trainer, cfg = lora_run, lora_run.cfg
    out = tmp_path / "hf"
    export_cli.main([cfg.run_dir, "--out", str(out)])
    exported = json.loads((out / "config.json").read_text())
    assert not any("lora" in k for k in exported), "transformers gets a plain model"
    ids = _ids(out)
    ours = _jgem_logits(trainer, ids)
    base = _logits(Transformer(preset(MICRO), rngs=nnx.Rngs(cfg.seed)), ids)
    assert np.abs(ours - base).max() > 1e-3, "the trained adapters must matter, or the merge is not tested"
    np.testing.assert_allclose(_hf_logits(out, ids), ours, atol=1e-4, rtol=1e-4)


ARCH = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "tie_word_embeddings",
)


def _rope_theta(config: dict) -> float:
    return float((config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta")))


@pytest.mark.slow
@pytest.mark.parity
def test_a_run_from_a_tiny_hf_checkpoint_exports_its_architecture_and_trained_logits(tmp_path):
    """A random Qwen3 written by transformers (with the shipped tokenizer) trains one step through the trainer
    (`model.path`, LoRA on: the base from the checkpoint, fresh adapters), exports, and comes back with the
    source's architecture and the trained model's logits."""
    from tests.models.helpers import save_hf, torch_logits, torch_model

    src = tmp_path / "src"
    hf = torch_model("qwen3", vocab_size=1024, hidden_size=64, num_key_value_heads=1, rms_norm_eps=1e-5, head_dim=16)
    save_hf(hf, str(src))
    for f in TINY_TOKENIZER_DIR.iterdir():
        shutil.copy(f, src / f.name)
    cfg = small_config(str(tmp_path / "run"), steps=0, model={"path": str(src), "lora": LORA}, warm_start=WARM)
    trainer = Trainer(cfg)
    assert trainer.model_cfg.lora == LORA
    trainer.run()
    out = tmp_path / "hf"
    export_cli.main([cfg.run_dir, "--out", str(out)])

    source, exported = (json.loads((d / "config.json").read_text()) for d in (src, out))
    assert {k: exported[k] for k in ARCH} == {k: source[k] for k in ARCH}
    assert _rope_theta(exported) == _rope_theta(source) == 10000.0
    ids = _ids(out)
    ours = _jgem_logits(trainer, ids)
    # the source's logits from the model that wrote it (the same weights, not loaded again)
    assert np.abs(torch_logits(hf, ids) - ours).max() > 1e-3, "one step must move the model, or parity is trivial"
    np.testing.assert_allclose(_hf_logits(out, ids), ours, atol=1e-4, rtol=1e-4)
    assert (out / "tokenizer.json").is_file()
