"""`agents`: multi-agent games (`jgem.envs.multiagent`): each seat the policy plays is a stream and an episode of its
own, on one env the seats share.

A seat's stream is its own conversation: the game's observations for that agent only (private information stays
private: the env's `observe` decides what each sees) as user messages, its actions as assistant messages. What
happens while a seat waits (the opponent's move, the end of a hand) is gathered into one message, shown when it is
next to act. Seats that act in the same step (simultaneous games) generate in one batch; their joint action is
one `ctx.step`. A reward the env gives a seat in a step it did not act in (a loss revealed by the opponent's move)
is added to that seat's last turn.

`rollout.opponent` says who plays the seats the policy does not:
- "self" (self-play with one shared policy): every seat is the policy. A group of `group_size` specs is
  `group_size / seats` games, spec i the seat i mod seats of game i div seats; every seat's episode trains, its
  `role` the seat's index, so the `rae` estimator (ReBN per role) gives each seat its own baseline.
- "pool" (an opponent pool, as in fictitious self-play): each spec is one game, the policy at `rollout.seat` as
  against a scripted player, the other seats played by a past version of the policy, frozen (their streams pinned to
  it, never trained). The pool at policy version v is `pool_versions(v)`: versions 0, `pool_every`,
  2 `pool_every`, ... up to v, the last `pool_size` of them (the pipeline keeps their params, on the sampler's
  devices, and on disk for a resume: `jgem.train.pipeline`). A game draws among them uniformly, or with probability
  `pool_latest` plays the current policy, from a generator seeded by its spec and the version it starts at: the
  same seed draws the same opponents. The episode records the version it played (`Episode.opponent`).
- a scripted player of the game (the `PLAYERS` of the env's module: "minimax", "nash", ...): each spec is one game,
  the policy at `rollout.seat` ("alternate": spec k at seat k mod seats, so both seats train).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jgem.envs.multiagent.base import AgentsStep
from jgem.rollout.config import PromptBudgetError
from jgem.rollout.views import first_prompt, observation_suffix
from jgem.rollout.workflow import Context, Generation, Stream, Trajectory, Workflow, register_workflow

SUCCESS = ("win", "success")
POLICY = "policy:"  # an opponent "policy:N": the other seats are played by policy version N (frozen, not trained)
POOL = "pool"  # the other seats are played by a past version drawn from the opponent pool (frozen, not trained)


def pool_versions(version: int, every: int, size: int) -> list[int]:
    """The opponent pool at policy version `version`: versions 0, `every`, 2 `every`, ... up to `version`, the last
    `size` of them (version 0: the policy the run starts RL with)."""
    last = version // every * every
    return list(range(max(0, last - (size - 1) * every), last + 1, every))


def pool_span(lo: int, hi: int, every: int, size: int) -> list[int]:
    """Every version of the pools at versions `lo` .. `hi` (`pool_versions` of each)."""
    return list(range(pool_versions(lo, every, size)[0], hi // every * every + 1, every)) if hi >= lo else []


@dataclass
class Seat:
    """One seat the policy plays: its agent, trajectory, stream, its chat messages (the stream holds the first
    `num_messages`, then the last action) and the observations that came since its last action."""

    agent: str
    traj: Trajectory
    stream: Stream | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    num_messages: int = 0
    last: Generation | None = None
    waiting: list[str] = field(default_factory=list)
    version: int | None = None  # a frozen policy version's seat: its stream is pinned to it
    trained: bool = True  # the policy's seat, which trains (a frozen opponent's actions are only played)
    policy: int = 0  # the policy (LoRA adapter) that plays the seat, with several (`rollout.policies`)


class Agents(Workflow):
    name = "agents"
    grouped = True
    raw_env = True

    def width(self, group_size: int) -> int:
        return group_size  # a slot per seat the policy plays; an env per game

    def width_of(self, group_size: int, *, cfg: Any, env_name: str, evaluating: bool) -> int:
        opponent = (cfg.eval_opponent if evaluating else cfg.opponent) or ""
        if opponent.startswith(POLICY) or opponent == POOL:  # a slot per seat the frozen policy plays too
            return group_size * seat_count(env_name)
        return group_size

    def group_errors(self, group_size: int) -> list[str]:
        return []  # any size with a scripted opponent; self-play checks the seats when the game tells them

    def check(self, cfg) -> list[str]:
        out = []
        if cfg.view not in ("chat", "chat_per_turn"):
            out.append(
                f"renders each seat's conversation, so it needs rollout.view chat or chat_per_turn, not {cfg.view!r}"
            )
        if cfg.opponent == "self" and cfg.seat != "alternate":
            out.append(
                f"rollout.seat {cfg.seat!r} is for a scripted opponent; in self-play the policy plays every seat"
            )
        return out

    async def run(self, ctx: Context, specs: Sequence) -> list[Trajectory]:
        first = AgentsStep.unpack(await ctx.reset(ctx.envs[0], specs[0].seed))
        if first.fault is not None:
            return [_faulted(ctx.trajectory(s), first.fault) for s in specs]
        agents = list(first.observations)
        cfg = ctx.cfg
        opponent, flag = _opponent(ctx)
        seat = "alternate" if ctx.evaluating else cfg.seat
        errors = seat_errors(ctx.env_name, agents, opponent, seat, len(specs), flag, evaluation=ctx.evaluating)
        errors += policy_errors(cfg.policies, agents, f"rollout.policies {' '.join(cfg.policies)}")
        if errors:
            raise ValueError("; ".join(errors))
        if opponent == "self":
            games = [
                {a: specs[g * len(agents) + i] for i, a in enumerate(agents)} for g in range(len(specs) // len(agents))
            ]
        else:
            games = [{_seat(seat, agents, s): s} for s in specs]
        out: dict[int, Trajectory] = {}
        results = await ctx.gather(
            *(_game(ctx, ctx.envs[g], game, first if g == 0 else None) for g, game in enumerate(games))
        )
        for trajs in results:
            out.update({t.spec.episode_id: t for t in trajs})
        return [out[s.episode_id] for s in specs]


def _opponent(ctx: Context) -> tuple[str, str]:
    """Who plays the other seats, and the flag that said so: rollout.opponent in training; in an evaluation
    rollout.eval_opponent, or the game's first scripted player."""
    if not ctx.evaluating:
        return ctx.cfg.opponent, "rollout.opponent"
    return ctx.cfg.eval_opponent or next(iter(players_of(ctx.env_name)), "none"), "rollout.eval_opponent"


