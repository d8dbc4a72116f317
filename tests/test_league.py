"""The multi-agent evaluation's arithmetic (jgem/train/league.py) on known numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jgem.train.league import Tally, bradley_terry, wilson


def test_wilson_interval_known_values():
    lo, hi = wilson(8, 10)  # the textbook case: 0.4902, 0.9433
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(0, 20)
    assert lo == 0.0 and 0.16 < hi < 0.17  # 0.1611


def test_tally_counts_outcomes_draws_score_half_and_cut_games_count_apart():
    t = Tally()
    for outcome, r in [("win", 1), ("draw", 0), ("loss", -1), ("success", 1), (None, 0), ("failure", 0)]:
        t.add(outcome, r)
    row = t.row()
    assert (row["wins"], row["draws"], row["losses"], row["cut"], row["games"]) == (2, 1, 2, 1, 5)
    assert row["score"] == pytest.approx(2.5 / 5) and row["mean_return"] == pytest.approx(1 / 6)


def test_bradley_terry_on_known_numbers():
    # A beats B 3 games of 4: strengths 3 : 1, 400 log10(3) Elo points apart, mean 0
    elo = bradley_terry([("A", "B", 1.0)] * 3 + [("A", "B", 0.0)], prior=0.0)
    gap = 400 * math.log10(3)
    assert elo["A"] == pytest.approx(gap / 2, abs=1e-6) and elo["B"] == pytest.approx(-gap / 2, abs=1e-6)
    # a draw is half a win each way: two draws leave the players level
    assert bradley_terry([("A", "B", 0.5)] * 2, prior=0.0) == pytest.approx({"A": 0.0, "B": 0.0}, abs=1e-9)


def test_bradley_terry_recovers_strengths_from_many_games():
    rng = np.random.default_rng(0)
    true = {"a": 200.0, "b": 0.0, "c": -200.0}
    games = []
    for x, y in [("a", "b"), ("b", "c"), ("a", "c")]:
        p = 1 / (1 + 10 ** ((true[y] - true[x]) / 400))
        games += [(x, y, float(rng.random() < p)) for _ in range(4000)]
    elo = bradley_terry(games)
    for name, want in true.items():
        assert elo[name] == pytest.approx(want, abs=15)


def test_a_player_that_won_every_game_gets_a_finite_rating_and_apart_players_are_refused():
    elo = bradley_terry([("A", "B", 1.0)] * 5)  # half a virtual draw: 5.25 wins to 0.25, strengths 21 : 1
    assert elo["A"] == pytest.approx(200 * math.log10(21)) and elo["B"] == pytest.approx(-200 * math.log10(21))
    with pytest.raises(ValueError, match=r"players \['A', 'B'\] won every game or none"):
        bradley_terry([("A", "B", 1.0)] * 5, prior=0.0)
    with pytest.raises(ValueError, match="never met"):
        bradley_terry([("A", "B", 1.0), ("C", "D", 0.0)])
