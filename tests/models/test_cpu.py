"""jgem.models.cpu: one switch turns every CPU trick on or off, off the CPU none of them is traced, and the
model's numbers do not depend on them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models import cpu
from jgem.models.platform import target_platform
from jgem.models.transformer import init_model
from tests.models.helpers import VOCAB, tiny_cfg


def test_switch_reads_the_env(monkeypatch):
    monkeypatch.delenv(cpu.ENV, raising=False)
    assert cpu.enabled_tricks() == cpu.TRICKS
    monkeypatch.setenv(cpu.ENV, "0")
    assert cpu.enabled_tricks() == () and not cpu.cpu_tuning("matmul_vjp")
    monkeypatch.setenv(cpu.ENV, " matmul_vjp,")
    assert cpu.enabled_tricks() == ("matmul_vjp",)
    with target_platform("cpu"):
        assert cpu.cpu_tuning("matmul_vjp")
    with target_platform("tpu"):
        assert not cpu.cpu_tuning("matmul_vjp")
    for gone in ("rope", "out_in_decode"):  # out_in_decode: removed with the static Sampler it served
        monkeypatch.setenv(cpu.ENV, gone)
        with pytest.raises(ValueError, match="unknown CPU tricks"):
            cpu.enabled_tricks()
    with pytest.raises(ValueError, match="unknown CPU trick"):
        cpu.cpu_tuning("bias")


def _grad_jaxpr(model, toks, pos):
    loss = lambda m: jnp.sum(m(toks, pos)[0])
    return str(jax.make_jaxpr(lambda m: nnx.grad(loss)(m))(model))


@pytest.mark.parametrize("flag", ["1", "0"])
def test_tricks_traced_only_on_cpu_and_when_enabled(monkeypatch, flag):
    """With the tricks on, a CPU trace has the custom-VJP matmul; with them off, or traced for TPU, it does not; the
    gradients are the same either way."""
    monkeypatch.setenv(cpu.ENV, flag)
    model = init_model(tiny_cfg("qwen3"), seed=0)
    toks = jnp.asarray(np.random.default_rng(0).integers(0, VOCAB, (2, 6)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (2, 6))
    with target_platform("cpu"):
        on_cpu = _grad_jaxpr(model, toks, pos)
    with target_platform("tpu"):
        on_tpu = _grad_jaxpr(model, toks, pos)
    # the custom backward's materialised x^T sits behind an optimization_barrier
    assert ("optimization_barrier" in on_cpu) == (flag == "1")
    assert "optimization_barrier" not in on_tpu
    grads = nnx.grad(lambda m: jnp.sum(jnp.sin(m(toks, pos)[0])))(model)
    monkeypatch.setenv(cpu.ENV, "1" if flag == "0" else "0")
    other = nnx.grad(lambda m: jnp.sum(jnp.sin(m(toks, pos)[0])))(model)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(other)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
