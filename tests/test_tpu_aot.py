"""Ahead-of-time compilation for a TPU topology on this CPU machine (experiments/tpu_pod/aot.py).

Runs in a subprocess: it loads libtpu from .libtpu/ (built by `make libtpu`, which `make test` depends on) and keeps
that process on CPU, without touching this test session's backends.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jgem.models.config import preset

REPO = Path(__file__).resolve().parents[1]
LIBTPU = Path(os.environ.get("JGEM_LIBTPU_DIR") or REPO / ".libtpu")
GIB = 2**30


@pytest.mark.slow
@pytest.mark.skipif(
    not (LIBTPU / "libtpu").is_dir(),
    reason=f"no libtpu in {LIBTPU}: build it with `make libtpu` (pip install --target .libtpu libtpu, off the default "
    "path; `make test` does it) or point JGEM_LIBTPU_DIR at such a directory",
)
def test_tiny_update_and_rollout_compile_for_v5e_2x2(tmp_path):
    out = tmp_path / "aot.jsonl"
    cmd = [sys.executable, "-m", "experiments.tpu_pod.aot", "--topology", "v5e:2x2", "--model", "tiny"]
    cmd += ["--episodes", "8", "--tokens", "256", "--learner.micro-batch-size", "4", "--slots", "8"]
    cmd += ["--json", str(out)]
    env = {**os.environ, "JGEM_LIBTPU_DIR": str(LIBTPU), "PYTHONPATH": str(REPO)}
    env.pop("XLA_FLAGS", None)  # the session's simulated CPU devices are not this process's business
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    res = {r["program"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(res) == {"advantages", "update", "extend", "decode"}
    for r in res.values():
        assert r["fits"] and 0 < r["total_gib"] < r["hbm_gib"] == 16
        assert r["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1}  # --mesh.fsdp -1 (the default): all 4 chips

    cfg = preset("tiny")
    chips = 4
    # the train state (float32 params and two Adam moments) is sharded over the 4 chips by the rules (norms and
    # small vectors replicated), and donated: the new state aliases it
    state_bytes = 3 * cfg.num_params * 4 / chips
    upd = res["update"]
    assert state_bytes <= upd["argument_gib"] * GIB <= 2 * state_bytes + 8 * 256 * 26 / chips
    assert upd["alias_gib"] * GIB >= state_bytes
    assert upd["rows"] == 8 and upd["micro_batches"] == 2 and upd["rows_per_micro_batch"] == 4
    # on TPU the layers are scanned (the default): XLA counts the scan's body once, so no compiled FLOPs are claimed
    assert upd["scan_layers"] is None and upd["compiled_tflop_per_chip"] is None and upd["model_tflop_per_chip"] > 0
    # the rollout's arguments hold the params (bfloat16 compute, float32 params) and the 8 slots' KV cache
    cache = 8 * 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 256 * 2 / chips
    for name in ("extend", "decode"):
        assert res[name]["argument_gib"] * GIB >= cache
        assert res[name]["alias_gib"] * GIB >= cache  # the cache is donated and updated in place


@pytest.mark.skipif(not (LIBTPU / "libtpu").is_dir(), reason=f"no libtpu in {LIBTPU}: build it with `make libtpu`")
def test_make_mesh_splits_physical_axes_for_tensor_8_on_v5e_4x4():
    # tensor=8 is no product of the 4x4 slice's physical axes: jax's create_device_mesh refuses it unless allowed
    # to split an axis
    code = (
        "from experiments.tpu_pod.aot import use_libtpu, topology_devices\n"
        "from jgem.sharding.mesh import MeshConfig, make_mesh\n"
        "use_libtpu()\n"
        "mesh = make_mesh(MeshConfig(fsdp=-1, tensor=8), devices=topology_devices('v5e:4x4'))\n"
        "print(dict(mesh.shape), len({d.id for d in mesh.devices.flat}))\n"
    )
    env = {**os.environ, "JGEM_LIBTPU_DIR": str(LIBTPU), "PYTHONPATH": str(REPO)}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "{'data': 1, 'fsdp': 2, 'tensor': 8} 16"