def _seat(seat: str, agents: list[str], spec: Any) -> str:
    return agents[spec.episode_id % len(agents)] if seat == "alternate" else seat


@functools.cache
def seat_count(env_id: str) -> int:
    """How many seats `env_id`'s game has (one env built here, once); 2 when it cannot be built here (a remote id)."""
    from jgem.registry import make

    try:
        game = make(env_id)
    except Exception:  # noqa: BLE001 - an id this process cannot build: two-seat games are the common case
        return 2
    try:
        return len(game.possible_agents)
    finally:
        game.close()


def players_of(env_id: str) -> dict[str, Any]:
    """The scripted players of `env_id`'s game (its module's PLAYERS): name -> a class for any seat, or a dict of
    seat -> class (a cooperative game's speaker and listener)."""
    from jgem.registry import spec

    entry = spec(env_id).entry_point
    module = importlib.import_module(entry.partition(":")[0] if isinstance(entry, str) else entry.__module__)
    return dict(getattr(module, "PLAYERS", {}))


def player_for(env_id: str, name: str, seat: str) -> Any:
    """The class of scripted player `name` at `seat` (checked by `seat_errors`)."""
    p = players_of(env_id)[name]
    return p[seat] if isinstance(p, dict) else p


def seat_errors(
    env_id: str,
    agents: list[str],
    opponent: str,
    seat: str,
    group_size: int,
    flag: str,
    *,
    evaluation: bool = False,
    name: Any = str,
) -> list[str]:
    """What keeps `opponent` (a scripted player's name, or "self") from filling the seats the policy leaves under
    `seat` ("alternate" or an agent) with groups of `group_size`; each message names `flag` (and `name(field)` for the
    other fields it names)."""
    if opponent == "self":
        if evaluation:
            return [f"{flag} self: name a scripted player of {env_id} (only training plays itself, in whole games)"]
        if group_size % len(agents):
            return [
                f"{flag} self plays every seat of {env_id} ({len(agents)}: {agents}), so a group is a whole number of "
                f"games: set {name('group_size')} to a multiple of {len(agents)}, got {group_size}"
            ]
        return []
    if opponent == POOL:
        if evaluation:
            return [f"{flag} pool: the opponent pool plays only in training; name a scripted player"]
        return [f"{name('rollout.seat')} {seat!r} is not a seat of {env_id}: {agents}"] * (
            seat != "alternate" and seat not in agents
        )
    if opponent.startswith(POLICY):
        if not evaluation:
            return [
                f"{flag} {opponent}: a frozen policy version plays only in evaluations that load it "
                "(experiments.eval --agents)"
            ]
        if not opponent[len(POLICY) :].lstrip("-").isdigit():
            return [f"{flag} {opponent!r}: name a policy version as {POLICY}N"]
        return [f"{name('rollout.seat')} {seat!r} is not a seat of {env_id}: {agents}"] * (
            seat != "alternate" and seat not in agents
        )
    players = players_of(env_id)
    if opponent not in players:
        return [
            f"{flag} {opponent!r} is not a scripted player of {env_id}; its players: "
            f"{', '.join(players) or 'none'}" + ("" if evaluation else " (or self for self-play)")
        ]
    if seat != "alternate" and seat not in agents:
        return [f"{name('rollout.seat')} {seat!r} is not a seat of {env_id}: {agents}"]
    p = players[opponent]
    needed = agents if seat == "alternate" else [a for a in agents if a != seat]
    missing = [a for a in needed if isinstance(p, dict) and a not in p]
    if missing:
        return [f"{flag} {opponent!r} of {env_id} plays seats {sorted(p)}, not {missing}"]
    return []


