"""Publication with split meshes: the ways JAX offers to move the learner's weights onto the sampler's devices,
each tried, timed and checked, in one process and across two (docs/benchmarks.md, "publish").

Ways (`--ways`):
- `union`: jgem's (`jgem.sharding.publish.Publisher`): one program over both sides' devices whose only
  communication is a collective permute (each learner device's shard to its paired sampler device).
- `device_put`: `jax.device_put(learner_params, sampler_shardings)`, the peer: JAX's own way between meshes. Across
  processes JAX refuses it unless `jax_cross_host_transfer_socket_address` is set (the worker records the refusal),
  and `device_put+dcn` sets it: the cross-host (DCN) transfer, through sockets.
- `transfer`: `jax.experimental.transfer`, a transfer server per process; the sampler's process pulls the learner's
  arrays (request ids and addresses through the `jax.distributed` key-value store).

Workload: a preset's params (default `tiny`) in float32; learner mesh fsdp over its devices (the pod layout),
sampler mesh data over its devices (replicated weights: the engine's default layout), half the devices each.
Per way: whether it works, the median milliseconds of `--repeats` publications after one warm-up, the bytes the
sampler's devices receive, and whether the values arrived bit for bit (each process hashes its side).
On CPU every "device" is host memory and the processes share two cores: the times say what each way costs in
program dispatch and copies here, not what the chips' interconnect would do (docs/scaling.md, "Split meshes",
has the pod figures, from the compiler).

    .venv/bin/python bench/publish.py                     # 1 process x 8 devices and 2 processes x 2 devices
    .venv/bin/python bench/publish.py --preset 100m --repeats 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("union", "device_put", "device_put+dcn", "transfer")


def _digest(tree) -> str:
    import jax
    import numpy as np

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()[:16]


def worker(args) -> dict:
    """One process's side of every way (all processes run this together)."""
    import jax

    pid, nproc = args.process_id, args.num_processes
    if nproc > 1:
        if args.dcn:
            jax.config.update("jax_cross_host_transfer_socket_address", f"127.0.0.1:{args.port + 1 + pid}")
        from jgem.sharding.mesh import initialize

        initialize(f"localhost:{args.port}", nproc, pid)
    import numpy as np
    from flax import nnx

    from jgem.models.config import preset
    from jgem.models.transformer import init_model
    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import split_meshes
    from jgem.sharding.publish import shard_bytes
    from jgem.sharding.rules import tree_shardings

    n = jax.device_count() // 2
    learner, sampler = split_meshes(MeshConfig(fsdp=-1, rollout_devices=n, rollout_placement="first"))
    params = nnx.split(init_model(preset(args.preset), seed=0, mesh=learner), nnx.Param, ...)[1]
    targets = tree_shardings(params, sampler)
    mine = lambda mesh: any(d.process_index == pid for d in mesh.devices.flat)
    out = {"process": pid, "learner": _digest(params) if mine(learner) else None, "ways": {}}
    for way in args.ways:
        try:
            fn = _way(way, params, targets, learner, sampler)
            times, into = [], fn(None)  # warm-up (compiles)
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                into = fn(into)
                times.append(time.perf_counter() - t0)
            got = _digest(into) if mine(sampler) else None
            out["ways"][way] = {"ms": 1e3 * float(np.median(times)), "bytes": shard_bytes(into)[0], "sampler": got}
        except Exception as e:  # noqa: BLE001 - the bench reports what each way says
            out["ways"][way] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
    return out


def _way(way: str, params, targets, learner, sampler):
    """`publish(into) -> the sampler's new copy` for one way."""
    import jax
    from jax.sharding import NamedSharding

    from jgem.sharding.publish import Publisher

    if way == "union":
        pub = Publisher(learner, sampler)
        return lambda into: pub(params, targets, into)
    if way == "device_put":
        return lambda into: jax.block_until_ready(jax.device_put(params, targets, may_alias=False))
    if way == "device_put+dcn":  # across hosts it moves shard i to shard i: the sampler's layout first
        mirror = Publisher(learner, sampler).mirror
        layout = jax.jit(lambda xs: xs, out_shardings=jax.tree.map(lambda t: NamedSharding(mirror, t.spec), targets))
        return lambda into: jax.block_until_ready(jax.device_put(layout(params), targets, may_alias=False))
    return _transfer(params, targets, learner, sampler)


