"""EnvPool: partial batches, ordering, faults (exceptions, timeouts, killed workers), shutdown, determinism."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from functools import partial
from pathlib import Path

import numpy as np
import psutil
import pytest

from jgem.core import JgemError
from jgem.envs.pool import EnvPool, EnvResults
from jgem.envs.pool_commands import run_command
from jgem.envs.wrappers import EpisodeStatistics
from tests.envs.faulty_envs import (
    BAD_RESULTS,
    BrokenInitEnv,
    CloseRecordingEnv,
    CounterEnv,
    HangingCloseEnv,
    ListObsEnv,
    ResetFailsEnv,
)

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["inline", "thread", "process"]


def _pool(backend: str, n: int = 4, **kw) -> EnvPool:
    if backend == "process":
        kw.setdefault("num_workers", 2)
    return EnvPool(CounterEnv, n, backend=backend, **kw)


def _reset_all(pool: EnvPool, seeds: list[int]) -> dict[int, tuple]:
    pool.reset(seeds=seeds)
    out = {}
    while pool.num_in_flight:
        out.update(_sorted(pool.recv()))
    return out


def _sorted(b: EnvResults) -> dict[int, tuple]:
    return {
        int(i): (b.obs[k], float(b.rewards[k]), bool(b.terminated[k]), bool(b.truncated[k]), b.infos[k])
        for k, i in enumerate(b.env_ids)
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_seeds_step_and_no_autoreset(backend: str) -> None:
    ref = CounterEnv(horizon=2)
    expected_start = {s: ref.reset(seed=s)[1]["start"] for s in (5, 6, 7)}
    with _pool(backend, 3, env_kwargs={"horizon": 2}) as pool:
        pool.reset(seeds=[5, 6, 7])
        b = pool.recv()
        assert len(b) == 3 and b.is_reset.all() and not b.truncated.any()
        assert b.env_ids.dtype == np.int32 and b.rewards.dtype == np.float32
        starts = {int(i): info["start"] for i, info in zip(b.env_ids, b.infos)}
        assert starts == {0: expected_start[5], 1: expected_start[6], 2: expected_start[7]}

        b = pool.step([2, 0], ["x", "y"])  # ordered as given
        assert b.env_ids.tolist() == [2, 0]
        assert b.obs == [f"{expected_start[7]}:1:x", f"{expected_start[5]}:1:y"]
        assert not b.is_reset.any() and b.rewards.tolist() == [1.0, 1.0]

        b = pool.step([0], ["z"])
        assert b.terminated.tolist() == [True] and b.obs == [f"{expected_start[5]}:2:z"]  # terminal obs kept
        b = pool.step([0], ["w"])  # no auto-reset: the same episode goes on counting
        assert b.obs == [f"{expected_start[5]}:3:w"] and not b.is_reset.any()


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_partial_batches_arrive_fastest_first(backend: str) -> None:
    with _pool(backend, 4, batch_size=2, num_workers=4) as pool:
        _reset_all(pool, [0, 1, 2, 3])
        pool.send([0, 1, 2, 3], ["sleep:0.6", "sleep:0.01", "sleep:0.6", "sleep:0.02"])
        first = pool.recv()  # does not wait for the slow envs
        assert sorted(first.env_ids.tolist()) == [1, 3]
        second = pool.recv()
        assert sorted(second.env_ids.tolist()) == [0, 2]
        assert pool.num_faults == 0


def test_recv_timeout_returns_what_is_ready() -> None:
    with _pool("thread", 2) as pool:
        _reset_all(pool, [0, 1])
        pool.send([0, 1], ["sleep:1.0", "ok"])
        b = pool.recv(timeout=0.3)
        assert b.env_ids.tolist() == [1]
        assert len(pool.recv(timeout=0.01)) == 0  # env 0 still running: an empty batch, not an error
        assert pool.recv().env_ids.tolist() == [0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_recv_at_least_and_a_look_without_waiting(backend: str) -> None:
    """`recv(at_least=1)` returns once one result is in, with all that are ready; `recv(timeout=0)` looks once."""
    with _pool(backend, 3, num_workers=3) as pool:
        _reset_all(pool, [0, 1, 2])
        slow = "ok" if backend == "inline" else "sleep:0.8"
        pool.send([0, 1, 2], ["ok", slow, "ok"])
        time.sleep(0.2)  # envs 0 and 2 are done by now (thread and process backends)
        t = time.monotonic()
        first = pool.recv(timeout=0)
        assert time.monotonic() - t < 0.5
        if backend == "inline":  # runs its queued commands when asked
            assert sorted(first.env_ids.tolist()) == [0, 1, 2]
            return
        assert sorted(first.env_ids.tolist()) == [0, 2]
        pool.send([0], ["ok"])
        b = pool.recv(at_least=1)  # env 0 answers at once; env 1 is still sleeping
        assert b.env_ids.tolist() == [0]
        assert pool.recv(at_least=1).env_ids.tolist() == [1]
        with pytest.raises(ValueError, match="at_least"):
            pool.send([0], ["ok"]) or pool.recv(at_least=0)


def test_step_leaves_other_results_for_recv() -> None:
    with _pool("thread", 3) as pool:
        _reset_all(pool, [0, 1, 2])
        pool.send([0], ["a"])
        b = pool.step([1, 2], ["b", "c"])
        assert b.env_ids.tolist() == [1, 2]
        b = pool.recv()
        assert b.env_ids.tolist() == [0] and b.obs[0].endswith(":1:a")


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_is_a_fault_and_env_is_rebuilt(backend: str) -> None:
    with _pool(backend, 4) as pool:
        _reset_all(pool, [0, 1, 2, 3])
        b = _sorted(pool.step([0, 1, 2, 3], ["ok", "raise", "ok", "ok"]))
        obs, _, term, trunc, info = b[1]
        assert trunc and not term and info["fault"].startswith("exception: RuntimeError: injected failure")
        assert all("fault" not in b[i][4] for i in (0, 2, 3))
        assert pool.num_faults == 1
        pool.reset([1], seeds=[9])
        b = pool.recv()
        assert b.is_reset.tolist() == [True] and b.infos[0]["start"] == CounterEnv().reset(seed=9)[1]["start"]
        assert pool.step([1], ["ok"]).obs[0].endswith(":1:ok")  # fresh env: t starts again at 1


def test_faults_reported_by_the_env_are_counted() -> None:
    with _pool("thread", 2) as pool:
        _reset_all(pool, [0, 1])
        b = pool.step([0, 1], ["self_fault", "ok"])
        assert b.infos[0]["fault"] == "remote: server went away" and b.truncated.tolist() == [True, False]
        assert pool.num_faults == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_fault_during_reset(backend: str) -> None:
    kw = {"num_workers": 1} if backend == "process" else {}
    with EnvPool(ResetFailsEnv, 2, backend=backend, **kw) as pool:
        pool.reset(seeds=[13, 1])
        b = _sorted(pool.recv())
        assert b[0][3] and "unlucky seed" in b[0][4]["fault"] and "fault" not in b[1][4]
        assert pool.num_faults == 1
        pool.reset([0], seeds=[2])
        assert "fault" not in pool.recv().infos[0]


def test_thread_timeout_abandons_hung_step() -> None:
    with _pool("thread", 3, step_timeout=0.25) as pool:
        _reset_all(pool, [0, 1, 2])
        t0 = time.monotonic()
        b = _sorted(pool.step([0, 1, 2], ["sleep:2.0", "ok", "sleep:0.05"]))
        assert time.monotonic() - t0 < 1.5  # did not wait for the 2 s step
        assert b[0][4]["fault"].startswith("timeout: step ran longer than step_timeout=0.25s") and b[0][3]
        assert "fault" not in b[1][4] and "fault" not in b[2][4]
        assert pool.num_faults == 1
        pool.reset([0], seeds=[0])
        pool.recv()
        assert pool.step([0], ["ok"]).obs[0].endswith(":1:ok")  # rebuilt env serves again


def test_thread_timeout_closes_the_abandoned_env() -> None:
    # A hung step's env owns what must not outlive the fault (a browser, a sandbox): its close() runs at once.
    CloseRecordingEnv.closed.clear()
    with EnvPool(CloseRecordingEnv, 2, backend="thread", step_timeout=0.2) as pool:
        starts = {i: r[4]["start"] for i, r in _reset_all(pool, [0, 1]).items()}
        b = _sorted(pool.step([0, 1], ["sleep:3.0", "ok"]))
        assert b[0][4]["fault"].startswith("timeout:")
        deadline = time.monotonic() + 2.0
        while not CloseRecordingEnv.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert CloseRecordingEnv.closed == [starts[0]]  # env 0 only, long before its step returns


def test_process_timeout_restarts_only_that_worker() -> None:
    with _pool("process", 4, step_timeout=0.3) as pool:  # workers: {0, 2} and {1, 3}
        _reset_all(pool, [0, 1, 2, 3])
        before = pool._backend.pids
        b = _sorted(pool.step([0, 1, 2, 3], ["hang", "ok", "ok", "ok"]))
        assert b[0][4]["fault"].startswith("timeout: step ran longer") and b[0][3]
        # env 2 shared env 0's worker; it was queued behind the hang, so it reports the restart
        assert b[2][4]["fault"].startswith("worker_restart: worker 0 was restarted after env 0")
        assert "fault" not in b[1][4] and "fault" not in b[3][4]
        after = pool._backend.pids
        assert after[0] != before[0] and after[1] == before[1]
        assert not psutil.pid_exists(before[0]) or psutil.Process(before[0]).status() == psutil.STATUS_ZOMBIE
        pool.reset([0, 2], seeds=[0, 2])
        pool.recv()
        assert pool.step([0, 2], ["ok", "ok"]).obs[1].endswith(":1:ok")


def test_process_killed_worker_faults_all_its_envs() -> None:
    with _pool("process", 4) as pool:  # worker 0 hosts envs 0 and 2
        _reset_all(pool, [0, 1, 2, 3])
        victim = pool._backend.pids[0]
        pool.send([0, 1], ["sleep:2", "ok"])
        time.sleep(0.2)
        os.kill(victim, signal.SIGKILL)
        b = _sorted(pool.recv())
        assert b[0][4]["fault"].startswith("worker_died: worker 0") and "-9" in b[0][4]["fault"] and b[0][3]
        assert "fault" not in b[1][4]
        # env 2 was idle on the dead worker: its episode is gone, and its next step says so
        b = _sorted(pool.step([2, 3], ["ok", "ok"]))
        assert b[2][4]["fault"].startswith("worker_restart: ") and "episode was lost" in b[2][4]["fault"]
        assert "fault" not in b[3][4]
        assert pool.num_faults == 2
        pool.reset([0, 2], seeds=[0, 2])
        assert sorted(pool.recv().env_ids.tolist()) == [0, 2]
        assert pool.step([0, 2], ["ok", "ok"]).obs[0].endswith(":1:ok")
        assert victim not in pool._backend.pids


def test_caller_errors_are_value_errors() -> None:
    with _pool("inline", 2) as pool:
        with pytest.raises(ValueError, match="no command in flight"):
            pool.recv()
        pool.reset()
        with pytest.raises(ValueError, match=r"already have a command in flight"):
            pool.send([0], ["a"])
        with pytest.raises(ValueError, match=r"has a command in flight"):
            pool.get_state(0)
        pool.recv()
        with pytest.raises(ValueError, match=r"unknown env id 5; valid ids are 0..1"):
            pool.send([5], ["a"])
        with pytest.raises(ValueError, match="2 actions for 1 env ids"):
            pool.send([0], ["a", "b"])
        with pytest.raises(ValueError, match="repeat"):
            pool.send([0, 0], ["a", "b"])
        with pytest.raises(ValueError, match="1 seeds for 2 envs"):
            pool.reset(seeds=[1])
    with pytest.raises(ValueError, match="closed"):
        pool.send([0], ["a"])
    with pytest.raises(ValueError, match="batch_size"):
        EnvPool(CounterEnv, 2, batch_size=3)
    with pytest.raises(ValueError, match="inline backend cannot time out"):
        EnvPool(CounterEnv, 2, backend="inline", step_timeout=1.0)
    with pytest.raises(ValueError, match="unknown backend"):
        EnvPool(CounterEnv, 2, backend="gpu")  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="did you mean 'game:GuessTheNumber-v0-easy'"):
        EnvPool("game:GuessTheNumber-v0-eazy", 2)
    with pytest.raises(ValueError, match="remote_urls"):
        EnvPool("game:GuessTheNumber-v0-easy", 2, backend="remote")


def test_process_backend_errors() -> None:
    with pytest.raises(ValueError, match="picklable"):
        EnvPool(lambda: CounterEnv(), 2, backend="process")
    with pytest.raises(JgemError, match="cannot build this env"):
        EnvPool(BrokenInitEnv, 2, backend="process", num_workers=1)
    with pytest.raises(RuntimeError, match="cannot build this env"):
        EnvPool(BrokenInitEnv, 2, backend="thread")


def _rollout(backend: str, seed: int) -> list:
    """A random agent over 12 envs with partial batches: the full trace of what the pool returned."""
    rng = np.random.default_rng(seed)
    trace = []
    with _pool(backend, 12, batch_size=5, env_kwargs={"horizon": 4}) as pool:
        pool.reset(seeds=list(range(100, 112)))
        for _ in range(30):
            b = pool.recv()
            trace.append((b.env_ids.tolist(), b.obs, b.rewards.tolist(), b.terminated.tolist()))
            done = [int(i) for i, t in zip(b.env_ids, b.terminated) if t]
            live = [int(i) for i, t in zip(b.env_ids, b.terminated) if not t]
            if done:
                pool.reset(done, seeds=[int(s) for s in rng.integers(1000, size=len(done))])
            if live:
                pool.send(live, [f"a{int(x)}" for x in rng.integers(10, size=len(live))])
    return trace


def test_inline_is_deterministic() -> None:
    a, b = _rollout("inline", 0), _rollout("inline", 0)
    assert a == b
    assert a != _rollout("inline", 1)
    assert {len(ids) for ids, *_ in a} == {5}  # partial batches of exactly batch_size


@pytest.mark.parametrize("backend", BACKENDS)
def test_state_clone_continues_identically(backend: str) -> None:
    with _pool(backend, 2, wrappers=[EpisodeStatistics], env_kwargs={"horizon": 5}) as pool:
        _reset_all(pool, [3, 4])
        pool.step([0], ["a"])
        pool.set_state(1, pool.get_state(0))
        b = pool.step([0, 1], ["b", "b"])
        assert b.obs[0] == b.obs[1] and b.obs[0].endswith(":2:b")
        for _ in range(3):
            b = pool.step([0, 1], ["c", "c"])
        assert b.terminated.all() and b.infos[0]["episode"] == b.infos[1]["episode"] == {
            "return": 15.0,
            "length": 5,
            "success": False,
        }


def _pool_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("jgem-pool-")}


def _new_pool_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    # Identity, not a count: a thread another test abandoned on a step timeout may end while this test runs.
    return _pool_threads() - before  # threading.enumerate lists only live threads


def test_close_leaves_no_threads_or_processes() -> None:
    before = _pool_threads()
    pool = _pool("thread", 8)
    assert len(_new_pool_threads(before)) == 8
    _reset_all(pool, list(range(8)))
    pool.close()
    assert not _new_pool_threads(before)
    pool.close()  # idempotent

    pool = _pool("process", 4)
    pids = pool._backend.pids
    assert all(psutil.pid_exists(p) for p in pids)
    _reset_all(pool, [0, 1, 2, 3])
    pool.close()
    assert not any(psutil.pid_exists(p) for p in pids)


_CHILD = """
import signal, sys, time
# Ctrl-C as a terminal delivers it: a child inherits an ignored SIGINT, and Python keeps it ignored
signal.signal(signal.SIGINT, signal.default_int_handler)
from jgem.envs.pool import EnvPool
from tests.envs.faulty_envs import CounterEnv
if __name__ == "__main__":
    with EnvPool(CounterEnv, 4, backend="process", num_workers=2) as pool:
        pool.reset(); pool.recv()
        if sys.argv[1] == "busy":
            pool.send([0], ["hang"])
        print(*pool._backend.pids, flush=True)
        time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "mode"), [(signal.SIGKILL, "busy"), (signal.SIGTERM, "idle"), (signal.SIGINT, "busy")])
