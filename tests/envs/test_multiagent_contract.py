"""The multi-agent contract for every registered `multi:` game: in process, through every EnvPool backend and over
`jgem-serve` (joint actions through the pool's remote backend, and one client per agent over HTTP)."""

from __future__ import annotations

import copy

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jgem
from jgem.envs.multiagent import MULTIAGENT_IDS
from jgem.envs.multiagent.base import AgentSelector, AgentsStep, MultiAgentEnv, pack
from jgem.envs.pool import EnvPool
from jgem.envs.remote.protocol import jsonable
from tests.agentgym.conftest import TOKEN, start_server  # noqa: F401  (fixture)

SEEDS = [3, 11]


def _choose(env: MultiAgentEnv, rng: np.random.Generator, malformed: float = 0.05) -> dict[str, str]:
    """A random joint action for `env`'s active agents, drawn on a copy (so `env`'s own RNG does not move), now and
    then a malformed text (the game's to judge)."""
    twin = copy.deepcopy(env)
    twin.np_random = np.random.default_rng(int(rng.integers(2**31)))
    return {a: "no move" if rng.random() < malformed else twin.sample_agent_action(a) for a in env.active_agents()}


def _episode(env_id: str, seed: int) -> list[tuple[dict | None, tuple]]:
    """One game in process: (joint action, the five dicts) per reset and step, the actions drawn from `seed`."""
    env = jgem.make(env_id)
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    out: list[tuple[dict | None, tuple]] = [(None, (obs, infos))]
    while env.active_agents():
        action = _choose(env, rng)
        out.append((action, env.step(action)))
        assert len(out) < 500, f"{env_id} did not end"
    return out


@pytest.mark.parametrize("env_id", MULTIAGENT_IDS)
def test_every_game_keeps_the_contract_in_process(env_id):
    env = jgem.make(env_id)
    assert isinstance(env, MultiAgentEnv) and env.possible_agents
    episode = _episode(env_id, 0)
    assert episode == _episode(env_id, 0)  # same seed, same actions: the same game
    (_, (obs, infos)), steps = episode[0], episode[1:]
    assert set(obs) == set(infos) == set(env.possible_agents)
    assert any(i["active"] for i in infos.values())
    live = set(obs)
    for k, (action, result) in enumerate(steps):
        assert set(action) == {a for a, i in (steps[k - 1][1][4] if k else infos).items() if i["active"]}
        packed = pack("step", *result, env_id)  # the dicts cover the live agents, with checked types
        assert set(packed[0]) == live
        done = {a for a in live if result[2][a] or result[3][a]}
        assert not any(result[4][a]["active"] for a in done)
        live -= done
    last = steps[-1][1]
    assert all(last[2][a] or last[3][a] for a in last[0]) and not any(i["active"] for i in last[4].values())
    assert all("outcome" in i for i in last[4].values())
    # a wrong joint action is the caller's error; a non-str text a TypeError
    env.reset(seed=1)
    active = env.active_agents()
    idle = [a for a in env.possible_agents if a not in active]
    with pytest.raises(ValueError, match="missing the action"):
        env.step({})
    if idle:
        with pytest.raises(ValueError, match="only .* may act now"):
            env.step({**{a: "x" for a in active}, idle[0]: "x"})
    with pytest.raises(TypeError, match="must be a str"):
        env.step({active[0]: 5})
    with pytest.raises(TypeError, match="a dict of agent name"):
        env.step("\\boxed{1}")


@pytest.mark.parametrize("env_id", MULTIAGENT_IDS)
def test_a_snapshot_plays_on_identically(env_id):
    env = jgem.make(env_id)
    env.reset(seed=5)
    rng = np.random.default_rng(0)
    env.step(_choose(env, rng, malformed=0))
    assert env.active_agents(), "a legal first move ended the game"
    state = env.get_state()
    twin = jgem.make(env_id)
    twin.set_state(state)
    actions = _choose(env, rng, malformed=0)
    assert twin.step(actions) == env.step(actions)
    assert env.get_state(env.agents[0])[0] == env.observe(env.agents[0]) if env.agents else True


@pytest.mark.parametrize("backend", ["inline", "thread", "process"])
def test_every_game_plays_through_the_pool(backend):
    """Each game's episodes through the pool equal the same episodes in process, row by row."""
    for env_id in MULTIAGENT_IDS:
        pool = EnvPool(env_id, len(SEEDS), backend=backend, num_workers=2 if backend == "process" else None)
        try:
            _check_pool(pool, env_id)
        finally:
            pool.close()


