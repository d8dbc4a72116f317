"""Kuhn Poker: the betting tree's payoffs, private cards, forfeits, turn order over hands, seeding, snapshots, and the
scripted players (Nash vs Nash reaches the game value -1/18 for the first player)."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import jgem
from jgem.envs.multiagent.base import play_match
from jgem.envs.multiagent.kuhn_poker import PLAYERS, KuhnNashPlayer, KuhnPokerEnv, KuhnRandomPlayer

P0, P1 = "player_0", "player_1"
CARDS = "JQK"
SHOWDOWNS = [("check", "check"), ("bet", "call"), ("check", "bet", "call")]
FOLDS = [("bet", "fold"), ("check", "bet", "fold")]
TERMINALS = SHOWDOWNS + FOLDS


def box(move: str) -> str:
    return f"\\boxed{{{move}}}"


def opener_chips(opener_card: int, other_card: int, seq: tuple[str, ...]) -> int:
    """The opener's chips for a finished hand, straight from the rules."""
    sign = 1 if opener_card > other_card else -1
    return {
        ("check", "check"): sign,
        ("bet", "fold"): 1,
        ("bet", "call"): 2 * sign,
        ("check", "bet", "fold"): -1,
        ("check", "bet", "call"): 2 * sign,
    }[seq]


def forced(deals: list[tuple[int, int]]) -> KuhnPokerEnv:
    """A reset env whose hands deal (player_0's card, player_1's card) = `deals` (0 = J, 1 = Q, 2 = K)."""
    env = KuhnPokerEnv(hands=len(deals))
    env.reset(seed=0)
    state = env.get_state()
    state["deals"] = list(deals)
    env.set_state(state)
    return env


def play(env: KuhnPokerEnv, moves: tuple[str, ...]) -> list[tuple]:
    """Each move boxed and sent by whoever is to act; the step results."""
    results = []
    for move in moves:
        (actor,) = env.active_agents()
        results.append(env.step({actor: box(move)}))
    return results


def seeds_by_deal(hands: int = 1) -> dict[tuple[str, ...], int]:
    """A seed for each first-hand deal (player_0's card, player_1's card), found from the reset infos."""
    env, found = KuhnPokerEnv(hands=hands), {}
    for seed in range(200):
        _, infos = env.reset(seed=seed)
        found.setdefault((infos[P0]["card"], infos[P1]["card"]), seed)
    assert len(found) == 6
    return found


def test_every_terminal_pays_the_right_chips() -> None:
    for (c0, c1), seq in itertools.product(itertools.permutations(range(3), 2), TERMINALS):
        env = forced([(c0, c1)])
        results = play(env, seq)
        for _, rewards, terms, truncs, _ in results[:-1]:
            assert rewards == {P0: 0.0, P1: 0.0} and not any(terms.values()) and not any(truncs.values())
        obs, rewards, terms, truncs, infos = results[-1]
        won = opener_chips(c0, c1, seq)
        assert rewards == {P0: won, P1: -won}, (c0, c1, seq)
        assert terms == {P0: True, P1: True} and truncs == {P0: False, P1: False}
        assert env.active_agents() == [] and not infos[P0]["active"] and not infos[P1]["active"]
        assert (infos[P0]["chips"], infos[P1]["chips"]) == (won, -won)
        assert (infos[P0]["outcome"], infos[P1]["outcome"]) == (("win", "loss") if won > 0 else ("loss", "win"))
        if seq in SHOWDOWNS:  # the cards are shown to both
            assert f"your {CARDS[c0]}" in obs[P0] and f"opponent's {CARDS[c1]}" in obs[P0]
            assert f"your {CARDS[c1]}" in obs[P1] and f"opponent's {CARDS[c0]}" in obs[P1]
        else:
            assert "Showdown" not in obs[P0] + obs[P1]


def test_second_hand_is_opened_by_player_1_and_pays_the_right_chips() -> None:
    for (c0, c1), seq in itertools.product(itertools.permutations(range(3), 2), TERMINALS):
        env = forced([(0, 1), (c0, c1)])
        assert play(env, ("bet", "fold"))[-1][1] == {P0: 1.0, P1: -1.0}  # hand 1: player_0 bets, player_1 folds
        assert env.active_agents() == [P1]
        rewards, infos = play(env, seq)[-1][1::3]
        won = opener_chips(c1, c0, seq)
        assert rewards == {P0: -won, P1: won}
        assert (infos[P0]["chips"], infos[P1]["chips"]) == (1 - won, won - 1)


