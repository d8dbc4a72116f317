"""Many terminal envs at once, with hostile commands among them: every episode must end graded, every hostile
command must end with a clear observation, and no env may stop the pool.

    .venv/bin/python -m experiments.terminal_scale --envs 64 --backend process
    .venv/bin/python -m experiments.terminal_scale --envs 64 --backend remote     # over jgem-serve (in this process)

Env i plays shipped task i (mod 46: `terminal:shipped` with `index_seeds`) and runs three turns: one command of the
i-th kind below, `ls` (the session goes on), and `submit` (the task's tests grade it). The kinds: a command that
hangs (killed at the command limit), a fork bomb, a disk fill (the episode's writable layer is `workdir_mb`), a
connection to the internet, a 2 GiB allocation (over `memory_mb`), and two ordinary commands. Prints one JSON object:
per kind, how many ran, how many observations showed what stopped them, the longest turn; episodes graded; pool
faults; the wall time; the peak resident memory of this process and its descendants.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time

# (kind, command, what its observation must show)
KINDS = [
    ("hang", "sleep 600", "wall-clock limit"),
    ("fork_bomb", ":(){ :|:& };: 2>/dev/null; sleep 1; echo survived", None),
    ("disk_fill", "for i in 1 2 3 4 5 6; do head -c 60000000 /dev/zero > big$i || break; done", "No space left"),
    ("network", "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"", "Errno"),
    ("memory", "python3 -c 'x = bytearray(2 << 30)'", "MemoryError"),
    ("ordinary", "ls -la; cat *.txt 2>/dev/null | head -5", "[exit code"),
    ("ordinary", "pwd; echo $HOME", "[exit code 0]"),
]


def _call(command: str) -> str:
    return f"<bash>{command}</bash>"


def _memory_mb() -> float:
    """The resident memory of this process and all its descendants (the pool's workers, the shell workers, the
    sessions' processes)."""
    import psutil

    me = psutil.Process()
    total = 0
    for p in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total / 2**20


def run(envs: int, backend: str, command_timeout: float, workers: int | None = None) -> dict:
    from jgem.envs.pool import EnvPool

    kwargs = {"command_timeout": command_timeout, "index_seeds": True}
    servers, urls = [], []
    if backend == "remote":
        import uvicorn

        from jgem.envs.remote import server
        from jgem.envs.remote.service import ServeConfig

        cfg = uvicorn.Config(
            server.create_app(ServeConfig(envs=("terminal:shipped",), allow_kwargs=tuple(kwargs))),
            port=0,
            log_level="error",
        )
        srv = uvicorn.Server(cfg)
        threading.Thread(target=srv.run, daemon=True).start()
        while not srv.started:
            time.sleep(0.05)
        servers.append(srv)
        urls.append(f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}")
    peak, stop = [0.0], threading.Event()

    def watch() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], _memory_mb())

    threading.Thread(target=watch, daemon=True).start()
    start = time.monotonic()
    rows = {k: {"ran": 0, "shown": 0, "turn_s": 0.0} for k, *_ in KINDS}
    graded, successes = 0, 0
    try:
        with EnvPool(
            "terminal:shipped", envs, backend=backend, env_kwargs=kwargs, num_workers=workers, remote_urls=urls
        ) as pool:
            ids = list(range(envs))
            pool.reset(ids, seeds=ids)
            got = pool.recv(at_least=envs)
            assert len(got) == envs, f"{len(got)} of {envs} envs reset"
            kinds = [KINDS[i % len(KINDS)] for i in ids]
            t = time.monotonic()
            first = pool.step(ids, [_call(k[1]) for k in kinds])
            turn = time.monotonic() - t
            for i, obs in zip(first.env_ids, first.obs):
                kind, _, shows = kinds[i]
                rows[kind]["ran"] += 1
                rows[kind]["shown"] += shows is None or shows in obs
                rows[kind]["turn_s"] = max(rows[kind]["turn_s"], round(turn, 2))
            after = pool.step(ids, [_call("ls")] * envs)
            goes_on = int(sum("[exit code 0]" in o for o in after.obs))
            stuck = [(kinds[i][0], o[-300:]) for i, o in zip(after.env_ids, after.obs) if "[exit code 0]" not in o]
            end = pool.step(ids, ["<submit/>"] * envs)
            graded = int(sum("Tests:" in o for o in end.obs))
            successes = int(sum(bool(info.get("success")) for info in end.infos))
            faults = pool.num_faults
    finally:
        stop.set()
        for srv in servers:
            srv.should_exit = True
    return {
        "envs": envs,
        "backend": backend,
        "pool_workers": workers,
        "command_timeout_s": command_timeout,
        "kinds": rows,
        "sessions_went_on": goes_on,
        "sessions_stuck": stuck,
        "episodes_graded": graded,
        "tasks_solved_by_doing_nothing": successes,
        "pool_faults": faults,
        "wall_s": round(time.monotonic() - start, 1),
        "peak_rss_mb": round(peak[0]),
        "contained": all(r["shown"] == r["ran"] for r in rows.values()) and graded == envs and faults == 0,
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--backend", choices=["process", "thread", "remote"], default="process")
    ap.add_argument("--command-timeout", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=None, help="the pool's worker processes or threads")
    args = ap.parse_args(argv)
    print(json.dumps(run(args.envs, args.backend, args.command_timeout, args.workers), indent=1))


if __name__ == "__main__":
    main()
