"""Training: one file per part, each readable on its own.

- `run.py`: the composition root. `Run(cfg)` builds the mesh, models, the learner, the sampler's copy of the policy,
  env pool and rollout engine, and plays a step's episodes; with `optimizer=False` it is what evaluation and export
  restore a policy into.
- `learn.py`: `Learner`, the learner side: the state, the host side of one update (pack, one upload, the device
  program `jgem.algos.step.train_step`, one download), the state's checkpoints.
- `side.py`, `pipeline.py`: the sampler side as the pipeline sees it, and the pipeline (sync, off_policy, async,
  stream) that produces each step's episodes.
- `transport.py`: between the sides (one mesh, split meshes, a role split's processes); `roles.py`: which process
  is on which side, and a role split's messages.
- `warm_start.py`: supervised steps on a scripted teacher's games before RL.
- `evaluate.py`: the metrics of a set of episodes and of an evaluation.
- `dynamic.py`: dynamic sampling (DAPO): a step's groups without signal dropped, extra rounds played.
- `loop.py`: `Trainer(Run)`, the parts assembled, the loop (resume, the cadence of evaluations, checkpoints and
  logs), the step, and `train`.
- `progress.py`: what a run shows on the console while it runs.
"""

from jgem.train.loop import Trainer, train

__all__ = ["Trainer", "train"]
