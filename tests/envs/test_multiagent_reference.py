"""ReferenceGame: object sets, private views, messages, shared rewards, invalid moves, scripted players."""

from __future__ import annotations

import numpy as np
import pytest

import jgem
from jgem.envs.multiagent.base import play_match
from jgem.envs.multiagent.reference_game import (
    ReferenceGameEnv,
    ReferenceListener,
    ReferenceRandomListener,
    ReferenceSpeaker,
    describe,
)

EASY, HARD = "multi:ReferenceGame-v0-easy", "multi:ReferenceGame-v0-hard"


def start(seed: int = 0, env_id: str = EASY) -> tuple[ReferenceGameEnv, dict, dict]:
    env = jgem.make(env_id)
    obs, infos = env.reset(seed=seed)
    return env, obs, infos


def number_of(env: ReferenceGameEnv, obj: tuple) -> int:
    """The listener's number of `obj`."""
    return env.objects["listener"].index(obj) + 1


def test_same_seed_same_game_and_the_seed_matters() -> None:
    targets = set()
    for seed in range(8):
        a, obs_a, infos_a = start(seed, HARD)
        b, obs_b, infos_b = start(seed, HARD)
        assert (obs_a, infos_a) == (obs_b, infos_b)
        targets.add(infos_a["speaker"]["target"])
        while a.active_agents():
            (agent,) = a.active_agents()
            move = a.sample_agent_action(agent)
            assert move == b.sample_agent_action(agent)
            assert a.step({agent: move}) == b.step({agent: move})
    assert len(targets) > 1


@pytest.mark.parametrize("env_id", [EASY, HARD])
def test_both_see_the_same_distinct_objects_in_their_own_orders(env_id: str) -> None:
    orders_differ = 0
    for seed in range(30):
        env, obs, infos = start(seed, env_id)
        mine, theirs = infos["speaker"]["objects"], infos["listener"]["objects"]
        assert len(set(mine)) == len(mine) == env.num_objects and sorted(mine) == sorted(theirs)
        assert infos["speaker"]["target"] in mine
        orders_differ += mine != theirs
        for k, obj in enumerate(theirs, 1):
            assert f"{k}. {describe(obj)}" in obs["listener"]
        assert f"The target is the {describe(infos['speaker']['target'])}." in obs["speaker"]
    assert orders_differ > 15


def test_on_hard_one_word_seldom_names_the_target() -> None:
    singled_out = 0
    for seed in range(100):
        _, _, infos = start(seed, HARD)
        objects, target = infos["speaker"]["objects"], infos["speaker"]["target"]
        singled_out += any(sum(o[i] == target[i] for o in objects) == 1 for i in range(3))
    assert singled_out < 10


def listener_view(env: ReferenceGameEnv, target: tuple) -> list:
    """What the listener is shown up to its pick when `target` is the target: the observation and info after the
    reset, then after a fixed message."""
    env.target = target  # the views are rendered from the state, so this is the game with that target
    view = [env.observe("listener"), env.extra_info("listener")]
    obs, _, _, _, infos = env.step({"speaker": "\\boxed{large red}"})
    return [*view, obs["listener"], infos["listener"]]


def test_the_listener_never_learns_the_target_before_the_end() -> None:
    """The listener's observations and infos are the same whichever object is the target, until it picks."""
    for seed in range(20):
        env, obs, infos = start(seed, HARD)
        views = [listener_view(start(seed, HARD)[0], obj) for obj in env.objects["speaker"]]
        assert all(view == views[0] for view in views)
        assert views[0][:2] == [obs["listener"], {k: v for k, v in infos["listener"].items() if k != "active"}]
        assert "The target is" not in views[0][0] + views[0][2]
        assert "target" not in views[0][1] and "target" not in views[0][3]