def test_workers_die_with_their_parent(sig: int, mode: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, mode], stdout=subprocess.PIPE, cwd=ROOT, env=env, text=True)
    try:
        pids = [int(p) for p in child.stdout.readline().split()]
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
        pids += [p.pid for p in psutil.Process(child.pid).children(recursive=True)]  # forkserver too
        os.kill(child.pid, sig)
        child.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids), f"orphaned workers after {signal.Signals(sig).name}"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_wrappers_and_partial_pickle_into_process_workers() -> None:
    from jgem.envs.wrappers import HistoryWrapper

    wrappers = [partial(HistoryWrapper, mode="concat"), EpisodeStatistics]
    with EnvPool(CounterEnv, 2, backend="process", num_workers=1, wrappers=wrappers, env_kwargs={"horizon": 1}) as pool:
        pool.reset(seeds=[0, 1])
        first = _sorted(pool.recv())
        b = pool.step([0], ["x"])
        start = first[0][4]["start"]
        assert b.obs[0] == f"start {start}\n{start}:1:x\n[t=1]"
        assert b.infos[0]["episode"]["length"] == 1


def test_remote_backend_round_robin() -> None:
    pytest.importorskip("jgem.envs.remote.client")
    server = pytest.importorskip("jgem.envs.remote.server")
    uvicorn = pytest.importorskip("uvicorn")
    from jgem.envs.remote.service import ServeConfig
    from jgem.registry import register

    register("test:PoolCounter-v0", CounterEnv, overwrite=True, horizon=2)
    servers, urls = [], []
    try:
        for _ in range(2):
            cfg = uvicorn.Config(
                server.create_app(ServeConfig(envs=("test:PoolCounter-v0",))),
                host="127.0.0.1",
                port=0,
                log_level="error",
            )
            srv = uvicorn.Server(cfg)
            t = threading.Thread(target=srv.run, daemon=True)
            t.start()
            while not srv.started:
                time.sleep(0.02)
            port = srv.servers[0].sockets[0].getsockname()[1]
            servers.append((srv, t))
            urls.append(f"http://127.0.0.1:{port}")
        with EnvPool("test:PoolCounter-v0", 4, backend="remote", remote_urls=urls) as pool:
            assert [e.base_url for e in pool._backend.envs] == [urls[0], urls[1], urls[0], urls[1]]
            pool.reset(seeds=[1, 2, 3, 4])
            starts = {int(i): info["start"] for i, info in zip(*(lambda b: (b.env_ids, b.infos))(pool.recv()))}
            assert starts[0] == CounterEnv().reset(seed=1)[1]["start"]
            b = pool.step([0, 1, 2, 3], ["a", "b", "c", "d"])
            assert b.obs[3] == f"{starts[3]}:1:d" and not b.terminated.any()
            b = pool.step([0], ["e"])
            assert b.terminated.tolist() == [True]
    finally:
        for srv, t in servers:
            srv.should_exit = True
            t.join(timeout=5)


