"""The multi-agent env contract (GEM's `gem/envs/multiagent/multi_agent_env.py`, refined where jgem needs more).

GEM's contract, kept:
- agents by name: `possible_agents` (every seat), `agents` (the live ones), an `AgentSelector` for the turn order
  ("sequential": one agent acts per step, in seat order; "parallel": every live agent acts at once);
- `reset(seed) -> (observations, infos)` and `step(actions) -> (observations, rewards, terminations, truncations,
  infos)`, every value a dict keyed by agent name; `actions` maps each active agent to its text;
- subclasses implement `observe(agent)` (what that agent sees, and nothing it should not) and `_process_actions`;
- `send_message` / `broadcast_message` into `shared_memory`, `add_agent` / `remove_agent`.

jgem's refinements (what a trainer and a transport need):
- **Every dict covers every agent that was live before the step**, so an agent that did not act still learns what
  happened (the opponent's move, the end of the game), and an agent that just finished gets its last reward.
- **Who acts next travels with the result**: `infos[agent]["active"]` is True for each agent that must act in the
  next step (none once the game is over), so a caller that holds the env only through a pool or over HTTP knows
  whom to ask. `active_agents()` says the same in process.
- **A wrong joint action is a caller bug**, not a move: `step` raises `ValueError` naming the missing or extra
  agent, and `TypeError` for anything but a dict of str (the single-agent `Env.step` check, per agent). A malformed
  or illegal *text* is the game's to judge (each game's docstring says how it scores one).
- **`get_state()` without an agent is jgem's snapshot** (deep copy for `fork_env`, process workers, /snapshot);
  `get_state(agent)` is GEM's per-agent tuple (observation, cumulative reward, terminated, truncated, info).
- The game-ending step's infos carry `outcome` per agent ("win", "loss" or "draw" for competitive games, "success"
  or "failure" for cooperative ones).

Through `EnvPool` a multi-agent env's result travels in the single-agent row shape (`pack` / `AgentsStep.unpack`):
the observation is the per-agent dict, the row's reward the sum over agents, `terminated` / `truncated` whether the
episode is over, and the info `{"agents": infos, "rewards": ..., "terminations": ..., "truncations": ...}`.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from jgem.core import Env

SEQUENTIAL, PARALLEL = "sequential", "parallel"


class AgentSelector:
    """GEM's turn order: "sequential" (one agent at a time, in order, wrapping) or "parallel" (all live agents)."""

    def __init__(self, agents: list[str], mode: str = SEQUENTIAL) -> None:
        if mode not in (SEQUENTIAL, PARALLEL):
            raise ValueError(f"AgentSelector mode {mode!r} is not {SEQUENTIAL!r} or {PARALLEL!r}")
        self.mode = mode
        self.reinit(agents)

    def reinit(self, agents: list[str]) -> None:
        self._agents = list(agents)
        self._current_idx = 0
        self.selected = self._agents[0] if self._agents else None

    def get_active_agents(self) -> list[str]:
        if self.mode == SEQUENTIAL:
            return [self.selected] if self.selected is not None else []
        return list(self._agents)

    def next(self) -> None:
        if self.mode == SEQUENTIAL and self._agents:
            self._current_idx = (self._current_idx + 1) % len(self._agents)
            self.selected = self._agents[self._current_idx]

    def select(self, agent: str) -> None:
        """Make `agent` the one to act next (sequential games whose turn order is not a plain cycle)."""
        if agent not in self._agents:
            raise ValueError(f"AgentSelector.select: {agent!r} is not one of {self._agents}")
        self._current_idx = self._agents.index(agent)
        self.selected = agent

    def is_first(self) -> bool:
        return self._current_idx == 0

    def is_last(self) -> bool:
        return self._current_idx == len(self._agents) - 1

    def add_agent(self, agent: str) -> None:
        if agent not in self._agents:
            self._agents.append(agent)
            if self.selected is None:
                self.selected = agent

    def remove_agent(self, agent: str) -> None:
        if agent not in self._agents:
            return
        idx = self._agents.index(agent)
        self._agents.remove(agent)
        if not self._agents:
            self._current_idx, self.selected = 0, None
            return
        if idx <= self._current_idx:  # the current one removed: back to the one before, so `next()` lands after it
            self._current_idx -= 1
        self._current_idx %= len(self._agents)
        self.selected = self._agents[self._current_idx]


def check_actions(actions: Any, where: str) -> dict[str, str]:
    """`actions` if it is a dict of str names to str texts, else `TypeError` saying what arrived."""
    if not isinstance(actions, dict):
        raise TypeError(f"{where}: a multi-agent step takes a dict of agent name -> text, got {type(actions).__name__}")
    for agent, text in actions.items():
        if not isinstance(agent, str) or not isinstance(text, str):
            raise TypeError(
                f"{where}: the action of agent {agent!r:.40} must be a str, got {type(text).__name__} {text!r:.60}"
            )
    return actions


