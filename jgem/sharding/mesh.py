"""Device meshes (data, fsdp, tensor; expert with expert parallelism) and multi-host initialisation."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import io
import logging
import os
import re
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jgem.sharding.config import BATCH_AXES, MeshConfig

log = logging.getLogger(__name__)


def make_mesh(cfg: MeshConfig | None = None, devices: list | None = None, *, any_devices: bool = False) -> Mesh:
    """A `Mesh` with axes (data, fsdp, tensor) over `devices` (default: all, across processes); with `cfg.expert` > 1
    (data, fsdp, expert, tensor).

    Without a config every device goes to `data` (pure data parallelism). `any_devices`: the devices may be any
    subset (a side of a split), laid out in id order where they form no box of the slice.
    """
    cfg = cfg or MeshConfig(data=-1)
    devices = list(jax.devices() if devices is None else devices)
    shape = cfg.resolve(len(devices))
    if devices[0].platform == "cpu":
        dev_array = np.asarray(devices, dtype=object).reshape(shape)
    else:  # topology-aware placement (ICI rings on TPU, NVLink islands on GPU)
        # splitting a physical axis lets e.g. tensor=8 sit on a 4x4x4 or 16x16 slice (else NotImplementedError)
        try:
            dev_array = mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True)
        except (AssertionError, ValueError, NotImplementedError) as e:
            if not any_devices:
                raise
            # a set of chips that is no box of the slice (one side of a per-process split: some chips of each
            # host): jax cannot lay rings over it; the devices in id order
            log.warning("mesh %s over %d devices in id order: %s", shape, len(devices), str(e).splitlines()[0][:200])
            dev_array = np.asarray(sorted(devices, key=lambda d: d.id), dtype=object).reshape(shape)
    names = cfg.axis_names()
    return Mesh(dev_array, names, axis_types=(AxisType.Auto,) * len(names))


def split_meshes(cfg: MeshConfig | None = None, devices: list | None = None) -> tuple[Mesh, Mesh]:
    """(the learner's mesh, the sampler's): with `cfg.rollout_devices` N the sampler's over N devices
    (`cfg.rollout()`'s axes), the learner's over the rest; without, one mesh over every device, twice.

    `per_process` (the default): each process gives the sampler the same share of its own devices (its first
    N / processes, by id): every process keeps both roles, its envs' episodes are trained where they were played,
    and a publication pairs devices of one host (on a TPU VM, chips next to each other). `first`: the first N
    devices (in one process the same). In one process both are the first N devices."""
    cfg = cfg or MeshConfig(data=-1)
    devices = list(jax.devices() if devices is None else devices)
    n = cfg.rollout_devices
    if not n:
        mesh = make_mesh(cfg, devices)
        return mesh, mesh
    if errors := cfg.split_errors(len(devices)):
        raise ValueError(errors[0])
    if cfg.rollout_placement == "first":
        return make_mesh(cfg, devices[n:], any_devices=True), make_mesh(cfg.rollout(), devices[:n], any_devices=True)
    by_process: dict[int, list] = {}
    for d in sorted(devices, key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(d.process_index, []).append(d)
    if n % len(by_process):
        raise ValueError(
            f"mesh.rollout_devices {n} is not a multiple of the {len(by_process)} processes: each process gives the "
            f"sampler the same share of its devices; use a multiple of {len(by_process)}"
        )
    k = n // len(by_process)
    sampler = [d for ds in by_process.values() for d in ds[:k]]
    learner = [d for ds in by_process.values() for d in ds[k:]]
    return make_mesh(cfg, learner, any_devices=True), make_mesh(cfg.rollout(), sampler, any_devices=True)


EXIT_GRACE_S = 10.0  # process 0's wait before it ends on an error (the others poll for errors once a second)
BEAT_S = 1.0  # how often each process of several says it is alive (`_beat`)
STOP_KEY = "jgem/stop"  # the coordinator's key-value store: why the run stops (the first process to say wins)


class RunStopped(RuntimeError):
    """Another process of the run posted why the run stops (`post_stop`); this one stops with it."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the run stopped because {reason}")
        self.reason = reason


