"""Negotiation: alternating offers, private outside options, rewards, invalid moves, turn limit, scripted players."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import jgem
from jgem.envs.multiagent.base import play_match
from jgem.envs.multiagent.negotiation import NegotiationEnv, NegotiationPlayer, NegotiationRandomPlayer

EASY, HARD = "multi:Negotiation-v0-easy", "multi:Negotiation-v0-hard"


def boxed(move: object) -> str:
    return f"\\boxed{{{move}}}"


def start(seed: int = 0, env_id: str = EASY) -> tuple[NegotiationEnv, dict, dict]:
    env = jgem.make(env_id)
    obs, infos = env.reset(seed=seed)
    return env, obs, infos


def step(env: NegotiationEnv, text: str) -> tuple[dict, dict, dict, dict, dict]:
    (agent,) = env.active_agents()
    return env.step({agent: text})


def test_same_seed_same_game_and_the_seed_matters() -> None:
    reservations = set()
    for seed in range(8):
        a, obs_a, infos_a = start(seed)
        b, obs_b, infos_b = start(seed)
        assert (obs_a, infos_a) == (obs_b, infos_b)
        reservations.add((infos_a["proposer"]["reservation"], infos_a["responder"]["reservation"]))
        while a.active_agents():
            (agent,) = a.active_agents()
            move = a.sample_agent_action(agent)
            assert move == b.sample_agent_action(agent)
            assert a.step({agent: move}) == b.step({agent: move})
    assert len(reservations) > 1


def test_offers_are_shown_to_both_and_accept_splits_the_pie() -> None:
    env, obs, infos = start()
    assert infos["proposer"]["active"] and not infos["responder"]["active"]
    assert "\\boxed{accept}" not in infos["proposer"]["legal_moves"] and infos["responder"]["legal_moves"] == []
    assert f"Your outside option is {infos['proposer']['reservation']} coins" in obs["proposer"]
    obs, rewards, terms, truncs, infos = step(env, "I want most of it: \\boxed{7}")
    assert obs["responder"].startswith("The proposer offers you 3 of 10 coins (keeps 7).")
    assert "Turns left: you 4, the proposer 3." in obs["responder"] and "\\boxed{accept}" in obs["responder"]
    assert obs["proposer"].startswith("You offer the responder 3 of 10 coins (you keep 7).")
    assert infos["responder"]["offer"] == {"by": "proposer", "keep": 7, "give": 3}
    assert infos["responder"]["active"] and "\\boxed{accept}" in infos["responder"]["legal_moves"]
    assert rewards == {"proposer": 0.0, "responder": 0.0} and not any(terms.values())
    obs, rewards, terms, truncs, infos = step(env, boxed(" Accept "))
    assert rewards == {"proposer": 0.7, "responder": pytest.approx(0.3)}
    assert sum(rewards.values()) == pytest.approx(1.0)
    assert terms == {"proposer": True, "responder": True} and truncs == {"proposer": False, "responder": False}
    assert {a: (i["outcome"], i["deal"], i["share"], i["active"]) for a, i in infos.items()} == {
        "proposer": ("win", True, 7, False),
        "responder": ("loss", True, 3, False),
    }
    assert env.active_agents() == []


def test_an_even_deal_is_a_draw_and_a_counter_offer_replaces_the_standing_one() -> None:
    env, _, _ = start()
    step(env, boxed(8))
    _, _, _, _, infos = step(env, boxed(5))
    assert infos["proposer"]["offer"] == {"by": "responder", "keep": 5, "give": 5}
    _, rewards, _, _, infos = step(env, boxed("accept"))
    assert rewards == {"proposer": 0.5, "responder": 0.5}
    assert infos["proposer"]["outcome"] == infos["responder"]["outcome"] == "draw"


@pytest.mark.parametrize("env_id", [EASY, HARD])
def test_deal_rewards_sum_to_one(env_id: str) -> None:
    env = jgem.make(env_id)
    deals = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        returns, last = play_match(env, {a: NegotiationRandomPlayer(rng) for a in env.possible_agents}, seed=seed)
        if last["proposer"]["deal"]:
            deals += 1
            assert sum(returns.values()) == pytest.approx(1.0)
            assert all(returns[a] == last[a]["share"] / env.coins for a in returns)
    assert deals > 0


def test_no_deal_after_the_last_turn_pays_the_outside_options_and_is_truncated() -> None:
    env, _, infos = start(seed=5)
    r = {a: infos[a]["reservation"] for a in infos}
    for _ in range(7):
        obs, rewards, terms, truncs, infos = step(env, boxed(9))
        assert not any(terms.values()) and not any(truncs.values())
    assert "This is the last turn" in obs["responder"] and infos["responder"]["turns_left"] == 1
    obs, rewards, terms, truncs, infos = step(env, boxed(9))
    assert rewards == {a: r[a] / 10 for a in r}
    assert terms == truncs == {"proposer": True, "responder": True}
    assert all(not i["deal"] and i["share"] == 0 and not i["active"] for i in infos.values())
    assert "no deal" in obs["proposer"] and "no deal" in obs["responder"]
    with pytest.raises(ValueError, match="game is over"):
        env.step({"proposer": boxed(5)})


@pytest.mark.parametrize(
    ("before", "bad"),
    [
        ([], boxed("accept")),  # no standing offer yet
        ([], boxed(11)),
        ([], boxed(-3)),
        ([], boxed("five")),
        ([], "I keep 5"),
        ([], ""),
        ([boxed(6)], boxed(10**40)),
        ([boxed(6)], "\\boxed{6} ... no, \\boxed{deal}"),  # the last \boxed{} counts
    ],
)
def test_an_invalid_move_ends_the_game_against_the_offender(before: list[str], bad: str) -> None:
    env, _, infos = start(seed=3)
    r = {a: infos[a]["reservation"] for a in infos}
    for move in before:
        step(env, move)
    (offender,) = env.active_agents()
    other = "responder" if offender == "proposer" else "proposer"
    obs, rewards, terms, truncs, infos = step(env, bad)
    assert rewards == {offender: 0.0, other: r[other] / 10}
    assert terms == {offender: True, other: True} and truncs == {offender: False, other: False}
    assert (infos[offender]["outcome"], infos[offender]["invalid"]) == ("loss", True)
    assert infos[other]["outcome"] == "win" and "invalid" not in infos[other]
    assert not infos[offender]["deal"] and not infos[other]["deal"]
    assert obs[offender].startswith("Invalid move") and env.active_agents() == []


def test_a_wrong_joint_action_is_a_caller_error() -> None:
    env, _, _ = start()
    with pytest.raises(ValueError, match="only \\['proposer'\\] may act"):
        env.step({"responder": boxed(5)})
    with pytest.raises(ValueError, match="missing"):
        env.step({})
    with pytest.raises(ValueError, match="only"):
        env.step({"proposer": boxed(5), "responder": boxed(5)})
    with pytest.raises(TypeError):
        env.step({"proposer": 5})  # type: ignore[dict-item]
    assert env.moves == 0  # nothing was played


def test_each_agent_sees_only_its_own_outside_option() -> None:
    """Everything an agent is shown (every observation, every info but the final `outcome`) is the same across
    games where its own outside option is the same and the other's differs: nothing depends on the other's."""
    script = [boxed(9), boxed(8), boxed(9), boxed(8), boxed(9), boxed(8), boxed(9), boxed(8)]
    seen: dict[str, dict[int, set[str]]] = {a: defaultdict(set) for a in ("proposer", "responder")}
    others: dict[str, dict[int, set[int]]] = {a: defaultdict(set) for a in ("proposer", "responder")}
    for seed in range(60):
        env, obs, infos = start(seed)
        trace = {a: [obs[a], repr(infos[a])] for a in obs}
        r = {a: infos[a]["reservation"] for a in infos}
        for move in script:
            obs, rewards, _, _, infos = step(env, move)
            for a in obs:
                view = {k: v for k, v in infos[a].items() if k != "outcome"}
                trace[a] += [obs[a], repr(view), repr(rewards[a])]
        for a, other in (("proposer", "responder"), ("responder", "proposer")):
            seen[a][r[a]].add("\n".join(trace[a]))
            others[a][r[a]].add(r[other])
    for a in seen:
        assert all(len(traces) == 1 for traces in seen[a].values()), a
        assert any(len(values) > 1 for values in others[a].values())  # the test saw the other's option vary


@pytest.mark.parametrize("env_id", [EASY, HARD])
def test_scripted_players_always_reach_a_deal(env_id: str) -> None:
    env = jgem.make(env_id)
    for seed in range(60):
        rng = np.random.default_rng(seed)
        players = {a: NegotiationPlayer(rng) for a in env.possible_agents}
        returns, last = play_match(env, players, seed=seed)
        assert last["proposer"]["deal"] and sum(returns.values()) == pytest.approx(1.0)
        assert all(returns[a] >= last[a]["reservation"] / env.coins for a in returns)


def test_a_scripted_player_opens_greedy_and_accepts_a_fair_offer() -> None:
    env, obs, infos = start(seed=1)
    proposer = NegotiationPlayer(np.random.default_rng(0), greed=0.8)
    proposer.reset("proposer", obs["proposer"], infos["proposer"])
    assert proposer.act() == boxed(8)
    responder = NegotiationPlayer(np.random.default_rng(0))
    obs, _, _, _, infos = step(env, boxed(5))
    responder.reset("responder", obs["responder"], infos["responder"])
    assert responder.act() == boxed("accept")  # 5 >= its next proposal (6) - 1


def test_on_the_last_turn_a_scripted_player_takes_any_offer_worth_its_outside_option() -> None:
    env, obs, infos = start(seed=0)
    responder = NegotiationPlayer(np.random.default_rng(0))
    responder.reset("responder", obs["responder"], infos["responder"])
    r = infos["responder"]["reservation"]

    def play(move: str) -> None:
        obs, _, _, _, infos = step(env, move)
        responder.update(obs["responder"], infos["responder"])

    for _ in range(3):
        play(boxed(10 - r))
        assert responder.act() == boxed(6)  # too little before the last turn: it counters
        play(boxed(6))
    play(boxed(10 - r))
    assert responder.info["turns_left"] == 1 and responder.act() == boxed("accept")


def test_random_moves_end_every_game_within_the_turn_limit() -> None:
    env = jgem.make(HARD)
    for seed in range(30):
        env.reset(seed=seed)
        for _ in range(2 * env.max_rounds):
            (agent,) = env.active_agents()
            _, rewards, terms, _, infos = env.step({agent: env.sample_agent_action(agent)})
            if all(terms.values()):
                break
        assert env.active_agents() == [] and all("outcome" in i for i in infos.values())
        assert all(0.0 <= v <= 1.0 for v in rewards.values())


def test_state_round_trip_continues_identically() -> None:
    env, _, _ = start(seed=2, env_id=HARD)
    for move in (boxed(70), boxed(65), boxed(60)):
        step(env, move)
    clone = jgem.make(HARD, seed=99)
    clone.set_state(env.get_state())
    assert clone.get_state("responder") == env.get_state("responder")
    while env.active_agents():
        assert clone.active_agents() == env.active_agents()
        (agent,) = env.active_agents()
        move = env.sample_agent_action(agent)
        assert clone.sample_agent_action(agent) == move
        assert clone.step({agent: move}) == env.step({agent: move})
    assert clone.active_agents() == []


@pytest.mark.parametrize("kwargs", [dict(coins=0), dict(coins=2.5), dict(max_rounds=0), dict(max_rounds=True)])
def test_bad_arguments_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        NegotiationEnv(**kwargs)
