"""Logical axis names -> mesh axes: one rules table, and functions that place params, optimizer state and batches.

Params carry logical names in their nnx metadata (`out_sharding`, e.g. ("embed", "mlp")). A rule maps each
logical name to a mesh axis (or a tuple of axes, or None: replicated). The batch is sharded over (data, fsdp), and
`expert` where the mesh has it (expert parallelism: jgem.models.moe); a mesh axis a mesh lacks is left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jgem.sharding.config import BATCH_AXES

Rules = tuple[tuple[str, str | tuple[str, ...] | None], ...]

DEFAULT_RULES: Rules = (
    ("batch", ("data", "fsdp")),
    ("embed", "fsdp"),
    ("vocab", "tensor"),
    ("mlp", "tensor"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    ("lora", None),  # a LoRA adapter's rank axis: a few columns, replicated (its other axis shards as its weight's)
    ("adapters", None),  # several policies' adapters stacked (LoraConfig.adapters): a few, replicated
    ("expert", "expert"),  # a mixture of experts' leading axis (jgem.models.moe): split over the expert mesh axis
    ("layers", None),
    ("norm", None),
)
# on a mesh with an `expert` axis (expert parallelism) the default rules become these (`mesh_rules`): the axis splits
# the rows and the dense weights' `embed` as fsdp does (an expert weight's `embed` keeps fsdp: `expert` is taken by
# its leading dim)
EP_RULES: Rules = tuple(
    (name, {"batch": BATCH_AXES, "embed": ("fsdp", "expert")}.get(name, axes)) for name, axes in DEFAULT_RULES
)


def mesh_rules(rules: Rules, mesh) -> Rules:
    """`rules` for `mesh`: the default rules on a mesh with an `expert` axis are `EP_RULES`; others as they are."""
    if rules == DEFAULT_RULES and mesh is not None and not getattr(mesh, "empty", False) and "expert" in mesh.shape:
        return EP_RULES
    return rules


def logical_names(var: nnx.Variable) -> tuple | None:
    """The logical axis names attached to a variable (flax 0.12 `out_sharding`, older `sharding_names`)."""
    meta = var.get_metadata()
    for key in ("out_sharding", "sharding_names", "sharding"):
        names = meta.get(key)
        if names is not None:
            return tuple(names)
    return None


def logical_to_spec(names: Sequence[str | None] | None, rules: Rules = DEFAULT_RULES) -> P:
    """PartitionSpec for logical names; a mesh axis already used by an earlier dim is not reused."""
    if names is None:
        return P()
    table = dict(rules)
    used: set[str] = set()
    out = []
    for name in names:
        axes = table.get(name) if name is not None else None
        if name is not None and name not in table:
            raise ValueError(
                f"logical axis {name!r} has no sharding rule; add ({name!r}, <mesh axis or None>) "
                f"to the rules (known: {sorted(table)})"
            )
        axes_t = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
        axes_t = tuple(a for a in axes_t if a not in used)
        used.update(axes_t)
        out.append(None if not axes_t else (axes_t[0] if len(axes_t) == 1 else axes_t))
    return P(*out)


def _axis_size(mesh: Mesh, axes) -> int:
    if axes is None:
        return 1
    axes = (axes,) if isinstance(axes, str) else axes
    return int(np.prod([mesh.shape[a] for a in axes if a in mesh.shape]))


def check_divisible(shape: Sequence[int], spec: P, mesh: Mesh, what: str) -> None:
    """ValueError naming the array, dim, mesh axis and a size that works when a dim does not divide its axes."""
    for dim, (size, axes) in enumerate(zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)))):
        n = _axis_size(mesh, axes)
        if size % n:
            valid = max(d for d in range(1, n + 1) if size % d == 0 and n % d == 0)
            raise ValueError(
                f"{what}: dim {dim} of size {size} is not divisible by mesh axis {axes} of size {n}; "
                f"use a mesh where {axes} has size {valid} (divides {size}), or change the rules or the shape"
            )


def canonical_spec(spec: P, mesh) -> P:
    """`spec` without the mesh axes of size 1 (they split nothing) or absent from the mesh (`expert` on a mesh without
    expert parallelism), and `P()` where nothing is left: the form jax
    gives a program's outputs, so a train state placed this way comes back from a step with the same shardings and
    the next step reuses the compiled program (placed as P('tensor', 'fsdp') on a mesh where both axes are 1, the
    state came back as P() and the second step compiled the update again)."""
    out = []
    for axes in spec:
        axes_t = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
        axes_t = tuple(a for a in axes_t if mesh.shape.get(a, 1) > 1)
        out.append(None if not axes_t else (axes_t[0] if len(axes_t) == 1 else axes_t))
    while out and out[-1] is None:
        out.pop()
    return P(*out)


def _path_str(path) -> str:
    return ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)


def tree_shardings(tree, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """NamedSharding for every leaf: nnx Variables by their logical names, anything else replicated.

    Works on params, on optimizer state (optax keeps the Variable wrappers and their metadata for mu/nu),
    and on abstract trees (ShapeDtypeStruct or tracers) inside jit.
    """

    rules = mesh_rules(rules, mesh)

    def leaf_sharding(path, x):
        if isinstance(x, nnx.Variable):
            value = x.get_value() if hasattr(x, "get_value") else x.value
            spec = logical_to_spec(logical_names(x), rules)
            spec = canonical_spec(spec, mesh)
            check_divisible(np.shape(value), spec, mesh, f"param {_path_str(path)} {tuple(logical_names(x) or ())}")
            return x.replace(NamedSharding(mesh, spec))
        return NamedSharding(mesh, P())

    return jax.tree_util.tree_map_with_path(leaf_sharding, tree, is_leaf=lambda x: isinstance(x, nnx.Variable))


def put_global(x, sharding: jax.sharding.Sharding):
    """A copy of `x` (an array holding the same value on every process) placed on `sharding`.

    On a sharding that spans processes, `jax.device_put` of a `jax.Array` (jax 0.10) returns an array whose
    per-device buffers are themselves global arrays: it computes, but `addressable_shards` raises, so orbax
    cannot save it (issue 31: the first checkpoint after a warm start's fresh optimizer state crashed). There
    the array is built from its addressable shards instead: each a slice of `x` copied device to device. An `x`
    that spans processes already (a checkpoint loaded onto the mesh) is resharded as usual."""
    if sharding.is_fully_addressable or (isinstance(x, jax.Array) and not x.is_fully_addressable):
        return jax.device_put(x, sharding, may_alias=False)  # a global array already (e.g. load_pretrained's)
    if not isinstance(x, jax.Array):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx], dtype=x.dtype)
    # dtype: a process that holds none of `sharding`'s devices (a role split's other side) has no shard to read it
    return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx].copy(), dtype=x.dtype)


def shard_tree(tree, mesh: Mesh, rules: Rules = DEFAULT_RULES):
    """Place (a copy of) a pytree of arrays (params, opt state) on `mesh` according to the rules."""
    return jax.tree.map(put_global, tree, tree_shardings(tree, mesh, rules))


def constrain_tree(tree, mesh: Mesh | None, rules: Rules = DEFAULT_RULES):
    """with_sharding_constraint by the rules (inside jit); identity without a mesh."""
    if mesh is None:
        return tree
    return jax.lax.with_sharding_constraint(tree, tree_shardings(tree, mesh, rules))


def batch_axes(mesh=None) -> tuple[str, ...]:
    """The mesh axes that split the rows: (data, fsdp), and `expert` where `mesh` (default: the mesh in context,
    `jax.set_mesh`) has it."""
    mesh = jax.sharding.get_abstract_mesh() if mesh is None else mesh
    has_expert = not getattr(mesh, "empty", False) and "expert" in mesh.shape
    return tuple(a for a in BATCH_AXES if a != "expert" or has_expert)


def batch_spec(ndim: int = 2, mesh=None) -> P:
    """Rows over the batch axes (`batch_axes(mesh)`), everything else replicated."""
    return P(batch_axes(mesh), *([None] * (ndim - 1)))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Rows over (data, fsdp) (and expert), everything else replicated."""
    return NamedSharding(mesh, batch_spec(ndim, mesh))


def check_batch_size(batch_size: int, mesh: Mesh, what: str = "batch_size") -> None:
    axes = batch_axes(mesh)
    n = int(np.prod([mesh.shape[a] for a in axes]))
    if batch_size % n:
        raise ValueError(
            f"{what} {batch_size} is not divisible by {n} devices on mesh axes ({', '.join(axes)}) "
            f"= ({', '.join(str(mesh.shape[a]) for a in axes)}); use a multiple of {n}"
        )


def shard_batch(batch, mesh: Mesh, *, process_local: bool | None = None):
    """Place a pytree of [B, ...] host arrays with rows sharded over (data, fsdp).

    Single process: the arrays are the global batch. Multi-process (default when jax.process_count() > 1):
    each process passes its own rows and the global batch is their concatenation in process order.
    """
    process_local = jax.process_count() > 1 if process_local is None else process_local

    def place(x):
        if x is None:
            return None
        sharding = batch_sharding(mesh, np.ndim(x))
        if process_local:
            return jax.make_array_from_process_local_data(sharding, np.asarray(x))
        check_batch_size(np.shape(x)[0], mesh)
        return jax.device_put(x, sharding)

    return jax.tree.map(place, batch)


def constrain(x: jax.Array, names: Sequence[str | None], rules: Rules = DEFAULT_RULES) -> jax.Array:
    """`x` constrained to the sharding its logical axis `names` map to, when a mesh is in context (`jax.set_mesh`);
    without one, `x` as it is. Mesh axes the mesh lacks, manual ones (inside shard_map) and ones that do not divide
    their dim are left out, so the constraint never fails a shape that runs unconstrained."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    out = []
    for size, axes in zip(x.shape, tuple(logical_to_spec(names, mesh_rules(rules, mesh))) + (None,) * x.ndim):
        axes_t = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
        kept, n = [], 1
        for a in axes_t:
            if a in mesh.shape and a not in mesh.manual_axes and size % (n * mesh.shape[a]) == 0:
                kept.append(a)
                n *= mesh.shape[a]
        out.append(None if not kept else (kept[0] if len(kept) == 1 else tuple(kept)))
    if all(a is None for a in out):
        return x
    return jax.lax.with_sharding_constraint(x, P(*out))
