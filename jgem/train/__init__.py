"""Training: one file per part, each readable on its own.

- `run.py`: the composition root. `Run(cfg)` builds the mesh, models, learner state, env pool and rollout engine,
  and plays a step's episodes; with `optimizer=False` it is what evaluation and export restore a policy into.
- `learn.py`: `Learner(Run)`, the host side of one training step (pack, one upload, the device program
  `jgem.algos.step.train_step`, one download).
- `warm_start.py`: supervised steps on a scripted teacher's games before RL.
- `evaluate.py`: the metrics of a set of episodes and of an evaluation.
- `dynamic.py`: dynamic sampling (DAPO): a step's groups without signal dropped, extra rounds played.
- `loop.py`: `Trainer(Learner)`, the loop (resume, the cadence of evaluations, checkpoints and logs) and `train`.
- `progress.py`: what a run shows on the console while it runs.
"""

from jgem.train.loop import Trainer, train

__all__ = ["Trainer", "train"]