def _faulted(traj: Trajectory, fault: str) -> Trajectory:
    traj.truncated, traj.fault = True, fault
    return traj


async def _game(ctx: Context, env: int, game: dict[str, Any], first: AgentsStep | None) -> list[Trajectory]:
    """One game on `env`: `game` maps each seat the policy plays to its spec; the other seats are scripted, or
    played by a frozen policy version (`policy:N`: streams pinned to version N, whose turns are not trained)."""
    cfg = ctx.cfg
    spec0 = next(iter(game.values()))
    r = first if first is not None else AgentsStep.unpack(await ctx.reset(env, spec0.seed))
    policy = seat_policies(cfg.policies)
    seats = {a: Seat(a, ctx.trajectory(s), policy=policy.get(a, 0)) for a, s in game.items()}
    if r.fault is not None:
        return [_faulted(s.traj, r.fault) for s in seats.values()]
    agents = list(r.observations)
    for s in seats.values():
        s.traj.role = agents.index(s.agent)
    scripted = {}
    opponent, _ = _opponent(ctx)
    frozen: dict[str, Seat] = {}  # seats a frozen policy version plays: rendered as the policy's, never trained
    if opponent.startswith(POLICY) or opponent == POOL:
        version = _draw(ctx, spec0) if opponent == POOL else int(opponent[len(POLICY) :])
        if version is not None:
            ctx.hold(version)  # kept for this game from now: its seats' streams open at their first actions
        frozen = {
            a: Seat(a, ctx.trajectory(spec0), version=version, trained=False, policy=policy.get(a, 0))
            for a in agents
            if a not in seats
        }
        for s in seats.values():
            s.traj.opponent = ctx.version if version is None else version
    elif opponent != "self":
        for a in agents:
            if a not in seats:
                cls = player_for(ctx.env_name, opponent, a)
                scripted[a] = cls(np.random.default_rng([spec0.seed, spec0.episode_id, agents.index(a)]))
                scripted[a].reset(a, r.observations[a], r.infos[a])
    llm = {**seats, **frozen}  # every seat a policy plays, trained or frozen
    for s in llm.values():
        s.waiting.append(r.observations[s.agent])
    steps, truncated = 0, False
    while not r.done:
        mine = [llm[a] for a in r.active if a in llm]
        for s in mine:
            _show(ctx, s)
        if any(len(s.stream.tokens) + cfg.max_new_tokens > cfg.max_episode_tokens for s in mine):
            ctx.stats.budget_truncations += 1  # a seat's conversation outgrew its slot: the game is cut here
            truncated = True
            for s in mine:
                s.traj.next_prompt = list(s.stream.tokens)
            break
        gens = await ctx.gather(
            *(ctx.generate(s.stream, ctx.token_limit(len(s.traj.turns), s.traj.spec)) for s in mine)
        )
        actions = {s.agent: ctx.text(g) for s, g in zip(mine, gens)}
        actions.update({a: scripted[a].act() for a in r.active if a not in llm})
        r = AgentsStep.unpack(await ctx.step(actions, env))
        steps += 1
        for s, g in zip(mine, gens):
            s.last = g
            s.messages.append({"role": "assistant", "content": actions[s.agent]})
            if s.trained:  # a trained seat's turn (a frozen one's action is only played)
                s.traj.record(g, 0.0)  # its reward comes with the step's (below), to its last turn
                ctx.stats.turns += 1
                ctx.stats.action_tokens += len(g.ids)
        if r.fault is not None:
            return [_faulted(s.traj, r.fault) for s in seats.values()]
        for a, reward in r.rewards.items():
            if a in seats and reward and seats[a].traj.turns:  # to its last action (none yet: nothing to train)
                t = seats[a].traj
                t.set_reward(len(t.turns) - 1, t.turns[-1].reward + reward)
        for a, obs in r.observations.items():
            if a in llm:
                llm[a].waiting.append(obs)
            elif a in scripted:
                scripted[a].update(obs, r.infos[a])
        if not r.done and steps >= ctx.max_turns:
            truncated = True
            break
    for s in seats.values():
        info = r.infos.get(s.agent, {})
        s.traj.success = info.get("outcome") in SUCCESS and bool(s.traj.turns)  # a forfeit before it moved: no
        s.traj.outcome = info.get("outcome")
        s.traj.truncated = truncated or bool(r.truncations.get(s.agent))
    return [s.traj for s in seats.values()]


