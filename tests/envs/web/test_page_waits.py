"""The page an action leads to is the page observed: a navigation that answers slowly is waited for (the
issue-34 flake: an empty observation read from a just-committed document), and one that does not load within
the session's timeout is an env fault naming the page, not an empty observation. In a BrowserSession on the
fixture pages, and in WebEnv and the pool on the shop with its category pages made slow."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import Iterator

import pytest

pytest.importorskip("playwright")

from starlette.responses import StreamingResponse  # noqa: E402

import jgem  # noqa: E402
from jgem.core import EnvFault  # noqa: E402
from jgem.envs.games.solvers import play, solver_for  # noqa: E402
from jgem.envs.pool import EnvPool  # noqa: E402
from jgem.envs.web import tabs  # noqa: E402
from jgem.envs.web.actions import parse  # noqa: E402
from jgem.envs.web.browser import BrowserSession  # noqa: E402
from jgem.envs.web.observation import elements, find  # noqa: E402
from jgem.envs.web.sites.shop import ShopSite  # noqa: E402
from jgem.envs.web.sites.shop_data import CATEGORIES  # noqa: E402

pytestmark = pytest.mark.xdist_group("web-env")  # with test_web_env: their browsers and sites are heavy

SLOW = {  # how the slow route answers: (seconds before its headers, seconds between headers and body)
    "navigation in flight": (1.0, 0.0),
    "committed, body in flight": (0.0, 1.0),
}


def link_to(origin: str, target: str) -> str:
    return f"{origin}/link?to={urllib.parse.quote(target)}"


@pytest.fixture
def quick_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorten the soft settle bound far below the slow route's delays, as a loaded machine stretches the
    route's answer far beyond it: a wait that only the soft bound ends reads the page too early."""
    monkeypatch.setattr(tabs, "SETTLE_S", 0.2)


@pytest.fixture(scope="module")
def short_session() -> Iterator[BrowserSession]:
    """A session whose pages must load within 2 s."""
    s = BrowserSession(timeout_s=2.0)
    yield s
    s.close()


def test_a_click_that_navigates_slowly_is_observed_on_the_new_page(
    session: BrowserSession, origin: str, quick_settle: None
) -> None:
    session.reset(origin + "/")
    for slow, (head, body) in SLOW.items():
        target = f"/slow?head={head}&body={body}"
        session.execute(parse(f"goto [{link_to(origin, target)}]"))
        started = time.monotonic()
        session.execute(parse(f"click [{find(session.observe(), 'link', 'Go')}]"))
        waited = time.monotonic() - started
        obs = session.observe()
        assert find(obs, "link", "Home from the slow page"), (slow, obs)
        assert f"URL: {origin}{target}" in obs and session.tabs == ["Slow"], slow
        assert waited >= head + body - 0.1, slow  # it waited for the page, not for a fixed time


def test_typing_enter_that_submits_to_a_slow_page_is_observed_on_the_new_page(
    session: BrowserSession, origin: str, quick_settle: None
) -> None:
    session.reset(origin + "/form")
    # the form's action made slow: Enter submits it (a scheduled form submission, not a link)
    session.evaluate("document.querySelector('form').action = '/slow'")
    session.evaluate(
        "document.querySelector('form').insertAdjacentHTML('beforeend', \"<input type=hidden name=body value=1.0>\")"
    )
    session.execute(parse(f"type [{find(session.observe(), 'textbox', 'Name')}] [Ada] [1]"))
    obs = session.observe()
    assert [name for _, role, name in elements(obs) if role == "link"] == ["Home from the slow page"], obs


def test_a_page_that_does_not_load_within_the_timeout_is_an_env_fault(
    short_session: BrowserSession, origin: str
) -> None:
    for slow, delays in SLOW.items():
        head, body = (8.0, 0.0) if delays[0] else (0.0, 8.0)
        target = f"{origin}/slow?head={head}&body={body}"
        short_session.reset(link_to(origin, target))  # after the first fault, also: the browser is fine
        started = time.monotonic()
        with pytest.raises(EnvFault) as fault:
            short_session.execute(parse(f"click [{find(short_session.observe(), 'link', 'Go')}]"))
        assert time.monotonic() - started < 6.0, slow  # the page's bound, not the hung-browser bound, ended the wait
        message = str(fault.value)
        assert message.startswith("execute click [") and target in message and "2.0 s" in message, (slow, message)
    short_session.reset(origin + "/")  # the browser is fine: a new episode can start
    assert find(short_session.observe(), "link", "Form page")


def test_a_navigation_that_ends_without_a_page_is_no_fault(short_session: BrowserSession, origin: str) -> None:
    short_session.reset(link_to(origin, "/nothing"))  # 204: the browser stays on the page it was on
    short_session.execute(parse(f"click [{find(short_session.observe(), 'link', 'Go')}]"))
    assert find(short_session.observe(), "link", "Go") and short_session.url == link_to(origin, "/nothing")


# -- the shop under a slow route, in WebEnv and the pool ----------------------------------------------------------


def slow_categories(monkeypatch: pytest.MonkeyPatch, head: float, body: float) -> list[str]:
    """Make the shop's category pages answer `head` s late and send their body `body` s after their headers (a
    shop started after this serves them so). Returns the list the paths served are appended to."""
    served: list[str] = []
    category = ShopSite.category

    async def slow(self: ShopSite, request):  # noqa: ANN001, ANN202 (starlette's handler)
        await asyncio.sleep(head)
        page = await category(self, request)
        served.append(request.url.path)

        async def late_body():  # noqa: ANN202
            await asyncio.sleep(body)
            yield page.body

        return StreamingResponse(late_body(), status_code=page.status_code, headers=dict(page.headers))

    monkeypatch.setattr(ShopSite, "category", slow)
    return served


def test_the_scripted_solver_scores_one_while_shop_pages_answer_slowly(monkeypatch, quick_settle) -> None:
    served = slow_categories(monkeypatch, head=0.0, body=1.0)
    env = jgem.make("web:Shop-v0-hard")
    try:
        # seed 0 of the flaky test: open a category, sort it by price (the step that saw no links), read products
        assert play(env, solver_for("web:Shop-v0-hard"), seed=0, max_steps=40)[0] == 1.0
    finally:
        env.close()
    assert len(served) >= 2, served  # the category and its sorted listing came slowly


def test_a_shop_page_that_does_not_load_is_a_fault_the_pool_reports(monkeypatch) -> None:
    slow_categories(monkeypatch, head=8.0, body=0.0)
    with EnvPool("web:Shop-v0-easy", 1, backend="thread", env_kwargs={"timeout_s": 2.0}) as pool:
        pool.reset(seeds=[0])
        obs = pool.recv().obs[0]
        link = find(obs, "link", CATEGORIES["kitchen"][0])
        info = pool.step([0], [f"click [{link}]"]).infos[0]
        assert pool.num_faults == 1
        assert "/category/kitchen did not commit within 2.0 s" in info["fault"], info
