"""WebEnv in a real headless browser on the shipped sites: tasks solved by WebArena's actions and scored by its
evaluators, WebArena-format task files, the pool (thread and process backends), faults, and jgem-serve."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import psutil
import pytest

pytest.importorskip("playwright")

import jgem  # noqa: E402
from jgem.envs.games.solvers import play, solver_for  # noqa: E402
from jgem.envs.pool import EnvPool  # noqa: E402
from jgem.envs.web.env import WebEnv  # noqa: E402
from jgem.envs.web.observation import find  # noqa: E402
from jgem.envs.web.sites.forum import ForumSite  # noqa: E402

pytestmark = pytest.mark.xdist_group("web-env")  # one worker for this module: its browsers and sites are heavy

IDS = ["web:Shop-v0-easy", "web:Shop-v0-hard", "web:Forum-v0-easy", "web:Forum-v0-hard"]
EVALUATORS = {"string_match", "url_match", "program_html"}
# The reset seeds each id's solver plays. The easy ones draw a task of each evaluator (the tests check that they do),
# so that every evaluator passes a solution on each site (and, on the shop, fails a stop at the start); the hard
# ones draw tasks with forms to fill and listings to scan (shop: which order holds a product, fill the cart; forum:
# upvote a thread and a comment, type a reply). Every template's solution is replayed over HTTP in test_site_tasks.py.
SEEDS = {
    "web:Shop-v0-easy": (0, 2, 9),
    "web:Shop-v0-hard": (1, 2),
    "web:Forum-v0-easy": (0, 2, 3),
    "web:Forum-v0-hard": (2, 3),
}


def chromium_pids(*roots: int) -> set[int]:
    """Live chromium processes descended from `roots` (default: this process), so browsers that tests on other
    xdist workers start are not counted. A zombie is no browser: a killed browser's renderers are re-parented to
    pid 1, which reaps them when it gets to them."""
    found = set()
    for root in roots or (os.getpid(),):
        with contextlib.suppress(psutil.NoSuchProcess):
            for p in psutil.Process(root).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if "chrom" in p.name() and p.status() != psutil.STATUS_ZOMBIE:
                        found.add(p.pid)
    return found


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.add(pid)
    return out


@pytest.fixture(scope="module")
def made():
    """jgem.make per id, one env each for the module, all closed at the end."""
    envs: dict[str, WebEnv] = {}
    yield lambda env_id: envs.setdefault(env_id, jgem.make(env_id))
    for env in envs.values():
        env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_the_scripted_solver_scores_one_on_generated_tasks(made, env_id):
    env = made(env_id)
    evaluators = set()
    for seed in SEEDS[env_id]:
        ret, turns, won = play(env, solver_for(env_id), seed=seed, max_steps=40)
        assert (ret, won) == (1.0, True), (env_id, seed, env.unwrapped.task["intent"])
        assert turns == len(env.unwrapped.task["solution"])
        evaluators |= set(env.unwrapped.task["eval"]["eval_types"])
    if env_id.endswith("easy"):  # on each site every evaluator passes a solution
        assert evaluators == EVALUATORS, evaluators


def test_every_evaluator_fails_a_stop_at_the_start(made):
    """Tasks whose solutions score 1 above, one per evaluator: stopped before anything is done, with a wrong answer,
    they score 0. (The evaluators are the same on every site; program_html, the one that reads the site, also fails
    such a stop on the forum in test_a_generated_task_file_runs_on_the_site_state_of_site_seed.)"""
    env = made("web:Shop-v0-easy")
    evaluators = set()
    for seed in SEEDS["web:Shop-v0-easy"]:
        assert run(env, ["stop [I do not know]"], seed=seed) == 0.0, (seed, env.unwrapped.task["intent"])
        evaluators |= set(env.unwrapped.task["eval"]["eval_types"])
    assert evaluators == EVALUATORS, evaluators


def test_reset_is_reproducible_and_shows_the_task(made):
    env = made("web:Shop-v0-easy")
    obs, info = env.reset(seed=11)
    again, info2 = env.reset(seed=11)
    assert obs == again and info["task"] == info2["task"]
    assert f"Objective: {info['task']['intent']}" in obs and "URL: http://127.0.0.1:" in obs
    assert any(env.reset(seed=s)[1]["task"]["intent"] != info["task"]["intent"] for s in range(12, 20))


def test_a_malformed_action_is_an_invalid_move_and_three_in_a_row_end_the_episode(made):
    env = made("web:Forum-v0-easy")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("dance wildly")
    assert obs.startswith("Invalid action:") and "URL:" in obs and reward == 0.0 and not (terminated or truncated)
    assert info["action_is_valid"] is False
    obs, *_ = env.step("click [99999999]")
    assert obs.startswith("Invalid action:") and "99999999" in obs
    _, reward, terminated, _, info = env.step("type [oops")
    assert terminated and reward == 0.0 and info["success"] is False


def run(env: WebEnv, actions_or_solver, seed: int = 0) -> float:
    obs, info = env.reset(seed=seed)
    solver = None if isinstance(actions_or_solver, list) else actions_or_solver
    if solver:
        solver.reset(obs, info, env)
    actions = iter(actions_or_solver) if solver is None else None
    for _ in range(40):
        action = solver.act(obs, info, env) if solver else next(actions)
        obs, reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return reward
    raise AssertionError("episode did not end")


def test_a_generated_task_file_runs_on_the_site_state_of_site_seed(tmp_path):
    seed = 3  # the forum's state 3: its task is to downvote one of its threads (program_html checks the score)
    site = ForumSite()
    try:
        task = site.make_task(seed, "easy")
    finally:
        site.close()
    assert task["eval"]["eval_types"] == ["program_html"]
    path = tmp_path / "tasks.json"  # a WebArena-format task file written for the shipped site
    path.write_text(json.dumps([task]))
    env = WebEnv(site="forum", tasks=path, site_seed=seed)  # the site state the task was drawn on
    try:
        assert run(env, solver_for("web:")) == 1.0
        assert run(env, ["stop [I do not know]"]) == 0.0  # nothing done: the thread's score is unchanged
    finally:
        env.close()


def test_a_webarena_task_file_runs_against_a_shipped_site(tmp_path):
    task = {
        "task_id": 0,
        "sites": ["shop"],
        "require_login": True,  # the cart is the signed-in user's: the env signs in through the site
        "storage_state": None,
        "start_url": "__SHOP__/",
        "geolocation": None,
        "intent_template": "Open the cart",
        "instantiation_dict": {},
        "intent": "Open the cart",
        "require_reset": False,
        "eval": {
            "eval_types": ["url_match"],
            "reference_answers": None,
            "reference_url": "__SHOP__/cart",
            "program_html": [],
            "url_note": "GOLD in PRED",
        },
    }
    (tmp_path / "0.json").write_text(json.dumps(task))
    env = WebEnv(site="shop", tasks=tmp_path)
    try:
        assert run(env, ["stop []"]) == 0.0  # signed in on the start page, not the cart
        base = env.task["start_url"].rstrip("/")  # the served shop's URL, filled in
        assert run(env, [f"goto [{base}/cart]", "stop []"]) == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_pool_backends_play_and_leave_no_browser_behind(backend):
    before = chromium_pids()
    with EnvPool("web:Shop-v0-easy", 2, backend=backend, num_workers=2) as pool:
        pool.reset(seeds=[3, 4])
        infos = []
        while pool.num_in_flight:
            infos += pool.recv().infos
        assert len(infos) == 2 and all("fault" not in info for info in infos)
        roots = pool._backend.pids if backend == "process" else []
        browsers = chromium_pids(*roots) - before
        assert len(browsers) >= 2  # a browser per env (each several processes)
        if backend == "thread":
            a_browser_killed_mid_episode_is_a_contained_fault(pool)
            browsers |= chromium_pids() - before  # the rebuilt env's browser is the pool's to end too
    deadline = time.monotonic() + 10
    while alive(browsers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(browsers)


def a_browser_killed_mid_episode_is_a_contained_fault(pool: EnvPool) -> None:
    """Kill env 0's browser (thread backend): the next step is a fault of env 0 alone, and a reset rebuilds it."""
    victim = pool._backend.envs[0].unwrapped.session
    for pid in victim.pids:
        os.kill(pid, signal.SIGKILL)
    b = pool.step([0, 1], ["scroll [down]", "scroll [down]"])
    by_id = {int(i): info for i, info in zip(b.env_ids, b.infos)}
    assert "fault" in by_id[0] and "fault" not in by_id[1] and pool.num_faults == 1
    pool.reset([0], seeds=[0])  # rebuilt: a fresh env with a fresh browser
    assert "fault" not in pool.recv().infos[0]