def _check_pool(pool: EnvPool, env_id: str) -> None:
    episodes = [_episode(env_id, s) for s in SEEDS]
    pool.reset(seeds=SEEDS)
    rows = {int(i): (o, info) for i, o, info in zip(*_cols(pool.recv(), "env_ids", "obs", "infos"))}
    for i, ep in enumerate(episodes):
        got = AgentsStep.unpack(rows[i])
        assert got.fault is None and (got.observations, got.infos) == ep[0][1]
        assert got.active == [a for a, inf in ep[0][1][1].items() if inf["active"]]
    for k in range(1, max(map(len, episodes))):
        ids = [i for i, ep in enumerate(episodes) if k < len(ep)]
        out = pool.step(ids, [episodes[i][k][0] for i in ids])
        for j, i in enumerate(ids):
            row = (out.obs[j], out.rewards[j], out.terminated[j], out.truncated[j], out.infos[j])
            got = AgentsStep.unpack(row)
            want = episodes[i][k][1]
            assert tuple(got) == tuple(want), (env_id, i, k)
            assert got.done == (k == len(episodes[i]) - 1) == bool(out.terminated[j])
            assert out.rewards[j] == pytest.approx(sum(want[1].values()))


def _cols(results, *names):
    return [getattr(results, n) for n in names]


class _BrokenRewards(MultiAgentEnv):
    """Answers rewards for an agent it does not observe: a malformed result."""

    def __init__(self, seed=None):
        self.possible_agents = ["a", "b"]
        self.agent_selector = AgentSelector(self.possible_agents, mode="parallel")
        super().__init__(seed=seed)

    def observe(self, agent):
        return f"hello {agent}"

    def _process_actions(self, actions):
        return {}, {"c": 1.0}, {}, {}, {}

    def step(self, actions):
        obs, rewards, terms, truncs, infos = super().step(actions)
        return obs, {**rewards, "c": 1.0}, terms, truncs, infos


def test_the_pool_turns_a_malformed_multiagent_result_or_a_wrong_joint_action_into_a_fault():
    pool = EnvPool(_BrokenRewards, 1, backend="inline")
    try:
        pool.reset(seeds=[0])
        first = pool.recv()
        assert AgentsStep.unpack((first.obs[0], first.infos[0])).active == ["a", "b"]
        bad = pool.step([0], [{"a": "x", "b": "y"}])
        assert "invalid_result" in bad.infos[0]["fault"] and "rewards for ['a', 'b', 'c']" in bad.infos[0]["fault"]
        assert AgentsStep.unpack((bad.obs[0], bad.infos[0])).done
        pool.reset(seeds=[0])
        pool.recv()
        wrong = pool.step([0], [{"a": "x"}])  # b is active too
        assert "missing the action of active agent(s) ['b']" in wrong.infos[0]["fault"]
        with pytest.raises(TypeError, match="the action of agent 'a' must be a str"):
            pool.send([0], [{"a": 1}])
    finally:
        pool.close()


@pytest.mark.xdist_group("multiagent_serve")
def test_every_game_over_jgem_serve(start_server):  # noqa: F811
    server = start_server(None, "--env", "multi:")
    for env_id in MULTIAGENT_IDS:  # joint actions: the pool's remote backend
        pool = EnvPool(env_id, len(SEEDS), backend="remote", remote_urls=[server.url], remote_token=TOKEN)
        try:
            episodes = [_episode(env_id, s) for s in SEEDS]
            pool.reset(seeds=SEEDS)
            pool.recv()
            for k in range(1, max(map(len, episodes))):
                ids = [i for i, ep in enumerate(episodes) if k < len(ep)]
                out = pool.step(ids, [episodes[i][k][0] for i in ids])
                for j, i in enumerate(ids):
                    got = AgentsStep.unpack((out.obs[j], out.infos[j]))
                    assert list(got) == jsonable(list(episodes[i][k][1])), (env_id, i, k)
        finally:
            pool.close()
    _agents_as_clients(server, "multi:TicTacToe-v0-easy")
    _agents_as_clients(server, "multi:RockPaperScissors-v0-easy")