def test_the_speaker_never_sees_the_listeners_numbering() -> None:
    """The speaker's observations and infos are the same however the listener's objects are ordered (with the
    listener picking the same object)."""
    for seed in range(20):
        a, obs, infos = start(seed, HARD)
        b, _, _ = start(seed, HARD)
        b.objects["listener"] = b.objects["listener"][::-1]
        assert (b.observe("speaker"), {**b.extra_info("speaker"), "active": True}) == (obs["speaker"], infos["speaker"])
        pick = a.objects["listener"][seed % a.num_objects]
        said_a, said_b = (env.step({"speaker": "\\boxed{small blue star}"}) for env in (a, b))
        assert (said_a[0]["speaker"], said_a[4]["speaker"]) == (said_b[0]["speaker"], said_b[4]["speaker"])
        res_a = a.step({"listener": f"\\boxed{{{number_of(a, pick)}}}"})
        res_b = b.step({"listener": f"\\boxed{{{number_of(b, pick)}}}"})
        assert (res_a[0]["speaker"], res_a[1], res_a[4]["speaker"]) == (
            res_b[0]["speaker"],
            res_b[1],
            res_b[4]["speaker"],
        )


def test_a_right_pick_pays_both_and_a_wrong_one_neither() -> None:
    env, obs, infos = start(seed=4)
    target = infos["speaker"]["target"]
    obs, rewards, terms, truncs, infos = env.step({"speaker": "I'd say \\boxed{  the   big one }"})
    assert (
        obs["listener"].startswith('The speaker says: "the big one"') and infos["listener"]["message"] == "the big one"
    )
    assert env.messages_to("listener") == [{"from": "speaker", "to": "listener", "message": "the big one"}]
    assert rewards == {"speaker": 0.0, "listener": 0.0} and not any(terms.values())
    assert infos["listener"]["active"] and not infos["speaker"]["active"]
    clone = jgem.make(EASY)
    clone.set_state(env.get_state())
    _, rewards, terms, truncs, infos = env.step({"listener": f"\\boxed{{{number_of(env, target)}}}"})
    assert rewards == {"speaker": 1.0, "listener": 1.0}
    assert terms == {"speaker": True, "listener": True} and truncs == {"speaker": False, "listener": False}
    assert infos["speaker"]["outcome"] == infos["listener"]["outcome"] == "success"
    assert infos["listener"]["target"] == infos["listener"]["pick"] == target  # revealed once the game is over
    wrong = next(k for k in range(1, 4) if clone.objects["listener"][k - 1] != target)
    obs, rewards, _, _, infos = clone.step({"listener": f"\\boxed{{{wrong}}}"})
    assert rewards == {"speaker": 0.0, "listener": 0.0}
    assert infos["speaker"]["outcome"] == infos["listener"]["outcome"] == "failure"
    assert f"the target was the {describe(target)}" in obs["listener"]


@pytest.mark.parametrize(
    "message", ["large red square", "\\boxed{}", "\\boxed{ }", "\\boxed{a large red square}", "\\boxed{the 2nd}"]
)
def test_an_invalid_message_ends_the_game_for_both(message: str) -> None:
    env, _, _ = start(seed=1)
    obs, rewards, terms, truncs, infos = env.step({"speaker": message})
    assert rewards == {"speaker": 0.0, "listener": 0.0}
    assert terms == {"speaker": True, "listener": True} and truncs == {"speaker": False, "listener": False}
    assert infos["speaker"]["outcome"] == infos["listener"]["outcome"] == "failure"
    assert infos["speaker"]["invalid"] and "invalid" not in infos["listener"]
    assert obs["speaker"].startswith("Invalid message") and env.active_agents() == []


@pytest.mark.parametrize("pick", ["2", "\\boxed{0}", "\\boxed{4}", "\\boxed{two}", "\\boxed{1.5}", "\\boxed{9" * 3])
def test_an_invalid_pick_ends_the_game_for_both(pick: str) -> None:
    env, _, _ = start(seed=1)
    env.step({"speaker": "\\boxed{red}"})
    obs, rewards, terms, _, infos = env.step({"listener": pick})
    assert rewards == {"speaker": 0.0, "listener": 0.0} and all(terms.values())
    assert infos["listener"]["invalid"] and "invalid" not in infos["speaker"]
    assert infos["speaker"]["outcome"] == infos["listener"]["outcome"] == "failure"