def test_served_over_http_by_jgem_serve():
    from jgem.envs.remote.client import RemoteEnv
    from tests.agentgym.conftest import TOKEN, Server

    server = Server(None, "--env", "web:Shop-v0-easy")
    try:
        env = RemoteEnv(server.url, "web:Shop-v0-easy", token=TOKEN, timeout=60)
        try:
            ret, turns, won = play(env, solver_for("web:Shop-v0-easy"), seed=5, max_steps=40)
            assert (ret, won) == (1.0, True)
        finally:
            env.close()
    finally:
        server.stop()


def test_every_action_kind_on_the_shop(made):
    env = made("web:Shop-v0-easy")
    env.reset(seed=2)
    session, base = env.unwrapped.session, env.unwrapped.sites["shop"].url

    def act(action: str) -> str:
        obs, _, terminated, truncated, info = env.step(action)
        assert info["action_is_valid"] and not (terminated or truncated), (action, obs[:300])
        return obs

    obs = act(f"goto [{base}/category/kitchen]")
    assert f"URL: {base}/category/kitchen" in obs
    obs = act(f"click [{find(obs, 'link', 'Sort by price: low to high')}]")
    assert "sort=" in session.url
    sorted_url = session.url
    assert act("go_back") and session.url == f"{base}/category/kitchen"
    assert act("go_forward") and session.url == sorted_url
    act(f"goto [{base}/search?q=a]")  # results taller than the viewport
    act("scroll [down]")
    assert session.evaluate("window.scrollY") > 0
    act("scroll [up]")
    assert session.evaluate("window.scrollY") == 0
    obs = act("go_back")
    obs = act(f"hover [{find(obs, 'link', 'My cart')}]")
    assert session.evaluate("[...document.querySelectorAll('a:hover')].map(a => a.innerText).join()") == "My cart"
    obs = act(f"type [{find(obs, 'textbox', 'Search')}] [lantern] [0]")  # typed, not sent
    assert "/search" not in session.url
    obs = act("press [Enter]")
    assert "/search" in session.url and "lantern" in session.url
    obs = act("new_tab")
    assert "Tabs: [0]" in obs and "[1]" in obs.rsplit("Tabs:", 1)[1] and session.current_tab == 1
    obs = act(f"goto [{base}/cart]")
    obs = act("tab_focus [0]")
    assert session.current_tab == 0 and "/search" in session.url
    obs = act("close_tab")
    assert len(session.tabs) == 1 and "/cart" in session.url