def _agents_as_clients(server, env_id: str) -> None:
    """Each agent posts its own action with its name; each sees only its own view, and the game is the one played
    in process with the same joint actions."""
    episode = _episode(env_id, 7)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10) as http:
        idx = http.post("/create", json={"env_id": env_id}).json()["id"]
        http.post("/reset", json={"id": idx, "seed": 7}).raise_for_status()
        obs, infos = episode[0][1]
        for a in obs:
            view = http.get("/observation", params={"id": idx, "agent": a}).json()
            assert view["observation"] == obs[a] and view["info"] == jsonable(infos[a])
        for seq, (action, (obs, rewards, terms, truncs, infos)) in enumerate(episode[1:], start=1):
            answers = {}
            for k, (a, text) in enumerate(action.items()):
                r = http.post("/step", json={"id": idx, "action": text, "agent": a, "seq": seq})
                assert r.status_code == 200, r.text
                answers[a] = r.json()
                if k < len(action) - 1:  # the others have not sent theirs yet
                    assert answers[a]["waiting_for"] == list(action)[k + 1 :]
            last = list(action)[-1]
            assert answers[last]["observation"] == obs[last] and answers[last]["reward"] == rewards[last]
            for a in obs:  # each agent's view: its own observation, reward and info only
                view = http.get("/observation", params={"id": idx, "agent": a}).json()
                assert (view["observation"], view["reward"], view["info"]) == (obs[a], rewards[a], jsonable(infos[a]))
                assert view["done"] == (terms[a] or truncs[a])
            retry = http.post("/step", json={"id": idx, "action": action[last], "agent": last, "seq": seq})
            assert retry.json() == answers[last]  # a retried post answers the step it applied, again
            if seq == 1 and len(action) == 1:  # sequential: the other agent's stale action for step 1 is refused
                other = next(a for a in obs if a not in action)
                stale = http.post("/step", json={"id": idx, "action": "x", "agent": other, "seq": 1})
                assert stale.status_code == 409 and "out of order" in stale.json()["detail"], stale.text
        refused = http.post("/step", json={"id": idx, "action": "x", "agent": "nobody", "seq": len(episode)})
        assert refused.status_code == 409  # the episode is over
        for a, o in episode[0][1][0].items():  # a reset with "agent" answers that agent's view only
            view = http.post("/reset", json={"id": idx, "seed": 7, "agent": a}).json()
            assert view["observation"] == o and view["agent"] == a
        active = [a for a, i in episode[0][1][1].items() if i["active"]]
        idle = [a for a in episode[0][1][0] if a not in active]
        if idle:
            r = http.post("/step", json={"id": idx, "action": "x", "agent": idle[0]})
            assert r.status_code == 400 and f"agent {idle[0]!r} may not act now" in r.json()["detail"]


class _ThreeSeats(MultiAgentEnv):
    """Three agents in turn; an agent whose text is "quit" leaves (terminated)."""

    def __init__(self, seed=None):
        self.possible_agents = ["a", "b", "c"]
        self.agent_selector = AgentSelector(self.possible_agents)
        super().__init__(seed=seed)

    def observe(self, agent):
        return agent

    def _process_actions(self, actions):
        ((agent, text),) = actions.items()
        if text == "quit":
            self.terminations[agent] = True
        return {}, {}, {}, {}, {}


def test_the_turn_order_goes_on_to_the_next_seat_when_the_one_acting_leaves():
    env = _ThreeSeats()
    env.reset(seed=0)
    order = []
    for text in ["quit", "go", "go", "go", "quit", "go"]:  # a leaves on its move; later c leaves on its own
        (agent,) = env.active_agents()
        order.append(agent)
        env.step({agent: text})
    assert order == ["a", "b", "c", "b", "c", "b"]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(MULTIAGENT_IDS), st.integers(0, 2**31 - 1), st.integers(0, 2**31 - 1), st.floats(0.0, 0.5))
def test_drawn_games_keep_the_contract(env_id, seed, action_seed, malformed):
    """Any seed, any legal or malformed moves: every result packs (dicts over the live agents, checked types), the
    actors are the previous result's active agents, the game ends, and its end carries an outcome per agent."""
    env = jgem.make(env_id)
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    pack("reset", obs, None, None, None, infos, env_id)
    active = {a for a, i in infos.items() if i["active"]}
    for _ in range(500):
        if not active:
            break
        actions = _choose(env, rng, malformed)
        assert set(actions) == active
        result = env.step(actions)
        pack("step", *result, env_id)
        active = {a for a, i in result[4].items() if i["active"]}
    else:
        raise AssertionError(f"{env_id} seed {seed} did not end")
    assert all("outcome" in i for i in result[4].values())
