"""reasoning-gym suite: `rg:<name>` for its procedural datasets, scored by the dataset's own
`score_answer` on the last `\\boxed{}` of the answer (GEM's ReasoningGymEnv)."""

from __future__ import annotations

from typing import Any

from jgem.envs.data.dataset import SingleTurnEnv, last_boxed

INSTRUCTION = "\nPut your final answer within \\boxed{}."


class _Dataset:
    """A reasoning-gym dataset, shared (not copied) by env clones; items are generated per index."""

    def __init__(self, name: str, size: int, seed: int) -> None:
        import reasoning_gym

        try:
            self.ds = reasoning_gym.create_dataset(name, size=size, seed=seed)
        except (KeyError, ValueError) as e:
            raise ValueError(f"reasoning-gym cannot build dataset {name!r}: {e}") from e

    def __deepcopy__(self, memo: dict) -> _Dataset:
        return self


class ReasoningGymEnv(SingleTurnEnv):
    """Problems `0..size-1` of the dataset built with `seed`; each later epoch uses `seed + epoch`."""

    def __init__(self, name: str, size: int = 500, seed: int = 42, instruction: str = INSTRUCTION) -> None:
        super().__init__(None, seed=seed)
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.name, self.size, self.data_seed = name, size, seed
        self.instruction = instruction
        self.epoch = 0
        self._order: list[int] = []
        self._ds = _Dataset(name, size, seed)

    def _generate(self) -> dict[str, Any]:
        raise AssertionError("unused: ReasoningGymEnv overrides _next_row")

    def _next_row(self, seed: int | None) -> dict[str, Any]:
        if seed is not None:
            return self._ds.ds[int(self.np_random.integers(self.size))]
        if not self._order:
            if self.epoch > 0:  # a new but deterministic set of problems each epoch
                self._ds = _Dataset(self.name, self.size, self.data_seed + self.epoch)
            self.epoch += 1
            self._order = self.np_random.permutation(self.size).tolist()
        return self._ds.ds[self._order.pop()]

    def prompt(self, row: dict[str, Any]) -> str:
        return f"{row['question']}{self.instruction}"

    def grade(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        answer = last_boxed(action)
        if answer is None:
            return 0.0, {"correct": False, "reason": "no \\boxed{} answer"}
        try:
            score = float(self._ds.ds.score_answer(answer=answer, entry=row))
        except Exception as e:  # a scorer crashing on odd input is the answer's fault, not a fault of the env
            return 0.0, {"correct": False, "reason": f"score_answer raised {type(e).__name__}"}
        return score, {"correct": score >= 1.0}

    def sample_random_action(self) -> str:
        return "\\boxed{0}"
