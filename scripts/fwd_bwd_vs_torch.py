"""Forward+backward of the model alone (sum of token log-probs), jgem vs transformers' PyTorch model, interleaved.

    LAYERS=4 .venv/bin/python scripts/fwd_bwd_vs_torch.py            # 2 threads each
    NT=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 1 .venv/bin/python scripts/fwd_bwd_vs_torch.py

The `100m` preset with LAYERS layers (default 4), batch 8 x 256, same weights; no optimizer, no PPO loss. Both
run with `jgem.hostmem.keep_host_memory`. Prints 3 interleaved timings after 3 warm-up rounds.
"""

from __future__ import annotations

import os
import tempfile
import time

from jgem.hostmem import keep_host_memory


def main() -> None:
    keep_host_memory(force=True)  # before JAX's first computation
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from flax import nnx
    from transformers import AutoModelForCausalLM

    from jgem.models.config import preset
    from jgem.models.head import token_logprobs
    from jgem.models.hf import save_pretrained
    from jgem.models.transformer import Transformer

    torch.set_num_threads(int(os.environ.get("NT", "2")))
    cfg = preset("100m", num_layers=int(os.environ.get("LAYERS", "4")))
    b, t = 8, 256
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    tok = rng.integers(0, cfg.vocab_size, (b, t), dtype=np.int32)
    pos = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy()
    graphdef, params = nnx.split(model)
    jt, jp, js = jnp.asarray(tok), jnp.asarray(pos), jnp.ones((b, t), jnp.int32)
    grad = jax.jit(jax.grad(lambda p: jnp.sum(token_logprobs(nnx.merge(graphdef, p), jt, jp, js)[0])))
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(model, cfg, d)
        hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="sdpa")
    tt, tp = torch.from_numpy(tok).long(), torch.from_numpy(pos).long()

    def torch_step():
        hf.zero_grad(set_to_none=True)
        logits = hf(input_ids=tt, position_ids=tp).logits[:, :-1]
        torch.gather(torch.log_softmax(logits, -1), -1, tt[:, 1:, None]).sum().backward()

    def jax_step():
        jax.block_until_ready(grad(params))

    def timed(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    for _ in range(3):
        jax_step()
        torch_step()
    for _ in range(3):
        print(f"jax {timed(jax_step):.2f} s   torch {timed(torch_step):.2f} s", flush=True)


if __name__ == "__main__":
    main()
