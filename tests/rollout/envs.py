"""Test envs for the rollout and trainer tests."""

from __future__ import annotations

import threading
import time

from jgem.core import Env
from jgem.envs.games.guess_the_number import GuessTheNumberEnv
from jgem.envs.multiagent.base import AgentSelector, MultiAgentEnv


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


class TalkEnv(Env):
    """Any action is a move: the episode lasts 2 + seed % 4 turns whatever the model says, each turn answering with
    a short observation and a reward of 0.1 * turn (multi-turn episodes of uneven length for an untrained model)."""

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.turns = self.turn = 0

    def reset(self, seed: int | None = None):
        super().reset(seed)
        self.turns, self.turn = 2 + (0 if seed is None else seed) % 4, 0
        return f"Talk for {self.turns} turns. Seed {seed}.", {}

    def step(self, action: str):
        self.turn += 1
        done = self.turn >= self.turns
        obs = f"Turn {self.turn}: you said {len(action)} characters; {self.np_random.integers(100)} is next."
        return obs, 0.1 * self.turn, done, False, {"success": done} if done else {}


class LongPromptTalkEnv(TalkEnv):
    """TalkEnv whose seed 999 opens at once with a long observation (about 600 tokens): a first prompt too long for a
    small `max_episode_tokens`, which the engine refuses with a ValueError while other episodes are in play; the
    other seeds take 0.2 s to reset, so on a thread pool their resets are still in flight when it does."""

    def reset(self, seed: int | None = None):
        if seed == 999:
            obs, info = super().reset(seed)
            return obs + " word" * 600, info
        time.sleep(0.2)
        return super().reset(seed)


GATE = threading.Event()


class GatedTalkEnv(TalkEnv):
    """TalkEnv whose seed-0 episodes block in their first step until the test sets `GATE` (a slow tool call the
    test ends when it chooses: a thread-backend pool runs its envs in the test's own process)."""

    def step(self, action: str):
        if self.turn == 0 and self._seed == 0 and not GATE.wait(timeout=600):
            raise TimeoutError("GATE was never set")
        return super().step(action)

    def reset(self, seed: int | None = None):
        self._seed = seed
        return super().reset(seed)


class StopEnv(Env):
    """One turn, reward 1 for any answer: an action cut at the token limit reaches the env as the empty invalid
    action and scores 0, so the policy learns to end its answer (an untrained model rarely samples the end token:
    a learning signal a tiny model climbs in a few dozen updates)."""

    def reset(self, seed: int | None = None):
        super().reset(seed)
        return f"Answer anything, briefly. Seed {seed}.", {}

    def step(self, action: str):
        return "ok", float(bool(action)), True, False, {"success": bool(action)}


class NoCopyTalkEnv(TalkEnv):
    """TalkEnv that cannot be copied (its state lives outside Python, as a browser's or a sandbox's)."""

    def get_state(self):
        raise NotImplementedError("the state lives in another process")


class SecretsEnv(MultiAgentEnv):
    """Two agents, "a" and "b", take turns (3 moves each, 2 + seed % 3 for b): any text is a move. Each has a private
    secret word only its own observations name; each observation states the other's last message length. Rewards:
    the mover gets 0.1 per move; when b's last move ends the game, a gets +1 and b -1 (a reward a seat earns in a
    step it did not act in)."""

    SECRETS = ("apple", "banana", "cherry", "damson", "elder", "fig")

    def __init__(self, seed: int | None = None) -> None:
        self.possible_agents = ["a", "b"]
        self.agent_selector = AgentSelector(self.possible_agents)
        super().__init__(seed=seed)
        self.secret: dict[str, str] = {}
        self.moves = {"a": 0, "b": 0}
        self.limit = 3
        self.heard = ""

    def _reset(self) -> None:
        pick = self.np_random.permutation(len(self.SECRETS))[:2]
        self.secret = {"a": f"SECRET-{self.SECRETS[pick[0]]}", "b": f"SECRET-{self.SECRETS[pick[1]]}"}
        self.moves, self.heard = {"a": 0, "b": 0}, ""
        self.limit = 2 + int(self.np_random.integers(3))

    def observe(self, agent: str) -> str:
        return f"You are {agent}; your secret is {self.secret[agent]}. {self.heard}"

    def _process_actions(self, actions):
        ((agent, text),) = actions.items()
        self.moves[agent] += 1
        self.heard = f"{agent} said {len(text)} characters."
        rewards = {agent: 0.1}
        if agent == "b" and self.moves["b"] >= self.limit:
            self.end()
            rewards = {"a": 1.0, "b": -0.9}
            return {}, rewards, {}, {}, {"a": {"outcome": "win"}, "b": {"outcome": "loss"}}
        return {}, rewards, {}, {}, {}

    def sample_agent_action(self, agent: str) -> str:
        return "x" * int(self.np_random.integers(1, 9))


class EchoPlayer:
    """A scripted SecretsEnv player: says how long its last observation was."""

    def __init__(self, rng) -> None:
        self.rng = rng

    def reset(self, agent, obs, info) -> None:
        self.last = obs

    def update(self, obs, info) -> None:
        self.last = obs

    def act(self) -> str:
        return f"heard {len(self.last)}"


PLAYERS = {"echo": EchoPlayer}
