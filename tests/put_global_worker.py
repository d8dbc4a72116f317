"""One process of tests/test_put_global.py: every kind of input `put_global` meets, placed on shardings that span
2 processes, then saved with orbax (which is what failed on arrays placed with `jax.device_put`).

Usage: python -m tests.put_global_worker PROCESS_ID NUM_PROCESSES PORT OUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    pid, n, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    import jax

    jax.distributed.initialize(f"127.0.0.1:{port}", n, pid)
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    from jax.experimental import multihost_utils
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jgem.sharding.rules import put_global

    mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    value = np.arange(8, dtype=np.float32)
    inputs = {
        "numpy": lambda: value,
        "uncommitted": lambda: jnp.asarray(value),
        "committed": lambda: jax.device_put(jnp.asarray(value), jax.local_devices()[0]),
        "global_replicated": lambda: jax.make_array_from_callback((8,), NamedSharding(mesh, P()), lambda i: value[i]),
        "global_sharded": lambda: jax.make_array_from_callback(
            (8,), NamedSharding(mesh, P("data")), lambda i: value[i]
        ),
    }
    placed, report = {}, {}
    for name, make in inputs.items():
        for spec in (P(), P("data")):
            y = put_global(make(), NamedSharding(mesh, spec))
            key = f"{name}-{'data' if spec else 'replicated'}"
            placed[key] = y
            shards = [s.data for s in y.addressable_shards]  # raised on the arrays device_put made
            whole = np.asarray(multihost_utils.process_allgather(y, tiled=True))
            report[key] = {"shards": len(shards), "equal": bool(np.array_equal(whole, value)), "spec": str(y.sharding)}
    ckpt = ocp.StandardCheckpointer()
    ckpt.save(out.parent.resolve() / "state", placed)
    ckpt.wait_until_finished()
    restored = ckpt.restore(out.parent.resolve() / "state", jax.tree.map(ocp.utils.to_shape_dtype_struct, placed))
    report["restored_equal"] = all(
        np.array_equal(np.asarray(multihost_utils.process_allgather(r, tiled=True)), value) for r in restored.values()
    )
    out.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
