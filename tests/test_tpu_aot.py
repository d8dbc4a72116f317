"""Ahead-of-time compilation for a TPU topology on this CPU machine (experiments/tpu_pod/aot.py).

Runs in a subprocess: it loads libtpu from .libtpu/ (built by `make libtpu`, which `make test` depends on) and keeps
that process on CPU, without touching this test session's backends.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jgem.algos.algorithms import ALGORITHMS
from jgem.algos.config import LearnerConfig
from jgem.models.config import preset

REPO = Path(__file__).resolve().parents[1]
LIBTPU = Path(os.environ.get("JGEM_LIBTPU_DIR") or REPO / ".libtpu")
GIB = 2**30
needs_libtpu = pytest.mark.skipif(
    not (LIBTPU / "libtpu").is_dir(),
    reason=f"no libtpu in {LIBTPU}: build it with `make libtpu` (pip install --target .libtpu libtpu, off the default "
    "path; `make test` does it) or point JGEM_LIBTPU_DIR at such a directory",
)


def aot(tmp_path, *args: str) -> list[dict]:
    """Run the tool for the tiny preset on v5e:2x2 (8 episodes of 256 tokens, 4 rows per micro-batch) with `args`;
    its JSON rows, the first holding the run's stdout and stderr (`_stdout`, `_stderr`)."""
    out = tmp_path / "aot.jsonl"
    cmd = [sys.executable, "-m", "experiments.tpu_pod.aot", "--topology", "v5e:2x2", "--model", "tiny"]
    cmd += ["--episodes", "8", "--tokens", "256", "--learner.micro-batch-size", "4", *args, "--json", str(out)]
    env = {**os.environ, "JGEM_LIBTPU_DIR": str(LIBTPU), "PYTHONPATH": str(REPO)}
    env.pop("XLA_FLAGS", None)  # the session's simulated CPU devices are not this process's business
    # no persistent compilation cache (tests/conftest.py): a program compiled for a topology is written to it but
    # cannot be read back ("PjRtCompiler must be constructed with a Client to call DeserializeLoadedExecutable"),
    # so a warm cache would only add a warning and a recompile per program
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows[0].update(_stdout=proc.stdout, _stderr=proc.stderr)
    return rows


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> list[dict]:
    """One run of the tool (libtpu's start-up once): PPO's update with an off-policy correction (decoupled PPO: the
    proximal policy's forward and the correction compile into the step; PPO adds the critic, GAE and the value
    loss: the step with the most parts), and the rollout's extend and decode. Each update compiles in 20-40 s
    here, so one algorithm stands for the rest (test_algorithm_all_names_... checks they are all built alike)."""
    argv = ("--slots", "8", "--learner.correction", "decoupled", "--algorithm", "ppo")
    return aot(tmp_path_factory.mktemp("aot"), *argv)


