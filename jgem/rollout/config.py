"""How episodes are played (`RolloutConfig`): plain data, light to import (the CLI and `jgem.config` read it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# The most extra rounds dynamic sampling may play in a step: the run's seed stream holds this many per step.
MAX_RESAMPLE_ROUNDS = 64

# The multi-turn views (`jgem.rollout.views`): the chat's messages as one growing token stream (`chat`), rendered
# afresh by the template every turn (`chat_per_turn`), or GEM's history text in one user message every turn
# (`per_turn`).
View = Literal["chat", "chat_per_turn", "per_turn"]
VIEWS: tuple[str, ...] = ("chat", "chat_per_turn", "per_turn")


class PromptBudgetError(ValueError):
    """An episode's first prompt leaves no room for an action within the episode's token budget (the CLI prints it
    as one line: it names the flags to raise)."""


@dataclass(frozen=True)
class Sampling:
    """What a decode chunk samples with: traced scalars, so changing them compiles nothing."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are played. Token budgets: `max_new_tokens` per turn, `max_episode_tokens` per
    episode (chat view: the whole stream; the per-turn views: one prompt plus its action), which is also the length
    of a KV-cache slot. `chunk_steps`: decode steps per chunk (between two looks at the envs);
    `extend_chunk`: the most tokens one prefill call takes per slot (longer prompts are prefilled in pieces)."""

    view: View = "chat"
    max_new_tokens: int = 32
    max_episode_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    chunk_steps: int = 8
    extend_chunk: int = 512
    # What the env receives for a response cut at max_new_tokens (no stop token): an invalid action,
    # which GEM's games score as a format error.
    invalid_action: str = ""
    # DAPO's dynamic sampling (grouped algorithms): a group whose episodes' returns are all equal has advantage 0
    # everywhere; it is dropped and the step plays extra rounds of groups until it has its number of groups
    # (jgem.train.dynamic). Off: every played group trains.
    dynamic_sampling: bool = False
    # the most extra rounds (each the step's number of groups) a step plays; then it trains on the groups it has
    max_resample_rounds: int = 4
    # how an episode interacts (jgem.rollout.workflow): a registered workflow's name ("turns": the turn loop;
    # "compact": summarise into a new segment past `compact_tokens`; "tree": each group forks at `fork_turn`)
    workflow: str = "turns"
    # the compacting agent: the stream length past which it writes a summary and starts a new segment (0: half of
    # max_episode_tokens)
    compact_tokens: int = 0
    # tree rollouts: the turns the group's trunk plays before it forks into the group's episodes
    fork_turn: int = 1
    # multi-agent games (workflow "agents"): who plays the seats the policy does not: "self" (every seat is the
    # policy, each trained as its own role: a group is a whole number of games), "pool" (a past version of the
    # policy from the opponent pool, frozen; each episode one game, the policy at one seat), or a scripted player of
    # the game (its module's PLAYERS: minimax, nash, ...; each episode one game, the policy at one seat)
    opponent: str = "self"
    # the opponent pool (opponent "pool"): how many of the kept versions form the pool (the last ones)
    pool_size: int = 4
    # the opponent pool: the policy's versions 0, pool_every, 2 * pool_every, ... are kept
    pool_every: int = 10
    # the opponent pool: the chance a game plays the current policy (not trained at that seat) instead of a draw
    # among the pool's versions (uniform)
    pool_latest: float = 0.0
    # with a scripted opponent, the policy's seat: "alternate" (episode k plays seat k mod the seats) or an agent name
    seat: str = "alternate"
    # the scripted player evaluations play against (at alternating seats), whatever `opponent` trains against; "":
    # the game's first player (its module's PLAYERS)
    eval_opponent: str = ""
    # several trainable policies in one run (workflow "agents"), each a LoRA adapter on one base model
    # (--model.lora.adapters, one per policy): entry p names policy p's seats (comma-separated agent names of the
    # game), every seat in one entry; (): one policy plays every seat
    policies: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.view not in VIEWS:
            raise ValueError(f"RolloutConfig.view {self.view!r}; choose one of {', '.join(VIEWS)}")
        if self.max_new_tokens < 1 or self.max_episode_tokens <= self.max_new_tokens:
            raise ValueError(
                f"need 1 <= max_new_tokens ({self.max_new_tokens}) < max_episode_tokens ({self.max_episode_tokens})"
            )
        if self.chunk_steps < 1:
            raise ValueError(f"RolloutConfig.chunk_steps must be >= 1, got {self.chunk_steps}")
        if self.extend_chunk < 16:
            raise ValueError(f"RolloutConfig.extend_chunk must be >= 16, got {self.extend_chunk}")

    def errors(self, name: Callable[[str], str] = str) -> list[str]:
        """What `jgem.config.validate` checks here, each message naming the field as `name(field)`: the resample
        rounds, an integer in [0, MAX_RESAMPLE_ROUNDS]; the opponent pool's size, interval and probability."""
        out = []
        rounds = self.max_resample_rounds
        if not (isinstance(rounds, int) and not isinstance(rounds, bool) and 0 <= rounds <= MAX_RESAMPLE_ROUNDS):
            out.append(
                f"{name('max_resample_rounds')} is {rounds!r}; it must be an integer in [0, {MAX_RESAMPLE_ROUNDS}] "
                "(the extra rounds of groups a step may play)"
            )
        for f in ("pool_size", "pool_every"):
            if getattr(self, f) < 1:
                out.append(f"{name(f)} is {getattr(self, f)}; the opponent pool needs at least 1")
        if not 0.0 <= self.pool_latest <= 1.0:
            out.append(f"{name('pool_latest')} is {self.pool_latest}; it is a probability, in [0, 1]")
        return out

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.greedy)