def test_private_cards_one_hand() -> None:
    """Before a showdown an agent's observations and infos are the same whatever the opponent holds."""
    seeds = seeds_by_deal()
    env = KuhnPokerEnv()

    def seen(agent: str, seed: int, seq: tuple[str, ...]) -> list[Any]:
        obs, infos = env.reset(seed=seed)
        out = [(obs[agent], infos[agent])]
        for move in seq:
            (actor,) = env.active_agents()
            obs, _, terms, _, infos = env.step({actor: box(move)})
            if terms[agent] and seq in SHOWDOWNS:
                break
            out.append((obs[agent], infos[agent]))
        return out

    for own, (a, b), seq in itertools.product(CARDS, [(P0, 0), (P1, 1)], TERMINALS):
        views = []
        for deal, seed in seeds.items():
            if deal[b] == own:
                views.append(seen(a, seed, seq))
        assert len(views) == 2 and views[0] == views[1], (a, own, seq)


def test_private_cards_over_three_hands() -> None:
    """With hands=3, every run of folded hands up to the first showdown looks the same to an agent whatever cards
    the opponent holds."""
    rng = np.random.default_rng(0)
    runs = [f + (s,) for k in range(3) for f in itertools.product(FOLDS, repeat=k) for s in SHOWDOWNS]
    runs += list(itertools.product(FOLDS, repeat=3))

    def seen(env: KuhnPokerEnv, agent: str, hands: tuple[tuple[str, ...], ...]) -> list[Any]:
        out = [(env.observe(agent), env.extra_info(agent))]
        for seq in hands:
            for move in seq:
                (actor,) = env.active_agents()
                obs, _, _, _, infos = env.step({actor: box(move)})
                if seq in SHOWDOWNS and move == seq[-1]:
                    return out
                out.append((obs[agent], infos[agent]))
        return out

    for agent, me in ((P0, 0), (P1, 1)):
        for _ in range(8):
            deals = [tuple(int(c) for c in rng.permutation(3)[:2]) for _ in range(3)]
            # the opponent holds the third card instead, in every hand
            swapped = [(d[0], 3 - sum(d)) if me == 0 else (3 - sum(d), d[1]) for d in deals]
            for hands in runs:
                assert seen(forced(deals), agent, hands) == seen(forced(swapped), agent, hands), (agent, deals, hands)


def test_reset_shows_rules_own_card_and_legal_moves() -> None:
    env = jgem.make("multi:KuhnPoker-v0-easy")
    obs, infos = env.reset(seed=3)
    for a in (P0, P1):
        assert obs[a] == env.rules(a) + env.observe(a) and "\\boxed{bet}" in obs[a]
        assert f"Your card: {infos[a]['card']}." in obs[a]
    assert "Your move: \\boxed{check} or \\boxed{bet}." in obs[P0] and "Your move" not in obs[P1]
    assert infos[P0] | {"card": "?"} == {
        "hand": 1,
        "card": "?",
        "first": True,
        "moves": [],
        "legal": ["check", "bet"],
        "chips": 0,
        "active": True,
    }
    assert (infos[P1]["first"], infos[P1]["legal"], infos[P1]["active"]) == (False, [], False)
    obs = env.step({P0: "I open with \\boxed{check}"})[0]
    assert obs[P0].startswith("You check.") and obs[P1].startswith("Your opponent checks.")
    assert "Your move: \\boxed{check} or \\boxed{bet}." in obs[P1]
    assert jgem.make("multi:KuhnPoker-v0-hard").hands == 3
    with pytest.raises(ValueError, match="hands"):
        KuhnPokerEnv(hands=0)


def test_last_boxed_counts_and_case_is_ignored() -> None:
    env = forced([(2, 0)])
    play(env, ())
    env.step({P0: "\\boxed{fold} no, rather \\boxed{ BET }"})
    assert env.moves == ["bet"] and env.active_agents() == [P1]
    assert env.step({P1: "\\boxed{Call}"})[1] == {P0: 2.0, P1: -2.0}


