"""Kuhn Poker: the smallest poker (two players, three cards, one betting round), a game of imperfect information
with a known Nash equilibrium."""

from __future__ import annotations

from typing import Any

import numpy as np

from jgem.envs.games.base import last_boxed
from jgem.envs.multiagent.base import SEQUENTIAL, AgentSelector, InfoPlayer, MultiAgentEnv

CARDS = ("J", "Q", "K")
CHECK, BET, CALL, FOLD = "check", "bet", "call", "fold"
AGENTS = ("player_0", "player_1")
_OPEN = (CHECK, BET)
_FACING_BET = (CALL, FOLD)


def other(agent: str) -> str:
    """The opponent of `agent`."""
    return AGENTS[1 - AGENTS.index(agent)]


def legal_moves(moves: list[str]) -> tuple[str, ...]:
    """The legal moves after `moves` of an unfinished hand: call or fold facing a bet, else check or bet."""
    return _FACING_BET if moves and moves[-1] == BET else _OPEN


def hand_over(moves: list[str]) -> bool:
    """True for a finished hand: check/check, or a bet answered by call or fold."""
    return len(moves) >= 2 and moves[-1] != BET


def chips_text(n: int) -> str:
    return f"{n} chip" if abs(n) == 1 else f"{n} chips"


def boxed_moves(moves: tuple[str, ...]) -> str:
    return " or ".join(f"\\boxed{{{m}}}" for m in moves)