def test_a_wrong_joint_action_is_a_caller_error() -> None:
    env, _, _ = start()
    with pytest.raises(ValueError, match="only \\['speaker'\\] may act"):
        env.step({"listener": "\\boxed{1}"})
    with pytest.raises(ValueError, match="missing"):
        env.step({})
    env.step({"speaker": "\\boxed{red}"})
    with pytest.raises(ValueError, match="only \\['listener'\\] may act"):
        env.step({"speaker": "\\boxed{red}"})
    env.step({"listener": "\\boxed{1}"})
    with pytest.raises(ValueError, match="game is over"):
        env.step({"listener": "\\boxed{1}"})


def success_rate(env_id: str, listener: type, games: int = 300) -> float:
    env = jgem.make(env_id)
    wins = 0.0
    for seed in range(games):
        rng = np.random.default_rng(seed)
        returns, last = play_match(env, {"speaker": ReferenceSpeaker(rng), "listener": listener(rng)}, seed=seed)
        assert returns["speaker"] == returns["listener"]
        wins += returns["listener"]
    return wins / games


@pytest.mark.parametrize("env_id", [EASY, HARD])
def test_scripted_players_communicate_and_a_deaf_listener_is_at_chance(env_id: str) -> None:
    n = jgem.make(env_id).num_objects
    assert success_rate(env_id, ReferenceListener) > 0.9
    assert abs(success_rate(env_id, ReferenceRandomListener) - 1 / n) < 0.1


def test_the_object_set_does_not_give_the_target_away() -> None:
    """Without the message, the most typical object (sharing the most attribute values with the others) is the
    target no more often than chance: the set is drawn before the target."""
    hits = 0
    for seed in range(300):
        env, _, infos = start(seed, HARD)
        objects = infos["listener"]["objects"]
        shared = [sum(x == y for o in objects for x, y in zip(obj, o)) for obj in objects]
        hits += objects[int(np.argmax(shared))] == env.target
    assert hits / 300 < 1 / 6 + 0.1


def test_the_scripted_speaker_names_the_fewest_attributes_within_the_limit() -> None:
    env = ReferenceGameEnv(num_objects=3, max_message_words=3)
    env.reset(seed=0)
    env.objects = {"speaker": [("red", "square", "large"), ("blue", "square", "large"), ("red", "circle", "large")]}
    env.objects["listener"] = list(env.objects["speaker"])
    env.target = ("red", "square", "large")
    speaker = ReferenceSpeaker(np.random.default_rng(0))
    speaker.reset("speaker", env.observe("speaker"), env.extra_info("speaker"))
    assert speaker.act() == "\\boxed{red square}"
    env.max_message_words = 1  # too few words: the best single word leaves two candidates
    speaker.reset("speaker", env.observe("speaker"), env.extra_info("speaker"))
    assert speaker.act() in ("\\boxed{red}", "\\boxed{square}")
    listener = ReferenceListener(np.random.default_rng(0))
    listener.reset("listener", "", {**env.extra_info("listener"), "message": "Red, SQUARE!"})
    assert listener.candidates() == [0]
    listener.update("", {**env.extra_info("listener"), "message": "green"})  # no object fits: any
    assert listener.candidates() == [0, 1, 2]


def test_state_round_trip_continues_identically() -> None:
    env, _, _ = start(seed=2, env_id=HARD)
    env.step({"speaker": env.sample_agent_action("speaker")})
    clone = jgem.make(HARD, seed=99)
    clone.set_state(env.get_state())
    assert clone.get_state("listener") == env.get_state("listener")
    move = env.sample_agent_action("listener")
    assert clone.sample_agent_action("listener") == move
    assert clone.step({"listener": move}) == env.step({"listener": move})
    assert clone.reset(seed=5) == env.reset(seed=5)


@pytest.mark.parametrize(
    "kwargs", [dict(num_objects=1), dict(num_objects=13), dict(max_message_words=0), dict(num_objects=3.0)]
)
def test_bad_arguments_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        ReferenceGameEnv(**kwargs)
