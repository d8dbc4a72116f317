"""Rock-paper-scissors over several rounds: the simultaneous-move game (every agent acts in every step)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from jgem.envs.games.base import last_match
from jgem.envs.multiagent.base import PARALLEL, AgentSelector, MultiAgentEnv

MOVES = ("rock", "paper", "scissors")
BEATS = {"rock": "scissors", "paper": "rock", "scissors": "paper"}
_MOVE = re.compile(r"\\boxed{\s*(rock|paper|scissors)\s*}", re.IGNORECASE)


class RockPaperScissorsEnv(MultiAgentEnv):
    """Agents "player_0" and "player_1" both move in every step (parallel turns); neither sees the other's move of
    a round before its own is in. A move is `\\boxed{rock}`, `\\boxed{paper}` or `\\boxed{scissors}`.

    Rewards per round: +1 to the winner, -1 to the loser, 0 each on a tie; the match ends after `rounds` rounds with
    `outcome` by the sign of each agent's total (`score` in the info). A reply without a boxed move forfeits the
    match at once: -1 to each offender for that step (`invalid`), 0 to the other, who wins unless both forfeited
    (then a draw). The round history is public: each result's info carries `history` (both moves per round, in
    seat order: the agent's own first) and `round`.
    """

    def __init__(self, rounds: int = 3, seed: int | None = None) -> None:
        if rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {rounds}")
        self.possible_agents = ["player_0", "player_1"]
        self.agent_selector = AgentSelector(self.possible_agents, mode=PARALLEL)
        super().__init__(seed=seed)
        self.rounds = rounds
        self.history: list[dict[str, str]] = []
        self.score: dict[str, float] = {}
        self.note = ""

    def _reset(self) -> None:
        self.history, self.score, self.note = [], dict.fromkeys(self.possible_agents, 0.0), ""

    def observe(self, agent: str) -> str:
        if not self.history and not self.note:
            return (
                f"Let's play rock-paper-scissors, {self.rounds} round(s). Each round you and your opponent move at "
                "the same time; rock beats scissors, scissors beats paper, paper beats rock. A win scores +1, a loss "
                "-1. Put your move inside \\boxed{}, for example \\boxed{rock}. A reply without one loses the "
                "match.\nRound 1: your move.\n"
            )
        other = self._other(agent)
        head = self.note or (
            f"Round {len(self.history)}: you played {self.history[-1][agent]}, your opponent played "
            f"{self.history[-1][other]}. Score: you {self.score[agent]:g}, opponent {self.score[other]:g}."
        )
        more = f"\nRound {len(self.history) + 1}: your move." if self.agents else ""
        return head + more + "\n"

    def extra_info(self, agent: str) -> dict[str, Any]:
        other = self._other(agent)
        return {"history": [[h[agent], h[other]] for h in self.history], "round": len(self.history) + 1}

    def _other(self, agent: str) -> str:
        return self.possible_agents[1 - self.possible_agents.index(agent)]

    def _process_actions(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]:
        moves = {a: last_match(_MOVE, t) for a, t in actions.items()}
        bad = [a for a, m in moves.items() if m is None]
        if bad:
            self.end()
            rewards = {a: -1.0 if a in bad else 0.0 for a in actions}
            outcome = {a: "draw" if len(bad) == 2 else ("loss" if a in bad else "win") for a in actions}
            self.note = "A reply had no \\boxed{rock|paper|scissors} move: the match is forfeited."
            infos = {
                a: {"outcome": outcome[a], "score": self.score[a], **({"invalid": True} if a in bad else {})}
                for a in actions
            }
            return {}, rewards, {}, {}, infos
        played = {a: m.group(1).lower() for a, m in moves.items()}
        self.history.append(played)
        a, b = self.possible_agents
        win = 1.0 if BEATS[played[a]] == played[b] else -1.0 if BEATS[played[b]] == played[a] else 0.0
        rewards = {a: win, b: -win}
        for k, r in rewards.items():
            self.score[k] += r
        infos: dict[str, dict] = {}
        if len(self.history) == self.rounds:
            self.end()
            for k in (a, b):
                s = self.score[k]
                infos[k] = {"outcome": "win" if s > 0 else "loss" if s < 0 else "draw", "score": s}
        return {}, rewards, {}, {}, infos

    def sample_agent_action(self, agent: str) -> str:
        return f"\\boxed{{{MOVES[int(self.np_random.integers(3))]}}}"


class RPSBiasedPlayer:
    """Plays from a fixed distribution over rock, paper, scissors (default: rock half the time): an opponent a
    learner can exploit."""

    def __init__(self, rng: np.random.Generator, probs: tuple[float, float, float] = (0.5, 0.25, 0.25)) -> None:
        self.rng, self.probs = rng, probs

    def reset(self, agent: str, obs: str, info: dict[str, Any]) -> None:
        pass

    def update(self, obs: str, info: dict[str, Any]) -> None:
        pass

    def act(self) -> str:
        return f"\\boxed{{{MOVES[int(self.rng.choice(3, p=self.probs))]}}}"


class RPSCounterPlayer(RPSBiasedPlayer):
    """Plays what beats the opponent's most frequent move so far (a random move before any, ties at random)."""

    def reset(self, agent: str, obs: str, info: dict[str, Any]) -> None:
        self.history: list[tuple[str, str]] = []

    def update(self, obs: str, info: dict[str, Any]) -> None:
        self.history = list(info.get("history", self.history))

    def act(self) -> str:
        if not self.history:
            return f"\\boxed{{{MOVES[int(self.rng.integers(3))]}}}"
        counts = np.array([sum(theirs == m for _, theirs in self.history) for m in MOVES])
        likely = MOVES[int(self.rng.choice(np.flatnonzero(counts == counts.max())))]
        return f"\\boxed{{{next(m for m in MOVES if BEATS[m] == likely)}}}"


PLAYERS = {"biased": RPSBiasedPlayer, "counter": RPSCounterPlayer}
