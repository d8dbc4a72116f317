"""Expert-parallel dispatch for one MoE layer, compiled for a TPU topology: what each way costs per chip.

    python -m experiments.tpu_pod.moe_ep --topology v5p:2x4x4 --model qwen3-30b-a3b --tokens 8192 \\
        --expert 8 --json moe_ep.jsonl

Compiles the forward and backward of one sparse layer's experts (`jgem.models.moe`; the router's top-k is an input:
random expert ids, so the shapes are the layer's) with `--tokens` tokens per chip, the rows split over
(fsdp, expert), the experts over `expert` and their `embed` dimension over fsdp, in bf16, for each way of dispatching:

- `gspmd`: the one-device code (sort the (token, expert) pairs by expert, `ragged_dot`) left to XLA's partitioner
  with expert-sharded weights;
- `allgather`: jgem's `shard_map` (`_expert_parallel`): all-gather the expert group's tokens, the local experts'
  pairs through one `ragged_dot`, reduce-scatter the outputs; with `--capacity` factors (0: the worst case);
- `a2a`: a `shard_map` with `ragged_all_to_all`: each chip sends its pairs to their experts' chips and gets the
  outputs back (MaxText's scheme; TPU and GPU only: XLA:CPU has no ragged-all-to-all), its receive buffer sized as
  `allgather`'s.

Per way: the compiler's per-chip memory (arguments, temporaries), its FLOPs per chip (`cost_analysis`: static, so
a `ragged_dot` counts its whole buffer whatever the routing), and the bytes of each kind of collective in the
compiled HLO (the result shapes of the collective ops, per chip).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from experiments.tpu_pod.aot import GIB, chip_of, topology_devices, use_libtpu
from jgem.models.config import preset
from jgem.models.moe import _expert_parallel, expert_buffer_rows
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "ragged-all-to-all", "collective-permute")
_BYTES = {"bf16": 2, "f32": 4, "s32": 4, "u32": 4, "f16": 2, "s8": 1, "u8": 1, "pred": 1, "s64": 8, "u64": 8}


@dataclass(frozen=True)
class Config:
    topology: str = "v5p:2x4x4"
    model: str = "qwen3-30b-a3b"
    tokens: int = 8192  # per chip
    expert: int = 8  # the expert axis; fsdp takes the rest
    ways: tuple[str, ...] = ("gspmd", "allgather", "a2a")
    capacity: tuple[float, ...] = (0.0, 2.0, 1.25)  # allgather's and a2a's buffers (0: the worst case)
    json: str | None = None


def collective_bytes(hlo: str) -> dict[str, float]:
    """Bytes of each collective's result in the compiled (per-chip) HLO; an async start's largest tuple element."""
    out: dict[str, float] = {}
    for line in hlo.splitlines():
        m = re.search(r"=\s*(.*?)\s(" + "|".join(COLLECTIVES) + r")(-start)?\(", line)
        if not m or "-done" in line.split("=")[0]:
            continue
        sizes = [
            _BYTES.get(dt, 4) * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
            for dt, dims in re.findall(r"(\w+)\[([\d,]*)\]", m.group(1))
        ]
        out[m.group(2)] = out.get(m.group(2), 0.0) + float(max(sizes, default=0))
    return out


def gspmd(x, ids, gates, wg, wu, wd):
    """The one-device code of `Experts.__call__` (jgem.models.moe), for XLA's partitioner to split."""
    n, k = ids.shape
    e = wg.shape[0]
    flat = ids.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    sizes = jnp.bincount(flat, length=e).astype(jnp.int32)
    xs = x[order // k]
    h = jax.nn.silu(jax.lax.ragged_dot(xs, wg, sizes)) * jax.lax.ragged_dot(xs, wu, sizes)
    out = jax.lax.ragged_dot(h, wd, sizes) * gates.reshape(-1)[order][:, None]
    back = jnp.zeros_like(order).at[order].set(jnp.arange(n * k, dtype=order.dtype))
    return out[back].reshape(n, k, -1).astype(jnp.float32).sum(axis=1).astype(x.dtype)


def a2a(x, ids, gates, wg, wu, wd, *, mesh, capacity_factor: float):
    """Dispatch by `ragged_all_to_all` over `expert` (rows over fsdp x expert, weights' D over fsdp)."""
    e = wg.shape[0]
    ep = mesh.shape["expert"]
    el = e // ep
    tok = P(("fsdp", "expert"), None)

    def local(x, ids, gates, wg, wu, wd):
        wg, wu = (jax.lax.all_gather(w, "fsdp", axis=1, tiled=True) for w in (wg, wu))
        wd = jax.lax.all_gather(wd, "fsdp", axis=2, tiled=True)
        n, k = ids.shape
        d = x.shape[1]
        flat = ids.reshape(-1)
        order = jnp.argsort(flat, stable=True)
        xs = x[order // k]  # [n*k, D] by expert, so by destination
        per_expert = jnp.bincount(flat, length=e).astype(jnp.int32)
        send = per_expert.reshape(ep, el).sum(1)
        in_off = jnp.cumsum(send) - send
        every = jax.lax.all_gather(per_expert, "expert")  # [sender, E]
        me = jax.lax.axis_index("expert")
        mine = jax.lax.dynamic_slice_in_dim(every, me * el, el, axis=1)  # [sender, local expert]
        recv = mine.sum(1)
        pair = every.reshape(ep, ep, el).sum(2)  # [sender, receiver]
        out_off = (jnp.cumsum(pair, axis=0) - pair)[me]  # where my rows land on each receiver
        cap = expert_buffer_rows(ep * n, k, e, ep, capacity_factor)
        buf = jnp.zeros((cap, d), xs.dtype)
        got = jax.lax.ragged_all_to_all(xs, buf, in_off, send, out_off, recv, axis_name="expert")
        # received by sender, then by local expert: regroup by local expert
        seg = jnp.repeat(jnp.arange(ep * el), mine.reshape(-1), total_repeat_length=cap) % el
        seg = jnp.where(jnp.arange(cap) < recv.sum(), seg, el)
        o2 = jnp.argsort(seg, stable=True)
        sizes = mine.sum(0).astype(jnp.int32)
        rows = got[o2]
        h = jax.nn.silu(jax.lax.ragged_dot(rows, wg, sizes)) * jax.lax.ragged_dot(rows, wu, sizes)
        y = jax.lax.ragged_dot(h, wd, sizes)
        y = jnp.zeros_like(y).at[o2].set(y)  # back in the received order
        back_off = (jnp.cumsum(recv) - recv).astype(jnp.int32)
        their_off = jax.lax.all_gather(in_off, "expert")[:, me]  # where each sender keeps my rows
        ret = jax.lax.ragged_all_to_all(y, jnp.zeros_like(xs), back_off, recv, their_off, send, axis_name="expert")
        ret = ret * gates.reshape(-1)[order][:, None]
        inv = jnp.zeros_like(order).at[order].set(jnp.arange(n * k, dtype=order.dtype))
        return ret[inv].reshape(n, k, d).astype(jnp.float32).sum(1).astype(x.dtype)

    w_in, w_out = P("expert", "fsdp", None), P("expert", None, "fsdp")
    return jax.shard_map(local, mesh=mesh, in_specs=(tok, tok, tok, w_in, w_in, w_out), out_specs=tok)(
        x, ids, gates, wg, wu, wd
    )


def measure(cfg: Config) -> list[dict]:
    use_libtpu()
    devices = topology_devices(cfg.topology)
    chip = chip_of(cfg.topology)
    mcfg = preset(cfg.model)
    mesh = make_mesh(MeshConfig(fsdp=-1, expert=cfg.expert), devices)
    n = cfg.tokens * len(devices)
    e, d, f, k = mcfg.num_experts, mcfg.hidden_size, mcfg.moe_intermediate_size, mcfg.num_experts_per_tok
    bf = jnp.bfloat16
    sds = lambda shape, dt, spec: jax.ShapeDtypeStruct(shape, dt, sharding=NamedSharding(mesh, spec))
    tok = P(("fsdp", "expert"), None)
    args = (
        sds((n, d), bf, tok),
        sds((n, k), jnp.int32, tok),
        sds((n, k), bf, tok),
        sds((e, d, f), bf, P("expert", "fsdp", None)),
        sds((e, d, f), bf, P("expert", "fsdp", None)),
        sds((e, f, d), bf, P("expert", None, "fsdp")),
    )
    runs = []
    for way in cfg.ways:
        for c in (None,) if way == "gspmd" else cfg.capacity:
            if way == "gspmd":
                fn = gspmd
            elif way == "allgather":
                fn = lambda *a, c=c: _expert_parallel(*a, mesh=mesh, capacity_factor=c)[0]
            else:
                fn = lambda *a, c=c: a2a(*a, mesh=mesh, capacity_factor=c)
            loss = lambda x, ids, g, wg, wu, wd, fn=fn: jnp.sum(fn(x, ids, g, wg, wu, wd).astype(jnp.float32) ** 2)
            step = jax.jit(jax.grad(loss, argnums=(0, 3, 4, 5)))
            t0 = time.perf_counter()
            row = {"way": way, "capacity": c, "topology": cfg.topology, "mesh": dict(mesh.shape), "tokens": cfg.tokens}
            try:
                with jax.set_mesh(mesh):
                    compiled = step.lower(*args).compile()
            except Exception as ex:  # noqa: BLE001 (a way the compiler refuses is a result)
                row["error"] = str(ex).splitlines()[0][:300]
                print(json.dumps(row), flush=True)
                runs.append(row)
                continue
            m = compiled.memory_analysis()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, list) else cost
            coll = collective_bytes(compiled.as_text())
            row.update(
                argument_gib=m.argument_size_in_bytes / GIB,
                temp_gib=m.temp_size_in_bytes / GIB,
                total_gib=(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes) / GIB,
                hbm_gib=chip.hbm_bytes / GIB,
                tflop=float(cost.get("flops", 0.0)) / 1e12,
                # the useful matmul FLOPs: 3 matmuls x 2 x D x F per (token, expert) pair, forward and backward (x3)
                model_tflop=3 * 3 * 2 * d * f * cfg.tokens * k / 1e12,
                collective_gib={key: v / GIB for key, v in coll.items()},
                compile_s=time.perf_counter() - t0,
            )
            print(json.dumps(row), flush=True)
            runs.append(row)
    return runs


def main() -> None:
    import tyro

    cfg = tyro.cli(Config)
    rows = measure(cfg)
    if cfg.json:
        with open(cfg.json, "a") as fh:
            for r in rows:
                fh.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