def _per_env_traces(backend: str) -> dict[int, list]:
    """Each env's own trajectory under a random agent whose choices depend only on that env's history.

    Random sleeps scramble arrival order in the async backends; the per-env story must not change.
    """
    rngs = [np.random.default_rng(100 + i) for i in range(8)]
    episodes = [0] * 8
    traces: dict[int, list] = {i: [] for i in range(8)}
    with _pool(backend, 8, batch_size=3, env_kwargs={"horizon": 3}) as pool:
        pool.reset(seeds=list(range(8)))
        while pool.num_in_flight:
            b = pool.recv()
            for i, obs, rew, term, trunc, is_reset in zip(
                b.env_ids.tolist(),
                b.obs,
                b.rewards.tolist(),
                b.terminated.tolist(),
                b.truncated.tolist(),
                b.is_reset.tolist(),
            ):
                traces[i].append((obs, rew, term, trunc, is_reset))
                if term:
                    episodes[i] += 1
                    if episodes[i] < 3:
                        pool.reset([i], seeds=[int(rngs[i].integers(1000))])
                    continue
                pool.send([i], [f"sleep:{rngs[i].random() / 50:.3f}"])
    return traces


def test_backends_agree_per_env() -> None:
    ref = _per_env_traces("inline")
    assert all(len(t) == 3 * 4 for t in ref.values())  # 3 episodes of reset + 3 steps
    assert len({t[1][0] for t in ref.values()}) == 8  # envs really differ
    assert _per_env_traces("thread") == ref
    assert _per_env_traces("process") == ref


