"""Negotiation for two agents: alternating offers over a pie of coins, each agent with a private outside option."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from jgem.envs.games.base import capped_int, last_boxed
from jgem.envs.multiagent.base import AgentSelector, InfoPlayer, MultiAgentEnv

PROPOSER, RESPONDER = "proposer", "responder"
ACCEPT = "accept"
_NUMBER = re.compile(r"\d+")


def _other(agent: str) -> str:
    return RESPONDER if agent == PROPOSER else PROPOSER


class NegotiationEnv(MultiAgentEnv):
    """Alternating-offers bargaining over a pie of `coins` coins between "proposer" (moves first) and "responder".

    At reset each agent privately draws an outside option (reservation value) `r`, a whole number uniform in
    [0, coins // 4]; only that agent's observations and infos state it. The agents take turns, `max_rounds` turns
    each. A turn is one move inside `\\boxed{}` (the last one in the reply counts):
    - `\\boxed{N}`, N a whole number in 0..coins: "I keep N coins, you get coins - N". It replaces the standing
      offer (so the standing offer is always the other agent's last proposal);
    - `\\boxed{accept}`: accept the standing offer; legal only when one stands (not on the proposer's first turn).
      The game ends with a deal: the agent that made the offer gets N coins, the accepting agent coins - N.
    If the last of the 2 * max_rounds turns is not an accept, the game ends with no deal (`terminated` and
    `truncated`, GEM's turn limit) and each agent gets its outside option `r`.

    Rewards come at the end only, normalised by the pie: coins received / coins, so a deal's two rewards sum to 1
    and no deal pays r / coins each. A reply that is not a legal move (no `\\boxed{}`, not `accept` nor a whole
    number, N out of range, accept with no standing offer) ends the game at once (terminated, not truncated): the
    offender gets 0 (`outcome` "loss", `info["invalid"] = True`), the other agent its r / coins (`outcome` "win").
    Otherwise `outcome` is "win" for the agent with the larger reward, "loss" for the smaller, "draw" when equal.

    Every info carries the agent's view (`extra_info`): `role`, `coins`, `max_rounds`, its own `reservation`, the
    standing `offer` ({"by", "keep", "give"} or None), `turns_left` (its own), `other_turns_left` and
    `legal_moves` (empty unless it acts next). The game-ending infos add `deal` (bool), `share` (the coins of the
    pie the agent gets; 0 without a deal) and `outcome`.
    """

    def __init__(self, coins: int = 10, max_rounds: int = 4, seed: int | None = None) -> None:
        if isinstance(coins, bool) or not isinstance(coins, int) or coins < 1:
            raise ValueError(f"coins must be a positive int, got {coins!r}")
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
            raise ValueError(f"max_rounds must be a positive int (turns per agent), got {max_rounds!r}")
        self.possible_agents = [PROPOSER, RESPONDER]
        self.agent_selector = AgentSelector(self.possible_agents)
        super().__init__(seed=seed)
        self.coins, self.max_rounds = coins, max_rounds
        self.reservation: dict[str, int] = {}
        self.offer: tuple[str, int] | None = None  # (who proposed, coins it keeps)
        self.moves = 0
        self.last_note: dict[str, str] = {}

    def _reset(self) -> None:
        self.reservation = {a: int(self.np_random.integers(0, self.coins // 4 + 1)) for a in self.possible_agents}
        self.offer = None
        self.moves = 0
        self.last_note = {}

    # -- what each agent sees ----------------------------------------------------------------------------------
    def instructions(self, agent: str) -> str:
        other, c = _other(agent), self.coins
        first = "You move first." if agent == PROPOSER else "The proposer moves first."
        return (
            f"Let's negotiate. You are the {agent}; the other player is the {other}. You two split a pie of {c} "
            f"coins. You take turns, {self.max_rounds} turns each. {first}\n"
            "On your turn make one move inside \\boxed{} (only the last \\boxed{} counts):\n"
            f"- \\boxed{{N}} with N a whole number from 0 to {c}: you propose to keep N coins and give the {other} "
            f"{c}-N. It replaces any standing offer.\n"
            f"- \\boxed{{{ACCEPT}}}: accept the {other}'s standing offer; the game ends with that split.\n"
            "If no offer is accepted by the last turn, there is no deal and each player gets its own outside option "
            "instead.\n"
            f"Your outside option is {self.reservation[agent]} coins. Only you know it; the {other} has its own, "
            "which you do not know.\n"
            f"Your score is the coins you end with divided by {c}. A reply without a legal move (no \\boxed{{}}, a "
            "number out of range, accepting when there is no offer) ends the game: you score 0 and the other "
            "player gets its outside option.\n"
        )

    @property
    def end_at(self) -> int:
        """The number of moves after which the game is over."""
        return 2 * self.max_rounds

    def turns_left(self, agent: str) -> int:
        made = (self.moves + 1) // 2 if agent == PROPOSER else self.moves // 2
        return self.max_rounds - made

    def legal_moves(self, agent: str) -> list[str]:
        if agent not in self.active_agents():
            return []
        accept = [f"\\boxed{{{ACCEPT}}}"] if self.offer is not None else []
        return accept + [f"\\boxed{{{n}}}" for n in range(self.coins + 1)]

    def observe(self, agent: str) -> str:
        head = self.last_note[agent] if self.last_note else self.instructions(agent)
        if not self.agents:
            return head
        other = _other(agent)
        status = f"Turns left: you {self.turns_left(agent)}, the {other} {self.turns_left(other)}."
        if agent not in self.active_agents():
            return f"{head}\n{status} Wait for the {other}'s move.\n"
        moves = f"\\boxed{{0}} to \\boxed{{{self.coins}}} (propose what you keep)"
        if self.offer is not None:
            moves += f", or \\boxed{{{ACCEPT}}} (you get {self.coins - self.offer[1]} coins)"
        if self.moves + 1 == self.end_at:
            status += " This is the last turn: if you do not accept, there is no deal."
        return f"{head}\n{status} Your move. Legal moves: {moves}.\n"

    def extra_info(self, agent: str) -> dict[str, Any]:
        offer = None
        if self.offer is not None:
            by, keep = self.offer
            offer = {"by": by, "keep": keep, "give": self.coins - keep}
        return {
            "role": agent,
            "coins": self.coins,
            "max_rounds": self.max_rounds,
            "reservation": self.reservation[agent],
            "offer": offer,
            "turns_left": self.turns_left(agent),
            "other_turns_left": self.turns_left(_other(agent)),
            "legal_moves": self.legal_moves(agent),
        }

    # -- the rules ---------------------------------------------------------------------------------------------
    def parse(self, text: str) -> tuple[str | int | None, str]:
        """(`ACCEPT`, "") or (N, "") for a legal move, else (None, why it is not one)."""
        content = last_boxed(text)
        if content is None:
            return None, "no \\boxed{} move"
        move = content.strip().lower()
        if move == ACCEPT:
            return (ACCEPT, "") if self.offer is not None else (None, "there is no standing offer to accept")
        if not _NUMBER.fullmatch(move):
            return None, f"\\boxed{{{content:.40}}} is neither {ACCEPT} nor a whole number"
        n = capped_int(move)
        if n > self.coins:
            return None, f"{n} is outside 0..{self.coins}"
        return n, ""

    def _process_actions(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]:
        ((agent, text),) = actions.items()
        other, c = _other(agent), self.coins
        move, why = self.parse(text)
        self.moves += 1
        if move is None:
            self.end()
            r = self.reservation[other]
            self.last_note = {
                agent: f"Invalid move ({why}): the game is over and you score 0.",
                other: f"The {agent} made an invalid move: the game is over and you get your outside option of "
                f"{r} coins.",
            }
            infos = {
                agent: {"outcome": "loss", "invalid": True, "deal": False, "share": 0},
                other: {"outcome": "win", "deal": False, "share": 0},
            }
            return {}, {agent: 0.0, other: r / c}, {}, {}, infos
        if move == ACCEPT:
            assert self.offer is not None
            keep = self.offer[1]
            self.end()
            self.last_note = {
                agent: f"You accept the {other}'s offer. Deal: you get {c - keep} of {c} coins, the {other} {keep}.",
                other: f"The {agent} accepts your offer. Deal: you get {keep} of {c} coins, the {agent} {c - keep}.",
            }
            return {}, *self._settle({agent: c - keep, other: keep}, deal=True)
        self.offer = (agent, move)
        self.last_note = {
            agent: f"You offer the {other} {c - move} of {c} coins (you keep {move}).",
            other: f"The {agent} offers you {c - move} of {c} coins (keeps {move}).",
        }
        if self.moves < self.end_at:
            return {}, {}, {}, {}, {}
        self.end(truncated=True)
        for a in self.possible_agents:
            self.last_note[a] += (
                f"\nThat was the last turn: no deal. You get your outside option of {self.reservation[a]} coins."
            )
        return {}, *self._settle(dict(self.reservation), deal=False)

    def _settle(self, coins_of: dict[str, int], deal: bool) -> tuple[dict, dict, dict, dict]:
        """Rewards (coins / pie) and the game-ending infos for the agents ending with `coins_of`."""
        rewards = {a: coins_of[a] / self.coins for a in coins_of}
        infos = {}
        for a, other in ((PROPOSER, RESPONDER), (RESPONDER, PROPOSER)):
            mine, theirs = rewards[a], rewards[other]
            outcome = "win" if mine > theirs else "loss" if mine < theirs else "draw"
            infos[a] = {"outcome": outcome, "deal": deal, "share": coins_of[a] if deal else 0}
        return rewards, {}, {}, infos

    def sample_agent_action(self, agent: str) -> str:
        moves = self.legal_moves(agent)
        if not moves:
            raise ValueError(f"{self!r}: agent {agent!r} does not act now")
        return str(moves[int(self.np_random.integers(len(moves)))])


class NegotiationPlayer(InfoPlayer):
    """A scripted bargainer that reads only its own infos. It proposes to keep `ceil(greed * coins)` on its first
    turn, conceding linearly to `ceil(coins / 2)` on its last (never below its outside option). It accepts a
    standing offer worth at least max(its outside option, what it would propose now - margin * coins); on the last
    turn of the game, any offer worth at least its outside option. Two of them always reach a deal (the
    proposer's last offer leaves the responder at least coins // 2 >= any outside option). The strategy is
    deterministic; `rng` is taken for the common player constructor."""

    def __init__(self, rng: np.random.Generator, greed: float = 0.6, margin: float = 0.1) -> None:
        if not 0.0 <= greed <= 1.0 or margin < 0.0:
            raise ValueError(f"greed must be in [0, 1] and margin >= 0, got greed={greed}, margin={margin}")
        super().__init__(rng)
        self.greed, self.margin = greed, margin

    def target(self) -> int:
        """The coins it proposes to keep on this turn."""
        coins, rounds, left = self.info["coins"], self.info["max_rounds"], self.info["turns_left"]
        half = coins / 2
        wish = half + (self.greed * coins - half) * (left - 1) / max(rounds - 1, 1)
        return min(coins, max(self.info["reservation"], math.ceil(wish)))

    def act(self) -> str:
        info, keep = self.info, self.target()
        offer = info["offer"]
        if offer is not None and offer["by"] != self.agent:
            last = info["turns_left"] == 1 and info["other_turns_left"] == 0
            floor = 0.0 if last else keep - self.margin * info["coins"]
            if offer["give"] >= max(info["reservation"], floor):
                return f"\\boxed{{{ACCEPT}}}"
        return f"\\boxed{{{keep}}}"


class NegotiationRandomPlayer(InfoPlayer):
    """A uniformly random legal move (from its info's `legal_moves`)."""

    def act(self) -> str:
        moves = self.info["legal_moves"]
        return str(moves[int(self.rng.integers(len(moves)))])


PLAYERS = {"scripted": NegotiationPlayer, "random": NegotiationRandomPlayer}
