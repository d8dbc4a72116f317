"""The `agents` workflow (multi-agent games): a stream per seat holding only that seat's observations, joint actions
through the pool, rewards to the seat that earned them, self-play groups, scripted opponents, evaluation, and a
trainer step; the scripted players' warm-start games rendered as the workflow renders a seat."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from jgem.envs.pool import EnvPool
from jgem.models.config import LoraConfig
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.registry import register
from jgem.rollout.config import RolloutConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine
from jgem.rollout.scripted import scripted_agent_episodes
from tests.rollout import mp_engine_worker as worker
from tests.rollout.envs import SecretsEnv

pytestmark = pytest.mark.xdist_group("workflows")  # one worker: the engines share their compiled programs
register("test:secrets", "tests.rollout.envs:SecretsEnv", overwrite=True)


@pytest.fixture(scope="module")
def setup():
    chat = ChatFormat(load_tokenizer())
    cfg, graphdef, state = worker.model()
    return chat, cfg, nnx.merge(graphdef, state)


def _collect(setup, *, specs, backend="inline", evaluation=False, view="chat", **rollout):
    chat, cfg, model = setup
    rcfg = RolloutConfig(view=view, max_new_tokens=6, max_episode_tokens=400, workflow="agents", **rollout)
    with EnvPool("test:secrets", 4, backend=backend) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg, env_name="test:secrets")
        eps = engine.collect(model, specs, jax.random.key(3), max_turns=50, evaluation=evaluation)
    return eps, engine


def _sent(chat, t) -> str:
    """What the env received for transition `t`: its text, or rollout.invalid_action ("") for one cut at its limit."""
    return chat.action_text(t.action_ids) if t.stopped else ""


def _replay(chat, a_ep, b_ep, seed):
    """The game replayed in process from the two seats' recorded actions: each seat's observations and per-turn
    rewards (a step's reward to a seat that did not act goes to its last turn)."""
    env = SecretsEnv()
    obs, _ = env.reset(seed=seed)
    texts = {e: [_sent(chat, t) for t in ep.transitions] for e, ep in (("a", a_ep), ("b", b_ep))}
    seen = {a: [obs[a]] for a in obs}
    rewards = {"a": [], "b": []}
    while env.active_agents():
        (agent,) = env.active_agents()
        obs, rew, *_ = env.step({agent: texts[agent][len(rewards[agent])]})
        rewards[agent].append(0.0)
        for a, r in rew.items():
            if rewards[a]:
                rewards[a][-1] += r
        for a in obs:
            seen[a].append(obs[a])
    return seen, rewards


@pytest.mark.parametrize("view", ["chat", "chat_per_turn"])
def test_self_play_gives_each_seat_a_stream_of_its_own_observations_and_rewards(setup, view):
    chat = setup[0]
    specs = [EpisodeSpec(i, i // 2, 40 + i // 2) for i in range(8)]  # 4 games, seats a and b
    eps, engine = _collect(setup, specs=specs, view=view)
    assert [e.role for e in eps] == [0, 1] * 4
    for g in range(4):
        a_ep, b_ep = eps[2 * g], eps[2 * g + 1]
        seen, rewards = _replay(chat, a_ep, b_ep, 40 + g)
        for agent, ep in (("a", a_ep), ("b", b_ep)):
            assert [t.reward for t in ep.transitions] == pytest.approx(rewards[agent])
            text = chat.tokenizer.decode(ep.stream if ep.stream is not None else ep.transitions[-1].prompt_ids)
            secret = seen[agent][0].split("secret is ")[1].split(".")[0]
            other = seen["b" if agent == "a" else "a"][0].split("secret is ")[1].split(".")[0]
            assert secret in text and other not in text  # private information stays with its seat
        # what happened while a seat waited reached it before its next move: b's first prompt has a's first move
        a_first = _sent(chat, a_ep.transitions[0])
        assert f"a said {len(a_first)} characters" in chat.tokenizer.decode(b_ep.prompt_ids(0))
        assert a_ep.success and not b_ep.success  # a wins when b's last move ends the game
    assert engine.stats.turns == sum(e.num_turns for e in eps)


def test_against_a_scripted_opponent_the_policy_alternates_seats_and_evaluation_uses_the_eval_opponent(setup):
    chat = setup[0]
    specs = [EpisodeSpec(i, i, 50 + i) for i in range(4)]
    eps, _ = _collect(setup, specs=specs, opponent="echo")
    assert [e.role for e in eps] == [0, 1, 0, 1]
    for ep in eps:  # the opponent's moves reached the seat: "<seat> said N characters" of the echo's "heard N"
        text = chat.tokenizer.decode(ep.stream)
        assert "said" in text or ep.num_turns == 1
    eps, _ = _collect(setup, specs=specs, opponent="nobody", eval_opponent="echo", evaluation=True)
    assert [e.role for e in eps] == [0, 1, 0, 1]  # evaluation: the eval opponent, seats alternating
    with pytest.raises(ValueError, match="rollout.opponent 'nobody' is not a scripted player of test:secrets"):
        _collect(setup, specs=specs, opponent="nobody")


def test_self_play_needs_a_whole_number_of_games_per_group(setup):
    with pytest.raises(ValueError, match="set group_size to a multiple of 2, got 3"):
        _collect(setup, specs=[EpisodeSpec(i, 0, 7) for i in range(3)])


def test_the_scripted_teachers_games_are_rendered_as_the_workflow_renders_a_seat(setup):
    """Warm-start games: seat k mod 2 of each game, the teacher's actions in the stream at their offsets, the
    first prompt the seat's observation, rewards as the workflow attributes them; equal across runs."""
    chat = setup[0]
    specs = [EpisodeSpec(i, i, 60 + i) for i in range(4)]
    eps = scripted_agent_episodes("test:secrets", specs, chat, teacher="echo", seed=1)
    assert (
        eps[0].stream.tolist()
        == scripted_agent_episodes("test:secrets", specs[:1], chat, teacher="echo", seed=1)[0].stream.tolist()
    )
    assert [e.role for e in eps] == [0, 1, 0, 1]
    for k, ep in enumerate(eps):
        agent = "ab"[k % 2]
        first = chat.tokenizer.decode(ep.stream[: ep.transitions[0].prompt_len])
        assert f"You are {agent}; your secret is" in first
        assert all(chat.action_text(t.action_ids).startswith("heard ") for t in ep.transitions)
        assert ep.transitions[-1].reward == pytest.approx(1.1 if agent == "a" else -0.9)  # its move and the end
    with pytest.raises(KeyError, match="warm_start.teacher 'nope' is not a scripted player of test:secrets"):
        scripted_agent_episodes("test:secrets", specs, chat, teacher="nope")


def test_a_self_play_run_trains_a_step_with_rae_and_evaluates_against_the_scripted_player(tmp_path, capsys):
    import json

    from jgem.train import Trainer
    from tests.train_utils import small_config

    cfg = small_config(
        str(tmp_path / "run"),
        steps=2,
        algorithm="rae",
        group_size=2,
        episodes_per_step=4,
        env={"env_id": "test:secrets", "num_envs": 4, "imports": ("tests.rollout.envs",)},
        rollout={"workflow": "agents", "eval_opponent": "echo"},
        eval_every=2,
        eval_episodes=4,
        checkpoint_every=1,
    )
    summary = Trainer(cfg).run()
    assert np.isfinite(summary["final_eval"]["eval/return"]), summary
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(np.isfinite(r.get("train/loss", np.nan)) for r in rows)
    # experiments.eval --agents: the checkpoint against the game's scripted player, per seat, and a league table
    from experiments.eval import main

    out = tmp_path / "agents.json"
    result = main([str(tmp_path / "run"), "--agents", "--checkpoints", "all", "--episodes", "4", "--out", str(out)])
    assert result == json.loads(out.read_text())
    for step in ("step 1", "step 2"):
        seats = result["policy"][step]["echo"]
        assert set(seats) == {"a", "b"} and sum(r["games"] for r in seats.values()) == 4
        assert all(r["win_rate_lo"] <= r["win_rate"] <= r["win_rate_hi"] for r in seats.values())
        assert seats["a"]["wins"] == 2 and seats["b"]["losses"] == 2  # SecretsEnv: a wins every game
    # checkpoint against checkpoint: step 2's policy pinned at the other seat; a wins, so half the games each way
    assert result["checkpoints"]["step 1"]["step 2"]["wins"] == 2 == result["checkpoints"]["step 1"]["step 2"]["losses"]
    assert set(result["league"]) == {"step 1", "step 2", "echo"} and result["faults"] == 0
    assert not result["cooperative"]
    for argv, message in [
        (["--agents", "--opponents", "policy:-1"], "--opponents: 'policy:-1' is not one (the players of test:secrets"),
        (["--opponents", "echo"], "--opponents and --checkpoints are for multi-agent runs: add --agents"),
        (["--agents", "--env-id", "multi:TicTacToe-v0-easy"], "--agents evaluates a multi-agent run on its own game"),
    ]:
        with pytest.raises(SystemExit):
            main([str(tmp_path / "run"), *argv])
        assert message in capsys.readouterr().err


def test_a_frozen_policy_version_plays_the_other_seats_with_its_own_model(setup):
    """`rollout.eval_opponent policy:-1`: the other seat's stream is pinned to version -1 and decoded by that
    version's model only (its chunks apart, checked by the params each chunk is dispatched with); the trained seat's
    tokens carry the run's version; a missing model is named."""
    from jgem.rollout.workflows.agents import POLICY
    from tests.train_utils import perturbed

    chat, cfg, model = setup
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    other = nnx.merge(graphdef, perturbed(params, 0.5, seed=1), rest)
    first = lambda state: float(np.asarray(jax.tree.leaves(state)[0]).ravel()[0])  # a mark of whose params
    specs = [EpisodeSpec(i, i, 70 + i) for i in range(4)]
    rcfg = RolloutConfig(
        view="chat", max_new_tokens=6, max_episode_tokens=400, workflow="agents", eval_opponent=f"{POLICY}-1"
    )

    def play(frozen, spy=None):
        with EnvPool("test:secrets", 4, backend="inline") as pool:
            engine = RolloutEngine(cfg, pool, chat, rcfg, env_name="test:secrets")
            if spy is not None:
                spy(engine)
            return engine.collect(model, specs, jax.random.key(3), max_turns=50, evaluation=True, others=frozen)

    chunks = []

    def spy(engine):
        dispatch = engine._dispatch

        def recording(m, slots, play):
            whose = first(nnx.state(nnx.merge(*m), nnx.Param))
            chunks.append((whose, [engine._live[i].pinned for i in slots], engine._live[slots[0]].version))
            return dispatch(m, slots, play)

        engine._dispatch = recording

    mixed = play({-1: other}, spy)
    assert {v for _, _, v in chunks} == {-1, 0}
    for whose, pinned, version in chunks:  # each chunk one version: the pinned streams', with the frozen model
        assert all(pinned) if version == -1 else not any(pinned)
        assert whose == first(nnx.state(other if version == -1 else model, nnx.Param))
    assert all(e.role == k % 2 for k, e in enumerate(mixed))
    assert all((t.versions == 0).all() for e in mixed for t in e.transitions)
    with pytest.raises(KeyError, match=r"no model for policy version\(s\) \[-1\]"):
        play({})


def test_in_lockstep_a_version_another_process_has_rows_of_runs_here_with_padding(setup):
    """A sampler over several processes (lockstep), simulated here by a peer process's round flags: every round the
    peer has rows of both versions (the run's and the frozen -1), so this process runs a chunk of each, padding-only
    where it has none of that version's rows, and its games come out as without the peer; a peer that lacks a model
    makes this process raise too (every process together)."""
    from jgem.rollout.workflows.agents import POLICY
    from tests.train_utils import perturbed

    chat, cfg, model = setup
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    other = nnx.merge(graphdef, perturbed(params, 0.5, seed=1), rest)
    specs = [EpisodeSpec(i, i, 80 + i) for i in range(2)]
    rcfg = RolloutConfig(
        view="chat", max_new_tokens=6, max_episode_tokens=400, workflow="agents", eval_opponent=f"{POLICY}-1"
    )

    def play(peer=None, lost=False):
        with EnvPool("test:secrets", 4, backend="inline") as pool:
            engine = RolloutEngine(cfg, pool, chat, rcfg, env_name="test:secrets")
            chunks = []
            if peer is not None:
                engine.slots.lockstep = True
                agree = engine._agree_round

                def with_peer(values):  # [live, work, wanted, lost, per version of the models: has rows]
                    out = agree(values)
                    return out[:3] + [out[3] or lost] + [max(h, p) for h, p in zip(out[4:], peer + [0] * 8)]

                engine._agree_round = with_peer
                dispatch = engine._dispatch

                def recording(m, slots, play):
                    versions = {engine._live[i].version for i in slots}
                    chunks.append(versions or "padding")
                    return dispatch(m, slots, play)

                engine._dispatch = recording
            eps = engine.collect(model, specs, jax.random.key(4), max_turns=50, evaluation=True, others={-1: other})
        return eps, chunks

    alone, _ = play()
    with_peer, chunks = play(peer=[1, 1])  # the models' versions, sorted: -1, 0
    assert "padding" in chunks and {-1} in chunks and {0} in chunks
    assert [e.stream.tolist() for e in with_peer] == [e.stream.tolist() for e in alone]
    with pytest.raises(KeyError, match="no model for policy version.s. another process's streams use"):
        play(peer=[0, 0], lost=True)


def test_an_opponent_pool_plays_past_versions_and_a_resume_restores_them_exactly(tmp_path):
    """`rollout.opponent pool` (every version kept, the last 2, a quarter of the games against the current policy),
    off_policy lag 1: each game's opponent is a member of the pool at the version it started with, drawn the same way
    again; a checkpoint saves the members its resume needs (pool/1 for step 2, pool/3 for step 4); a run stopped
    after checkpoint 2 and resumed (step 3's games play version 1 again, restored) ends with the straight run's params,
    and a resume whose pool is gone is refused naming the versions."""
    import json
    import shutil

    from jgem.rollout.workflows.agents import pool_versions
    from jgem.train import Trainer
    from tests.train_utils import small_config

    def config(run):
        return small_config(
            str(tmp_path / run),
            steps=4,
            checkpoint_every=2,
            env={"env_id": "test:secrets", "num_envs": 4, "imports": ("tests.rollout.envs",)},
            rollout={"workflow": "agents", "opponent": "pool", "pool_every": 1, "pool_size": 2, "pool_latest": 0.25},
            pipeline={"mode": "off_policy", "lag": 1},
        )

    played, marks = [], {}  # the trained episodes; per pinned version, marks of the params its chunks decode with
    first = lambda state: float(np.asarray(jax.tree.leaves(state)[0]).ravel()[0])

    class Watching(Trainer):
        def __init__(self, cfg):
            super().__init__(cfg)
            dispatch = self.engine._dispatch

            def recording(m, slots, play):
                pinned = {self.engine._live[i].version for i in slots if self.engine._live[i].pinned}
                for v in pinned:
                    marks.setdefault(v, set()).add(first(nnx.state(nnx.merge(*m), nnx.Param)))
                return dispatch(m, slots, play)

            self.engine._dispatch = recording

        def learn(self, episodes, **kwargs):
            played.extend((self.host["step"], e) for e in episodes)
            return super().learn(episodes, **kwargs)

    straight = Watching(config("a")).run()
    # step s trains on version max(0, s - 1)'s games: each drew from the pool at that version (or played it)
    opponents = {(s, e.episode_id): e.opponent for s, e in played}
    assert all(e.opponent in pool_versions(max(0, s - 1), 1, 2) for s, e in played)
    assert {e.opponent for s, e in played if s == 2} == {0, 1} and 1 in {e.opponent for s, e in played if s == 3}
    assert all((t.versions == max(0, s - 1)).all() for s, e in played for t in e.transitions)
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    assert [r["pool/opponent_age_mean"] for r in rows if "pool/opponent_age_mean" in r][0] == 0.0
    assert sorted(int(p.name) for p in (tmp_path / "a" / "pool").iterdir() if p.name.isdigit()) == [1, 3]

    class Stopping(Trainer):
        def learn(self, episodes, **kwargs):
            if self.host["step"] == 2:
                raise RuntimeError("stopped after checkpoint 2")
            return super().learn(episodes, **kwargs)

    with pytest.raises(RuntimeError, match="stopped after checkpoint 2"):
        Stopping(config("b")).run()
    pool = tmp_path / "b" / "pool"
    shutil.move(pool / "1", tmp_path / "aside")
    with pytest.raises(FileNotFoundError, match=r"policy versions \[1\] of the opponent pool at step 2 are missing"):
        Trainer(config("b")).run()
    shutil.move(tmp_path / "aside", pool / "1")
    played.clear()
    straight_marks = {v: m for v, m in marks.items()}
    marks.clear()
    resumed = Watching(config("b")).run()
    assert resumed["params_sha256"] == straight["params_sha256"]
    # version 1 played again after the resume, with the params restored from pool/1: the straight run's
    assert 1 in marks and all(len(m) == 1 and m == straight_marks[v] for v, m in marks.items()), (marks, straight_marks)
    assert {(s, e.episode_id): e.opponent for s, e in played} == {k: v for k, v in opponents.items() if k[0] >= 2}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            dict(env={"env_id": "multi:TicTacToe-v0-easy"}),
            "is a multi-agent game; play it with rollout.workflow agents",
        ),
        (
            dict(rollout={"workflow": "agents"}),
            "plays multi-agent games .multi:.., and game:GuessTheNumber-v0-easy has",
        ),
        (
            dict(env={"env_id": "multi:TicTacToe-v0-easy"}, rollout={"workflow": "agents", "opponent": "policy:1"}),
            "rollout.opponent policy:1: a frozen policy version plays only in evaluations that load it",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                rollout={"workflow": "agents", "opponent": "pool", "seat": "z", "pool_every": 0},
            ),
            r"rollout.seat 'z' is not a seat of multi:TicTacToe-v0-easy: \['x', 'o'\]",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                rollout={"workflow": "agents", "opponent": "pool", "pool_every": 0, "pool_latest": 2.0},
            ),
            r"(?s)rollout.pool_every is 0; the opponent pool needs at least 1.*rollout.pool_latest is 2.0; it is a "
            r"probability",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                rollout={"workflow": "agents", "opponent": "random", "eval_opponent": "pool"},
                eval_every=1,
            ),
            "rollout.eval_opponent pool: the opponent pool plays only in training; name a scripted player",
        ),
        (
            dict(env={"env_id": "multi:TicTacToe-v0-easy", "system_prompt": "hi"}, rollout={"workflow": "agents"}),
            "drop env.tools and env.system_prompt",
        ),
        (
            dict(env={"env_id": "multi:TicTacToe-v0-easy"}, rollout={"workflow": "agents", "view": "per_turn"}),
            "needs rollout.view chat or chat_per_turn",
        ),
        (
            dict(env={"env_id": "multi:TicTacToe-v0-easy"}, rollout={"workflow": "agents"}),
            "rollout.opponent self plays every seat of multi:TicTacToe-v0-easy .2: .'x', 'o'.., so a group is a "
            "whole number of games: set group_size to a multiple of 2, got 1",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-hard"},
                rollout={"workflow": "agents", "opponent": "heuristic", "eval_opponent": "minmax"},
                eval_every=1,
            ),
            "rollout.eval_opponent 'minmax' is not a scripted player of multi:TicTacToe-v0-hard; its players: "
            "heuristic, minimax, random",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                rollout={"workflow": "agents", "opponent": "random", "eval_opponent": "self"},
                eval_every=1,
            ),
            "rollout.eval_opponent self: name a scripted player",
        ),
        (
            dict(
                env={"env_id": "multi:ReferenceGame-v0-easy"},
                rollout={"workflow": "agents", "opponent": "random_listener"},
            ),
            r"rollout.opponent 'random_listener' of multi:ReferenceGame-v0-easy plays seats \['listener'\], "
            r"not \['speaker'\]",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                rollout={"workflow": "agents", "opponent": "random"},
                warm_start={"steps": 1, "teacher": "x"},
            ),
            "warm_start.teacher 'x' is not a scripted player of multi:TicTacToe-v0-easy",
        ),
        (
            dict(
                env={"env_id": "multi:ReferenceGame-v0-easy"},
                rollout={"workflow": "agents", "opponent": "scripted"},
                warm_start={"steps": 1, "teacher": "random_listener"},
            ),
            r"warm_start.teacher 'random_listener' of multi:ReferenceGame-v0-easy plays seats \['listener'\]",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                model={"lora": LoraConfig(rank=4, adapters=2)},
                rollout={"workflow": "agents"},
                group_size=2,
            ),
            r"rollout.policies \(none\) names 0 policies and model.lora.adapters is 2: one LoRA adapter per policy",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                model={"lora": LoraConfig(rank=4, adapters=2)},
                rollout={"workflow": "agents", "policies": ("x", "z,x")},
                group_size=2,
            ),
            r"(?s)rollout.policies x z,x: \['z'\] are not seats of the game: \['x', 'o'\].*\['x'\] are named by more "
            r"than one policy.*no policy plays \['o'\]",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                model={"lora": LoraConfig(rank=4, adapters=2)},
                rollout={"workflow": "agents", "policies": ("x", "o")},
                group_size=2,
                algorithm="ppo",
            ),
            "rollout.policies x o: ppo trains a critic, which is one model while the policies are several",
        ),
        (
            dict(
                env={"env_id": "multi:TicTacToe-v0-easy"},
                model={"lora": LoraConfig(rank=4, adapters=2)},
                rollout={"workflow": "agents", "policies": ("x", "o"), "opponent": "random", "seat": "x"},
            ),
            "rollout.policies x o: with rollout.seat x only the policy of seat x plays",
        ),
    ],
)
def test_multiagent_settings_are_refused_naming_the_flag(tmp_path, overrides, message):
    from jgem.config import ConfigError, validate
    from tests.train_utils import small_config

    with pytest.raises(ConfigError, match=message):
        validate(small_config(str(tmp_path), **overrides), 8)
