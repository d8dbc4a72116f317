"""The main job: `python -m experiments.train <preset> [--field value ...]`.

Presets are in experiments/configs; every TrainConfig field can be overridden on the command line
(`--steps 100 --gamma 0.9 --env.env-id game:Sudoku-v0-easy --mesh.fsdp 8`). Multi-host: run the same
command on every host with JGEM_COORDINATOR, JGEM_NUM_PROCESSES and JGEM_PROCESS_ID set (or on a TPU pod,
with nothing set); see experiments/tpu_pod/.
"""

from __future__ import annotations


def main() -> None:
    import tyro

    from experiments.configs import PRESETS
    from jgem.hostmem import keep_host_memory
    from jgem.sharding.mesh import initialize

    keep_host_memory()  # if JGEM_KEEP_HOST_MEMORY=1: before JAX's first computation (docs/benchmarks.md)
    cfg = tyro.extras.overridable_config_cli(PRESETS)
    initialize()  # multi-host from JGEM_* env vars or TPU auto-detection; a no-op on one machine

    from jgem.train import train

    train(cfg)


if __name__ == "__main__":
    main()
