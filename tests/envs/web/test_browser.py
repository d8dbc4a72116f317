"""BrowserSession in a real Chromium: every action changes the browser, bad actions are ActionErrors,
and a dead, hung or closed browser is a BrowserError that leaves no process behind."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import psutil
import pytest

from jgem.core import EnvFault
from jgem.envs.web import chromium
from jgem.envs.web.actions import ActionError, parse
from jgem.envs.web.browser import BrowserError, BrowserSession, ScriptError
from jgem.envs.web.observation import find


def act(session: BrowserSession, text: str) -> None:
    session.execute(parse(text))


def element(session: BrowserSession, role: str, name: str) -> int:
    return find(session.observe(), role, name)


def all_dead(pids: list[int], within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.05)
    return False


# -- each action changes the browser ------------------------------------------------------------------


def test_click_follows_a_link(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    act(session, f"click [{element(session, 'link', 'Form page')}]")
    assert session.url == f"{origin}/form"
    assert session.tabs == ["Form"]


def test_type_clears_types_and_presses_enter(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/form")
    name = element(session, "textbox", "Name")
    act(session, f"type [{name}] [first] [0]")
    act(session, f"type [{name}] [Ada [the first] Lovelace] [0]")  # replaces, not appends
    assert session.evaluate("document.querySelector('#name').value") == "Ada [the first] Lovelace"
    assert session.url == f"{origin}/form"  # [0]: no Enter
    act(session, f"type [{name}] [Grace] [1]")  # Enter submits the form
    assert session.url == f"{origin}/result?name=Grace&colour=red"
    assert "You sent colour=red, name=Grace" in session.observe()


def test_select_by_typing_and_by_clicking_an_option(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/form")
    obs = session.observe()
    act(session, f"type [{find(obs, 'combobox', 'Colour')}] [Blue] [0]")
    assert session.evaluate("document.querySelector('#colour').value") == "blue"
    act(session, f"click [{find(obs, 'option', 'Green')}]")
    assert session.evaluate("document.querySelector('#colour').value") == "green"
    act(session, f"click [{find(obs, 'button', 'Submit')}]")
    assert session.url == f"{origin}/result?name=&colour=green"


def test_hover_reveals_a_menu(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/menu")
    before = session.observe()
    assert "Secret item" not in before
    act(session, f"hover [{find(before, 'StaticText', 'Products menu')}]")
    act(session, f"click [{element(session, 'link', 'Secret item')}]")
    assert session.url == f"{origin}/target"


def test_press_keys(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/form")
    act(session, f"type [{element(session, 'textbox', 'Name')}] [abc] [0]")
    act(session, "press [Backspace]")
    act(session, "press [Meta+a]")  # WebArena's Meta is Control off a Mac: select all
    act(session, "press [x]")
    assert session.evaluate("document.querySelector('#name').value") == "x"
    act(session, "press [Tab]")
    assert session.evaluate("document.activeElement.id") == "colour"
    act(session, "press [Shift+Tab]")
    act(session, "press [Enter]")
    assert session.url == f"{origin}/result?name=x&colour=red"


def test_a_dialog_does_not_block_the_page(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/alert")
    act(session, f"click [{element(session, 'button', 'Greet')}]")  # alert() is dismissed
    assert "StaticText 'Greeted'" in session.observe()


def test_scroll_moves_one_viewport(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/long")
    height = session.evaluate("window.innerHeight")
    assert session.evaluate("window.scrollY") == 0
    act(session, "scroll [down]")
    act(session, "scroll [down]")
    assert session.evaluate("window.scrollY") == 2 * height
    act(session, "scroll [up]")
    assert session.evaluate("window.scrollY") == height
    act(session, "press [End]")
    assert session.evaluate("window.scrollY + window.innerHeight") == session.evaluate(
        "document.scrollingElement.scrollHeight"
    )


def test_click_scrolls_an_element_into_view(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/long")
    act(session, f"click [{element(session, 'link', 'Bottom link')}]")  # below the fold
    assert session.url == f"{origin}/"


def test_tabs(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    act(session, "new_tab")
    assert session.tabs == ["Home", "about:blank"] and session.current_tab == 1
    assert session.url == "about:blank"
    act(session, f"goto [{origin}/form]")
    act(session, "tab_focus [0]")
    assert session.url == f"{origin}/" and session.current_tab == 0
    assert session.observe().endswith("Tabs: [0] Home (current) | [1] Form")
    act(session, "close_tab")
    assert session.tabs == ["Form"] and session.url == f"{origin}/form"
    act(session, "close_tab")  # the last tab: a blank one takes its place
    assert session.tabs == ["about:blank"] and session.url == "about:blank"


def test_a_link_to_a_new_tab_becomes_the_current_tab(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    act(session, f"click [{element(session, 'link', 'Open in new tab')}]")
    assert session.tabs == ["Home", "Target"] and session.current_tab == 1
    assert session.url == f"{origin}/target"
    assert "Target page" in session.observe()


def test_goto_back_forward(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    act(session, f"goto [{origin}/form]")
    act(session, f"goto [{origin}/menu]")
    act(session, "go_back")
    assert session.url == f"{origin}/form"
    act(session, "go_back")
    assert session.url == f"{origin}/"
    act(session, "go_forward")
    assert session.url == f"{origin}/form"
    act(session, "stop [done]")  # the env ends the episode; the browser does nothing
    assert session.url == f"{origin}/form"


def test_reset_gives_a_fresh_context(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    session.evaluate("localStorage.setItem('k', 'v'); document.cookie = 'c=1'")
    act(session, "new_tab")
    session.reset(origin + "/form", cookies=[{"name": "token", "value": "abc", "url": origin}])
    assert session.tabs == ["Form"]
    assert session.evaluate("localStorage.getItem('k')") is None
    assert session.evaluate("document.cookie") == "token=abc"
    assert '<label for="name">Name</label>' in session.content()


# -- bad actions --------------------------------------------------------------------------------------


def test_actions_the_page_cannot_take_are_action_errors(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    obs = session.observe()
    with pytest.raises(ActionError, match=r"element \[987654\] is not on the current page"):
        act(session, "click [987654]")
    with pytest.raises(ActionError, match=r"tab_focus \[3\]: there are 1 tabs"):
        act(session, "tab_focus [3]")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed_port = free.getsockname()[1]
    with pytest.raises(
        ActionError, match=rf"goto \[http://127.0.0.1:{closed_port}/\] failed: .*ERR_CONNECTION_REFUSED"
    ):
        act(session, f"goto [http://127.0.0.1:{closed_port}/]")
    session.reset(origin + "/")
    obs = session.observe()  # ids are numbered as an observation first asks for them
    heading = find(obs, "heading", "Welcome home")
    with pytest.raises(ActionError, match=rf"element \[{heading}\] cannot take typed text"):
        act(session, f"type [{heading}] [x]")
    act(session, f"click [{find(obs, 'link', 'Form page')}]")
    with pytest.raises(ActionError, match=r"element \[\d+\] is not on the current page"):
        act(session, f"click [{find(obs, 'link', 'Long page')}]")  # an id from the page before
    assert session.url == f"{origin}/form"
    textbox = element(session, "textbox", "Name")
    act(session, "new_tab")
    with pytest.raises(ActionError, match=rf"element \[{textbox}\] is not on the current page"):
        act(session, f"click [{textbox}]")  # an id from another tab


def test_hidden_elements_cannot_be_clicked(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/menu")
    for hide in ("display = 'none'", "visibility = 'hidden'"):
        session.evaluate("document.querySelector('.sub').style.display = 'block'")
        link = element(session, "link", "Secret item")
        session.evaluate(f"document.querySelector('.sub').style.{hide}")
        with pytest.raises(ActionError, match=rf"element \[{link}\] is not visible"):
            act(session, f"click [{link}]")
        assert session.url == f"{origin}/menu", hide


def test_evaluate_errors_are_script_errors(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    with pytest.raises(ScriptError, match="boom"):
        session.evaluate("(() => { throw new Error('boom') })()")
    assert session.evaluate("1 + 1") == 2  # the session is fine
    with pytest.raises(TypeError, match="execute takes an Action"):
        session.execute("click [1]")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="observation kind"):
        session.observe("html")


# -- threads ------------------------------------------------------------------------------------------


def test_one_session_from_several_threads(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    results: dict[str, object] = {}

    def first() -> None:
        act(session, f"click [{element(session, 'link', 'Form page')}]")
        results["first"] = session.url

    def second() -> None:
        results["second"] = session.url
        results["obs"] = session.observe()

    for target in (first, second):  # in turn, each from a new thread
        t = threading.Thread(target=target)
        t.start()
        t.join(30)
    assert results["first"] == results["second"] == f"{origin}/form"
    assert "textbox 'Name'" in str(results["obs"])
    observed: list[str] = []  # and at once: calls on one session run one after the other
    threads = [threading.Thread(target=lambda: observed.append(session.observe())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(observed) == 4 and len(set(observed)) == 1


# -- faults: dead, hung and closed browsers ---------------------------------------------------------


def _name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return "(exited)"


def test_start_and_close_leave_no_process_even_while_a_call_hangs(origin: str) -> None:
    s = BrowserSession(timeout_s=30.0)
    assert s.pids == []  # starts lazily
    s.start()
    pids = s.pids
    # the browser and its renderer/zygote/utility processes; Chromium also runs short-lived helpers of its own at
    # start (under load one was still alive here: the test asserted every pid was named chrom*), which are its
    # descendants too and die with it below
    names = [_name(p) for p in pids]
    assert sum(n.startswith("chrom") for n in names) >= 2, names
    s.start()  # idempotent: the same browser (a start-up helper may have exited meanwhile)
    assert s.pids and set(s.pids) <= set(pids)
    s.reset(origin + "/")
    pids = sorted(set(pids) | set(s.pids))  # with the page's renderer
    errors: list[BaseException] = []

    def hang() -> None:
        try:
            s.evaluate("while (true) {}")
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=hang)
    t.start()
    time.sleep(0.5)
    assert t.is_alive()  # the page's script loops forever
    started = time.monotonic()
    s.close()  # from another thread than the hung call's
    assert time.monotonic() - started < 3.0
    t.join(5)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], BrowserError) and isinstance(errors[0], EnvFault)
    assert "evaluate failed: the browser session was closed during the call" in str(errors[0])
    s.close()  # idempotent
    assert s.pids == []
    assert all_dead(pids)
    with pytest.raises(BrowserError, match="observe: the browser session is closed"):
        s.observe()
    with pytest.raises(BrowserError, match="reset: the browser session is closed"):
        s.reset(origin + "/")


def test_a_hung_or_killed_browser_is_a_browser_error_and_reset_starts_a_new_one(origin: str) -> None:
    with BrowserSession(timeout_s=2.0) as s:
        # a hung call times out and kills the browser
        s.reset(origin + "/")
        pids = s.pids
        started = time.monotonic()
        with pytest.raises(BrowserError, match=r"evaluate timed out after 2\.0 s; the browser was killed"):
            s.evaluate("while (true) {}")
        assert time.monotonic() - started < 6.0
        assert all_dead(pids)
        with pytest.raises(BrowserError, match=r"was killed after evaluate timed out; reset\(\) starts a new one"):
            s.observe()
        s.reset(origin + "/form")
        assert s.url == f"{origin}/form" and set(s.pids).isdisjoint(pids)
        # a killed Chromium (that new browser) says so
        pids = s.pids
        browser_pid = next(p for p in pids if psutil.Process(p).ppid() == os.getpid())
        os.kill(browser_pid, signal.SIGKILL)
        with pytest.raises(BrowserError) as err:
            s.observe()
        assert (
            str(err.value)
            == f"observe failed: chromium (pid {browser_pid}) killed by signal 9; reset() starts a new one"
        )
        assert all_dead(pids) and s.pids == []
        s.reset(origin + "/")  # a new browser
        assert s.tabs == ["Home"]


OWNER = textwrap.dedent(
    """
    import sys, time
    from jgem.envs.web.browser import BrowserSession
    s = BrowserSession(timeout_s=20.0)
    s.reset(sys.argv[1])
    print(" ".join(map(str, s.pids)), flush=True)
    time.sleep(600)
    """
)


def test_chromium_dies_with_its_owner(origin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The owner keeps its profile in a temporary directory of its own: a browser launched meanwhile by another test
    # worker sweeps the shared one, and would remove the dead owner's profile before this test looks. A short path
    # (not pytest's tmp_path): Chromium puts its sockets under $TMPDIR, and a Unix socket's path has 107 bytes at most.
    own_tmp = tempfile.mkdtemp(prefix="jgem-owner-")
    try:
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER, origin + "/"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TMPDIR": own_tmp},
        )
        monkeypatch.setattr(tempfile, "tempdir", own_tmp)
        try:
            pids = [int(p) for p in owner.stdout.readline().split()]  # type: ignore[union-attr]
            assert len(pids) >= 2 and all(psutil.pid_exists(p) for p in pids)
        finally:
            owner.kill()  # SIGKILL: no atexit, no finalizer runs
            owner.wait()
        assert all_dead(pids, within=10.0)
        profiles = glob.glob(os.path.join(tempfile.gettempdir(), f"{chromium.PROFILE_PREFIX}{owner.pid}-*"))
        assert len(profiles) == 1  # left behind by the killed owner, until the next launch sweeps it
        assert chromium.sweep_profiles() == profiles and not os.path.exists(profiles[0])
    finally:
        shutil.rmtree(own_tmp, ignore_errors=True)


def test_a_temporary_directory_too_long_for_chromium_is_named_in_the_error(origin: str, monkeypatch) -> None:
    """Chromium aborts at start when $TMPDIR is too long for its sockets' paths; the error says so and how to fix it."""
    long_tmp = tempfile.mkdtemp(prefix="jgem-" + "t" * (chromium.MAX_TMPDIR_CHARS - len(tempfile.gettempdir())))
    try:
        monkeypatch.setenv("TMPDIR", long_tmp)  # Chromium's
        monkeypatch.setattr(tempfile, "tempdir", long_tmp)  # jgem's (its profile)
        with BrowserSession(timeout_s=20.0) as s, pytest.raises(BrowserError, match=r"killed by signal 6") as err:
            s.reset(origin + "/")
        assert f"set TMPDIR to a directory of at most {chromium.MAX_TMPDIR_CHARS} characters" in str(err.value)
    finally:
        shutil.rmtree(long_tmp, ignore_errors=True)


