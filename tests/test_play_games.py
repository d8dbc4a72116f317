"""experiments.play_games: the table of every game and `--watch`, one game turn by turn."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _play(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "experiments.play_games", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_watch_prints_one_game_turn_by_turn_to_its_end():
    out = _play("--watch", "--only", "GuessTheNumber-v0-easy")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    turns = [ln for ln in lines if ln.startswith("turn ")]
    assert turns and turns[0].startswith("turn 1: \\boxed{5}")  # the solver's binary search opens at the middle
    assert "Guess the Number" in out.stdout  # the first observation
    assert lines[-1] == f"won in {len(turns)} turns, return +1.00"


def test_watch_without_a_game_id_is_refused():
    out = _play("--watch")
    assert out.returncode == 2 and "--watch needs --only" in out.stderr
