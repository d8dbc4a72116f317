"""Find, launch and kill one headless Chromium process group; no Playwright here.

jgem launches Chromium itself (rather than through Playwright's `launch`) so it owns the process: Chromium
starts in a session of its own (`start_new_session`), so its renderers, GPU and utility processes share its
process group and one `killpg` ends them all; `PR_SET_PDEATHSIG` kills the browser process when the thread
that started it dies (the session's event-loop thread, which lives as long as its Python process), and its
children follow it. The DevTools port is chosen by Chromium (`--remote-debugging-port=0`) and read from the
profile's `DevToolsActivePort` file; Playwright then attaches over CDP.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV_VAR = "JGEM_CHROMIUM"
PROFILE_PREFIX = "jgem-chromium-"  # + the owning Python process's pid: its temporary profiles
PATH_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Chromium puts its sockets in a directory under $TMPDIR and aborts (SIGABRT) when their paths pass the 107 bytes
# a Unix socket's path may have: measured with Debian's chromium, a temporary directory of 62 characters works, 63 not
MAX_TMPDIR_CHARS = 62

# Playwright's own switches for automation (chromiumSwitches in playwright-core), less the Edge/Windows/Mac ones,
# plus its headless ones: no background work, no first-run UI, no throttling of background tabs.
ARGS = (
    "--headless",
    "--hide-scrollbars",
    "--mute-audio",
    "--no-startup-window",
    "--remote-debugging-port=0",
    "--disable-field-trial-config",
    "--disable-background-networking",
    "--disable-background-timer-throttling",
    "--disable-backgrounding-occluded-windows",
    "--disable-back-forward-cache",
    "--disable-breakpad",
    "--disable-component-extensions-with-background-pages",
    "--disable-component-update",
    "--no-default-browser-check",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-features=AvoidUnnecessaryBeforeUnloadCheckSync,DestroyProfileOnBrowserClose,HttpsUpgrades,"
    "HttpsFirstBalancedModeAutoEnable,LensOverlay,MediaRouter,PaintHolding,ThirdPartyStoragePartitioning,"
    "OptimizationHints,NetworkTimeServiceQuerying,AimEnabled,PreconnectToSearch",
    "--allow-pre-commit-input",
    "--disable-hang-monitor",
    "--disable-ipc-flooding-protection",
    "--disable-popup-blocking",
    "--disable-prompt-on-repost",
    "--disable-renderer-backgrounding",
    "--force-color-profile=srgb",
    "--metrics-recording-only",
    "--no-first-run",
    "--password-store=basic",
    "--use-mock-keychain",
    "--no-service-autorun",
    "--disable-search-engine-choice-screen",
    "--disable-sync",
    "--disable-smooth-scrolling",  # a scroll is done when its key press is: observations stay deterministic
    "--blink-settings=primaryHoverType=2,availableHoverTypes=2,primaryPointerType=4,availablePointerTypes=4",
)

_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


class ChromiumNotFound(FileNotFoundError):
    """No Chromium binary: none given, none in $JGEM_CHROMIUM, on PATH, or from Playwright."""


def find(executable: str | None = None, playwright_path: str | None = None) -> str:
    """The Chromium binary to run: `executable`, else $JGEM_CHROMIUM, else chromium / chromium-browser /
    google-chrome on PATH, else Playwright's own download at `playwright_path`."""
    for source, path in (("executable=", executable), (f"${ENV_VAR}", os.environ.get(ENV_VAR))):
        if path:
            if not (os.path.isfile(path) and os.access(path, os.X_OK)):
                raise ChromiumNotFound(f"{source} names {path!r}, which is not an executable file")
            return path
    for name in PATH_NAMES:
        found = shutil.which(name)
        if found:
            return found
    if playwright_path and os.access(playwright_path, os.X_OK):
        return playwright_path
    raise ChromiumNotFound(
        f"no Chromium found: set ${ENV_VAR} to a chromium binary, or put one of {', '.join(PATH_NAMES)} on PATH "
        f"(Debian/Ubuntu: apt-get install chromium), or run `playwright install chromium` "
        f"(looked for {playwright_path or 'Playwright download'})"
    )


