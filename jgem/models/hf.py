"""HF checkpoints in and out: safetensors <-> Transformer params through a regex name table.

Loading builds an abstract model (`nnx.eval_shape`, no host copy of the weights), then fills each
parameter from a memory-mapped safetensors tensor, placed straight onto its sharding.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jgem.models.config import LoraConfig, ModelConfig
from jgem.models.lora import fresh_adapters, merged
from jgem.models.transformer import Transformer
from jgem.sharding.rules import canonical_spec, put_global

# HF key regex -> (jgem param path template, layout). Layouts: "id" same array; "T" transposed 2-D;
# "in_heads" HF [N*H, D] -> [D, N, H]; "out_heads" HF [D, N*H] -> [N, H, D]; "heads" HF [N*H] -> [N, H];
# "experts_T" HF [E, out, in] -> [E, in, out] (each expert's matrix transposed).
# A mixture of experts' checkpoint stores each expert's projections apart (`mlp.experts.{e}.gate_proj.weight`, as
# transformers 5 saves Qwen3MoeForCausalLM) or fused (`mlp.experts.gate_up_proj` [E, 2F, D], `down_proj` [E, D, F],
# its in-memory layout); either is first stacked into one [E, out, in] tensor per projection under a key of its
# own, `mlp.experts.gate` (`_stack_experts`), which the table maps.
_L = r"model\.layers\.(\d+)\."
HF_TO_JGEM: tuple[tuple[str, str, str], ...] = (
    (r"model\.embed_tokens\.weight", "embed", "id"),
    (r"lm_head\.weight", "lm_head", "T"),
    (r"model\.norm\.weight", "final_norm.scale", "id"),
    (_L + r"input_layernorm\.weight", "layers.{0}.attn_norm.scale", "id"),
    (_L + r"post_attention_layernorm\.weight", "layers.{0}.mlp_norm.scale", "id"),
    (_L + r"self_attn\.(q|k|v)_proj\.weight", "layers.{0}.attn.{1}", "in_heads"),
    (_L + r"self_attn\.(q|k|v)_proj\.bias", "layers.{0}.attn.{1}_bias", "heads"),
    (_L + r"self_attn\.o_proj\.weight", "layers.{0}.attn.o", "out_heads"),
    (_L + r"self_attn\.(q|k)_norm\.weight", "layers.{0}.attn.{1}_norm.scale", "id"),
    (_L + r"mlp\.(gate|up|down)_proj\.weight", "layers.{0}.mlp.{1}", "T"),
    (_L + r"mlp\.gate\.weight", "layers.{0}.mlp.router", "T"),  # a mixture of experts' router
    (_L + r"mlp\.experts\.(gate|up|down)", "layers.{0}.mlp.experts.{1}", "experts_T"),  # stacked: _stack_experts
    (r"value_head\.weight", "value_w", "id"),  # jgem's critic head (transformers ignores it)
    (r"value_head\.bias", "value_b", "id"),
)
_IGNORED = (r".*rotary_emb\.inv_freq",)

# Where a logical axis goes when no rules are given: the first of these mesh axes that exists and divides.
DEFAULT_RULES: dict[str, tuple[str, ...]] = {
    "vocab": ("tensor",),
    "embed": ("fsdp",),
    "heads": ("tensor",),
    "kv_heads": ("tensor",),
    "mlp": ("tensor",),
    "head_dim": (),
    "expert": ("expert",),  # expert parallelism (a mesh with an expert axis); replicated on meshes without one
}

_ST_DTYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "BF16": ml_dtypes.bfloat16,
    "F64": np.float64,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}


# ---------------------------------------------------------------------- safetensors (numpy, bf16-aware)


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Memory-maps every tensor of one .safetensors file (bfloat16 via ml_dtypes; nothing is copied yet)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    if not header:
        return {}
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for key, info in header.items():
        if info["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {key} has unsupported dtype {info['dtype']}")
        a, b = info["data_offsets"]
        out[key] = mm[a:b].view(_ST_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key, arr in tensors.items():
        nbytes = arr.nbytes
        header[key] = {
            "dtype": _ST_NAMES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in tensors.values():
            f.write(np.ascontiguousarray(arr).tobytes())


def _checkpoint_tensors(path: str) -> dict[str, np.ndarray]:
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}; jgem reads safetensors checkpoints only")
    out: dict[str, np.ndarray] = {}
    for name in files:
        out.update(read_safetensors(os.path.join(path, name)))
    return out


_EXPERT_KEY = re.compile(r"(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight")
_FUSED_KEY = re.compile(r"(model\.layers\.\d+\.mlp\.experts)\.(gate_up_proj|down_proj)")


def _stack_experts(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`tensors` with a mixture of experts' projections as one [E, out, in] tensor per layer and projection, keyed
    `model.layers.{i}.mlp.experts.{gate|up|down}`: from the per-expert tensors (`experts.{e}.gate_proj.weight`,
    experts 0..E-1 all there) stacked, or from transformers' fused in-memory layout (`experts.gate_up_proj`
    [E, 2F, D] split into gate and up; `experts.down_proj` [E, D, F] as it is). A dense checkpoint: unchanged."""
    out: dict[str, np.ndarray] = {}
    parts: dict[str, dict[int, np.ndarray]] = {}
    for key, arr in tensors.items():
        m, fused = _EXPERT_KEY.fullmatch(key), _FUSED_KEY.fullmatch(key)
        if m:
            parts.setdefault(f"{m[1]}.{m[3]}", {})[int(m[2])] = arr
        elif fused and fused[2] == "down_proj":
            out[f"{fused[1]}.down"] = arr
        elif fused and arr.ndim == 3 and arr.shape[1] % 2 == 0:
            f = arr.shape[1] // 2
            out[f"{fused[1]}.gate"], out[f"{fused[1]}.up"] = arr[:, :f], arr[:, f:]
        else:
            out[key] = arr
    for name, experts in parts.items():
        if sorted(experts) != list(range(len(experts))):
            missing = sorted(set(range(max(experts) + 1)) - set(experts))
            raise ValueError(f"checkpoint lacks experts {missing} of {name.replace('.experts.', '.experts.*.')}")
        out[name] = np.stack([experts[e] for e in range(len(experts))])
    return out


