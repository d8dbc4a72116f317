"""A small, fast TrainConfig for trainer tests, and a subprocess entry point (`python -m tests.train_utils`)."""

from __future__ import annotations

import dataclasses
import json
import sys

from jgem.algos.algorithms import ALGORITHMS, get_algorithm
from jgem.algos.config import LearnerConfig
from jgem.config import CurriculumConfig, EnvConfig, ModelSpec, TrainConfig
from jgem.models.config import PRESETS, preset
from jgem.rollout.config import RolloutConfig

MICRO = "test-micro"
PRESETS.setdefault(
    MICRO, preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1)
)


def small_config(run_dir: str, **overrides) -> TrainConfig:
    algorithm = overrides.get("algorithm", "rebn")
    grouped = algorithm in ALGORITHMS and get_algorithm(algorithm).grouped
    base = TrainConfig(
        run_dir=run_dir,
        seed=0,
        steps=2,
        algorithm=algorithm,
        gamma=0.9,
        episodes_per_step=4,
        group_size=2 if grouped else 1,
        env=EnvConfig(env_id="game:GuessTheNumber-v0-easy", num_envs=4, backend="inline"),
        model=ModelSpec(preset=MICRO),
        rollout=RolloutConfig(view="chat", max_new_tokens=6, max_episode_tokens=320),
        learner=LearnerConfig(lr=1e-3, kl_coef=0.01 if algorithm == "reinforce_pp" else 0.0),
        curriculum=CurriculumConfig(),
        batch_buckets=(128, 256, 512),
        eval_every=0,
        checkpoint_every=1,
        console=False,
        plot=False,
    )
    nested = {k: overrides.pop(k) for k in list(overrides) if isinstance(overrides[k], dict)}
    cfg = dataclasses.replace(base, **overrides)
    for name, fields in nested.items():
        cfg = dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **fields)})
    return cfg


def perturbed(params, scale: float, *, seed: int):
    """`params` plus gaussian noise of std `scale`, drawn on the host (no program per parameter shape) and placed
    with each leaf's sharding."""
    import jax
    import numpy as np

    rng = np.random.default_rng(seed)
    noisy = lambda x: np.asarray(x) + scale * rng.standard_normal(x.shape).astype(x.dtype)
    return jax.tree.map(lambda x: jax.device_put(noisy(x), x.sharding), params)


def _die_in_publication(process: int, nth: int) -> None:
    """Process `process` kills itself (SIGKILL) just after dispatching its `nth` permute of a publication (counted
    from 1 over the run), with the transfer in flight: a process dying mid-publication."""
    import os
    import signal

    import jax

    from jgem.sharding.publish import Publisher

    if jax.process_index() != process:
        return
    calls = [0]
    program = Publisher._program

    def dying(self, specs):
        run = program(self, specs)

        def call(glob):
            out = run(glob)
            calls[0] += 1
            if calls[0] == nth:
                print(f"KILLING process {process} in publication {nth}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        return call

    Publisher._program = dying


def _fail_in_learn(process: int, call: int) -> None:
    """Process `process` raises in its `call`-th `Learner.learn` (1-based): a role split's error path."""
    import jax

    from jgem.train.learn import Learner

    if jax.process_index() != process:
        return
    learn, calls = Learner.learn, [0]

    def failing(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            raise RuntimeError(f"injected failure in learn call {call}")
        return learn(self, *args, **kwargs)

    Learner.learn = failing


def main() -> None:
    """argv[1]: JSON of small_config kwargs (with "run_dir"); runs the trainer and prints the summary. SIGUSR1
    prints every thread's stack (a multi-process test that hangs: `kill -USR1 <pid>`)."""
    import faulthandler
    import signal

    from jgem.sharding.mesh import initialize

    faulthandler.register(signal.SIGUSR1, all_threads=True)

    initialize()
    kwargs = json.loads(sys.argv[1])
    if "curriculum" in kwargs and "horizons" in kwargs["curriculum"]:
        kwargs["curriculum"]["horizons"] = tuple(kwargs["curriculum"]["horizons"])
    # JSON's lists and dicts back to the config's tuples and records
    for section, name in (("rollout", "policies"), ("env", "imports")):
        if name in kwargs.get(section, {}):
            kwargs[section][name] = tuple(kwargs[section][name])
    if "test:secrets" in json.dumps(kwargs):
        from jgem.registry import register

        register("test:secrets", "tests.rollout.envs:SecretsEnv", overwrite=True)
    if "lora" in kwargs.get("model", {}):
        from jgem.models.config import LoraConfig

        kwargs["model"]["lora"] = LoraConfig(**kwargs["model"]["lora"])
    probe = kwargs.pop("param_probe", False)
    if (kill := kwargs.pop("kill_in_publication", None)) is not None:
        _die_in_publication(*kill)
    if (fail := kwargs.pop("fail_in_learn", None)) is not None:
        _fail_in_learn(*fail)
    from jgem.sharding.mesh import exit_at_once_on_error
    from jgem.train import Trainer

    with exit_at_once_on_error():  # as experiments/train.py: an error ends a process of several at once
        trainer = Trainer(small_config(**kwargs))
        summary = trainer.run()
    if probe:  # the first values of every parameter, gathered to every process (tiny models only)
        import hashlib

        import jax
        import numpy as np
        from jax.experimental import multihost_utils

        from jgem.sharding.mesh import replicated

        params = trainer.state.params
        if trainer.roles.split:  # each side its own copy (the samplers': their last publication), gathered on it
            mesh = trainer.mesh if trainer.roles.learns else trainer.rollout_mesh
            params = trainer.state.params if trainer.roles.learns else trainer.sampler_params
            params = jax.tree.map(lambda x: x.addressable_data(0), replicated(mesh)(params))
        elif jax.process_count() > 1:
            params = multihost_utils.process_allgather(params, tiled=True)
        summary["param_probe"] = [np.asarray(x).ravel()[:16].tolist() for x in jax.tree.leaves(params)]
        digest = hashlib.sha256()  # every value of this process's copy (every adapter's, where there are several)
        for x in jax.tree.leaves(params):
            digest.update(np.ascontiguousarray(x).tobytes())
        summary["param_copy_sha256"] = digest.hexdigest()
    print("SUMMARY " + json.dumps(summary, default=str), flush=True)


if __name__ == "__main__":
    main()