@dataclasses.dataclass
class RunState:
    """What a process of a run is doing, where its checkpoints are and where its log goes: what the one line a
    stopped process ends on says (`stop_line`). The trainer keeps `doing` and `checkpoints` up to date."""

    doing: str = "while starting"
    step: int | None = None  # the step in progress (1-based), once training
    checkpoints: Path | None = None
    log: Path | None = None  # this process's log file (several processes: `log_to_run_dir`)
    console: Any = None  # the terminal's stderr, kept apart from the log
    reason: str | None = None  # a stop reason another process posted, as last seen (`_beat`)
    said: bool = False  # the one line is out
    # the beats as this process last read them (`_beat`): process -> (its counter, when this process saw it change),
    # the processes that said they stop, and when the coordinator last answered (time.monotonic())
    beats: dict[int, tuple[str, float]] = dataclasses.field(default_factory=dict)
    stopping: set[int] = dataclasses.field(default_factory=set)
    read_at: float | None = None


RUN = RunState()


def log_to_run_dir(run_dir: str | Path) -> Path | None:
    """Several processes: this process's stdout and stderr file descriptors go to `<run_dir>/logs/process-<i>.log`
    (XLA's and gloo's own messages, a fatal error's C++ stack, tracebacks), Python's `sys.stdout` and `sys.stderr` to
    both that file and the terminal (warnings, progress, jgem's messages; a traceback the log's alone); a stopped
    process's one line goes to the terminal (`exit_at_once_on_error`). The log's path; None in one process (nothing
    changes). Idempotent."""
    if jax.process_count() == 1:
        return None
    if RUN.log is not None:
        return RUN.log
    path = Path(run_dir) / "logs" / f"process-{jax.process_index()}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    old = sys.stderr
    log_file = open(path, "a", buffering=1, encoding="utf-8", errors="replace")  # noqa: SIM115 (the process's)
    terminal = [os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace") for fd in (1, 2)]
    RUN.console = terminal[1]
    # the descriptors write to a pipe whose reader copies to the log at once: it sees XLA's fatal message as it is
    # written, before XLA aborts (a thread polling the log file lost that race under load: the test failed once)
    read, write = os.pipe()
    os.dup2(write, 1)
    os.dup2(write, 2)
    os.close(write)
    threading.Thread(target=_relay, args=(read, path, terminal[1].fileno()), name="jgem-stderr", daemon=True).start()
    sys.stdout, sys.stderr = _Tee(terminal[0], log_file), _Tee(terminal[1], log_file)
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for h in getattr(logger, "handlers", []):  # handlers made before (absl's) wrote to the old sys.stderr
            if isinstance(h, logging.StreamHandler) and h.stream is old:
                h.setStream(sys.stderr)
    RUN.log = path
    return path


class _Tee(io.TextIOBase):
    """`sys.stdout` / `sys.stderr` of a process whose descriptors go to its log: to the terminal and the log."""

    def __init__(self, console: Any, log_file: Any) -> None:
        self.console, self.log_file = console, log_file

    def write(self, text: str) -> int:
        shown = text.split("Traceback (most recent call last)", 1)[0]  # a logged error's traceback: the log's alone
        if shown and not RUN.said:  # after jgem's one line, nothing more on the terminal
            with contextlib.suppress(OSError, ValueError):
                self.console.write(shown if shown == text else shown.rstrip() + f" (traceback in {RUN.log})\n")
        with contextlib.suppress(OSError, ValueError):  # a full disk: the terminal still shows it
            self.log_file.write(text)
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.console.flush()
        self.log_file.flush()

    def isatty(self) -> bool:
        return self.console.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.console.encoding

    def fileno(self) -> int:
        return self.console.fileno()


def resume_advice() -> str:
    """What to type to go on: the run's last checkpoint on disk, which the same command resumes from."""
    none = "no checkpoint was saved yet: rerun the same command to start the run again"
    if RUN.checkpoints is None:  # no import on the way out: a stopping process has ~80 ms before XLA's abort
        return none
    from jgem.checkpoint import committed_steps

    steps = committed_steps(RUN.checkpoints)
    if not steps:
        return none
    last = RUN.checkpoints / str(steps[-1])
    return f"rerun the same command to resume from the last checkpoint, {last}/ (step {steps[-1]})"


def stop_line(why: str) -> str:
    """The one line a process of several ends on: which process, what it was doing, why, how to resume, where the
    details are."""
    me, n = jax.process_index(), jax.process_count()
    where = f"; details in {RUN.log}" if RUN.log is not None else ""
    return f"jgem: process {me} of {n} stopped {RUN.doing}: {why}; {resume_advice()}{where}"


def _say(line: str) -> None:
    """`line` on the terminal (and in the log, where there is one): the terminal's last; what any thread writes
    after it (orbax's background save failing without its peer, say) goes to the log alone."""
    with _SAYING:  # once: the main thread and the log reader (`_relay`) may both come to say why
        if RUN.said:
            return
        sys.stdout.flush()
        if RUN.console is not None:
            sys.stderr.write(line + "\n")
        else:
            print(line, file=sys.stderr, flush=True)
        sys.stderr.flush()
        RUN.said = True


_SAYING = threading.Lock()


def _client() -> Any:
    from jax._src import distributed

    return distributed.global_state.client


def post_stop(reason: str) -> None:
    """Tell every process why the run stops (`reason`: "process 3 failed: ..."); the first reason posted stays."""
    with contextlib.suppress(Exception):  # another process posted first, or the coordinator is gone
        _client().key_value_set(STOP_KEY, reason)


def stop_reason() -> str | None:
    """Why the run stops, as a process posted it (`post_stop`); None while it goes on."""
    try:
        return _client().key_value_try_get(STOP_KEY)
    except Exception:  # none posted
        return None


def _beat() -> None:
    """A thread: this process's beat counter in the coordinator's store every `BEAT_S`; everyone's counters and the
    posted stop reason read back (`RUN.beats`, `RUN.reason`) while the coordinator is there. What it read last stays
    when the coordinator goes: a process whose counter stood still before is the one that died (`dead_processes`)."""
    client, me, n = _client(), jax.process_index(), 0
    while not _BEATS_STOP.is_set():
        with contextlib.suppress(Exception):
            client.key_value_set(f"jgem/alive/{me}", str(n), allow_overwrite=True)
            n += 1
        with contextlib.suppress(Exception):
            alive = client.key_value_dir_get("jgem/alive")
            stopping = client.key_value_dir_get("jgem/stopping")
            now = time.monotonic()
            for key, value in alive:
                i = int(key.rsplit("/", 1)[1])
                if RUN.beats.get(i, ("",))[0] != value:
                    RUN.beats[i] = (value, now)
            RUN.stopping = {int(key.rsplit("/", 1)[1]) for key, _ in stopping}
            RUN.read_at = now
        if RUN.reason is None:
            RUN.reason = stop_reason()
        _BEATS_STOP.wait(BEAT_S)


STILL_BEATS = 2.5  # a counter that stood still over this many beats belongs to a process that is gone


def _still(seconds: float, *, stopping: bool = False) -> list[int]:
    """The other processes whose counter stood still over `seconds` at the last read of the coordinator (its last
    change may have been read after a process died: a beat written just before); those that said they stop too when
    `stopping`."""
    me, at = jax.process_index(), RUN.read_at
    if at is None:
        return []
    return [
        i
        for i, (_, changed) in sorted(RUN.beats.items())
        if i != me and (stopping or i not in RUN.stopping) and at - changed > seconds
    ]


def dead_processes() -> list[int]:
    """The other processes that are gone, as this process's beat thread reads the coordinator (`_beat`): waits
    until every other process's counter has either moved well after the call (a live one's moves every beat; a dead
    one's last beat may still be read just after the call) or stood still over `STILL_BEATS` beats, at most that
    long and three beats more. Where the coordinator stops answering meanwhile (process 0, which hosts it, left: on
    jax's fatal error for the lost process, say), those whose counter had stood still over 1.5 beats by then, else
    [0]."""
    me, n, t = jax.process_index(), jax.process_count(), time.monotonic()
    # a dead one's last beat may be read up to a beat after the call, its standing still a beat after the limit
    deadline = t + (STILL_BEATS + 3) * BEAT_S
    while True:
        now = time.monotonic()
        if RUN.read_at is None or now - RUN.read_at > 2.5 * BEAT_S:  # the coordinator does not answer
            return (_still(1.5 * BEAT_S) or [0]) if me != 0 else []
        dead = _still(STILL_BEATS * BEAT_S)
        alive = {i for i, (_, changed) in RUN.beats.items() if changed > t + 1.5 * BEAT_S}
        others = {i for i in range(n) if i != me and i not in RUN.stopping}
        if now > deadline or others <= alive | set(dead):
            return dead
        time.sleep(BEAT_S / 4)


def _died(ids: list[int]) -> str:
    if ids == [0]:
        return "process 0 (which hosts the coordinator) died or cannot be reached"
    return f"process {ids[0]} died" if len(ids) == 1 else f"processes {', '.join(map(str, ids))} died"


# what XLA logs (then aborts) when jax's coordinator reports a lost process, or cannot be reached
XLA_FATAL = b"Terminating process because the JAX distributed service detected fatal errors"


def _relay(read: int, path: Path, terminal: int) -> None:
    """A thread: what the process writes to its stdout and stderr descriptors (XLA, gloo, absl) into its log file,
    read as it is written. On XLA's fatal message for a lost process (`XLA_FATAL`; XLA aborts next, once its C++ stack
    is written), jgem's line on the terminal (`_heartbeat_lost`) and the process ends first. It never stops reading
    while the process lives (a reader gone would leave every write blocked on a full pipe): a log it cannot write (a
    full disk) sends the text to the terminal instead."""
    try:
        log = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError:
        log = terminal
    seen = b""
    while True:
        try:
            chunk = os.read(read, 1 << 16)
        except OSError:
            return
        if not chunk:
            return
        try:
            os.write(log, chunk)
        except OSError:
            with contextlib.suppress(OSError):
                os.write(terminal, chunk)
        seen = (seen + chunk)[-8192:]
        if XLA_FATAL in seen:
            try:
                if not RUN.said:
                    seen = _rest_of_fatal(read, log, seen)
                _heartbeat_lost(seen[seen.index(XLA_FATAL) :].decode(errors="replace"))
            finally:
                os._exit(1)  # whatever went wrong above, before XLA's abort


def _rest_of_fatal(read: int, log: int, seen: bytes) -> bytes:
    """XLA's fatal message with its status (which names the lost process), read at once: XLA aborts about 80 ms
    after it writes the message (once its stack is written), so jgem's line must be on the terminal well before.
    The message comes in one write; where it has not all come yet, at most `FATAL_WAIT_S` more."""
    deadline = time.monotonic() + FATAL_WAIT_S
    os.set_blocking(read, False)
    while FATAL_END not in seen[seen.index(XLA_FATAL) :] and time.monotonic() < deadline:
        try:
            more = os.read(read, 1 << 16)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        except OSError:
            break
        if not more:
            break
        with contextlib.suppress(OSError):
            os.write(log, more)
        seen += more
    return seen


FATAL_END = b"RPC:"  # the status's last line names the RPC that reported it
FATAL_WAIT_S = 0.02


def _heartbeat_lost(status: str) -> None:
    """jax's coordinator reports a lost process (XLA then logs a fatal error with its C++ stack and aborts): jgem's
    line to the terminal, exit."""
    if RUN.said:  # this process has said why it stops (process 0, waiting for the others): it ends now
        os._exit(1)
    if RUN.reason is not None:
        why = f"the run stopped because {RUN.reason}"
    elif "Failed to send RPC to coordination service" in status or "leader task" in status:
        why = _died(_still(1.5 * BEAT_S) or [0])  # process 0 left: after one that died, or itself
    elif m := re.search(r"unhealthy[^:]*:\s*((?:\d+\s*)+)", status):
        why = _died(sorted(int(i) for i in m.group(1).split()))
    else:
        why = f"jax's coordinator reports: {status.splitlines()[0][:300] if status else 'a lost process'}"
    _say(stop_line(why))
    os._exit(1)


@contextlib.contextmanager
def exit_at_once_on_error():
    """Around a program's work. Ctrl-C (KeyboardInterrupt) ends it on one line: where it was, and how to resume
    (exit status 130). Several processes: an error (not a SystemExit) ends this process at once (`os._exit(1)`) on
    one line (`stop_line`: the process that died, when one did, what this one was doing, how to resume), its
    traceback in the log (`log_to_run_dir`); it posts why first (`post_stop`), so the others waiting for messages
    stop with the same reason. Its peers may be blocked in a collective with it, which no message reaches; the
    coordinator's heartbeat (`JGEM_HEARTBEAT_TIMEOUT`) stops them once this process is gone, where a normal exit
    would hold every process in jax's shutdown barrier for minutes. Process 0 hosts the coordinator: it stays up
    `EXIT_GRACE_S` first, so that the others can still read the posted reason and leave with it. One process: an
    error raises as it is."""
    try:
        yield
        if jax.process_count() > 1:  # done: a process whose beat stops now has not died
            with contextlib.suppress(Exception):
                _client().key_value_set(f"jgem/stopping/{jax.process_index()}", "done")
    except KeyboardInterrupt:
        if jax.process_count() > 1:
            _watchdog(STOP_WITHIN_S)
            traceback.print_exc(file=_log_only())
            with contextlib.suppress(Exception):
                _client().key_value_set(f"jgem/stopping/{jax.process_index()}", "interrupted")
            post_stop(f"process {jax.process_index()} was interrupted (Ctrl-C)")
        _say(f"jgem: interrupted {RUN.doing}; {resume_advice()}")
        if jax.process_count() == 1:
            raise SystemExit(130) from None
        os._exit(130)
    except Exception as e:
        if jax.process_count() == 1:
            raise
        _watchdog(STOP_WITHIN_S)
        traceback.print_exc(file=_log_only())
        me = jax.process_index()
        with contextlib.suppress(Exception):  # so that no other process takes this one for dead
            _client().key_value_set(f"jgem/stopping/{me}", "stopping")
        reason = RUN.reason or stop_reason()
        if isinstance(e, RunStopped):
            why = str(e)
        elif reason is not None:
            why = f"the run stopped because {reason}"
        elif dead := dead_processes():  # the transport's error for a lost peer (gloo: "Connection closed by peer")
            if dead == [0]:  # jax's fatal error, which names the lost process, may be on its way: its line then
                time.sleep(0.5)
            why = _died(dead)
            post_stop(why)
        else:
            why = f"{type(e).__name__}: {str(e).splitlines()[0][:500] if str(e) else ''}".rstrip(": ")
            post_stop(f"process {me} failed: {why}")
            why = f"this process failed: {why}"
        _say(stop_line(why))
        if me == 0:
            _wait_for_the_others()
        os._exit(1)


STOP_WITHIN_S = 20.0  # a stopping process of several is gone by then, whatever call of the coordinator's hangs


def _watchdog(seconds: float) -> None:
    """Ends this stopping process after `seconds`, with jgem's line if it has not said it: the coordinator's calls
    on the way out (the beats read, the reason posted) may wait long on a coordinator that is gone."""

    def fire() -> None:
        if not RUN.said:
            with contextlib.suppress(Exception):
                _say(stop_line("another process died, or jax's coordinator (process 0) cannot be reached"))
        os._exit(1)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def _wait_for_the_others() -> None:
    """Process 0, which hosts the coordinator, stopping: until every other process is gone (its beat stood still
    over `STILL_BEATS` beats, as the beat thread last read it), at most `EXIT_GRACE_S`: they read the posted reason
    meanwhile, and none is cut off from the coordinator before it has said why it stops."""
    others, deadline = set(range(1, jax.process_count())), time.monotonic() + EXIT_GRACE_S
    while time.monotonic() < deadline:
        if RUN.read_at is None or time.monotonic() - RUN.read_at > 2.5 * BEAT_S:  # no beats read: nothing to wait on
            return
        if others <= set(_still(STILL_BEATS * BEAT_S, stopping=True)):
            return
        time.sleep(0.2)


def _log_only() -> Any:
    """The log file alone (where there is one), else stderr: where a stopped process's traceback goes."""
    return sys.stderr.log_file if isinstance(sys.stderr, _Tee) else sys.stderr


def process_max(values, mesh: Mesh | None = None) -> list[int]:
    """The element-wise maximum of `values` (integers) over the processes of `mesh` (default: all devices, so
    all processes): one small all-gather program; in one process, `values` themselves. Every process that holds
    devices of `mesh`, and only those, must call it, with as many values.

    With split meshes a side agrees over its own devices: a program over every device would wait behind the other
    side's work (the sampler's rounds behind the learner's update), and on CPU processes (gloo) a program over
    some devices must not run while one over a superset of them does. In a role split (whole processes on each
    side, `jgem.train.roles`) only that side's processes take part."""
    devices = sorted(jax.devices() if mesh is None else mesh.devices.flat, key=lambda d: d.id)
    if len({d.process_index for d in devices}) == 1:
        return [int(v) for v in values]
    # a row per device of the set, each process's on its own devices: the program runs on the same devices as the
    # side's others (on CPU processes a program over part of a set of devices must not overlap one over all of it)
    line = Mesh(np.asarray(devices, dtype=object), ("p",))
    v = np.asarray(values, np.int64).reshape(1, -1)
    if v.size and (v.min() < -(2**31) or v.max() >= 2**31):
        raise OverflowError(f"process_max takes int32 values, got {v.min()}..{v.max()}")
    mine = [jax.device_put(v.astype(np.int32), d) for d in devices if d.process_index == jax.process_index()]
    arr = jax.make_array_from_single_device_arrays((len(devices), v.shape[1]), NamedSharding(line, P("p")), mine)
    try:
        out = np.asarray(replicated(line)(arr).addressable_data(0))
    except (jax.errors.JaxRuntimeError, ValueError) as e:  # gloo reports a lost peer as a ValueError
        raise RuntimeError(
            f"the processes' agreement (process_max) failed ({str(e).splitlines()[0][:300]}): a process of the run "
            "has probably died; the run stops here, resume it from its last checkpoint"
        ) from e
    return [int(x) for x in out.max(axis=0)]


_REPLICATED: dict = {}


def replicated(mesh: Mesh):
    """A program that copies an array (or a tree of them) whole onto every device of `mesh`, one per mesh; only
    the processes of `mesh` run it."""
    if mesh not in _REPLICATED:
        _REPLICATED[mesh] = jax.jit(lambda a: a, out_shardings=NamedSharding(mesh, P()))
    return _REPLICATED[mesh]


def batch_axis_size(mesh: Mesh) -> int:
    """Number of shards of the batch dimension (data * fsdp, times expert where the mesh has it)."""
    return int(np.prod([mesh.shape[a] for a in BATCH_AXES if a in mesh.shape]))


def _on_tpu_vm() -> bool:
    return bool(
        os.environ.get("TPU_WORKER_HOSTNAMES")
        or os.environ.get("TPU_ACCELERATOR_TYPE")
        or os.environ.get("CLOUD_TPU_TASK_ID")
    )


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: list[int] | None = None,
) -> bool:
    """Start `jax.distributed` for multi-host runs; returns True when it was started.

    Arguments override the env vars JGEM_COORDINATOR (host:port), JGEM_NUM_PROCESSES, JGEM_PROCESS_ID;
    JGEM_HEARTBEAT_TIMEOUT (seconds, default 100) is how long a dead process goes unnoticed before the others stop.
    With neither, a TPU VM is auto-detected (jax reads the topology itself); otherwise it is a no-op
    (single process). Call before any other jax call. CPU processes use gloo collectives.
    """
    coordinator_address = coordinator_address or os.environ.get("JGEM_COORDINATOR")
    if num_processes is None and os.environ.get("JGEM_NUM_PROCESSES"):
        num_processes = int(os.environ["JGEM_NUM_PROCESSES"])
    if process_id is None and os.environ.get("JGEM_PROCESS_ID"):
        process_id = int(os.environ["JGEM_PROCESS_ID"])
    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ValueError(
            f"multi-host initialize needs coordinator_address, num_processes and process_id together "
            f"(or env JGEM_COORDINATOR, JGEM_NUM_PROCESSES, JGEM_PROCESS_ID); got coordinator={coordinator_address}, "
            f"num_processes={num_processes}, process_id={process_id}"
        )
    if all(given):
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id {process_id} is outside [0, {num_processes}); ids run 0..num_processes-1")
        # only affects the CPU backend (harmless on GPU/TPU hosts); without it CPU processes cannot all-reduce
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # how long the coordinator waits for a silent process before it stops the others (jax's default: 100 s)
        heartbeat = int(os.environ.get("JGEM_HEARTBEAT_TIMEOUT", "100"))
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
            heartbeat_timeout_seconds=heartbeat,
        )
        log.info("jax.distributed: process %d/%d via %s", process_id, num_processes, coordinator_address)
        _start_beats()
        return True
    if _on_tpu_vm():
        jax.distributed.initialize()
        _start_beats()
        return True
    return False


_BEATS_STOP = threading.Event()


def _start_beats() -> None:
    """The beat thread, stopped and joined at exit before jax's own shutdown (atexit runs the later-registered
    first): a daemon thread still inside a call of jax's distributed client when the interpreter finalizes is
    unwound through C++ frames, which aborts the process ("FATAL: exception not rethrown": the suite met it once)."""
    if jax.process_count() > 1:
        beats = threading.Thread(target=_beat, name="jgem-beat", daemon=True)
        beats.start()

        def stop() -> None:
            _BEATS_STOP.set()
            beats.join(timeout=5 * BEAT_S)

        atexit.register(stop)