# ---------------------------------------------------------------------- layouts


def _hf_shape(layout: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    if layout == "experts_T":
        return (shape[0], shape[2], shape[1])
    if layout == "T":
        return shape[::-1]
    if layout == "in_heads":
        return (shape[1] * shape[2], shape[0])
    if layout == "out_heads":
        return (shape[2], shape[0] * shape[1])
    if layout == "heads":
        return (math.prod(shape),)
    return shape


def _to_jgem(layout: str, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if layout == "experts_T":
        return arr.transpose(0, 2, 1)
    if layout in ("T", "in_heads", "out_heads"):
        arr = arr.T
    return arr.reshape(shape)


def _to_hf(layout: str, arr: np.ndarray) -> np.ndarray:
    if layout == "experts_T":
        return arr.transpose(0, 2, 1)
    if layout == "heads":
        return arr.reshape(-1)
    if layout == "in_heads":
        return arr.reshape(arr.shape[0], -1).T
    if layout == "out_heads":
        return arr.reshape(-1, arr.shape[-1]).T
    if layout == "T":
        return arr.T
    return arr


def _match(key: str) -> tuple[str, str] | None:
    for pattern, template, layout in HF_TO_JGEM:
        m = re.fullmatch(pattern, key)
        if m:
            return template.format(*m.groups()), layout
    return None


def _path_str(path: tuple) -> str:
    return ".".join(str(p) for p in path)


# ---------------------------------------------------------------------- sharding


def logical_sharding(
    names: Sequence[str | None] | None,
    shape: tuple[int, ...],
    mesh: Mesh,
    rules: dict[str, tuple[str, ...]] | None = None,
) -> NamedSharding:
    """NamedSharding for a parameter with logical axis `names`; a mesh axis is used once and only if it divides."""
    rules = DEFAULT_RULES if rules is None else rules
    used: set[str] = set()
    spec = []
    for dim, name in zip(shape, names or (None,) * len(shape)):
        axis = None
        for cand in rules.get(name, ()) if name else ():
            if cand in mesh.shape and cand not in used and dim % mesh.shape[cand] == 0 and mesh.shape[cand] > 1:
                axis = cand
                used.add(cand)
                break
        spec.append(axis)
    return NamedSharding(mesh, canonical_spec(PartitionSpec(*spec), mesh))  # as the trainer places its state


# ---------------------------------------------------------------------- load / save


def load_pretrained(
    path: str | os.PathLike,
    *,
    mesh: Mesh | None = None,
    dtype: str | None = None,
    param_dtype: str | None = None,
    remat: bool | str | None = None,
    attention: str | None = None,
    scan_layers: bool | None = None,
    lora: LoraConfig | None = None,
    value_head: bool = False,
    seed: int = 0,
    rules: dict[str, tuple[str, ...]] | None = None,
    sharding_fn: Callable[[tuple[str | None, ...], tuple[int, ...]], Any] | None = None,
) -> tuple[Transformer, ModelConfig]:
    """Loads a local HF checkpoint directory (config.json + *.safetensors, single or sharded with an index).

    dtype / param_dtype override the compute / parameter dtypes (default float32); remat, attention, scan_layers and
    lora the `ModelConfig` fields of those names (defaults "none", "auto", None and no adapters). With `mesh`, each
    tensor goes straight to its NamedSharding (from the logical axis names via `rules`, or `sharding_fn(names,
    shape)`).
    What the checkpoint cannot hold is freshly initialised: a value head (seed 0) and LoRA adapters (from `seed`,
    as `Transformer(cfg, rngs=nnx.Rngs(seed))` draws them).
    """
    path = os.fspath(path)
    given = (
        ("dtype", dtype),
        ("param_dtype", param_dtype),
        ("remat", remat),
        ("attention", attention),
        ("scan_layers", scan_layers),
        ("lora", lora),
    )
    overrides = {k: v for k, v in given if v is not None}
    cfg = ModelConfig.from_hf(path, **overrides)
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0), value_head=value_head))
    graphdef, abs_state = nnx.split(abstract)
    targets = {_path_str(p): v for p, v in nnx.to_flat_state(abs_state)}
    tensors = _stack_experts(_checkpoint_tensors(path))

    filled: dict[str, jax.Array] = {}
    if cfg.lora.rank:
        for name, arr in fresh_adapters(cfg, seed=seed).items():
            var = targets[name]
            names = var.get_metadata().get("out_sharding")
            if mesh is None and sharding_fn is None:
                filled[name] = arr
            else:
                sh = sharding_fn(names, var.shape) if sharding_fn else logical_sharding(names, var.shape, mesh, rules)
                filled[name] = put_global(arr, sh)  # the same draw on every process
    unexpected, misshaped = [], []
    seen_bad: set[str] = set()
    for key, arr in tensors.items():
        hit = _match(key)
        if hit is None:
            if not any(re.fullmatch(p, key) for p in _IGNORED):
                unexpected.append(key)
            continue
        name, layout = hit
        if name not in targets:
            if name == "lm_head" and cfg.tie_word_embeddings:
                continue  # some tied checkpoints also store the head; transformers ignores it too
            if name.startswith("value_") and not value_head:
                continue  # a policy-only load of a checkpoint saved with a critic head
            unexpected.append(key)
            continue
        var = targets[name]
        want = _hf_shape(layout, var.shape)
        if tuple(arr.shape) != want:
            misshaped.append(f"{key}: checkpoint {tuple(arr.shape)}, expected {want}")
            seen_bad.add(name)
            continue
        host = _to_jgem(layout, arr, var.shape).astype(var.dtype)
        names = var.get_metadata().get("out_sharding")
        if mesh is None and sharding_fn is None:
            filled[name] = jnp.asarray(host)
        else:
            sh = sharding_fn(names, var.shape) if sharding_fn else logical_sharding(names, var.shape, mesh, rules)
            filled[name] = jax.make_array_from_callback(var.shape, sh, lambda idx, h=host: np.asarray(h[idx]))
    missing = [n for n in targets if n not in filled and n not in seen_bad and not n.startswith("value_")]
    if missing or unexpected or misshaped:
        parts = []
        if missing:
            parts.append(f"missing params ({len(missing)}): {missing}")
        if unexpected:
            parts.append(f"unexpected checkpoint keys ({len(unexpected)}): {unexpected}")
        if misshaped:
            parts.append(f"mis-shaped ({len(misshaped)}): {misshaped}")
        raise ValueError(f"checkpoint {path} does not match its config.json ({cfg.family}): " + "; ".join(parts))

    if value_head:
        fresh = nnx.state(Transformer(cfg.replace(num_layers=0, vocab_size=1), rngs=nnx.Rngs(0), value_head=True))
        for name in ("value_w", "value_b"):
            if name not in filled:
                v = np.asarray(fresh[name][...])
                sh = None if mesh is None else NamedSharding(mesh, PartitionSpec())
                filled[name] = jax.device_put(v, sh) if sh is not None else jnp.asarray(v)
    flat = [(p, v.replace(filled[_path_str(p)])) for p, v in nnx.to_flat_state(abs_state)]
    model = nnx.merge(graphdef, nnx.from_flat_state(flat))
    return model, cfg


