"""`--import tests.learner_micro_preset` for CLI runs in tests: registers tests/train_utils.py's small "test-micro"
model preset (the same architecture), so `--model.preset test-micro` works from `python -m experiments.train`.

It imports only the model configs, not train_utils' trainer modules: every process worker of a run imports its
`env.imports` too.
"""

from __future__ import annotations

from jgem.models.config import PRESETS, preset

MICRO = "test-micro"
PRESETS.setdefault(
    MICRO, preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1)
)
