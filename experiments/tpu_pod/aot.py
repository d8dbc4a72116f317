"""Compile jgem's training step and rollout programs for a TPU pod on a CPU machine, and print what they need.

    python -m experiments.tpu_pod.aot --topology v5p:4x4x4 --model experiments/tpu_pod/configs/qwen3-8b.json \\
        --episodes 256 --tokens 8192 --mesh.fsdp -1 --learner.micro-batch-size 64

libtpu's deviceless path gives the topology's chips (`get_topology_desc`); the process itself stays on CPU. The
programs are jgem's own, traced under `target_platform("tpu")` on abstract, sharded arguments (nothing of the
model is allocated):
- `update`: the whole training step, `jgem.algos.step.train_step` (the reference policy's log-probs with a KL
  penalty, the critic's values with a critic, the algorithm's advantage estimator over [episodes, turns], then
  epochs x minibatches optimizer steps, each accumulating micro-batches) on the `TrainState` the trainer builds
  for `--algorithm` (a critic for PPO, `ref_params` when `--learner.kl-coef` > 0) and the `StepInputs` it
  uploads (one full-length episode per row, rows padded as `Learner.pack` pads them), with the algorithm's
  `StepSpec` (as `Learner.step_spec`). `--algorithm` takes several registered algorithms, or `all`: one
  `update` per algorithm, each row naming it;
- `extend` / `decode`: the rollout engine's `SlotEngine` programs for `--slots` slots of `--tokens` positions,
  every slot taking part and attending the whole slot (the largest shapes the engine compiles).
Per program it prints a line as it starts (tracing and compiling an 8B model's `update` takes minutes), then per-chip
memory (`memory_analysis`) against the chip's HBM and the compiled FLOPs per chip (`cost_analysis`), with the time
they imply at `--mfu` and the seconds the program took.

XLA counts a loop body once: `update`'s FLOPs are scaled by its optimizer steps x micro-batches (the body dominates;
the forwards before the update, the reference's and the critic's, loop over micro-batches of the same rows once, so
they are scaled right at one epoch with `--learner.micro-batch-size` set, over-counted otherwise), but loops inside
a micro-batch (the chunked vocab projection) stay counted once, so the compiled figure is otherwise a lower bound;
with the layers scanned (`scan_layers`, on TPU by default) most of a micro-batch is one loop body, so no compiled
figure is given for `update` (`--scan-layers False` unrolls them and gives one). `model_tflop` is the MFU
convention's count: 6 x params x tokens plus causal attention per epoch, 2 x params x tokens for each forward that
only scores (the reference's log-probs, the proximal policy's with an off-policy correction), and with a critic its
values and its training, without the vocab projection.

libtpu is looked up in $JGEM_LIBTPU_DIR, else <repo>/.libtpu (`make libtpu`), else the environment.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.algos.algorithms import ALGORITHMS, Algorithm
from jgem.algos.config import LearnerConfig
from jgem.algos.corrections import resolve as resolve_correction
from jgem.algos.learner import TrainState, _micro_layout, init_train_state
from jgem.algos.step import StepInputs, StepSpec, train_step
from jgem.models.config import PRESETS, ModelConfig, preset
from jgem.models.platform import target_platform
from jgem.models.transformer import Transformer, scans_layers
from jgem.rollout.slots import SlotEngine
from jgem.sharding.config import BATCH_AXES, MeshConfig
from jgem.sharding.mesh import batch_axis_size, split_meshes
from jgem.sharding.publish import Publisher, shard_bytes
from jgem.sharding.rules import DEFAULT_RULES, batch_sharding, tree_shardings

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30


@dataclass(frozen=True)
class Chip:
    hbm_bytes: int
    peak_bf16_flops: float
    ici_link_bytes_s: float  # one ICI link, one direction: the chip's bidirectional ICI bandwidth / (2 x its links)
    dcn_bytes_s: float  # the data-center network per chip


# per chip: HBM, peak bf16 FLOP/s, bidirectional ICI GB/s over its links and DCN Gbps (Cloud TPU documentation,
# e.g. cloud.google.com/tpu/docs/v5p: v5p 1200 GB/s bidirectional ICI per chip over the 6 links of its 3D torus,
# 50 Gbps DCN; v5e 1600 Gbps ICI over 4 links of a 2D torus; v4 2400 Gbps over 6; v6e 3584 Gbps over 4)
CHIPS = {
    "v4": Chip(32 * GIB, 275e12, 2400e9 / 8 / 12, 25e9 / 8),
    "v5e": Chip(16 * GIB, 197e12, 1600e9 / 8 / 8, 25e9 / 8),
    "v5p": Chip(95 * GIB, 459e12, 1200e9 / 12, 50e9 / 8),
    "v6e": Chip(32 * GIB, 918e12, 3584e9 / 8 / 8, 25e9 / 8),
}


# what `--algorithm` takes: the registered algorithms (jgem.algos.algorithms), or `all` of them
AlgorithmName = Literal[(*ALGORITHMS.names(), "all")]


@dataclass(frozen=True)
class AotConfig:
    """A pod run's shapes; the CLI is tyro over this (`--mesh.fsdp 16 --learner.micro-batch-size 64`)."""

    topology: str = "v5e:2x2"  # <chip>:<shape>, e.g. v5p:4x4x4, v5e:16x16
    model: str = "tiny"  # an HF config.json (or a directory holding one), or a jgem preset name
    dtype: str = "bfloat16"  # compute dtype
    param_dtype: str = "float32"  # params and Adam moments
    remat: bool = True  # rematerialise each decoder block in the backward pass
    attention: str = "auto"  # the model's attention implementation (auto: splash for training on TPU)
    scan_layers: bool | None = None  # the training forward as one scan over the layers (None: as on TPU, scanned)
    # a mixture of experts under expert parallelism (--mesh.expert): each expert shard's buffer of (token, expert)
    # pairs at this many times the balanced share (0: the worst case, nothing dropped; jgem.models.moe)
    expert_capacity_factor: float = 0.0
    # the step's algorithms, one `update` each (`--algorithm ppo grpo`); `all`: every registered one
    algorithm: tuple[AlgorithmName, ...] = ("rebn",)
    gamma: float = 1.0  # the step's discount (as the trainer's --gamma)
    lam: float = 0.95  # GAE's lambda (as the trainer's --lam; PPO)
    episodes: int = 256  # episodes per step, one row each
    tokens: int = 8192  # tokens per episode: the row length, and the rollout slot length
    turns: int = 16  # turns per episode (the step's [episodes, turns] arrays; a power of two, as the trainer pads)
    mesh: MeshConfig = field(default_factory=lambda: MeshConfig(fsdp=-1))
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    slots: int | None = None  # rollout slots (one per env); default: episodes
    chunk_steps: int = 8  # decode steps per chunk
    extend_chunk: int = 512  # prefill tokens per slot per extend call
    # `publish` (with --mesh.rollout-devices): the learner's params onto the sampler's chips (jgem.sharding.publish)
    programs: tuple[Literal["update", "extend", "decode", "publish"], ...] = ("update", "extend", "decode")
    mfu: float = 0.4  # the model-FLOPs utilisation the step times assume
    json: str | None = None  # append one JSON line per program to this file


