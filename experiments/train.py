"""The main job: `python -m experiments.train <preset> [--import MODULE ...] [--field value ...]`.

Presets are in experiments/configs; every TrainConfig field can be overridden on the command line
(`--steps 100 --gamma 0.9 --env.env-id game:Sudoku-v0-easy --mesh.fsdp 8`). `--import my_pkg.my_envs`
(repeatable) imports a module that registers your own env ids first; it is kept in `env.imports`, so resuming,
`experiments.eval` and process workers import it too. Multi-host: run the same command on every host with
JGEM_COORDINATOR, JGEM_NUM_PROCESSES and JGEM_PROCESS_ID set (or on a TPU pod, with nothing set); see
experiments/tpu_pod/.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence


def pop_imports(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the modules of every `--import M` / `--import=M`, the other arguments)."""
    modules, rest, args = [], [], list(argv)
    while args:
        a = args.pop(0)
        if a == "--import":
            if not args or args[0].startswith("--"):
                raise SystemExit("--import needs a module name, e.g. --import my_pkg.my_envs")
            modules.append(args.pop(0))
        elif a.startswith("--import="):
            modules.append(a.split("=", 1)[1])
        else:
            rest.append(a)
    return modules, rest


def main(argv: Sequence[str] | None = None) -> None:
    import tyro

    from experiments.configs import PRESETS
    from jgem.hostmem import keep_host_memory
    from jgem.sharding.mesh import initialize

    keep_host_memory()  # if JGEM_KEEP_HOST_MEMORY=1: before JAX's first computation (docs/benchmarks.md)
    modules, args = pop_imports(sys.argv[1:] if argv is None else argv)
    cfg = tyro.extras.overridable_config_cli(PRESETS, args=args)
    if modules:
        imports = tuple(dict.fromkeys((*cfg.env.imports, *modules)))
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, imports=imports))
    initialize()  # multi-host from JGEM_* env vars or TPU auto-detection; a no-op on one machine

    from jgem.train import train

    train(cfg)


if __name__ == "__main__":
    main()
