"""jgem vs transformers' PyTorch models on the same random weights (float32): logits, and greedy generation through
the rollout engine's slots (`jgem.rollout.generate`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.hf import load_pretrained
from jgem.rollout.config import Sampling
from jgem.rollout.generate import generate
from jgem.rollout.slots import SlotEngine
from tests.models.helpers import VOCAB, save_hf, torch_logits, torch_model

pytest.importorskip("torch")
pytestmark = pytest.mark.parity

FAMILIES = ["qwen3", "qwen2", "llama"]


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request, tmp_path_factory):
    family = request.param
    tm = torch_model(family, seed=FAMILIES.index(family), tie=family == "qwen2")
    path = save_hf(tm, str(tmp_path_factory.mktemp(family)))
    model, cfg = load_pretrained(path)
    return family, tm, model, cfg


def test_logits_match_transformers(pair):
    family, tm, model, cfg = pair
    toks = np.random.RandomState(0).randint(0, VOCAB, (2, 80)).astype(np.int32)
    pos = np.broadcast_to(np.arange(80, dtype=np.int32), (2, 80))
    ref = torch_logits(tm, toks)
    out, _ = nnx.jit(lambda m, t, p: m(t, p))(model, jnp.asarray(toks), jnp.asarray(pos))
    assert out.shape == ref.shape
    err = float(np.max(np.abs(np.asarray(out) - ref)))
    assert err < 1e-4, f"{family}: max abs diff {err}"
    assert float(np.std(ref)) > 0.5  # the weights are not near-zero: a wrong mapping would show


def test_greedy_generate_matches_transformers(pair):
    import torch

    family, tm, model, cfg = pair
    rs = np.random.RandomState(1)
    prompts = [rs.randint(0, VOCAB, n).tolist() for n in (3, 17, 9)]
    # chunks of 5 steps: a prompt's tokens come from several decode chunks, each continuing the slot's state
    engine = SlotEngine(cfg, num_slots=4, max_len=64, eos_ids=[], chunk_steps=5)
    out = generate(engine, model, prompts, jax.random.key(0), max_new_tokens=24, sampling=Sampling(greedy=True))
    assert [t.size for t, _ in out] == [24, 24, 24]
    for i, p in enumerate(prompts):
        with torch.no_grad():
            ref = tm.generate(
                torch.tensor([p]),
                max_new_tokens=24,
                min_new_tokens=24,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        assert out[i][0].tolist() == ref[0, len(p) :].tolist(), f"{family} prompt {i}"
