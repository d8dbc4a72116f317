"""What a user reads when a run stops before its end (issue 49): Ctrl-C, and a process of several that dies. Each
stopped process ends on one jgem line (where it was, why, how to resume); tracebacks and XLA's own messages go to
the process's log in the run directory, not the terminal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jgem.checkpoint import committed_steps
from tests.multiprocess import free_port, xla_flags

ROOT = Path(__file__).resolve().parents[1]

# `python -m experiments.train` as a user runs it, cut to tests/train_utils.py's small run: the 1-layer "test-micro"
# model, GuessTheNumber on the inline backend, short episodes, no evaluation
CLI = ["tiny", "--import", "tests.learner_micro_preset", "--model.preset", "test-micro", "--algorithm", "reinforce"]
CLI += ["--learner.policy-loss", "reinforce", "--learner.epochs", "1", "--learner.minibatches", "1"]
CLI += ["--learner.kl-coef", "0", "--rollout.max-new-tokens", "6", "--rollout.max-episode-tokens", "320"]
CLI += ["--eval-every", "0", "--no-plot", "--checkpoint-every", "1", "--batch-buckets", "128", "256", "512"]


def _cli(args: list[str], env: dict | None = None) -> subprocess.Popen:
    e = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1), "PYTHONPATH": str(ROOT), **(env or {})}
    e.pop("JAX_NUM_CPU_DEVICES", None)
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.train", *CLI, *args],
        cwd=ROOT,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.slow
def test_ctrl_c_ends_on_one_line_with_the_step_and_the_last_checkpoint(tmp_path):
    """Ctrl-C printed a 40-line traceback ending in KeyboardInterrupt."""
    run = tmp_path / "run"
    args = ["--run-dir", str(run), "--steps", "50", "--episodes-per-step", "4", "--env.num-envs", "4"]
    # a suite started in the background (`make test &`) ignores SIGINT, and a child inherits an ignored signal: the
    # run is started with Python's own handler in place, as from a terminal (a handler resets to the default on exec)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        p = _cli([*args, "--warm-start.steps", "0", "--console"])
    finally:
        signal.signal(signal.SIGINT, before)
    lines = []
    for line in p.stdout:  # a pipe: one progress line per step ("train  1/50 ...")
        lines.append(line)
        if re.match(r"train +2/50", line):
            break
    else:
        pytest.fail("".join(lines)[-3000:])
    p.send_signal(signal.SIGINT)
    try:
        out = "".join(lines) + p.communicate(timeout=120)[0]
    finally:
        if p.poll() is None:  # never left behind (it once hung in tensorboardX's close: jgem.metrics)
            p.kill()
            p.wait()
    assert p.returncode == 130, out[-3000:]
    last = out.strip().splitlines()[-1]
    step = committed_steps(run / "checkpoints")[-1]
    assert step >= 1  # the step line comes before its checkpoint
    assert re.fullmatch(
        rf"jgem: interrupted in step \d+ of 50; rerun the same command to resume from the last checkpoint, "
        rf"{re.escape(str(run / 'checkpoints' / str(step)))}/ \(step {step}\)",
        last,
    ), out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_killed_sampler_ends_every_other_process_of_a_role_split_on_one_line(tmp_path):
    """A role split (4 processes x 1 device: 0 and 1 sample, 2 and 3 train) whose sampler process 1 is SIGKILLed
    after a checkpoint. The others ended on a gloo error's traceback ("Connection closed by peer") or XLA's fatal
    log with its C++ stack (`CoordinationServiceAgent::SetError`); now each ends on jgem's line naming process 1,
    what it was doing and the checkpoint to resume from, its traceback in its log."""
    run = tmp_path / "run"
    args = ["--run-dir", str(run), "--steps", "3", "--episodes-per-step", "2", "--env.num-envs", "2"]
    args += ["--warm-start.steps", "1", "--warm-start.episodes-per-step", "2", "--keep-checkpoints", "9"]
    args += ["--pipeline.mode", "off_policy", "--pipeline.lag", "1", "--no-console"]
    args += ["--mesh.rollout-devices", "2", "--mesh.rollout-placement", "first"]
    env = {"JGEM_COORDINATOR": f"127.0.0.1:{free_port()}", "JGEM_NUM_PROCESSES": "4", "JGEM_HEARTBEAT_TIMEOUT": "5"}
    procs = [_cli(args, env={**env, "JGEM_PROCESS_ID": str(i)}) for i in range(4)]
    try:
        deadline = time.time() + 600
        while not committed_steps(run / "checkpoints"):
            assert all(p.poll() is None for p in procs) and time.time() < deadline, "no checkpoint"
            time.sleep(0.05)
        t = time.time()
        procs[1].send_signal(signal.SIGKILL)
        logs = [p.communicate(timeout=120)[0] for p in procs]
        stopped_in = time.time() - t
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[1].returncode == -signal.SIGKILL
    assert stopped_in < 30, stopped_in

    def log_of(i: int) -> str:  # what the failure shows: the terminal's last lines and the process's log
        path = run / "logs" / f"process-{i}.log"
        return logs[i][-1500:] + "\n--- " + str(path) + ":\n" + (path.read_text()[-6000:] if path.exists() else "")

    for i in (0, 2, 3):
        assert procs[i].returncode == 1, (i, log_of(i))
        last = logs[i].strip().splitlines()[-1]
        assert re.fullmatch(
            rf"jgem: process {i} of 4 stopped (in|while) [^:]+: (the run stopped because )?process 1 died; rerun the "
            rf"same command to resume from the last checkpoint, {re.escape(str(run / 'checkpoints'))}/\d+/ "
            rf"\(step \d+\); details in {re.escape(str(run / 'logs' / f'process-{i}.log'))}",
            last,
        ), (i, log_of(i))
        for noise in ("Gloo", "CoordinationServiceAgent", "Traceback", "Check failure"):
            assert noise not in logs[i], (i, noise, log_of(i))
    details = "".join((run / "logs" / f"process-{i}.log").read_text() for i in (0, 2, 3))
    assert "Traceback (most recent call last)" in details and "Gloo" in details


def test_a_stopping_process_whose_way_out_hangs_ends_on_its_line_all_the_same(tmp_path):
    """A process of several that is stopping calls the coordinator on its way out (its beat read, the reason
    posted), which may wait long on a coordinator that is gone: the watchdog ends it within its limit, on jgem's line
    (the clean-clone suite's kill test once waited out its 120 s for a survivor)."""
    code = (
        "import time; from pathlib import Path; from jgem.sharding import mesh; "
        f"mesh.RUN.checkpoints = Path({str(tmp_path)!r}); mesh.RUN.doing = 'in step 2 of 3'; "
        "mesh._watchdog(0.5); time.sleep(60)"  # the hung call
    )
    t = time.time()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 1 and time.time() - t < 30
    assert out.stderr.strip().splitlines()[-1] == (
        "jgem: process 0 of 1 stopped in step 2 of 3: another process died, or jax's coordinator (process 0) cannot "
        "be reached; no checkpoint was saved yet: rerun the same command to start the run again"
    )


@pytest.fixture
def process_2_of_4(monkeypatch):
    """`jgem.sharding.mesh` as process 2 of 4 sees it, with beats of its own making (no coordinator)."""
    from jgem.sharding import mesh

    monkeypatch.setattr(mesh.jax, "process_index", lambda: 2)
    monkeypatch.setattr(mesh.jax, "process_count", lambda: 4)
    monkeypatch.setattr(mesh, "RUN", mesh.RunState())
    monkeypatch.setattr(mesh, "BEAT_S", 0.1)
    return mesh


def test_a_process_whose_coordinator_left_after_another_died_names_the_one_that_died(process_2_of_4):
    """Process 1 is killed; process 0 (the coordinator's host) leaves on jax's fatal error for it before process 2
    has said why it stops. Process 2's beats as last read show process 1's counter standing still: it names process
    1, not process 0 (the clean-clone suite's kill test once read "process 0 ... died or cannot be reached")."""
    mesh, now = process_2_of_4, time.monotonic()
    mesh.RUN.beats = {0: ("40", now - 0.35), 1: ("37", now - 0.6), 2: ("40", now - 0.35), 3: ("40", now - 0.35)}
    mesh.RUN.read_at = now - 0.3  # the coordinator has not answered since (3 beats)
    assert mesh.dead_processes() == [1]
    mesh.RUN.beats[1] = ("40", now - 0.35)  # every counter moved until the coordinator left: process 0 is to blame
    assert mesh.dead_processes() == [0]


def test_dead_processes_waits_for_every_other_beat_to_move_or_stand_still(process_2_of_4):
    """The coordinator answers: process 1's counter stands still, 0's and 3's move (a beat thread of their own,
    here), so dead_processes names 1 as soon as 1 has stood still over 2.5 beats, even though its last beat was read
    after the call (the clean-clone suite's publication kill once ended on "this process failed"); a stopping process
    is not dead."""
    import threading

    mesh, done = process_2_of_4, threading.Event()

    def beats() -> None:
        n = 0
        while not done.is_set():
            now = time.monotonic()
            n += 1
            for i in (0, 2, 3):
                mesh.RUN.beats[i] = (str(n), now)
            if n <= 2:  # process 1's last beat, read after dead_processes is called
                mesh.RUN.beats[1] = (str(n), now)
            mesh.RUN.read_at = now
            time.sleep(mesh.BEAT_S)

    thread = threading.Thread(target=beats, daemon=True)
    thread.start()
    try:
        time.sleep(0.05)
        t = time.monotonic()
        assert mesh.dead_processes() == [1]
        assert time.monotonic() - t < (mesh.STILL_BEATS + 2) * mesh.BEAT_S
        mesh.RUN.stopping = {1}
        t = time.monotonic()
        assert mesh.dead_processes() == []  # every other one alive: no wait to the limit
        assert time.monotonic() - t < mesh.STILL_BEATS * mesh.BEAT_S
    finally:
        done.set()
        thread.join()


# XLA's fatal message for a lost process, as process 0 of a run writes it when process 1 stopped beating
_FATAL = (
    "F1129 12:49:55.090479   28531 client.h:80] Terminating process because the JAX distributed service detected "
    "fatal errors. This most likely indicates that another task died; see the other task logs for more details. "
    "absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n1\nThe tasks have "
    "crashed.\n\nRPC: /xla.coordination.CoordinationService/PollForError [type.googleapis.com/tensorflow.Coordination"
    "ServiceError='']\n"
)


@pytest.mark.parametrize("split", [False, True])
def test_xla_s_fatal_message_for_a_lost_process_is_answered_with_jgem_s_line_at_once(tmp_path, split):
    """XLA aborts about 80 ms after its fatal message (the clean-clone CI's publication kill once ended on orbax's
    error instead of jgem's line: the log reader slept 50 ms for the rest of the message, then lost the race under
    load). The reader answers a whole message without waiting (no sleep at all), and waits for the rest of a message
    cut in two writes."""
    code = f"""
import os, sys, threading, time
from pathlib import Path
from jgem.sharding import mesh
slept = []
real_sleep = time.sleep
time.sleep = lambda s: (slept.append(s), real_sleep(s))[1]
real_exit = os._exit
os._exit = lambda rc: (print("slept", sum(slept), file=sys.stderr, flush=True), real_exit(rc))
mesh.RUN.checkpoints, mesh.RUN.doing = Path({str(tmp_path)!r}), "in step 3 of 3"
read, write = os.pipe()
text = {_FATAL!r}.encode()
cut = text.index(b"unhealthy") if {split} else len(text)  # the status, naming the process, in a 2nd write
os.write(write, text[:cut])
if cut < len(text):
    threading.Timer(0.005, lambda: os.write(write, text[cut:])).start()
mesh._relay(read, Path({str(tmp_path / "log")!r}), 2)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and lines[-2] == (
        "jgem: process 0 of 1 stopped in step 3 of 3: process 1 died; no checkpoint was saved yet: rerun the same "
        "command to start the run again"
    ), out.stderr
    slept = float(lines[-1].split()[1])
    assert slept == 0 if not split else 0 < slept < 0.02, out.stderr
    assert (tmp_path / "log").read_text() == _FATAL  # the whole message in the log