def test_dropped_pool_stops_its_threads() -> None:
    import gc

    before = _pool_threads()
    pool = _pool("thread", 4)
    assert len(_new_pool_threads(before)) == 4
    del pool
    gc.collect()
    deadline = time.monotonic() + 3
    while _new_pool_threads(before) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _new_pool_threads(before)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", sorted(BAD_RESULTS))
def test_malformed_result_faults_only_that_env(backend: str, bad: str) -> None:
    with _pool(backend, 3) as pool:
        _reset_all(pool, [0, 1, 2])
        pool.send([0, 1, 2], ["a", f"bad:{bad}", "b"])
        got = {}
        while pool.num_in_flight:
            got.update(_sorted(pool.recv()))
        assert sorted(got) == [0, 1, 2]  # the healthy envs' results are kept
        assert got[0][1] == 1.0 and got[2][1] == 1.0 and "fault" not in got[0][4] and "fault" not in got[2][4]
        obs, reward, terminated, truncated, info = got[1]
        assert info["fault"].startswith("invalid_result:") and truncated and not terminated and reward == 0.0
        assert pool.num_faults == 1
        pool.reset([1], seeds=[1])  # the faulted env is rebuilt and plays on
        pool.recv()
        assert pool.step([1], ["x"]).rewards.tolist() == [1.0]