# The inverse table, for saving: jgem param regex -> (HF key template, layout).
JGEM_TO_HF: tuple[tuple[str, str, str], ...] = (
    (r"embed", "model.embed_tokens.weight", "id"),
    (r"lm_head", "lm_head.weight", "T"),
    (r"final_norm\.scale", "model.norm.weight", "id"),
    (r"layers\.(\d+)\.attn_norm\.scale", "model.layers.{0}.input_layernorm.weight", "id"),
    (r"layers\.(\d+)\.mlp_norm\.scale", "model.layers.{0}.post_attention_layernorm.weight", "id"),
    (r"layers\.(\d+)\.attn\.(q|k|v)", "model.layers.{0}.self_attn.{1}_proj.weight", "in_heads"),
    (r"layers\.(\d+)\.attn\.(q|k|v)_bias", "model.layers.{0}.self_attn.{1}_proj.bias", "heads"),
    (r"layers\.(\d+)\.attn\.o", "model.layers.{0}.self_attn.o_proj.weight", "out_heads"),
    (r"layers\.(\d+)\.attn\.(q|k)_norm\.scale", "model.layers.{0}.self_attn.{1}_norm.weight", "id"),
    (r"layers\.(\d+)\.mlp\.(gate|up|down)", "model.layers.{0}.mlp.{1}_proj.weight", "T"),
    (r"layers\.(\d+)\.mlp\.router", "model.layers.{0}.mlp.gate.weight", "T"),
    (r"layers\.(\d+)\.mlp\.experts\.(gate|up|down)", "model.layers.{0}.mlp.experts.{1}", "experts_T"),
    (r"value_w", "value_head.weight", "id"),
    (r"value_b", "value_head.bias", "id"),
)