def use_libtpu() -> None:
    """Keep this process on CPU and let jax find libtpu for the topology (loaded lazily, on first use)."""
    jax.config.update("jax_platforms", "cpu")
    lib = os.environ.get("JGEM_LIBTPU_DIR") or str(REPO / ".libtpu")
    if os.path.isdir(lib) and lib not in sys.path:
        sys.path.insert(0, lib)
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")  # no TPU VM metadata here: quiets libtpu's init
    # compile-only: no chip is opened, so other processes (another compile, a test) may load libtpu at once
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def accelerator_type(topology: str) -> str | None:
    """The Cloud TPU accelerator type of a topology name (`v5e:2x2` -> `v5litepod-4`, `v5p:4x4x4` -> `v5p-128`: v4
    and v5p count TensorCores, two a chip); None for a name without a known chip or shape."""
    kind, _, shape = topology.partition(":")
    try:
        n = math.prod(int(d) for d in shape.split("x"))
    except ValueError:
        return None
    types = {"v4": f"v4-{2 * n}", "v5p": f"v5p-{2 * n}", "v5e": f"v5litepod-{n}", "v6e": f"v6e-{n}"}
    return types.get(kind.split("-")[0])


def topology_devices(name: str) -> list:
    from jax.experimental import topologies

    # libtpu reads the host's accelerator type when it loads (here: now) and, with none on a CPU machine, prints
    # "Failed to find host bounds for accelerator type: WARNING: could not determine TPU accelerator type ..." to
    # stderr (its own print: no log level hides it). The topology's own type quiets it; the topology compiled for
    # comes from `name` either way (its devices, coordinates and hosts are the same with any type set).
    if kind := accelerator_type(name):
        os.environ.setdefault("TPU_ACCELERATOR_TYPE", kind)
    try:
        return list(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)
    except Exception as e:  # no libtpu, or a name it does not know
        raise SystemExit(
            f"cannot describe TPU topology {name!r}: {e}\nBuild libtpu with `make libtpu` (it goes to .libtpu/, off "
            "the default path) or set JGEM_LIBTPU_DIR; topology names look like v5e:2x2, v5p:4x4x4, v6e:8x8"
        ) from e


