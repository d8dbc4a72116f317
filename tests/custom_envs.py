"""A user's env module, as `--import tests.custom_envs` loads it: importing it registers `test-custom:TinyGuess-v0`.

Only this import registers the id (jgem knows nothing of it), so a run that finds it proves the import happened.
"""

from __future__ import annotations

from jgem.envs.games.guess_the_number import GuessTheNumberEnv
from jgem.registry import register

ENV_ID = "test-custom:TinyGuess-v0"


class TinyGuess(GuessTheNumberEnv):
    """Guess a number in 1..4 within 2 turns (the default of `max_turns`, which is where the trainer reads it)."""

    def __init__(self, max_turns: int = 2, seed: int | None = None) -> None:
        super().__init__(min_number=1, max_number=4, max_turns=max_turns, seed=seed)


register(ENV_ID, "tests.custom_envs:TinyGuess", overwrite=True)