def test_step_observation_must_keep_the_reset_type() -> None:
    with EnvPool(partial(ListObsEnv), 2, backend="inline") as pool:
        _reset_all(pool, [0, 1])
        b = pool.step([0, 1], ["a", "str"])
        assert "fault" not in b.infos[0] and b.obs[0] == ["a"]
        assert b.infos[1]["fault"].startswith("invalid_result:") and "list" in b.infos[1]["fault"]


def test_flags_and_rewards_become_plain_python_types() -> None:
    env = CounterEnv()
    env.reset(seed=0)
    _, _, reward, term, trunc, _, _ = run_command(env, 0, "step", "x")
    assert type(reward) is float and type(term) is bool and type(trunc) is bool


@pytest.mark.parametrize("backend", BACKENDS)
def test_system_exit_in_an_env_is_a_fault(backend: str) -> None:
    # With the default step_timeout=None the thread backend used to lose the worker and never answer.
    with _pool(backend, 2, num_workers=1) as pool:
        _reset_all(pool, [0, 1])
        pool.send([0, 1], ["sysexit", "a"])
        got = {}
        while pool.num_in_flight:
            got.update(_sorted(pool.recv(timeout=10)))
        assert got[0][4]["fault"].startswith("exception: SystemExit")
        assert "fault" not in got[1][4]
        pool.reset([0], seeds=[0])
        pool.recv()
        assert pool.step([0, 1], ["b", "c"]).rewards.tolist() == [1.0, 2.0]  # the worker is still there


def test_process_unpicklable_result_faults_only_its_env() -> None:
    with _pool("process", 4, num_workers=1) as pool:
        _reset_all(pool, [0, 1, 2, 3])
        b = pool.step([0, 1, 2, 3], ["a", "unpicklable_info", "b", "c"])
        assert [("fault" in info) for info in b.infos] == [False, True, False, False]
        assert "pickled" in b.infos[1]["fault"] and b.rewards.tolist() == [1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("backend", ["inline", "thread"])
def test_close_is_bounded_when_an_env_close_hangs(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import jgem.envs.pool as pool_module

    monkeypatch.setattr(pool_module, "CLOSE_TIMEOUT", 0.5)  # the default the trainer's `finally` gets
    pool = EnvPool(HangingCloseEnv, 2, backend=backend)
    caught: list = []

    def close() -> None:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            pool.close()
        caught.extend(w)

    t = threading.Thread(target=close, daemon=True)
    t.start()
    t.join(timeout=5.0)
    assert not t.is_alive(), "close() did not return"
    (w,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert "env 0" in str(w.message) and "env 1" in str(w.message) and "0.5s" in str(w.message)
