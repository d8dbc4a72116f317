"""The arithmetic of pre-registered designs (experiments/ablations/power.py) against known numbers: G*Power's
one-sample t power, a t test done by hand, and Holm's correction on a textbook example."""

import math

import pytest

from experiments.ablations.power import holm, paired_power, paired_t, seeds_for


def test_paired_power_and_seeds_match_g_power():
    # G*Power 3.1, t tests, one sample (= paired differences), two-tailed, alpha 0.05: d = 0.5 needs n = 34 for 80%
    # (power 0.8078); d = 1 at n = 10 has power 0.8031; d = 0.8 at n = 15: 0.8213
    assert paired_power(0.5, 1.0, 34) == pytest.approx(0.8078, abs=1e-4)
    assert paired_power(0.5, 1.0, 33) < 0.8 <= paired_power(0.5, 1.0, 34)
    assert seeds_for(0.5, 1.0) == 34
    assert paired_power(1.0, 1.0, 10) == pytest.approx(0.8031, abs=1e-4)
    assert paired_power(0.8, 1.0, 15) == pytest.approx(0.8213, abs=1e-4)
    assert paired_power(0.17, 0.10, 5) == pytest.approx(paired_power(1.7, 1.0, 5))  # only d / sd counts
    assert paired_power(0.0, 1.0, 8) == pytest.approx(0.05, abs=1e-9)  # no effect: the test's level
    # far in the tail (scipy's noncentral t gives nan there): a number, and the integral agrees where both work
    assert [paired_power(0.313, 0.0282, n, 0.05 / 3) for n in (4, 5)] == pytest.approx([1.0, 1.0], abs=1e-6)
    assert paired_power(0.313, 0.0282, 3, 0.05 / 3) == pytest.approx(0.9978, abs=1e-4)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        paired_power(0.5, 1.0, 1)


def test_paired_t_by_hand():
    # differences 1..5: mean 3, sd sqrt(2.5), t = 3 / (sqrt(2.5) / sqrt(5)) = 4.2426 at 4 df, p = 0.013236; the 95%
    # interval is 3 +- 2.7764 * 0.70711
    r = paired_t([1, 2, 3, 4, 5])
    assert (r["n"], r["mean"]) == (5, 3.0) and r["sd"] == pytest.approx(math.sqrt(2.5))
    assert r["t"] == pytest.approx(4.242641, abs=1e-6) and r["p"] == pytest.approx(0.013236, abs=1e-6)
    assert r["ci95"] == pytest.approx([3 - 2.776445 * math.sqrt(0.5), 3 + 2.776445 * math.sqrt(0.5)], abs=1e-5)
    assert paired_t([-1.0, 1.0, 0.0])["p"] == pytest.approx(1.0)


def test_holm_steps_down_and_stops_at_the_first_kept_hypothesis():
    # p = 0.01, 0.04, 0.03 (three primary comparisons): 3 x 0.01 = 0.03 rejects; 2 x 0.03 = 0.06 does not, and
    # then nothing after it does (0.04 gets max(0.06, 1 x 0.04) = 0.06); Bonferroni would keep only the first too
    out = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert list(out) == ["a", "b", "c"]
    assert [out[k]["adjusted"] for k in "abc"] == pytest.approx([0.03, 0.06, 0.06])
    assert [out[k]["reject"] for k in "abc"] == [True, False, False]
    both = holm({"x": 0.02, "y": 0.025})  # 2 x 0.02 = 0.04, then max(0.04, 0.025): both rejected
    assert [both[k]["reject"] for k in "xy"] == [True, True] and both["y"]["adjusted"] == pytest.approx(0.04)


def test_newcombe_matches_the_papers_worked_example():
    """Newcombe (1998), Statistics in Medicine 17:873, table II example (a): 56/70 vs 48/80, difference 0.2000,
    method 10 (hybrid score) interval 0.0524 to 0.3339."""
    from experiments.ablations.power import newcombe, wilson

    r = newcombe(48, 80, 56, 70)
    assert r["diff"] == pytest.approx(0.2)
    assert r["ci95"] == pytest.approx([0.0524, 0.3339], abs=1e-4)
    assert wilson(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)  # Wilson at the boundary (Newcombe's table I)
