"""The arithmetic of pre-registered designs (docs/results/preregistered/): the power of a two-sided paired t test
over seeds, the seeds a target power needs, the paired t test itself, and Holm's step-down correction for several
primary comparisons.

    .venv/bin/python -m experiments.ablations.power --effect 0.17 --sd 0.10   # power at 3..10 seeds, and the n for 80%

The power of the paired test at n seeds is that of a one-sample t test on the per-seed differences: with effect
`d` (the mean difference) and `sd` (the standard deviation of the differences), the statistic follows a noncentral
t with n - 1 degrees of freedom and noncentrality d / sd * sqrt(n); the test rejects beyond Student's two-sided
critical value.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from typing import Any

from scipy import integrate, stats


def paired_power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """The chance a two-sided paired t test at level `alpha` over `n` seeds rejects "no difference" when the true
    mean difference is `effect` and the differences' standard deviation `sd`."""
    if n < 2:
        raise ValueError(f"a paired t test needs at least 2 seeds, got {n}")
    if sd <= 0:
        raise ValueError(f"sd must be positive, got {sd}")
    df, nc = n - 1, effect / sd * math.sqrt(n)
    crit = stats.t.ppf(1 - alpha / 2, df)
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if math.isfinite(power):
        return power
    # far in the tail scipy's noncentral t gives nan: the same power as an integral over the chi-square of the
    # sample variance, T = (Z + nc) / s with s = sqrt(V / df)
    s = lambda v: math.sqrt(v / df)
    reject = lambda v: (stats.norm.sf(crit * s(v) - nc) + stats.norm.cdf(-crit * s(v) - nc)) * stats.chi2.pdf(v, df)
    return float(min(1.0, integrate.quad(reject, 0, math.inf)[0]))


def seeds_for(effect: float, sd: float, power: float = 0.8, alpha: float = 0.05, max_n: int = 10_000) -> int:
    """The fewest seeds whose paired test reaches `power` (`paired_power`)."""
    for n in range(2, max_n + 1):
        if paired_power(effect, sd, n, alpha) >= power:
            return n
    raise ValueError(f"no n <= {max_n} reaches power {power} for effect {effect} and sd {sd}")


def paired_t(differences: Sequence[float]) -> dict[str, Any]:
    """The two-sided one-sample t test of `differences` (per seed, arm minus its baseline) against 0: n, mean, sd,
    t, p and the 95% interval of the mean."""
    n = len(differences)
    if n < 2:
        raise ValueError(f"a paired t test needs at least 2 differences, got {n}")
    mean = sum(differences) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in differences) / (n - 1))
    se = sd / math.sqrt(n)
    half = float(stats.t.ppf(0.975, n - 1)) * se
    if se == 0:
        t, p = (math.inf if mean else 0.0), (0.0 if mean else 1.0)
    else:
        t = mean / se
        p = float(2 * stats.t.sf(abs(t), n - 1))
    return {"n": n, "mean": mean, "sd": sd, "t": t, "p": p, "ci95": [mean - half, mean + half]}


def holm(pvalues: Mapping[str, float], alpha: float = 0.05) -> dict[str, dict[str, Any]]:
    """Holm's step-down correction over the primary comparisons `pvalues` (name -> p): each one's adjusted p
    (the running maximum of (m - k) p_(k) over the sorted p-values, capped at 1) and whether it is rejected at
    `alpha` (adjusted p <= alpha: the family-wise error rate stays at most alpha)."""
    order = sorted(pvalues, key=pvalues.get)
    m, running, out = len(order), 0.0, {}
    for k, name in enumerate(order):
        running = max(running, min(1.0, (m - k) * pvalues[name]))
        out[name] = {"p": pvalues[name], "adjusted": running, "reject": running <= alpha}
    return {name: out[name] for name in pvalues}


def wilson(k: int, n: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion k / n."""
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return float(ci.low), float(ci.high)


def newcombe(k1: int, n1: int, k2: int, n2: int) -> dict[str, Any]:
    """The difference of two proportions k2 / n2 - k1 / n1 (after minus before) with its 95% interval by Newcombe's
    hybrid score method (1998, method 10: from each proportion's Wilson interval); for independent samples, and
    conservative for positively correlated ones (the same held-out games played twice)."""
    p1, p2 = k1 / n1, k2 / n2
    (l1, u1), (l2, u2) = wilson(k1, n1), wilson(k2, n2)
    d = p2 - p1
    lo = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    hi = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return {"before": p1, "after": p2, "diff": d, "ci95": [lo, hi], "n": [n1, n2]}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--effect", type=float, required=True, help="the mean paired difference to detect")
    ap.add_argument("--sd", type=float, required=True, help="the standard deviation of the per-seed differences")
    ap.add_argument("--alpha", type=float, default=0.05, help="the two-sided level (after any correction)")
    ap.add_argument("--power", type=float, default=0.8, help="the target power (default 0.8)")
    args = ap.parse_args(argv)
    for n in range(3, 11):
        print(f"n={n:2d}: power {paired_power(args.effect, args.sd, n, args.alpha):.3f}")
    print(f"seeds for power {args.power}: {seeds_for(args.effect, args.sd, args.power, args.alpha)}")


if __name__ == "__main__":
    main()
