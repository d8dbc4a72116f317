"""Multi-agent evaluation arithmetic: outcome tallies with Wilson intervals, and a Bradley-Terry league table.

Pure numpy (no jax): `experiments.eval --agents` plays the games, this scores them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

Z95 = 1.959963984540054  # the two-sided 95% normal quantile


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion `successes / n` (a draw may count half); (0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Tally:
    """Results of one side against one opponent: wins, draws, losses (a cooperative game's success is a win, its
    failure a loss), games cut before they ended (a turn or token limit: no outcome, counted apart and in no rate),
    and the side's mean return over every game."""

    wins: int = 0
    draws: int = 0
    losses: int = 0
    cut: int = 0
    returns: list[float] = field(default_factory=list)

    def add(self, outcome: str | None, ret: float) -> None:
        if outcome in ("win", "success"):
            self.wins += 1
        elif outcome == "draw":
            self.draws += 1
        elif outcome in ("loss", "failure"):
            self.losses += 1
        else:  # cut before the game decided anything
            self.cut += 1
        self.returns.append(float(ret))

    @property
    def games(self) -> int:
        """Games that ended with an outcome."""
        return self.wins + self.draws + self.losses

    @property
    def score(self) -> float:
        """Wins plus half the draws, per game."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else 0.0

    def row(self) -> dict[str, float]:
        lo, hi = wilson(self.wins, self.games)
        return {
            "games": self.games,
            "wins": self.wins,
            "draws": self.draws,
            "losses": self.losses,
            "cut": self.cut,
            "win_rate": self.wins / self.games if self.games else 0.0,
            "win_rate_lo": lo,
            "win_rate_hi": hi,
            "score": self.score,
            "mean_return": float(np.mean(self.returns)) if self.returns else 0.0,
        }


def bradley_terry(
    games: Iterable[tuple[str, str, float]], *, prior: float = 0.5, iters: int = 100_000, tol: float = 1e-10
) -> dict[str, float]:
    """Bradley-Terry strengths from `(a, b, score of a)` games (1 win, 0.5 draw, 0 loss), as Elo points (400 log10
    of the strength ratio) with mean 0. Fitted by Hunter's MM algorithm; `prior` adds that many virtual draws (half
    a win each way per draw) between every pair that met, so a player that won every game gets a finite rating
    (with `prior` 0 such a player has none: ValueError). Players in separate components of the comparison graph are
    not comparable, and a fit that does not converge in `iters` rounds is not returned: ValueError."""
    wins: dict[tuple[str, str], float] = {}
    for a, b, s in games:
        if a == b:
            continue
        wins[(a, b)] = wins.get((a, b), 0.0) + s
        wins[(b, a)] = wins.get((b, a), 0.0) + 1.0 - s
    names = sorted({a for a, _ in wins})
    if not names:
        return {}
    idx = {n: i for i, n in enumerate(names)}
    k = len(names)
    w = np.zeros((k, k))
    for (a, b), s in wins.items():
        w[idx[a], idx[b]] += s
    met = (w + w.T) > 0
    w = w + 0.5 * prior * met  # `prior` virtual draws per pair that met: half a win each way per draw
    _check_connected(met, names)
    wins_of, losses_of = w.sum(1), w.sum(0)
    lone = [names[i] for i in range(k) if wins_of[i] <= 0 or losses_of[i] <= 0]
    if lone:
        raise ValueError(f"players {lone} won every game or none: no finite rating without a prior > 0")
    n = w + w.T  # games between each pair
    p = np.ones(k)
    for _ in range(iters):
        new = wins_of / (n / (p[:, None] + p[None, :])).sum(1)
        new /= np.exp(np.log(new).mean())
        done = np.max(np.abs(np.log(new) - np.log(p))) < tol
        p = new
        if done:
            break
    else:
        raise ValueError(f"the Bradley-Terry fit did not converge in {iters} rounds (a long chain of lopsided games)")
    elo = 400.0 * np.log10(p)
    return {name: float(elo[i] - elo.mean()) for name, i in idx.items()}


def _check_connected(met: np.ndarray, names: Sequence[str]) -> None:
    seen, todo = {0}, [0]
    while todo:
        i = todo.pop()
        for j in np.flatnonzero(met[i]):
            if int(j) not in seen:
                seen.add(int(j))
                todo.append(int(j))
    if len(seen) != len(names):
        apart = [names[i] for i in range(len(names)) if i not in seen]
        raise ValueError(f"players {apart} never met (through others) {names[0]}: no common scale for a league table")
