"""Final params digests of fixed short runs, to compare two commits bit for bit (run it in a checkout of each).

    .venv/bin/python scripts/params_digests.py            # every run below
    .venv/bin/python scripts/params_digests.py sync,async1

Runs: the demo preset (3 RL steps after 4 warm-start steps) and tests/test_pipeline.py's config in sync, off_policy
lag 1 (one mesh, split meshes, the per-turn view), GRPO with dynamic sampling, a warm start, the per-turn views, async
and stream. Each prints `name sha256`. The digests hold on one machine (XLA:CPU compiles for its host): compare two
commits on the same box; tests/test_default_workflow_pin.py is the portable pin.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
sys.path.insert(0, os.getcwd())

from experiments.configs import tiny  # noqa: E402
from jgem.config import MeshConfig, PipelineConfig  # noqa: E402
from jgem.train.loop import Trainer  # noqa: E402
from tests.test_pipeline import config  # noqa: E402

RUNS = {
    "demo": None,
    "sync": dict(mode="sync", k=0),
    "off_policy1": dict(mode="off_policy", k=1),
    "off_policy1_split": dict(mode="off_policy", k=1, mesh=MeshConfig(data=-1, rollout_devices=4)),
    "sync_dyn_grpo": dict(mode="sync", k=0, algorithm="grpo", group_size=2, rollout={"dynamic_sampling": True}),
    "sync_warm": dict(mode="sync", k=0, warm_start={"steps": 2}, env={"env_id": "game:GuessTheNumber-v0-easy"}),
    "per_turn": dict(mode="sync", k=0, rollout={"view": "per_turn"}),
    "chat_per_turn": dict(mode="sync", k=0, rollout={"view": "chat_per_turn"}),
    "off_policy1_pt": dict(mode="off_policy", k=1, rollout={"view": "per_turn"}),
    "async1": dict(mode="async", k=1),
    "stream1": dict(mode="stream", k=1),
}


def main() -> None:
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(RUNS)
    d = Path(tempfile.mkdtemp())
    for name in names:
        kw = RUNS[name]
        if kw is None:
            cfg = tiny()
            cfg = dataclasses.replace(
                cfg,
                run_dir=str(d / name),
                steps=3,
                eval_episodes=8,
                console=False,
                plot=False,
                warm_start=dataclasses.replace(cfg.warm_start, steps=4),
            )
        else:
            kw = dict(kw)
            mode, k = kw.pop("mode"), kw.pop("k")
            if mode in ("async", "stream"):
                kw["pipeline"] = PipelineConfig(mode=mode, max_staleness=k)
            cfg = config(d, name, mode, k, steps=3, **kw)
        print(name, Trainer(cfg).run()["params_sha256"], flush=True)


if __name__ == "__main__":
    main()