def test_a_forked_child_gets_its_own_browser(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    parent_pids = session.pids
    pid = os.fork()
    if pid == 0:  # the child: the parent's browser is not its own; it starts another and leaves the parent's
        code = 1
        try:
            assert session.pids == []
            session.reset(origin + "/form")
            code = 0 if session.url == f"{origin}/form" and set(session.pids).isdisjoint(parent_pids) else 2
            session.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert session.pids == parent_pids and session.url == f"{origin}/"


# -- finding Chromium ---------------------------------------------------------------------------------


def test_chromium_discovery(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("JGEM_CHROMIUM", str(tmp_path / "nope"))
    with pytest.raises(chromium.ChromiumNotFound, match=r"\$JGEM_CHROMIUM names .*nope.*not an executable"):
        chromium.find()
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JGEM_CHROMIUM", str(fake))
    assert chromium.find() == str(fake)
    assert chromium.find(executable="/bin/sh") == "/bin/sh"  # an explicit binary comes first
    monkeypatch.delenv("JGEM_CHROMIUM")
    monkeypatch.setenv("PATH", str(tmp_path))
    assert chromium.find() == str(fake)  # on PATH
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert chromium.find(playwright_path=str(fake)) == str(fake)  # Playwright's own
    with pytest.raises(chromium.ChromiumNotFound) as err:
        chromium.find(playwright_path=str(tmp_path / "missing"))
    for hint in ("JGEM_CHROMIUM", "chromium, chromium-browser, google-chrome", "playwright install chromium"):
        assert hint in str(err.value)


def test_a_missing_chromium_fails_start_clearly(tmp_path) -> None:
    with (
        BrowserSession(executable=str(tmp_path / "no-chromium")) as s,
        pytest.raises(
            BrowserError,
            match=r"start failed: could not start Chromium: executable= names .*no-chromium.*not an executable",
        ),
    ):
        s.start()
