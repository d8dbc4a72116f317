"""Test envs for the rollout and trainer tests."""

from __future__ import annotations

from jgem.envs.games.guess_the_number import GuessTheNumberEnv


class FlakyGuessEnv(GuessTheNumberEnv):
    """GuessTheNumber-easy whose reset or step raises for some seeds (a crashing env)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(min_number=1, max_number=10, max_turns=4, seed=seed)
        self._flaky_seed = 0

    def reset(self, seed: int | None = None):
        self._flaky_seed = -1 if seed is None else seed
        if seed is not None and seed % 7 == 3:
            raise RuntimeError(f"injected reset failure (seed {seed})")
        return super().reset(seed=seed)

    def step(self, action: str):
        if self._flaky_seed % 3 == 1:
            raise RuntimeError(f"injected step failure (seed {self._flaky_seed})")
        return super().step(action)