def chip_of(topology: str) -> Chip:
    kind = topology.split(":")[0].split("-")[0]
    if kind not in CHIPS:
        raise SystemExit(f"unknown chip {kind!r} in topology {topology!r}; known: {sorted(CHIPS)}")
    return CHIPS[kind]


def model_config(cfg: AotConfig) -> ModelConfig:
    opts = dict(
        dtype=cfg.dtype,
        param_dtype=cfg.param_dtype,
        remat=cfg.remat,
        attention=cfg.attention,
        scan_layers=cfg.scan_layers,
        expert_capacity_factor=cfg.expert_capacity_factor,
    )
    if cfg.model in PRESETS:
        return preset(cfg.model, **opts)
    return ModelConfig.from_hf(cfg.model, **opts)


def with_shardings(shapes, shardings):
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def abstract_model(mcfg: ModelConfig, *, value_head: bool = False):
    """(graphdef, state of ShapeDtypeStructs) of a Transformer: shapes without allocating a parameter."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(mcfg, rngs=nnx.Rngs(0), value_head=value_head)))


def algorithms(cfg: AotConfig) -> list[Algorithm]:
    """The records `--algorithm` names, in registry order for `all`."""
    names = ALGORITHMS.names() if "all" in cfg.algorithm else dict.fromkeys(cfg.algorithm)
    return [ALGORITHMS.get(n) for n in names]


def abstract_train_state(
    mcfg: ModelConfig, lcfg: LearnerConfig, mesh, *, critic: bool = False, reference: bool = False
) -> TrainState:
    """The `TrainState` that `init_train_state(model, lcfg, mesh, critic=..., reference=...)` returns, as sharded
    ShapeDtypeStructs (a critic of the policy's shape with a value head, as `make_critic` builds it)."""
    graphdef, state = abstract_model(mcfg)
    cgraphdef, cstate = abstract_model(mcfg, value_head=True) if critic else (None, None)

    def build(st, cst):
        c = None if cst is None else nnx.merge(cgraphdef, cst)
        return init_train_state(nnx.merge(graphdef, st), lcfg, critic=c, reference=reference)

    shapes = jax.eval_shape(build, state, cstate)
    shapes = shapes.replace(mesh=mesh)
    return with_shardings(shapes, tree_shardings(shapes, mesh, shapes.rules))


def step_rows(cfg: AotConfig, mesh) -> int:
    """Rows of `episodes` full-length episodes, one each, padded to a power-of-two multiple of minibatches x
    (micro-batch size or data*fsdp), as `Learner.pack` pads them."""
    d = cfg.learner.minibatches * (cfg.learner.micro_batch_size or batch_axis_size(mesh))
    return (1 << max(0, (math.ceil(cfg.episodes / d) - 1).bit_length())) * d


def step_inputs(cfg: AotConfig, mesh, *, critic: bool) -> StepInputs:
    """The `StepInputs` the trainer uploads, as ShapeDtypeStructs sharded by rows (`shard_batch`): [rows, tokens]
    token arrays; [E, K] per-turn arrays, E the episodes padded to a multiple of data*fsdp and K the turns padded
    to a power of two (as `Learner.pack`); with a critic its value mask and bootstrap rows."""
    B, T = step_rows(cfg, mesh), cfg.tokens
    n = batch_axis_size(mesh)
    E = -(-cfg.episodes // n) * n
    K = 1 << max(0, cfg.turns - 1).bit_length()
    spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding(mesh, len(shape)))
    bt = lambda dtype: spec((B, T), dtype)
    return StepInputs(
        tokens=bt(jnp.int32),
        positions=bt(jnp.int32),
        segment_ids=bt(jnp.int32),
        loss_mask=bt(jnp.bool_),
        old_logprobs=bt(jnp.float32),
        token_episode=bt(jnp.int32),
        token_turn=bt(jnp.int32),
        rewards=spec((E, K), jnp.float32),
        turn_mask=spec((E, K), jnp.bool_),
        group_ids=spec((E,), jnp.int32),
        value_mask=bt(jnp.bool_) if critic else None,
        # the states truncated episodes were cut in, rows of their own: as many as the training rows (every
        # episode cut, its state as long as a row), the most the trainer packs
        bootstrap_tokens=bt(jnp.int32) if critic else None,
        bootstrap_positions=bt(jnp.int32) if critic else None,
        bootstrap_segment_ids=bt(jnp.int32) if critic else None,
        bootstrap_episode=bt(jnp.int32) if critic else None,
    )


def model_flops(mcfg: ModelConfig, tokens: int, seq: int, *, train: bool) -> float:
    """The MFU convention's FLOPs: 2 (forward) or 6 (training) x matmul params x tokens, plus causal attention
    (q.k and p.v over on average seq/2 keys). A mixture of experts counts the params a token runs through (its k
    experts of E: `num_active_params`; the same as `num_params` for a dense model)."""
    embed = mcfg.vocab_size * mcfg.hidden_size
    matmul_params = mcfg.num_active_params - embed * (0 if mcfg.tie_word_embeddings else 1)  # the lookup is no matmul
    attn = 2 * 2 * mcfg.num_layers * mcfg.num_heads * mcfg.head_dim * (seq / 2)
    return (3 if train else 1) * (2 * matmul_params + attn) * tokens


def step_flops(
    mcfg: ModelConfig, lcfg: LearnerConfig, tokens: int, seq: int, *, critic: bool, reference: bool
) -> float:
    """The MFU convention's FLOPs of `train_step` on `tokens` tokens: the policy's training passes (epochs),
    the forward-only passes (the reference's log-probs; the proximal policy's with an off-policy correction), and
    with a critic its values (a forward) and its training passes, without the vocab projection it does not use."""
    total = lcfg.epochs * model_flops(mcfg, tokens, seq, train=True)
    total += (int(reference) + int(lcfg.recomputes_proximal)) * model_flops(mcfg, tokens, seq, train=False)
    if critic:
        head = 2 * mcfg.vocab_size * mcfg.hidden_size * tokens  # the policy's vocab projection, per forward
        total += (1 + 3 * lcfg.epochs) * (model_flops(mcfg, tokens, seq, train=False) - head)
    return total


def measure(name: str, lowered, chip: Chip, chips: int, mfu: float, *, loops: int | None, model_tflop: float) -> dict:
    t0 = time.perf_counter()
    try:
        compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:  # the TPU compiler refuses a program that does not fit
        need = re.search(r"HLO temporaries \(([\d.]+)([KMGT])\)", str(e))
        if "RESOURCE_EXHAUSTED" not in str(e) or need is None:
            raise
        temp = float(need.group(1)) * 2 ** (10 * "KMGT".index(need.group(2)) + 10)
        return {
            "program": name,
            "temp_gib": temp / GIB,
            "total_gib": None,
            "hbm_gib": chip.hbm_bytes / GIB,
            "fits": False,
            "error": str(e).splitlines()[0][:300],
            "model_tflop_per_chip": model_tflop / chips / 1e12,
            "time_s_at_mfu": model_tflop / chips / (chip.peak_bf16_flops * mfu),
            "compile_s": time.perf_counter() - t0,
        }
    compile_s = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # None where a loop XLA counts once has no factor to scale it by (the scanned layers inside a micro-batch)
    flops = None if loops is None else float(cost.get("flops", 0.0)) * loops
    return {
        "program": name,
        **_memory(compiled, chip),
        "compiled_tflop_per_chip": None if flops is None else flops / 1e12,
        "loop_factor": loops,
        "model_tflop_per_chip": model_tflop / chips / 1e12,
        "time_s_at_mfu": model_tflop / chips / (chip.peak_bf16_flops * mfu),
        "compile_s": compile_s,
    }


def measure_update(cfg: AotConfig, algo: Algorithm, mcfg: ModelConfig, mesh, chip: Chip, chips: int) -> dict:
    """Compile `train_step` for `algo` as the trainer runs it, and measure it."""
    lcfg = algo.learner(cfg.learner)
    reference = cfg.learner.kl_coef > 0  # the trainer keeps the reference whenever there is a KL penalty
    state = abstract_train_state(mcfg, lcfg, mesh, critic=algo.critic, reference=reference)
    sb = step_inputs(cfg, mesh, critic=algo.critic)
    M, n, r = _micro_layout(sb, lcfg, mesh)
    steps = lcfg.epochs * M * n
    rows = sb.tokens.shape[0]
    with jax.set_mesh(mesh):  # as the trainer traces it (jgem.train.learn.on_mesh)
        lowered = train_step.lower(
            state, sb, StepSpec.of(algo, gamma=cfg.gamma, lam=cfg.lam, kl_coef=cfg.learner.kl_coef)
        )
    tf = step_flops(mcfg, lcfg, rows * cfg.tokens, cfg.tokens, critic=algo.critic, reference=reference)
    res = measure("update", lowered, chip, chips, cfg.mfu, loops=None if scans_layers(mcfg) else steps, model_tflop=tf)
    res.update(
        algorithm=algo.name,
        advantage=algo.advantage,
        critic=algo.critic,
        reference=reference,
        correction=resolve_correction(lcfg)[0],
        rows=rows,
        episodes_padded=sb.rewards.shape[0],
        turns_padded=sb.rewards.shape[1],
        micro_batches=steps,
        rows_per_micro_batch=r,
    )
    return res


def link_loads(pairs: list[tuple], block: int) -> tuple[float, int]:
    """(the most bytes any one directed ICI link carries, the most hops a pair is apart) when each (source, target)
    device pair sends `block` bytes at once, routed dimension by dimension (x, then y, then z) the shorter way round
    the torus (wrap-around links in every dimension of 4 or more chips, as in v4/v5p slices of whole cubes; a tie
    alternates direction by source coordinate, so opposite halves of a ring use both directions)."""
    coords = [tuple(d.coords) for pair in pairs for d in pair]
    dims = [max(c[i] for c in coords) + 1 for i in range(len(coords[0]))]
    load: dict[tuple, int] = {}
    most_hops = 0
    for src, dst in pairs:
        at, hops = list(src.coords), 0
        for axis, size in enumerate(dims):
            fwd = (dst.coords[axis] - at[axis]) % size
            back = (at[axis] - dst.coords[axis]) % size
            wrap = size >= 4
            step = 1 if not wrap and dst.coords[axis] > at[axis] else -1 if not wrap else None
            if wrap:
                step = 1 if fwd < back or (fwd == back and at[axis] % 2 == 0) else -1
            n = abs(dst.coords[axis] - at[axis]) if not wrap else min(fwd, back)
            for _ in range(n):
                nxt = list(at)
                nxt[axis] = (at[axis] + step) % size
                load[(tuple(at), tuple(nxt))] = load.get((tuple(at), tuple(nxt)), 0) + block
                at, hops = nxt, hops + 1
        most_hops = max(most_hops, hops)
    return float(max(load.values(), default=0)), most_hops


def measure_publish(mcfg: ModelConfig, learner, sampler, chip: Chip, head: dict) -> list[dict]:
    """The publication of the policy's params (what moves after each update without LoRA): the learner-side
    reshard to the sampler's layout (when they differ) and the permute over both sides' chips, compiled; the bytes
    each chip sends, and the time at the interconnect's bandwidth with the link loads of the pairs' routes."""
    pub = Publisher(learner, sampler)
    if not pub.collective:
        raise SystemExit("--programs publish needs as many sampler as learner chips (--mesh.rollout-devices = half)")
    _, params, _ = nnx.split(nnx.eval_shape(lambda: Transformer(mcfg, rngs=nnx.Rngs(0))), nnx.Param, ...)
    leaves = jax.tree.leaves(params)
    src = jax.tree.leaves(tree_shardings(params, learner), is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    dst = jax.tree.leaves(tree_shardings(params, sampler), is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    avals = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
    total, per_chip = shard_bytes([jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=t) for a, t in zip(avals, dst)])
    pairs = [(pub.mirror.devices.flat[i], sampler.devices.flat[i]) for i in range(sampler.devices.size)]
    worst, hops = link_loads(pairs, per_chip)
    n = sampler.devices.size
    common = {**head, "algorithm": None, "chips": 2 * n, "model_tflop_per_chip": 0.0, "time_s_at_mfu": 0.0}
    out = []
    mirror = [jax.sharding.NamedSharding(pub.mirror, t.spec) for t in dst]
    moved = [i for i, (s, m) in enumerate(zip(src, mirror)) if not s.is_equivalent_to(m, leaves[i].ndim)]
    if moved:
        shapes = [jax.ShapeDtypeStruct(avals[i].shape, avals[i].dtype, sharding=src[i]) for i in moved]
        lowered = jax.jit(lambda xs: xs, out_shardings=[mirror[i] for i in moved]).lower(shapes)
        res = {**common, **measure("publish_reshard", lowered, chip, n, 1.0, loops=1, model_tflop=0.0)}
        res.update(chips=n, leaves_resharded=len(moved))
        out.append(res)
    t0 = time.perf_counter()
    compiled = pub.compiled(avals, [t.spec for t in dst])
    res = {**common, **_memory(compiled, chip), "program": "publish", "compile_s": time.perf_counter() - t0}
    res["compiled_tflop_per_chip"] = None
    hlo = compiled.as_text()
    res.update(
        publish_bytes_total=total,
        publish_bytes_per_chip=per_chip,
        publish_gib_per_chip=per_chip / GIB,
        collective_permutes=len(re.findall(r"collective-permute(?:-start)?\(", hlo)),  # ops, not their names
        # anything else that communicates (none: the permute is the whole transfer)
        other_collectives=len(re.findall(r"(?:all-gather|all-reduce|all-to-all|reduce-scatter)(?:-start)?\(", hlo)),
        max_hops=hops,
        max_link_gib=worst / GIB,
        ici_link_gb_s=chip.ici_link_bytes_s / 1e9,
        publish_s_at_ici=worst / chip.ici_link_bytes_s,
        publish_s_at_dcn=per_chip / chip.dcn_bytes_s,
    )
    out.append(res)
    return out


def _memory(compiled, chip: Chip) -> dict:
    m = compiled.memory_analysis()
    total = (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
        + m.generated_code_size_in_bytes
    )
    return {
        "argument_gib": m.argument_size_in_bytes / GIB,
        "output_gib": m.output_size_in_bytes / GIB,
        "alias_gib": m.alias_size_in_bytes / GIB,
        "temp_gib": m.temp_size_in_bytes / GIB,
        "code_gib": m.generated_code_size_in_bytes / GIB,
        "total_gib": total / GIB,
        "hbm_gib": chip.hbm_bytes / GIB,
        "fits": total <= chip.hbm_bytes,
    }


def run(cfg: AotConfig) -> list[dict]:
    use_libtpu()
    devices = topology_devices(cfg.topology)
    chip = chip_of(cfg.topology)
    # the learner's mesh and the sampler's (the same one without --mesh.rollout-devices)
    mesh, rollout = split_meshes(cfg.mesh, devices=devices)
    mcfg = model_config(cfg)
    head = {
        "topology": cfg.topology,
        "chips": len(devices),
        "mesh": dict(mesh.shape),
        "rollout_mesh": dict(rollout.shape) if rollout is not mesh else None,
        "model": cfg.model,
        "params_b": mcfg.num_params / 1e9,
        "episodes": cfg.episodes,
        "tokens": cfg.tokens,
        "micro_batch_size": cfg.learner.micro_batch_size,
        "remat": cfg.remat,
        "attention": cfg.attention,
        "scan_layers": cfg.scan_layers,
        "mfu": cfg.mfu,
    }
    print(json.dumps(head))
    out = []
    # the rollout's programs do not depend on the algorithm
    n_roll = rollout.devices.size
    measure_ = lambda name, lowered, **kw: {
        **head,
        **measure(name, lowered, chip, n_roll, cfg.mfu, **kw),
        "algorithm": None,
        "chips": n_roll,
    }
    with target_platform("tpu"):
        if "update" in cfg.programs:
            for algo in algorithms(cfg):
                t0 = _started("update", algo.name)
                res = {**head, **measure_update(cfg, algo, mcfg, mesh, chip, mesh.devices.size)}
                res["chips"] = mesh.devices.size
                out.append(res)
                _print(head, res, t0)
        if {"extend", "decode"} & set(cfg.programs):
            slots = cfg.slots or cfg.episodes
            engine = SlotEngine(
                mcfg,
                num_slots=slots,
                max_len=cfg.tokens,
                eos_ids=[0],
                chunk_steps=cfg.chunk_steps,
                extend_chunk=cfg.extend_chunk,
                mesh=rollout,
                batch_axes=BATCH_AXES,  # the slots over (data, fsdp, expert): those the mesh has
                allocate=False,
            )
            # no remat when sampling: there is no backward pass (and nnx.remat inside decode's while_loop fails
            # to trace today: TraceContextError)
            graphdef, st = abstract_model(mcfg.replace(remat=False))
            model = (graphdef, with_shardings(st, tree_shardings(st, rollout, DEFAULT_RULES)))
            if "extend" in cfg.programs:
                t0 = _started("extend")
                length = engine.extend_chunk
                lowered = engine.lower_extend(model, slots, length, cfg.tokens)
                tf = model_flops(mcfg, slots * length, cfg.tokens, train=False)
                res = measure_("extend", lowered, loops=1, model_tflop=tf)
                res.update(slots=slots, new_tokens=length, window=cfg.tokens)
                out.append(res)
                _print(head, res, t0)
            if "decode" in cfg.programs:
                t0 = _started("decode")
                lowered = engine.lower_decode(model, slots, cfg.tokens)
                tf = model_flops(mcfg, slots * cfg.chunk_steps, cfg.tokens, train=False)
                # the while loop's body (one decode step) is counted once: scale to the chunk
                res = measure_("decode", lowered, loops=cfg.chunk_steps, model_tflop=tf)
                res.update(slots=slots, steps=cfg.chunk_steps, window=cfg.tokens)
                out.append(res)
                _print(head, res, t0)
        if "publish" in cfg.programs:
            if rollout is mesh:
                raise SystemExit("--programs publish needs split meshes: set --mesh.rollout-devices")
            t0 = _started("publish")
            for res in measure_publish(mcfg, mesh, rollout, chip, head):
                out.append(res)
                _print(head, res, t0)
                t0 = time.perf_counter()
    return out


def _name(res: dict) -> str:
    algo = res.get("algorithm")
    return f"{res['program']:>10}" + (f" [{algo}]" if algo else "")


def _started(program: str, algorithm: str | None = None) -> float:
    """Say that `program` starts (tracing, then compiling: minutes for a large model); the time it starts."""
    print(f"{_name({'program': program, 'algorithm': algorithm})}: tracing and compiling ...", flush=True)
    return time.perf_counter()


def _print(head: dict, res: dict, started: float) -> None:
    """`res` as one line, with the seconds since `started` (stored as `seconds`: tracing and compiling)."""
    res["seconds"] = time.perf_counter() - started
    took = f"done in {res['seconds']:.0f} s (compile {res['compile_s']:.0f} s)"
    if res["total_gib"] is None:
        print(
            f"{_name(res)}: DOES NOT FIT: the compiler needs {res['temp_gib']:.2f} GiB of temporaries per chip "
            f"({res['hbm_gib']:.0f} GiB HBM) | {res['model_tflop_per_chip']:.2f} model TFLOP/chip; "
            f"{res['time_s_at_mfu']:.3f} s at MFU {head['mfu']} | {took}",
            flush=True,
        )
        return
    if res["program"] == "publish":
        print(
            f"{_name(res)}: {res['total_gib']:7.2f} GiB / {res['hbm_gib']:.0f} GiB per chip (args "
            f"{res['argument_gib']:.2f}, out {res['output_gib']:.2f}, temp {res['temp_gib']:.2f}) | "
            f"{res['publish_gib_per_chip']:.3f} GiB sent per chip ({res['publish_bytes_total'] / GIB:.2f} GiB in all), "
            f"{res['max_hops']} hops, busiest link {res['max_link_gib']:.3f} GiB: {res['publish_s_at_ici']:.4f} s at "
            f"{res['ici_link_gb_s']:.0f} GB/s per ICI link ({res['publish_s_at_dcn']:.2f} s over DCN) | "
            f"{res['collective_permutes']} collective-permutes | {took}",
            flush=True,
        )
        return
    tf = res["compiled_tflop_per_chip"]
    compiled = "(scanned layers: not counted)" if tf is None else f"{tf:.2f}"
    print(
        f"{_name(res)}: {res['total_gib']:7.2f} GiB / {res['hbm_gib']:.0f} GiB per chip "
        f"({'fits' if res['fits'] else 'DOES NOT FIT'}; args {res['argument_gib']:.2f}, out {res['output_gib']:.2f}, "
        f"alias {res['alias_gib']:.2f}, temp {res['temp_gib']:.2f}, code {res['code_gib']:.3f}) | "
        f"{compiled} TFLOP/chip compiled, {res['model_tflop_per_chip']:.2f} model; "
        f"{res['time_s_at_mfu']:.3f} s at MFU {head['mfu']} | {took}",
        flush=True,
    )


def main() -> None:
    import tyro

    cfg = tyro.cli(AotConfig)
    results = run(cfg)
    if cfg.json:
        with open(cfg.json, "a") as f:
            for res in results:
                f.write(json.dumps({**dataclasses.asdict(cfg), **res}, default=str) + "\n")
    if not all(r["fits"] for r in results):
        sys.exit(3)


if __name__ == "__main__":
    main()