def test_malformed_reply_forfeits() -> None:
    env = KuhnPokerEnv()
    env.reset(seed=0)
    obs, rewards, terms, truncs, infos = env.step({P0: "I bet!"})
    assert rewards == {P0: -1.0, P1: 0.0} and terms == {P0: True, P1: True} and truncs == {P0: False, P1: False}
    assert infos[P0]["invalid"] is True and infos[P0]["outcome"] == "loss" and infos[P1]["outcome"] == "win"
    assert "invalid" not in infos[P1] and (infos[P0]["chips"], infos[P1]["chips"]) == (0, 0)
    assert "forfeit" in obs[P0] and "forfeits" in obs[P1] and env.active_agents() == []
    with pytest.raises(ValueError, match="over"):
        env.step({P0: box("bet")})


def test_illegal_move_forfeits_even_when_ahead() -> None:
    env = forced([(0, 2), (1, 2), (0, 1)])
    assert play(env, ("bet", "call"))[-1][1] == {P0: -2.0, P1: 2.0}
    assert env.active_agents() == [P1]
    obs, rewards, terms, _, infos = env.step({P1: box("call")})  # nothing to call
    assert rewards == {P0: 0.0, P1: -1.0} and all(terms.values())
    assert infos[P1]["invalid"] is True and (infos[P1]["outcome"], infos[P0]["outcome"]) == ("loss", "win")
    assert (infos[P0]["chips"], infos[P1]["chips"]) == (-2, 2)
    env = forced([(0, 2)])
    play(env, ("check",))
    assert env.step({P1: box("fold")})[1] == {P0: 0.0, P1: -1.0}  # no bet to fold to