def _jgem_to_hf_key(name: str) -> tuple[str, str]:
    for pattern, template, layout in JGEM_TO_HF:
        m = re.fullmatch(pattern, name)
        if m:
            return template.format(*m.groups()), layout
    raise ValueError(f"no HF name for jgem param {name!r}; add it to JGEM_TO_HF and HF_TO_JGEM")


def save_pretrained(
    model: Transformer,
    cfg: ModelConfig,
    path: str | os.PathLike,
    *,
    max_shard_bytes: int | None = None,
    dtype: str | None = None,
    adapter: int | None = None,
) -> list[str]:
    """Writes config.json + safetensors that transformers loads; shards into several files plus
    model.safetensors.index.json when the weights exceed `max_shard_bytes`. Returns the files written.

    dtype (e.g. "bfloat16") converts the saved weights; default keeps the param dtype. LoRA adapters are merged
    into their projections (`jgem.models.lora.merged`): the checkpoint is a plain model of the same shapes; of a
    model with several (one per policy), `adapter`'s.
    """
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    for p, var in nnx.to_flat_state(nnx.state(merged(model, adapter), nnx.Param)):
        key, layout = _jgem_to_hf_key(_path_str(p))
        arr = np.asarray(jax.device_get(var[...]))
        if dtype is not None:
            arr = arr.astype(jnp.dtype(dtype))
        hf_arr = _to_hf(layout, arr)
        if layout == "experts_T":  # one tensor per expert and projection, as transformers saves them
            for e in range(hf_arr.shape[0]):
                tensors[key.replace(".experts.", f".experts.{e}.") + "_proj.weight"] = np.array(hf_arr[e], order="C")
            continue
        tensors[key] = np.array(hf_arr, order="C")  # (ascontiguousarray would make 0-d 1-d)
    hf = cfg.to_hf_dict()
    saved_dtype = str(jnp.dtype(dtype or cfg.param_dtype))
    hf["torch_dtype"] = hf["dtype"] = saved_dtype
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf, f, indent=2)
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for key in sorted(tensors):
        arr = tensors[key]
        if max_shard_bytes and shards[-1] and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][key] = arr
        size += arr.nbytes
    written = ["config.json"]
    if len(shards) == 1:
        write_safetensors(os.path.join(path, "model.safetensors"), shards[0])
        return [*written, "model.safetensors"]
    weight_map = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(path, name), shard)
        weight_map.update(dict.fromkeys(shard, name))
        written.append(name)
    index = {"metadata": {"total_size": sum(a.nbytes for a in tensors.values())}, "weight_map": weight_map}
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
    return [*written, "model.safetensors.index.json"]
