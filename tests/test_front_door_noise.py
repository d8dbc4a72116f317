"""What a newcomer's commands print besides their own output (issue 49): one suggestion per misspelled flag, the
command's own name in usage lines, no notice about PyTorch, no orbax warning per checkpoint between evaluations,
no minigrid line per rejected BabyAI layout."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import pytest

from experiments import train as train_cli
from experiments.configs import PRESETS
from jgem.checkpoint import CheckpointConfig, Checkpointer

REPO = Path(__file__).resolve().parents[1]


def _tyro_error(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        train_cli.parse(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def test_a_misspelled_flag_is_suggested_once_with_the_chosen_presets_help(capsys) -> None:
    err = _tyro_error(["tiny", "--stesp", "3"], capsys)
    # tyro lists --steps once per preset default (60 in tiny, 500, 30, 20 in others) and a line per preset
    assert err.count("--steps INT") == 1 and "(default: 60)" in err
    assert "(default: 500)" not in err and "qwen3-1.7b-games --help" not in err and "[...]" not in err
    assert "For full helptext, run python -m experiments.train --help" in err
    assert "train.py" not in err  # the command, not this file's path
    if "│" in err:  # tyro draws a box when stderr takes it (not under pytest's capture)
        assert len({len(line) for line in err.splitlines() if line}) == 1


def test_without_a_preset_the_suggestion_names_the_preset_of_its_help(capsys) -> None:
    err = _tyro_error(["--stesp", "3"], capsys)
    assert err.count("--steps INT") == 1
    named = [line.strip() for line in err.splitlines() if line.strip().startswith("in ")]
    assert len(named) == 1 and named[0].startswith("in preset ") and named[0].split()[-1] in PRESETS


def test_one_entry_per_flag_keeps_each_flags_variant_of_the_preset() -> None:
    box = textwrap.dedent("""\
        │ Perhaps you meant:                         │
        │     --learner.lr FLOAT                     │
        │         (default: 0.0002)                  │
        │         in prog tiny --help                │
        │         (default: 1e-06)                   │
        │         in prog big --help                 │
        │         in prog huge --help                │
        │     [...]                                  │
        │     --learner.b1 FLOAT                     │
        │         (default: 0.9)                     │
        │         in prog tiny --help                │
        │ ────────────────────────────────────────── │
        """)
    kept = [
        "Perhaps you meant:",
        "--learner.lr FLOAT",
        "(default: 1e-06)",
        "--learner.b1 FLOAT",
        "(default: 0.9)",  # not in `big`'s list (tyro shows the first few presets only): the first variant
        "in preset tiny",
        "─" * 42,
    ]
    lines = train_cli.one_entry_per_flag(box, "big").splitlines()
    assert [line.strip("│ ") for line in lines] == kept
    assert {len(line) for line in lines} == {len(box.splitlines()[0])}  # the box keeps its width
    plain = train_cli.one_entry_per_flag(box.replace("│", " "), "big")  # tyro's layout when it draws no box
    assert [line.strip() for line in plain.splitlines()] == kept


def test_help_names_the_command_not_the_files_path(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        train_cli.parse(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m experiments.train [-h] {tiny,")


# Python with torch hidden from imports and from importlib.util.find_spec (how transformers checks for it); tyro
# looks only at sys.modules, so it keeps working
HIDE_TORCH = """
import sys
from importlib.machinery import PathFinder

class HideTorch(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.split(".")[0] == "torch" else super().find_spec(name, path, target)

sys.meta_path = [HideTorch if f is PathFinder else f for f in sys.meta_path]
"""


def _without_torch(code: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", HIDE_TORCH + textwrap.dedent(code)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_transformers_says_nothing_about_a_missing_pytorch_through_jgem() -> None:
    alone = _without_torch("import transformers")
    assert alone.returncode == 0 and "PyTorch was not found" in alone.stderr  # the notice jgem drops
    proc = _without_torch("""
        import jgem.models.tokenizer
        from transformers.utils import logging
        logging.get_logger("transformers").warning("another warning")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "PyTorch was not found" not in proc.stderr
    assert "another warning" in proc.stderr  # transformers' other warnings still show


def test_saves_between_evaluations_do_not_warn_and_still_rank_last(tmp_path, caplog) -> None:
    cfg = CheckpointConfig(str(tmp_path), keep_last=1, keep_best=1, best_metric="eval/success", async_save=False)
    state = lambda i: {"w": jnp.full((2,), float(i))}
    with caplog.at_level(logging.WARNING), Checkpointer(cfg) as ck:
        ck.save(1, state(1), {}, metrics={"eval/success": 0.5})
        ck.save(2, state(2), {})  # --checkpoint-every not on an --eval-every step: no metrics
        ck.save(3, state(3), {})
        ck.wait()
        assert ck.best_step() == 1 and ck.all_steps() == [1, 3]
    assert not [r for r in caplog.records if "tracked_metric" in r.getMessage()]


def test_babyai_resets_print_no_rejected_layouts(capsys) -> None:
    pytest.importorskip("minigrid")
    from jgem.envs.agentgym.babyai import BabyAIEnv

    env = BabyAIEnv("Unlock-v0")
    for seed in range(5):  # minigrid rejects about 18 layouts over these seeds (measured)
        env.reset(seed=seed)
    assert "Sampling rejected" not in capsys.readouterr().out
    from minigrid.envs.babyai.core import roomgrid_level

    roomgrid_level.print("Timeout during mission generation:", "kept")  # the module's other lines still print
    assert capsys.readouterr().out == "Timeout during mission generation: kept\n"