def seat_policies(policies: Sequence[str]) -> dict[str, int]:
    """Each seat's policy (LoRA adapter) from `rollout.policies`: entry p lists policy p's seats, comma-separated;
    none: every seat is policy 0's."""
    return {a.strip(): p for p, entry in enumerate(policies) for a in entry.split(",")}


def policy_errors(policies: Sequence[str], agents: list[str], flag: str) -> list[str]:
    """What keeps `policies` (rollout.policies) from giving each of the game's seats `agents` one policy."""
    if not policies:
        return []
    named = [a.strip() for entry in policies for a in entry.split(",")]
    unknown = sorted({a for a in named if a not in agents})
    twice = sorted({a for a in named if named.count(a) > 1})
    missing = [a for a in agents if a not in named]
    out = [f"{flag}: {unknown} are not seats of the game: {agents}"] * bool(unknown)
    out += [f"{flag}: {twice} are named by more than one policy"] * bool(twice)
    out += [f"{flag}: no policy plays {missing}; name every seat of {agents} once"] * bool(missing)
    return out


def _draw(ctx: Context, spec: Any) -> int | None:
    """The opponent pool's draw for the game of `spec`: a version of `pool_versions` (uniform), or None (the current
    policy, with probability rollout.pool_latest); seeded by the spec and the version the game starts at."""
    cfg = ctx.cfg
    rng = np.random.default_rng([spec.seed, spec.episode_id, ctx.version])
    if rng.random() < cfg.pool_latest:
        return None
    pool = pool_versions(ctx.version, cfg.pool_every, cfg.pool_size)
    return pool[int(rng.integers(len(pool)))]


def seat_message(waiting: list[str]) -> dict[str, str]:
    """The user message a seat gets before it acts: the observations since its last action, in order."""
    return {"role": "user", "content": "\n".join(o.rstrip("\n") for o in waiting) + "\n"}


def _show(ctx: Context, s: Seat) -> None:
    """Give the seat's stream what came since its last action (before its first: since the reset), as one user
    message, before it acts. Its stream opens at its first action."""
    cfg = ctx.cfg
    if s.stream is None:
        s.messages = [seat_message(s.waiting)]
        s.waiting = []
        tokens, s.num_messages = first_prompt(ctx.chat, cfg.view, s.messages)
        if len(tokens) + cfg.max_new_tokens > cfg.max_episode_tokens:
            raise PromptBudgetError(
                f"the first prompt of seat {s.agent!r} (episode {s.traj.spec.episode_id}, {ctx.env_name}) has "
                f"{len(tokens)} tokens, which leaves no room for --rollout.max-new-tokens {cfg.max_new_tokens} within "
                f"--rollout.max-episode-tokens {cfg.max_episode_tokens}; raise the latter"
            )
        s.stream = ctx.open(tokens, episode_id=s.traj.spec.episode_id, version=s.version, adapter=s.policy)
        return
    if not s.waiting:
        return
    s.messages.append(seat_message(s.waiting))
    s.waiting = []
    if ctx.cfg.view == "chat":
        ctx.append(s.stream, observation_suffix(ctx.chat, s.num_messages, s.last.ids, s.messages))
    else:
        ctx.new_segment(s.stream, first_prompt(ctx.chat, ctx.cfg.view, s.messages)[0], keep_prefix=True)
    s.num_messages = len(s.messages)


register_workflow("agents", Agents())