class KuhnPokerEnv(MultiAgentEnv):
    """Two-player Kuhn Poker over `hands` hands; agents "player_0" and "player_1", one acts per step.

    Rules: the deck is J < Q < K. Each hand both players ante 1 chip and get one private card (the third card is
    not used); every hand's deal is drawn at reset from `self.np_random`, so sampling moves does not change later
    deals. player_0 opens hand 1, player_1 hand 2, and so on alternately. The opener checks or bets 1 chip; after a
    check the other player checks (showdown, pot 2) or bets; facing a bet a player calls (showdown, pot 4) or folds
    (the bettor takes the pot). At a showdown the higher card takes the pot.

    Actions: text whose last `\\boxed{}` holds the move (`check`, `bet`, `call` or `fold`, case-insensitive).

    Rewards: zero-sum chips, given to both players at the step that ends a hand: +-1 for check/check (higher card
    wins) and for a fold (the folder loses its ante), +-2 for a called bet (higher card wins). Over a match the
    returns sum to each player's chip total; the match ends after the last hand, and the ending infos carry
    `chips` (that agent's total) and `outcome` by its sign ("win", "loss", "draw").

    Invalid reply: a reply with no `\\boxed{}` move, or with a move not legal now (e.g. `call` with no bet), forfeits
    the match at once: the offender gets -1 for that step and the opponent 0 (a format penalty, not zero-sum; the
    unfinished hand is not settled and `chips` counts the settled hands only); `outcome` is "loss" for the offender
    and "win" for the opponent, whatever the chips, and the offender's info has `invalid=True`.

    Information: an agent sees its own card, every move and, only after a showdown, the opponent's card. While the
    match runs each info carries `hand`, `card` (the agent's own), `first` (the agent opens this hand), `moves`
    (this hand's moves so far, the opener's first), `legal` (the moves it may make now, empty when it is not to
    act) and `chips` (its total so far).
    """

    def __init__(self, hands: int = 1, seed: int | None = None) -> None:
        if not isinstance(hands, int) or hands < 1:
            raise ValueError(f"KuhnPokerEnv: hands must be a positive int, got {hands!r}")
        self.possible_agents = list(AGENTS)
        self.agent_selector = AgentSelector(self.possible_agents, mode=SEQUENTIAL)
        super().__init__(seed=seed)
        self.hands = hands
        self.hand = 0
        self.deals: list[tuple[int, int]] = []
        self.moves: list[str] = []
        self.chips: dict[str, int] = dict.fromkeys(AGENTS, 0)

    # -- state ------------------------------------------------------------------------------------------------
    def opener(self) -> str:
        """The agent that opens the current hand."""
        return AGENTS[(self.hand - 1) % 2]

    def to_act(self) -> str:
        """The agent whose move the current hand awaits."""
        return self.opener() if len(self.moves) % 2 == 0 else other(self.opener())

    def card(self, agent: str) -> int:
        """`agent`'s card in the current hand (0 = J, 1 = Q, 2 = K)."""
        return self.deals[self.hand - 1][AGENTS.index(agent)]

    def over(self) -> bool:
        return any(self.terminations.values())

    # -- the contract -----------------------------------------------------------------------------------------
    def rules(self, agent: str) -> str:
        return (
            f"Let's play Kuhn Poker against one opponent. You are {agent}.\n"
            "The deck has three cards: J < Q < K. Each hand both players ante 1 chip and get one private card.\n"
            "The opener checks or bets 1 chip. After a check the other player checks (showdown) or bets. Facing a "
            "bet a player calls (showdown) or folds (the bettor wins the pot). At a showdown the higher card wins "
            "the pot.\n"
            f"The match has {self.hands} hand(s); player_0 opens hand 1 and the opener alternates. You score the "
            "chips you win or lose.\n"
            "Write anything you like, but put your move inside \\boxed{}: \\boxed{check}, \\boxed{bet}, "
            "\\boxed{call} or \\boxed{fold}; only the last \\boxed{} counts. A missing or illegal move forfeits the "
            "match.\n"
        )

    def reset(self, seed: int | None = None) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        obs, infos = super().reset(seed)
        return {a: self.rules(a) + obs[a] for a in obs}, infos

    def _reset(self) -> None:
        self.deals = [(int(d[0]), int(d[1])) for d in (self.np_random.permutation(3) for _ in range(self.hands))]
        self.hand, self.moves, self.chips = 1, [], dict.fromkeys(AGENTS, 0)

    def observe(self, agent: str) -> str:
        if self.over():
            return f"The match is over. Your total: {chips_text(self.chips[agent])}."
        opens = "You open" if agent == self.opener() else "Your opponent opens"
        lines = [
            f"Hand {self.hand} of {self.hands}. Your card: {CARDS[self.card(agent)]}. "
            f"Your chips so far: {self.chips[agent]:+d}. {opens} this hand."
        ]
        if self.moves:
            movers = [self.opener(), other(self.opener())]
            said = [f"you {m}" if movers[i % 2] == agent else f"your opponent {m}s" for i, m in enumerate(self.moves)]
            lines.append(f"Moves so far: {', '.join(said)}.")
        if agent == self.to_act():
            lines.append(f"Your move: {boxed_moves(legal_moves(self.moves))}.")
        else:
            lines.append("Waiting for your opponent's move.")
        return "\n".join(lines)

    def extra_info(self, agent: str) -> dict[str, Any]:
        """Every result's info carries `chips`; while the match runs, also the agent's view of the hand."""
        if self.over() or not self.deals:
            return {"chips": self.chips[agent]}
        acts = agent == self.to_act()
        return {
            "hand": self.hand,
            "card": CARDS[self.card(agent)],
            "first": agent == self.opener(),
            "moves": list(self.moves),
            "legal": list(legal_moves(self.moves)) if acts else [],
            "chips": self.chips[agent],
        }

    def _process_actions(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]:
        agent = self.to_act()
        rival = other(agent)
        boxed = last_boxed(actions[agent])
        move = boxed.strip().lower() if boxed is not None else None
        legal = legal_moves(self.moves)
        if move not in legal:
            return self._forfeit(agent, move, legal)
        self.moves.append(move)
        said = {agent: f"You {move}.", rival: f"Your opponent {move}s."}
        if not hand_over(self.moves):
            self.select_next(rival)
            return {a: f"{said[a]}\n{self.observe(a)}" for a in AGENTS}, {}, {}, {}, {}
        if move == FOLD:
            winner, won = rival, 1
            result = {agent: "You lose 1 chip.", rival: "You win 1 chip."}
        else:
            winner = max(AGENTS, key=self.card)
            won = 2 if BET in self.moves else 1
            result = {a: self._showdown(a, a == winner, won) for a in AGENTS}
        self.chips[winner] += won
        self.chips[other(winner)] -= won
        rewards = {winner: float(won), other(winner): -float(won)}
        infos: dict[str, dict[str, Any]] = {}
        if self.hand < self.hands:
            self.hand, self.moves = self.hand + 1, []
            self.select_next(self.opener())
        else:
            self.end()
            infos = {a: {"outcome": self._outcome(a)} for a in AGENTS}
        return {a: f"{said[a]} {result[a]}\n{self.observe(a)}" for a in AGENTS}, rewards, {}, {}, infos

    def _showdown(self, agent: str, won: bool, chips: int) -> str:
        mine, theirs = CARDS[self.card(agent)], CARDS[self.card(other(agent))]
        if won:
            return f"Showdown: your {mine} beats your opponent's {theirs}. You win {chips_text(chips)}."
        return f"Showdown: your {mine} loses to your opponent's {theirs}. You lose {chips_text(chips)}."

    def _outcome(self, agent: str) -> str:
        n = self.chips[agent]
        return "win" if n > 0 else "loss" if n < 0 else "draw"

    def _forfeit(self, agent: str, move: str | None, legal: tuple[str, ...]) -> tuple[dict, dict, dict, dict, dict]:
        rival = other(agent)
        why = "no move in \\boxed{}" if move is None else f"\\boxed{{{move[:40]}}} is not legal now"
        self.end()
        obs = {
            agent: f"Invalid reply: {why} (legal: {', '.join(legal)}). You forfeit the match.\n{self.observe(agent)}",
            rival: f"Your opponent made an invalid move and forfeits the match. You win.\n{self.observe(rival)}",
        }
        infos = {
            agent: {"outcome": "loss", "invalid": True},
            rival: {"outcome": "win"},
        }
        return obs, {agent: -1.0, rival: 0.0}, {}, {}, infos

    def sample_agent_action(self, agent: str) -> str:
        if agent != self.to_act() or self.over():
            raise ValueError(f"{self!r}: agent {agent!r} is not to act now")
        legal = legal_moves(self.moves)
        return f"\\boxed{{{legal[int(self.np_random.integers(len(legal)))]}}}"