@pytest.mark.slow
@needs_libtpu
@pytest.mark.xdist_group("tpu-aot")
def test_tiny_update_with_a_critic_and_rollout_compile_for_v5e_2x2(compiled):
    res = {r["program"]: r for r in compiled}
    assert len(compiled) == 3 and set(res) == {"update", "extend", "decode"}
    # a line as each program starts and one when it is done, with its seconds; libtpu's complaint that this host
    # has no TPU accelerator type is not printed (the topology's type is set)
    lines = [line.strip() for line in compiled[0]["_stdout"].splitlines()[1:]]
    assert [line.split(":")[0] for line in lines] == ["update [ppo]"] * 2 + ["extend"] * 2 + ["decode"] * 2
    assert all(line.endswith("tracing and compiling ...") for line in lines[::2])
    assert all(re.search(r"\| done in \d+ s \(compile \d+ s\)$", line) for line in lines[1::2])
    assert all(r["seconds"] >= r["compile_s"] > 0 for r in compiled)
    assert "accelerator type" not in compiled[0]["_stderr"]
    for r in res.values():
        assert r["fits"] and 0 < r["total_gib"] < r["hbm_gib"] == 16
        assert r["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1}  # --mesh.fsdp -1 (the default): all 4 chips

    from experiments.tpu_pod.aot import model_flops

    cfg = preset("tiny")
    chips = 4
    # the train state (float32 params and two Adam moments) is sharded over the 4 chips by the rules (norms and
    # small vectors replicated), and donated: the new state aliases it. PPO's state also holds the critic (a
    # policy-shaped Transformer with a value head) and its moments. The step's batch: 25 bytes a token (more with
    # the critic's value mask and bootstrap rows), the [episodes, turns] rewards and mask, the group ids
    state_bytes = 3 * cfg.num_params * 4 / chips
    batch_bytes = (8 * 256 * 25 + 8 * 16 * 5 + 8 * 4) / chips
    upd = res["update"]
    assert upd["algorithm"] == "ppo" and upd["advantage"] == "gae" and upd["critic"] and not upd["reference"]
    assert 2 * state_bytes <= upd["argument_gib"] * GIB <= 4 * state_bytes + 2 * batch_bytes
    assert upd["alias_gib"] * GIB >= 2 * state_bytes  # policy and critic both donated
    assert upd["rows"] == 8 and upd["micro_batches"] == 2 and upd["rows_per_micro_batch"] == 4
    assert upd["episodes_padded"] == 8 and upd["turns_padded"] == 16
    # on TPU the layers are scanned (the default): XLA counts the scan's body once, so no compiled FLOPs are claimed
    assert upd["scan_layers"] is None and upd["compiled_tflop_per_chip"] is None
    # the model FLOPs: the training pass, the correction's scoring pass of the proximal policy, and the critic's
    # forward for the values and its training pass (without the vocab projection it does not use)
    assert upd["correction"] == "decoupled"
    tokens = upd["rows"] * 256
    infer = model_flops(cfg, tokens, 256, train=False)
    head = 2 * cfg.vocab_size * cfg.hidden_size * tokens
    flops = model_flops(cfg, tokens, 256, train=True) + infer + 4 * (infer - head)
    assert upd["model_tflop_per_chip"] == pytest.approx(flops / chips / 1e12, rel=1e-6)
    # the rollout's arguments hold the params (bfloat16 compute, float32 params) and the 8 slots' KV cache
    cache = 8 * 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 256 * 2 / chips
    for name in ("extend", "decode"):
        assert res[name]["argument_gib"] * GIB >= cache
        assert res[name]["alias_gib"] * GIB >= cache  # the cache is donated and updated in place
        assert res[name]["algorithm"] is None  # the rollout does not depend on it


def test_algorithm_all_names_every_registered_one_built_as_the_trainer_builds_it():
    from experiments.tpu_pod.aot import AotConfig, algorithms
    from jgem.algos.step import StepSpec

    assert [a.name for a in algorithms(AotConfig(algorithm=("all",)))] == list(ALGORITHMS.names())
    assert [a.name for a in algorithms(AotConfig(algorithm=("ppo", "grpo", "ppo")))] == ["ppo", "grpo"]
    lcfg = LearnerConfig(kl_coef=0.05)
    # REINFORCE++ takes the KL off the rewards, not in the loss; the others the other way round (the trainer and the
    # AOT tool both build them with Algorithm.learner and StepSpec.of)
    rpp, ppo, gspo = (ALGORITHMS.get(n) for n in ("reinforce_pp", "ppo", "gspo"))
    spec = lambda a: StepSpec.of(a, gamma=0.9, lam=0.8, kl_coef=lcfg.kl_coef)
    assert spec(rpp).reward_kl_coef == 0.05 and rpp.learner(lcfg).kl_coef == 0.0
    assert (spec(ppo).advantage, spec(ppo).gamma, spec(ppo).lam, spec(ppo).reward_kl_coef) == ("gae", 0.9, 0.8, 0.0)
    assert ppo.learner(lcfg).kl_coef == 0.05
    assert gspo.learner(lcfg).policy_loss == "gspo"


@pytest.mark.skipif(not (LIBTPU / "libtpu").is_dir(), reason=f"no libtpu in {LIBTPU}: build it with `make libtpu`")
def test_make_mesh_splits_physical_axes_for_tensor_8_on_v5e_4x4():
    # tensor=8 is no product of the 4x4 slice's physical axes: jax's create_device_mesh refuses it unless allowed
    # to split an axis
    code = (
        "from experiments.tpu_pod.aot import use_libtpu, topology_devices\n"
        "from jgem.sharding.config import MeshConfig\n"
        "from jgem.sharding.mesh import make_mesh\n"
        "use_libtpu()\n"
        "mesh = make_mesh(MeshConfig(fsdp=-1, tensor=8), devices=topology_devices('v5e:4x4'))\n"
        "print(dict(mesh.shape), len({d.id for d in mesh.devices.flat}))\n"
    )
    env = {**os.environ, "JGEM_LIBTPU_DIR": str(LIBTPU), "PYTHONPATH": str(REPO)}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "{'data': 1, 'fsdp': 2, 'tensor': 8} 16"


@pytest.mark.slow
@needs_libtpu
@pytest.mark.xdist_group("tpu-aot")
def test_a_split_pods_publication_compiles_to_collective_permutes_of_the_samplers_shards(tmp_path):
    """v5p:2x2x2 split 4 + 4: the learner's fsdp layout resharded on its own chips to the sampler's (data 2 x
    tensor 2), then one program over all 8 chips whose communication is collective permutes; each chip sends its
    paired sampler chip's share of the float32 params, no more."""
    rows = aot(
        tmp_path,
        "--topology",
        "v5p:2x2x2",
        "--programs",
        "publish",
        "--mesh.rollout-devices",
        "4",
        "--mesh.rollout-data",
        "2",
        "--mesh.rollout-tensor",
        "2",
    )
    res = {r["program"]: r for r in rows}
    assert set(res) == {"publish_reshard", "publish"}
    pub = res["publish"]
    assert pub["mesh"] == {"data": 1, "fsdp": 4, "tensor": 1}
    assert pub["rollout_mesh"] == {"data": 2, "fsdp": 1, "tensor": 2}
    assert pub["fits"] and pub["collective_permutes"] > 0 and pub["other_collectives"] == 0
    cfg = preset("tiny")
    # the sampler's layout splits the big matrices over tensor 2 and replicates the rest, so a chip receives
    # between a half and all of the params (float32)
    assert cfg.num_params * 4 / 2 < pub["publish_bytes_per_chip"] < cfg.num_params * 4
    assert pub["publish_bytes_total"] == pytest.approx(4 * pub["publish_bytes_per_chip"], rel=0.01)
    assert pub["max_hops"] >= 1 and pub["max_link_gib"] * GIB >= pub["publish_bytes_per_chip"]
    assert pub["publish_s_at_ici"] == pytest.approx(pub["max_link_gib"] * GIB / 100e9, rel=1e-6)
    assert res["publish_reshard"]["chips"] == 4 and res["publish_reshard"]["leaves_resharded"] > 0


def test_link_loads_route_each_pair_the_short_way_round_the_torus():
    from types import SimpleNamespace as D

    from experiments.tpu_pod.aot import link_loads

    ring = [D(coords=(0, 0, z)) for z in range(8)]  # one z ring of 8 chips (wrap-around links)
    # z and z + 4 are 4 hops apart either way: even sources go up, odd ones down, so no link carries more than 2
    pairs = [(ring[z], ring[z + 4]) for z in range(4)]
    worst, hops = link_loads(pairs, 10)
    assert hops == 4 and worst == 20
    # neighbours: one hop each, every link once
    assert link_loads([(ring[z], ring[z + 1]) for z in range(0, 8, 2)], 10) == (10.0, 1)
    # a line of 2 (no wrap): straight across
    assert link_loads([(D(coords=(0, 0)), D(coords=(1, 0)))], 7) == (7.0, 1)


def test_accelerator_type_of_a_topology_name():
    from experiments.tpu_pod.aot import accelerator_type

    assert accelerator_type("v5e:2x2") == "v5litepod-4" and accelerator_type("v6e:8x8") == "v6e-64"
    assert accelerator_type("v5p:4x4x4") == "v5p-128" and accelerator_type("v4:2x2x1") == "v4-8"  # TensorCores
    assert accelerator_type("v9:2x2") is None and accelerator_type("v5e:big") is None