def test_wrong_joint_actions_raise() -> None:
    env = KuhnPokerEnv()
    with pytest.raises(ValueError):
        env.step({P0: box("bet")})  # not reset
    env.reset(seed=0)
    with pytest.raises(ValueError, match="only"):
        env.step({P1: box("bet")})
    with pytest.raises(ValueError, match="only"):
        env.step({P0: box("bet"), P1: box("bet")})
    with pytest.raises(ValueError, match="missing"):
        env.step({})
    with pytest.raises(TypeError):
        env.step({P0: 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        env.step(box("bet"))  # type: ignore[arg-type]
    assert env.moves == [] and env.active_agents() == [P0]


def test_three_hands_alternate_the_opener_and_settle_zero_sum() -> None:
    for seed in range(100):
        env = KuhnPokerEnv(hands=3)
        obs, infos = env.reset(seed=seed)
        returns, openers, ended = {P0: 0.0, P1: 0.0}, [], 0
        while env.active_agents():
            (actor,) = env.active_agents()
            if not infos[actor]["moves"]:
                assert infos[actor]["first"] and not infos[{P0: P1, P1: P0}[actor]]["first"]
                openers.append(actor)
            assert infos[actor]["legal"] and box(infos[actor]["legal"][0]) in obs[actor]
            obs, rewards, terms, _, infos = env.step(env.sample_random_action())
            assert sum(rewards.values()) == 0.0
            ended += rewards[P0] != 0.0
            assert all(terms.values()) == (not env.active_agents())
            for a in returns:
                returns[a] += rewards[a]
        assert openers == [P0, P1, P0] and ended == 3
        chips = {a: infos[a]["chips"] for a in (P0, P1)}
        assert chips[P0] + chips[P1] == 0 and returns == {a: float(chips[a]) for a in chips}
        for a in (P0, P1):
            assert infos[a]["outcome"] == ("win" if chips[a] > 0 else "loss" if chips[a] < 0 else "draw")
            assert "invalid" not in infos[a] and "The match is over" in obs[a]


def run_joint(env: KuhnPokerEnv, seed: int, moves: list[str]) -> list[Any]:
    """Reset with `seed`, then each move in turn (a sampled one for "sample"); everything the env returned."""
    out: list[Any] = [env.reset(seed=seed)]
    for move in moves:
        if not env.active_agents():
            break
        (actor,) = env.active_agents()
        out.append(env.step({actor: env.sample_agent_action(actor) if move == "sample" else box(move)}))
    return out


def test_same_seed_same_game() -> None:
    rng = np.random.default_rng(1)
    for seed in range(30):
        moves = [str(rng.choice(["check", "bet", "call", "fold", "sample", "sample"])) for _ in range(10)]
        first = run_joint(KuhnPokerEnv(hands=3), seed, moves)
        assert first == run_joint(KuhnPokerEnv(hands=3), seed, moves)
    env = KuhnPokerEnv(hands=3)
    assert len({tuple(env.reset(seed=s)[0].values()) for s in range(20)}) > 5  # the seed matters


def test_state_round_trip_continues_identically() -> None:
    env = KuhnPokerEnv(hands=3)
    env.reset(seed=7)
    play(env, ("check", "bet", "call", "bet"))
    snap = env.get_state()
    rest = ["sample"] * 8

    def go_on(e: KuhnPokerEnv) -> list[Any]:
        out = []
        for _ in rest:
            if not e.active_agents():
                break
            (actor,) = e.active_agents()
            out.append(e.step({actor: e.sample_agent_action(actor)}))
        return out

    expected = go_on(env)
    fresh = KuhnPokerEnv()
    fresh.set_state(snap)
    assert go_on(fresh) == expected
    env.set_state(snap)
    assert go_on(env) == expected
    assert env.observe(P0) == fresh.observe(P0) and env.chips == fresh.chips


def match_returns(first: str, second: str, seeds: range, hands: int = 1, **kw: Any) -> np.ndarray:
    """player_0's return per seed, player_0 scripted by `first` and player_1 by `second`."""
    env, out = KuhnPokerEnv(hands=hands), []
    for seed in seeds:
        players = {
            P0: PLAYERS[first](np.random.default_rng([seed, 0]), **(kw if first == "nash" else {})),
            P1: PLAYERS[second](np.random.default_rng([seed, 1]), **(kw if second == "nash" else {})),
        }
        returns, last = play_match(env, players, seed=seed)
        assert returns[P0] + returns[P1] == 0.0 and not any("invalid" in info for info in last.values())
        out.append(returns[P0])
    return np.array(out)


@pytest.mark.parametrize("alpha, n", [(1 / 6, 4000), (0.0, 1500), (1 / 3, 1500)])
def test_nash_vs_nash_reaches_the_game_value(alpha: float, n: int) -> None:
    r = match_returns("nash", "nash", range(n), alpha=alpha)
    se = r.std() / np.sqrt(n)
    assert abs(r.mean() - (-1 / 18)) < 4 * se, (r.mean(), se)


def test_nash_beats_random_from_either_seat() -> None:
    as_first = match_returns("nash", "random", range(1500))
    as_second = -match_returns("random", "nash", range(1500))
    for r in (as_first, as_second):
        assert r.mean() > 4 * r.std() / np.sqrt(len(r)), r.mean()


@pytest.mark.parametrize("alpha", [0.0, 1 / 6, 1 / 3])
def test_nash_player_plays_the_equilibrium_frequencies(alpha: float) -> None:
    """How often the aggressive move (bet, or call facing a bet) is played, per seat, situation and card."""
    table = {  # (first, facing a bet): probabilities for J, Q, K
        (True, False): (alpha, 0.0, 3 * alpha),
        (True, True): (0.0, alpha + 1 / 3, 1.0),
        (False, False): (1 / 3, 0.0, 1.0),
        (False, True): (0.0, 1 / 3, 1.0),
    }
    player, n = KuhnNashPlayer(np.random.default_rng(0), alpha=alpha), 2000
    for (first, facing_bet), probs in table.items():
        legal = ["call", "fold"] if facing_bet else ["check", "bet"]
        for card, p in zip(CARDS, probs):
            player.update("", {"card": card, "first": first, "legal": legal})
            freq = sum(player.act() == box(legal[1 - facing_bet]) for _ in range(n)) / n
            assert abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / n) + 1e-9, (first, facing_bet, card, freq, p)


def test_players_reject_bad_alpha_and_only_play_legal_moves() -> None:
    with pytest.raises(ValueError, match="alpha"):
        KuhnNashPlayer(np.random.default_rng(0), alpha=0.5)
    assert PLAYERS["nash"] is KuhnNashPlayer and PLAYERS["random"] is KuhnRandomPlayer
    match_returns("random", "random", range(300), hands=3)