# -- scripted reference players --------------------------------------------------------------------------------
class KuhnNashPlayer(InfoPlayer):
    """A Nash equilibrium of Kuhn Poker (the one-parameter family, `alpha` in [0, 1/3]), read from its infos
    (`card`, `first`, `legal`). The first player's value is -1/18 per hand against any equilibrium.

    Opener: J bets with prob alpha, else checks and folds to a bet; Q checks and calls a bet with prob alpha + 1/3;
    K bets with prob 3 alpha, else checks and calls. Second player: facing a bet, J folds, Q calls with prob 1/3,
    K calls; facing a check, J bets with prob 1/3, Q checks, K bets."""

    def __init__(self, rng: np.random.Generator, alpha: float = 1 / 6) -> None:
        if not 0 <= alpha <= 1 / 3:
            raise ValueError(f"KuhnNashPlayer: alpha must be in [0, 1/3], got {alpha}")
        super().__init__(rng)
        self.alpha = alpha

    def act(self) -> str:
        card, first, facing_bet = CARDS.index(self.info["card"]), self.info["first"], CALL in self.info["legal"]
        a = self.alpha
        if first:  # probability of the aggressive move: call facing a bet, else bet
            p = (0.0, a + 1 / 3, 1.0)[card] if facing_bet else (a, 0.0, 3 * a)[card]
        else:
            p = (0.0, 1 / 3, 1.0)[card] if facing_bet else (1 / 3, 0.0, 1.0)[card]
        aggressive = self.rng.random() < p
        move = (CALL if aggressive else FOLD) if facing_bet else (BET if aggressive else CHECK)
        return f"\\boxed{{{move}}}"


class KuhnRandomPlayer(InfoPlayer):
    """A uniformly random legal move (from its info's `legal`)."""

    def act(self) -> str:
        legal = self.info["legal"]
        return f"\\boxed{{{legal[int(self.rng.integers(len(legal)))]}}}"


PLAYERS = {"nash": KuhnNashPlayer, "random": KuhnRandomPlayer}
