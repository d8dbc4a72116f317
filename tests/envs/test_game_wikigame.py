"""WikiGame: GEM's rules and rewards on a hand-made graph, the variants, the link graph, the shipped graph, the BFS
solver, and the game contract (reproducible resets, clones)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import jgem
from jgem.envs.games.solvers import play, solver_for
from jgem.envs.games.wiki_graph import SHIPPED, load_graph, read_graph
from jgem.envs.games.wikigame import WikiGameEnv
from tests.envs.game_checks import check_clone, check_reset_reproducible

IDS = ["game:WikiGame-v0-easy", "game:WikiGame-v0-hard"]

# Start -> {Bridge, Cave}; Bridge -> {Goal, Start}; Cave links nowhere (a dead end); Goal -> Start.
# "Nowhere" (not a page) and a self-link are dropped when the graph is read.
TOY = [
    {
        "title": "Start",
        "text": "Start is where it begins. It has two ways out.",
        "links": ["Bridge", "Cave", "Nowhere"],
    },
    {"title": "Bridge", "text": "Bridge crosses the river.", "links": ["Goal", "Start", "Bridge"]},
    {"title": "Cave", "text": "Cave is dark and has no exit.", "links": []},
    {"title": "Goal", "text": "Goal is the end of the road.", "links": ["Start"]},
]


@pytest.fixture
def toy(tmp_path, monkeypatch) -> str:
    monkeypatch.delenv("JGEM_DATA", raising=False)
    path = tmp_path / "toy.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in TOY))
    return str(path)


def rigged(toy: str, **kwargs) -> WikiGameEnv:
    """A toy game from Start to Goal."""
    env = WikiGameEnv(pages=toy, **kwargs)
    env.reset(seed=0)
    g = env.graph
    env.start = env.current = g.index["Start"]
    env.target, env.history, env.memory = g.index["Goal"], [env.start], {}
    env._remember(env.start)
    return env


def box(title: str) -> str:
    return f"I think \\boxed{{x}} at first, but \\boxed{{{title}}}"


def test_gem_rules_and_rewards(toy):
    env = rigged(toy, max_turns=6)
    assert "Its neighbouring pages:\n- \\boxed{Bridge}\n- \\boxed{Cave}\n" in env.suffix()  # Nowhere is dropped
    obs, r, term, trunc, info = env.step("no title here")
    assert (r, term, trunc) == (-0.2, False, False) and "no page title" in obs  # GEM: a format error goes on
    obs, r, term, trunc, _ = env.step(box("bridge"))
    assert (r, term, trunc) == (-0.2, False, False) and "Did you mean 'Bridge'?" in obs  # exact titles only
    obs, r, term, trunc, _ = env.step(box("Goal"))  # linked from Bridge, not from Start
    assert (r, term, trunc) == (-0.2, False, False) and "No neighbouring title contains it" in obs
    obs, r, term, trunc, _ = env.step(box("<PREV_PAGE>"))
    assert (r, term, trunc) == (-0.2, False, False) and "not allowed" in obs
    obs, r, term, trunc, info = env.step(box("Bridge"))
    assert (r, term, trunc) == (-0.05, False, False) and info["suffix"].startswith("You are on 'Bridge'")
    obs, r, term, trunc, info = env.step(box("Goal"))
    assert (r, term, trunc, info["success"]) == (1.0, True, False, True) and env.turn_count == 6
    assert "reached the target 'Goal' in 6 turns" in obs


def test_dead_end_and_turn_limit(toy):
    env = rigged(toy, max_turns=5)
    obs, r, term, trunc, info = env.step(box("Cave"))
    assert (r, term, trunc, info["success"]) == (0.0, True, False, False) and "dead end" in obs
    env = rigged(toy, max_turns=2)
    env.step(box("Bridge"))
    obs, r, term, trunc, info = env.step(box("Start"))  # a move on the last turn ends the game with 0
    assert (r, term, trunc, info["success"]) == (0.0, True, True, False) and "last turn" in obs
    env = rigged(toy, max_turns=1)
    assert env.step(box("Nowhere"))[1:4] == (0.0, True, True)  # so does a wrong title
    env = rigged(toy, max_turns=1)
    assert env.step("")[1:4] == (-0.2, True, True)  # a reply without a title keeps its -0.2 (GEM), and ends it


def test_backtracking_variants(toy):
    env = rigged(toy, max_turns=20, variant="oneback")
    assert env.step(box("<PREV_PAGE>"))[1] == -0.2  # nothing to go back to
    env.step(box("Bridge"))
    obs, r, term, _, _ = env.step(box("<PREV_PAGE>"))
    assert (r, term, env.graph.titles[env.current]) == (-0.05, False, "Start") and "went back to 'Start'" in obs
    env.step(box("Bridge"))
    env.step(box("Start"))
    env.step(box("<PREV_PAGE>"))
    assert env.step(box("<PREV_PAGE>"))[1] == -0.2  # never twice in a row
    turns = env.turn_count
    obs, r, term, trunc, _ = env.step(box("Bridge"))  # back on Bridge
    assert env.graph.titles[env.current] == "Bridge" and turns + 1 == env.turn_count

    free = rigged(toy, max_turns=20, variant="freenav")
    free.step(box("Bridge"))
    free.step(box("Start"))
    assert [free.step(box("<PREV_PAGE>"))[1] for _ in range(3)] == [-0.05, -0.05, -0.2]  # at will, to the first page
    obs, r, term, trunc, _ = free.step(box("Cave"))  # a dead end sends the player back and costs a second turn
    assert (r, term, trunc) == (pytest.approx(-0.1), False, False) and free.graph.titles[free.current] == "Start"
    assert free.turn_count == 7 and "sent back to 'Start'" in obs and "now turn 7" in obs


def test_eidetic_reaches_any_page_seen(toy):
    env = rigged(toy, max_turns=10, variant="eidetic")
    env.step(box("Bridge"))
    obs, r, term, _, _ = env.step(box("Cave"))  # linked from Start, seen before; no dead end in this variant
    assert (r, term, env.graph.titles[env.current]) == (-0.05, False, "Cave")
    assert "linked from any page seen so far" in env.suffix() and "\\boxed{Goal}" in env.suffix()
    assert env.step(box("<PREV_PAGE>"))[1] == -0.2
    assert env.step(box("Goal"))[1:4] == (1.0, True, False)
    env.reset(seed=1)  # memory is per episode (GEM's leaks into the next one)
    assert list(env.memory) == env.graph.links(env.start).tolist()


@pytest.mark.parametrize("env_id", IDS)
def test_bfs_solver_scores_one_on_a_shortest_path(env_id):
    env = jgem.make(env_id)
    for seed in range(40):
        env.reset(seed=seed)
        dist = int(env.graph.distances(env.start, env.max_turns)[env.target])
        ret, turns, won = play(env, solver_for(env_id), seed=seed)
        assert won and turns == dist <= env.max_turns
        assert ret == pytest.approx(1.0 - 0.05 * (dist - 1))  # GEM's -0.05 per move, then 1.0 at the target


def test_targets_are_reachable_within_the_turns():
    env = jgem.make("game:WikiGame-v0-hard", max_turns=2, min_distance=2)
    for seed in range(50):
        env.reset(seed=seed)
        assert env.graph.distances(env.start, 5)[env.target] == 2
    assert len({jgem.make(IDS[0]).reset(seed=s)[0] for s in range(20)}) == 20


def test_graph_reading(toy, tmp_path, monkeypatch):
    g = read_graph(toy)
    assert g.link_titles(g.index["Start"]) == ["Bridge", "Cave"] and g.link_titles(g.index["Bridge"]) == [
        "Goal",
        "Start",
    ]
    assert g.distances(g.index["Start"], 10).tolist() == [0, 1, 1, 2]
    assert g.distances(g.index["Start"], 1).tolist() == [0, 1, 1, -1]
    assert g.shortest_path(g.index["Cave"], g.index["Goal"]) is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "A", "links": []}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2 is not an article"):
        read_graph(bad)
    bad.write_text('{"title": "A"}\n{"title": "A"}\n')
    with pytest.raises(ValueError, match="'A' names two articles"):
        read_graph(bad)
    with pytest.raises(FileNotFoundError, match="WikiGame pages file .* does not exist"):
        jgem.make(IDS[0], pages=str(tmp_path / "none.jsonl"))
    with pytest.raises(ValueError, match="never queries Kiwix or MediaWiki"):
        jgem.make(IDS[0], backend="kiwix")
    # $JGEM_DATA/wikigame/pages.jsonl is used when present
    (tmp_path / "wikigame").mkdir()
    shutil.copy(toy, tmp_path / "wikigame" / "pages.jsonl")
    monkeypatch.setenv("JGEM_DATA", str(tmp_path))
    assert len(jgem.make(IDS[0]).graph) == 4 and load_graph() is load_graph()  # one copy per process


def test_shipped_graph_is_whole_and_strongly_connected(monkeypatch):
    monkeypatch.delenv("JGEM_DATA", raising=False)
    raw = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    titles = {p["title"] for p in raw}
    assert len(raw) == len(titles) == 245
    assert all(link in titles for p in raw for link in p["links"])  # nothing is dropped when it is read
    g = load_graph()
    assert g.targets.size == sum(len(p["links"]) for p in raw) == 1053
    far = max(int(g.distances(s, 50).max()) for s in range(len(g)))
    assert all((g.distances(s, 50) >= 0).all() for s in range(len(g))) and far <= 15  # hard's 15 turns reach all


def test_bfs_distances_match_the_paths():
    g = load_graph()
    rng = np.random.default_rng(0)
    for start in rng.integers(len(g), size=10).tolist():
        dist = g.distances(start, 50)
        for goal in rng.integers(len(g), size=10).tolist():
            assert len(g.shortest_path(start, goal)) - 1 == dist[goal]


def test_summaries(toy):
    env = rigged(toy, page_summary_length=(2, "words"))
    assert "This page begins: Start is...\n" in env.suffix()
    env = rigged(toy, page_summary_length=[1, "sentences"])  # a JSON list works too
    assert "This page begins: Start is where it begins. ...\n" in env.suffix()
    env = rigged(toy, page_summary_length=(12, "characters"))
    assert "This page begins: Start is whe...\n" in env.suffix()
    env = rigged(toy, page_summary_length=(1000, "characters"))
    assert "This page begins: Start is where it begins. It has two ways out.\n" in env.suffix()  # not cut: no "..."
    with pytest.raises(ValueError, match="page_summary_length"):
        WikiGameEnv(pages=toy, page_summary_length=(3, "pages"))


@pytest.mark.parametrize("env_id", IDS)
def test_contract(env_id):
    check_reset_reproducible(env_id, seeds=5, same=lambda a, b: (a.start, a.target) == (b.start, b.target))
    a, b = check_clone(env_id, reset_seed=3, clone_seed=9, steps=5, warmup=2)
    assert a.graph is b.graph  # clones share the graph