def sweep_profiles() -> list[str]:
    """Remove the temporary profiles of owners that died without cleaning up (a SIGKILLed process; its
    Chromium died with it); return their paths."""
    removed = []
    root = Path(tempfile.gettempdir())
    for path in root.glob(f"{PROFILE_PREFIX}*-*"):
        owner = path.name[len(PROFILE_PREFIX) :].split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
        except PermissionError:  # alive, someone else's
            pass
    return removed


def _tmpdir_hint() -> str:
    """Why Chromium may have aborted at start, when the temporary directory is too long for its sockets."""
    tmp = tempfile.gettempdir()
    if len(tmp) <= MAX_TMPDIR_CHARS:
        return ""
    return (
        f" (the temporary directory {tmp!r} is {len(tmp)} characters long: Chromium aborts when the paths of its "
        f"sockets under it pass 107 bytes; set TMPDIR to a directory of at most {MAX_TMPDIR_CHARS} characters)"
    )


def _die_with_parent() -> None:  # runs in the child between fork and exec: nothing but the prctl call
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Chromium:
    """One running Chromium: its process (a group leader), its temporary profile and its DevTools endpoint."""

    def __init__(self, executable: str, extra_args: tuple[str, ...] = ()) -> None:
        sweep_profiles()
        self.profile = tempfile.mkdtemp(prefix=f"{PROFILE_PREFIX}{os.getpid()}-")
        args = [executable, *ARGS, f"--user-data-dir={self.profile}", *extra_args]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium refuses to run as root with its sandbox on
        self._log = open(Path(self.profile, "chromium.log"), "wb")  # noqa: SIM115 (closed in kill)
        try:
            self.process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError:
            self._log.close()
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        self.death: str | None = None  # why it was killed, when we killed it

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def ended(self, within: float) -> bool:
        """Whether the browser process ends within `within` seconds (it is dying when its connection drops)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=within)
        return not self.alive()

    def exit_reason(self) -> str:
        """A sentence saying how the browser process ended (for errors)."""
        if self.death:
            return f"chromium (pid {self.pid}) was {self.death}"
        code = self.process.poll()
        if code is None:
            return f"chromium (pid {self.pid}) is running"
        how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"chromium (pid {self.pid}) {how}"

    def endpoint(self, deadline: float) -> str | None:
        """The browser's DevTools websocket URL once Chromium has written it, else None (not yet)."""
        port_file = Path(self.profile, "DevToolsActivePort")
        with contextlib.suppress(OSError):
            lines = port_file.read_text().split("\n")
            if len(lines) >= 2 and lines[0].strip().isdigit() and lines[1].startswith("/"):
                return f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
        if not self.alive():
            raise RuntimeError(
                f"{self.exit_reason()} before it listened for DevTools{_tmpdir_hint()}: {self.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"chromium (pid {self.pid}) did not open its DevTools port in time: {self.log_tail()}")
        return None

    def log_tail(self, chars: int = 800) -> str:
        with contextlib.suppress(OSError):
            text = Path(self.profile, "chromium.log").read_text(errors="replace").strip()
            return text[-chars:] or "(no output)"
        return "(no output)"

    def pids(self) -> list[int]:
        """Live processes of this browser: its process group (which outlives a killed browser process for a
        moment) and, while the browser process runs, any descendant that left the group."""
        return sorted(_group_and_descendants(self.pid, descendants=self.alive()))

    def kill(self, why: str | None = None) -> None:
        """SIGKILL the whole browser, reap it and remove its profile. Idempotent; any thread."""
        if why and self.death is None and self.alive():
            self.death = why
        members = _group_and_descendants(self.pid, descendants=self.alive())
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5.0)
        self._log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def _group_and_descendants(root: int, descendants: bool) -> set[int]:
    """Pids (not zombies) whose process group is `root`, and with `descendants` those that descend from `root`,
    read from /proc."""
    parent: dict[int, int] = {}
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if fields[0] in ("Z", "X"):
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        if int(fields[2]) == root:
            found.add(pid)
    for pid in parent if descendants else ():
        p = pid
        while p in parent and p not in found and p > 1:
            p = parent[p]
        if p == root or p in found:
            found.add(pid)
    return found