def _transfer(params, targets, learner, sampler):
    """`jax.experimental.transfer`: every process starts a server; the learner's processes offer their shards
    (`await_pull`), the sampler's pull them into arrays of the sampler's shardings. Addresses and request ids go
    through the jax.distributed key-value store."""
    import jax
    from jax._src import distributed
    from jax.experimental import transfer
    from jax.sharding import NamedSharding

    from jgem.sharding.publish import Publisher

    pid = jax.process_index()
    client = jax.devices()[0].client
    server = transfer.start_transfer_server(client, "127.0.0.1:0", ["127.0.0.1:0"])
    kv = distributed.global_state.client
    if kv is None:  # one process: the server pulls from itself
        addresses = {pid: server.address()}
    else:
        kv.key_value_set(f"jgem_transfer/{pid}", server.address())
        addresses = {p: kv.blocking_key_value_get(f"jgem_transfer/{p}", 60_000) for p in range(jax.process_count())}
    learner_proc = next(iter(learner.devices.flat)).process_index
    is_learner = any(d.process_index == pid for d in learner.devices.flat)
    is_sampler = any(d.process_index == pid for d in sampler.devices.flat)
    conn = server.connect(addresses[learner_proc]) if is_sampler else None
    leaves, targets = jax.tree.leaves(params), jax.tree.leaves(targets)
    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=t) for x, t in zip(leaves, targets)]
    # a pull moves shard i to shard i: the learner offers its params in the sampler's layout (on its own devices)
    mirror = Publisher(learner, sampler).mirror
    layout = jax.jit(lambda xs: xs, out_shardings=[NamedSharding(mirror, t.spec) for t in targets])
    count = iter(range(1, 1 << 30))

    def fn(_into):
        uuid = next(count)
        if is_learner:
            server.await_pull(uuid, layout(leaves))
        got = conn.pull(uuid, shapes) if is_sampler else None
        if kv is not None:  # the learner's side waits until the pull is done before its next offer
            kv.wait_at_barrier(f"jgem_transfer_done_{uuid}", 60_000)
        return jax.block_until_ready(got) if got is not None else []  # the learner's side receives nothing

    return fn


def spawn(nproc: int, devices: int, args, ways: list[str], *, dcn: bool = False) -> list[dict]:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(devices), PYTHONPATH=str(ROOT))
    outs = [Path(f"/tmp/jgem_publish_{os.getpid()}_{i}.json") for i in range(nproc)]
    cmd = lambda i: [
        sys.executable,
        __file__,
        "--worker",
        "--process-id",
        str(i),
        "--num-processes",
        str(nproc),
        "--port",
        str(port),
        "--out",
        str(outs[i]),
        "--preset",
        args.preset,
        "--repeats",
        str(args.repeats),
        "--ways",
        *ways,
        *(["--dcn"] if dcn else []),
    ]
    procs = [
        subprocess.Popen(cmd(i), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(nproc)
    ]
    logs = [p.communicate(timeout=args.timeout)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a worker failed:\n" + "\n".join(log[-2000:] for log in logs))
    return [json.loads(o.read_text()) for o in outs]


def rows(results: list[dict], setting: str) -> list[dict]:
    """One row per way: works, ms (the slowest process), bytes received, values equal on both sides."""
    learner = next(r["learner"] for r in results if r["learner"])
    out = []
    for way in results[0]["ways"]:
        per = [r["ways"][way] for r in results]
        err = next((p["error"] for p in per if "error" in p), None)
        row = {"setting": setting, "way": way}
        if err:
            row |= {"works": False, "error": err}
        else:
            sampler = next(p["sampler"] for p in per if p["sampler"])
            row |= {
                "works": sampler == learner,
                "ms": round(max(p["ms"] for p in per), 2),
                "bytes": max(p["bytes"] for p in per),  # every process counts all devices
            }
        out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--dcn", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        Path(args.out).write_text(json.dumps(worker(args)))
        return
    plain = [w for w in args.ways if w != "device_put+dcn"]
    table = rows(spawn(1, 8, args, plain), "1 process x 8 devices (4 + 4)")
    table += rows(spawn(2, 2, args, plain), "2 processes x 2 devices (one each side)")
    if "device_put+dcn" in args.ways:
        table += rows(spawn(2, 2, args, ["device_put+dcn"], dcn=True), "2 processes x 2 devices, DCN flags set")
    for r in table:
        print(json.dumps(r))
    print("\n| setting | way | works | ms per publication | bytes received |\n|---|---|---|---|---|")
    for r in table:
        ms = r.get("ms", r.get("error", ""))
        print(f"| {r['setting']} | {r['way']} | {'yes' if r['works'] else 'no'} | {ms} | {r.get('bytes', '')} |")


if __name__ == "__main__":
    main()