def test_warm_start_data_from_the_scripted_solver_even_with_random_moves():
    from jgem.models.tokenizer import ChatFormat, load_tokenizer
    from jgem.rollout.engine import EpisodeSpec
    from jgem.rollout.scripted import scripted_episodes

    chat = ChatFormat(load_tokenizer())
    specs = [EpisodeSpec(0, 0, 40)]  # one episode: a scripted_episodes call makes its own env (a browser)
    episodes = scripted_episodes("web:Shop-v0-easy", specs, chat)
    assert all(e.success and e.transitions[-1].reward == 1.0 for e in episodes)
    # random moves (epsilon) take the teacher off its plan: they cost it turns, but a replaced move is played later
    # (the final `stop [answer]` too: the solver once counted the replaced move as played and failed the task)
    noisy_specs = [EpisodeSpec(i, i, 40 + i) for i in range(3)]
    noisy = scripted_episodes("web:Shop-v0-easy", noisy_specs, chat, epsilon=0.3, seed=1, max_turns=30)
    assert [e.success for e in noisy] == [True] * 3
    assert noisy[0].num_turns > episodes[0].num_turns


def test_the_solver_steps_back_after_a_move_off_its_plan(made):
    env = made("web:Shop-v0-hard")
    solver = solver_for("web:Shop-v0-hard")
    for seed in range(20):  # a task whose second element is not on the account page
        obs, info = env.reset(seed=seed)
        solver.reset(obs, info, env)
        obs, *_ = env.step(solver.act(obs, info, env))  # the plan's first step
        obs, *_ = env.step(f"click [{find(obs, 'link', 'My account')}]")  # off the plan
        step = info["task"]["solution"][1]
        if step[0] in ("click", "type") and f"'{step[2]}'" not in obs:
            break
    else:
        pytest.fail("no task in seeds 0..19 has a second element the account page lacks")
    assert solver.act(obs, info, env) == "go_back"
    obs, *_ = env.step("go_back")
    for _ in range(20):
        obs, reward, terminated, truncated, info = env.step(solver.act(obs, info, env))
        if terminated or truncated:
            break
    assert reward == 1.0