def _checks_joint_action(step: Any) -> Any:
    @functools.wraps(step)
    def checked(self: MultiAgentEnv, actions: Any) -> Any:
        check_actions(actions, repr(self))
        return step(self, actions)

    checked._jgem_checks_action = True  # type: ignore[attr-defined]
    return checked


class MultiAgentEnv(Env):
    """Base of jgem's multi-agent envs (see the module docstring). Subclasses set `possible_agents` and
    `agent_selector` in `__init__`, implement `observe(agent)`, `_process_actions(actions)` (which sets
    `self.terminations` / `self.truncations` and returns `(observations, rewards, terminations, truncations, infos)`
    for the agents it concerns; the base fills in the rest) and may override `_reset()` (called by `reset` after
    the bookkeeping, before the observations)."""

    possible_agents: list[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        step = cls.__dict__.get("step")  # a subclass's own step checks its dict of texts too (not Env's str check)
        if step is not None and not getattr(step, "_jgem_checks_action", False):
            cls.step = _checks_joint_action(step)
        super().__init_subclass__(**kwargs)

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        if not hasattr(self, "possible_agents"):
            self.possible_agents = []
        self.agents: list[str] = []
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.rewards: dict[str, float] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.agent_selector: AgentSelector | None = getattr(self, "agent_selector", None)
        self.shared_memory: list[dict[str, str]] = []
        self.global_context = ""
        self._selected_next = False

    # -- what subclasses implement ----------------------------------------------------------------------------
    @abc.abstractmethod
    def observe(self, agent: str) -> str:
        """What `agent` sees now: its private information and the public state, never another agent's secret."""

    @abc.abstractmethod
    def _process_actions(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]: ...

    def _reset(self) -> None:  # noqa: B027 - optional hook
        """Deal cards, place pieces, draw targets (from `self.np_random`)."""

    def extra_info(self, agent: str) -> dict[str, Any]:
        """Info every result carries for `agent` (e.g. its seat's rendered board), the game-ending one too (the
        step's own infos for the agent are laid over it)."""
        return {}

    # -- the contract ------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
        super().reset(seed)
        self.agents = list(self.possible_agents)
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.rewards = {a: 0.0 for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.shared_memory = []
        self.global_context = ""
        if self.agent_selector is not None:
            self.agent_selector.reinit(self.agents)
        self._reset()
        active = set(self.active_agents())
        return {a: self.observe(a) for a in self.agents}, {
            a: {**self.extra_info(a), "active": a in active} for a in self.agents
        }

    def step(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        check_actions(actions, repr(self))  # its own check (a dict of str), not Env's
        live = list(self.agents)
        self._validate_actions(actions, self.active_agents())
        obs, rewards, terms, truncs, infos = self._process_actions(dict(actions))
        for a in live:
            rewards.setdefault(a, 0.0)
            terms.setdefault(a, self.terminations.get(a, False))
            truncs.setdefault(a, self.truncations.get(a, False))
            self._cumulative_rewards[a] = self._cumulative_rewards.get(a, 0.0) + float(rewards[a])
        self.rewards = {a: float(rewards[a]) for a in live}
        self._remove_dead_agents()
        if self.agent_selector is not None and self.agents and not self._selected_next:
            self.agent_selector.next()
        self._selected_next = False
        active = set(self.active_agents())
        out_obs = {a: obs[a] if a in obs else self.observe(a) for a in live}
        out_infos = {a: {**self.extra_info(a), **infos.get(a, {}), "active": a in active} for a in live}
        self.infos.update(out_infos)
        return (
            out_obs,
            {a: float(rewards[a]) for a in live},
            {a: bool(terms[a]) for a in live},
            {a: bool(truncs[a]) for a in live},
            out_infos,
        )

    step._jgem_checks_action = True  # type: ignore[attr-defined]  # Env must not wrap it with the str check

    def select_next(self, agent: str) -> None:
        """Called from `_process_actions`: `agent` acts next (instead of the selector's next in order)."""
        assert self.agent_selector is not None
        self.agent_selector.select(agent)
        self._selected_next = True

    def active_agents(self) -> list[str]:
        """The agents that must act in the next step (none when the game is over)."""
        if not self.agents:
            return []
        chosen = self.agent_selector.get_active_agents() if self.agent_selector is not None else list(self.agents)
        return [a for a in chosen if a in self.agents]

    def end(self, truncated: bool = False) -> None:
        """Every live agent is done (the game is over): terminated, or truncated when a turn limit ended it."""
        for a in self.agents:
            (self.truncations if truncated else self.terminations)[a] = True
            if truncated:
                self.terminations[a] = True  # GEM's convention for a turn limit: terminated and truncated

    def _validate_actions(self, actions: dict[str, str], active: list[str]) -> None:
        if not self.agents:
            raise ValueError(f"{self!r}: the game is over (or not reset); call reset() before step()")
        extra = [a for a in actions if a not in active]
        if extra:
            raise ValueError(f"{self!r}: agent(s) {extra} sent an action but only {active} may act now")
        missing = [a for a in active if a not in actions]
        if missing:
            raise ValueError(f"{self!r}: missing the action of active agent(s) {missing}")

    def _remove_dead_agents(self) -> None:
        for a in [a for a in self.agents if self.terminations.get(a) or self.truncations.get(a)]:
            self.remove_agent(a)

    # -- GEM's helpers -----------------------------------------------------------------------------------------
    def get_state(self, agent: str | None = None) -> Any:  # type: ignore[override]
        """No agent: the env's snapshot (jgem). An agent: GEM's (observation, cumulative reward, terminated,
        truncated, info) of that agent."""
        if agent is None:
            return super().get_state()
        if agent not in self.possible_agents:
            raise ValueError(f"agent {agent!r} is not in the env (its agents: {self.possible_agents})")
        return (
            self.observe(agent),
            self._cumulative_rewards.get(agent, 0.0),
            self.terminations.get(agent, False),
            self.truncations.get(agent, False),
            self.infos.get(agent, {}),
        )

    def get_active_states(self) -> dict[str, tuple]:
        return {a: self.get_state(a) for a in self.active_agents()}

    def add_agent(self, agent: str) -> None:
        if agent in self.agents:
            return
        self.agents.append(agent)
        self.terminations[agent] = self.truncations[agent] = False
        self.rewards[agent] = self._cumulative_rewards[agent] = 0.0
        self.infos[agent] = {}
        if self.agent_selector is not None:
            self.agent_selector.add_agent(agent)

    def remove_agent(self, agent: str) -> None:
        if agent not in self.agents:
            return
        self.agents.remove(agent)
        if self.agent_selector is not None:
            self.agent_selector.remove_agent(agent)

    def send_message(self, from_agent: str, to_agent: str, message: str) -> None:
        for who in (from_agent, to_agent):
            if who not in self.agents:
                raise ValueError(f"agent {who!r} is not in the env (live agents: {self.agents})")
        self.shared_memory.append({"from": from_agent, "to": to_agent, "message": message})

    def broadcast_message(self, from_agent: str, message: str) -> None:
        if from_agent not in self.agents:
            raise ValueError(f"agent {from_agent!r} is not in the env (live agents: {self.agents})")
        for a in self.agents:
            if a != from_agent:
                self.shared_memory.append({"from": from_agent, "to": a, "message": message})

    def messages_to(self, agent: str) -> list[dict[str, str]]:
        """The messages `agent` may read (sent to it)."""
        return [m for m in self.shared_memory if m["to"] == agent]

    def sample_random_action(self) -> dict[str, str]:  # type: ignore[override]
        return {a: self.sample_agent_action(a) for a in self.active_agents()}

    def sample_agent_action(self, agent: str) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no random action sampler")


class Player(Protocol):
    """A scripted player of one seat, built as `cls(rng: numpy.random.Generator)`. It sees only what its agent sees:
    every observation and info the env gives that agent (`reset`, then `update` after every step, acting or not),
    and answers `act()` when it is active. A game module's `PLAYERS` maps names to player classes (any seat) or to
    dicts of seat -> class (a role-specific player: a cooperative game's speaker and listener)."""

    def reset(self, agent: str, obs: str, info: dict[str, Any]) -> None: ...

    def update(self, obs: str, info: dict[str, Any]) -> None: ...

    def act(self) -> str: ...


class InfoPlayer:
    """The base of scripted players that act on their agent's latest info: it keeps its `rng`, its `agent` and the
    last info the env gave that agent (subclasses implement `act`)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.agent = ""
        self.info: dict[str, Any] = {}

    def reset(self, agent: str, obs: str, info: dict[str, Any]) -> None:
        self.agent, self.info = agent, info

    def update(self, obs: str, info: dict[str, Any]) -> None:
        self.info = info

    def act(self) -> str:
        raise NotImplementedError


def play_match(
    env: MultiAgentEnv, players: dict[str, Player], seed: int | None = None, max_steps: int = 10_000
) -> tuple[dict[str, float], dict[str, Any]]:
    """Play one game in process with a scripted player per seat: each agent's return and its last info (with
    `outcome`)."""
    obs, infos = env.reset(seed=seed)
    returns = dict.fromkeys(obs, 0.0)
    last = dict(infos)
    for a, p in players.items():
        p.reset(a, obs[a], infos[a])
    for _ in range(max_steps):
        active = env.active_agents()
        if not active:
            break
        obs, rewards, _, _, infos = env.step({a: players[a].act() for a in active})
        for a in obs:
            returns[a] += rewards[a]
            last[a] = infos[a]
            players[a].update(obs[a], infos[a])
    if env.active_agents():
        raise RuntimeError(f"{env!r}: the game did not end in {max_steps} steps")
    return returns, last


# -- the pool's row shape ---------------------------------------------------------------------------------------
PACKED = "agents"


def is_multiagent(obs: Any, info: Any) -> bool:
    """True for a result a multi-agent env returned (per-agent dicts)."""
    return isinstance(obs, dict) and isinstance(info, dict)


def pack(kind: str, obs: Any, rewards: Any, terms: Any, truncs: Any, infos: Any, where: str) -> tuple:
    """A multi-agent result checked and packed into one pool row `(obs, reward, terminated, truncated, info)`;
    `ValueError` names what broke the contract."""
    if not isinstance(obs, dict) or not obs:
        raise ValueError(f"{where} returned observations {obs!r:.80}; they must be a non-empty dict per agent")
    agents = list(obs)
    if kind == "reset":
        rewards, terms, truncs = dict.fromkeys(agents, 0.0), dict.fromkeys(agents, False), dict.fromkeys(agents, False)
    for name, d in (("rewards", rewards), ("terminations", terms), ("truncations", truncs), ("infos", infos)):
        if not isinstance(d, dict) or set(d) != set(agents):
            keys = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"{where} returned {name} for {keys}, not for the agents observed {sorted(agents)}")
    for a in agents:
        if not isinstance(obs[a], (str, list)):
            raise ValueError(f"{where} returned agent {a!r}'s observation of type {type(obs[a]).__name__}")
        r = rewards[a]
        if isinstance(r, (bool, np.bool_)) or not isinstance(r, (int, float, np.integer, np.floating)):
            raise ValueError(f"{where} returned agent {a!r}'s reward {r!r:.60}; it must be a float")
        if not math.isfinite(float(r)):
            raise ValueError(f"{where} returned agent {a!r}'s reward {r}; it must be finite")
        for name, d in (("terminated", terms), ("truncated", truncs)):
            if not isinstance(d[a], (bool, np.bool_)):
                raise ValueError(f"{where} returned agent {a!r}'s {name}={d[a]!r:.40}; it must be a bool")
        if not isinstance(infos[a], dict):
            raise ValueError(f"{where} returned agent {a!r}'s info of type {type(infos[a]).__name__}")
    rewards = {a: float(rewards[a]) for a in agents}
    terms = {a: bool(terms[a]) for a in agents}
    truncs = {a: bool(truncs[a]) for a in agents}
    over = all(terms[a] or truncs[a] for a in agents)
    info = {PACKED: infos, "rewards": rewards, "terminations": terms, "truncations": truncs}
    fault = next((i["fault"] for i in infos.values() if "fault" in i), None)
    if fault is not None:  # a transport's fault (e.g. the env server went away): the row's, as for one agent
        info["fault"] = fault
    return obs, sum(rewards.values()), over, over and any(truncs.values()), info


@dataclass(frozen=True)
class AgentsStep:
    """One multi-agent reset or step as a workflow sees it: GEM's five dicts (iterating gives them in GEM's order),
    who acts next, and the pool's fault when the env failed (then the dicts are empty and the episode is over)."""

    observations: dict[str, Any]
    rewards: dict[str, float]
    terminations: dict[str, bool]
    truncations: dict[str, bool]
    infos: dict[str, dict[str, Any]]
    fault: str | None = field(default=None)

    def __iter__(self) -> Iterator[dict]:
        return iter((self.observations, self.rewards, self.terminations, self.truncations, self.infos))

    @property
    def active(self) -> list[str]:
        """The agents that must act next."""
        return [a for a, info in self.infos.items() if info.get("active")]

    @property
    def done(self) -> bool:
        """The episode is over: every agent finished, or the env failed."""
        return self.fault is not None or all(self.terminations[a] or self.truncations[a] for a in self.observations)

    @staticmethod
    def unpack(result: tuple) -> AgentsStep:
        """From a pool row: `(obs, info)` of a reset or `(obs, reward, terminated, truncated, info)` of a step."""
        obs, info = result[0], result[-1]
        if "fault" in info or not isinstance(obs, dict):
            return AgentsStep({}, {}, {}, {}, {}, fault=str(info.get("fault", "the env returned a single-agent row")))
        if PACKED not in info:
            raise ValueError("AgentsStep.unpack: the row is not a packed multi-agent result")
        return AgentsStep(obs, info["rewards"], info["terminations"], info["truncations"], info[PACKED])
