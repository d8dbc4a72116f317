"""Training-pipeline throughput: `sync` vs `off_policy` vs `async` steps of jgem's `Trainer` (jgem/train/pipeline.py).

Compared: `--pipeline.mode sync` (each step plays its episodes to the end, then updates), `off_policy` lag 1 (the
producer plays one step ahead with the previous policy) and `async` max-staleness 1, 2 and 4 (the producer plays up
to N steps ahead; every live episode takes each new policy as it is published, `stale_kv` keep); `stream:N` (not in
the defaults) is async's producer with a consumer that trains whichever whole groups finish first. Same model (preset
`tiny`, random init, the shipped tokenizer), envs, seeds and trained episodes for every mode: `--warmup` steps (the
programs compile) then `--steps` timed steps, `--episodes` (32) episodes a step, algorithm rebn, group size 1.
Every mode has `env.num_envs` = `--num-envs` (64) envs on a thread-backend pool with one worker per env (the sleeps
below overlap): the engine's capacity, two steps' worth of KV-cache slots. A sync step can only use 32 of them at a
time (it plays one step's episodes and stops), while off_policy / async fill the other 32 with the next steps'
episodes; that difference is what is measured. No evaluation (`eval_every` 0), no checkpoints (the bench drives
`Trainer.train_step` itself; only `Trainer.run` checkpoints), console off.

Workloads, fixed in advance (not tuned to the results):
(a) `game:Sudoku-v0-easy` and `game:Game2048-v0-easy` (one run each), env steps sleeping a lognormal of median 3 ms,
    sigma 1, capped at 200 ms (as bench/rollout.py);
(b) a tool-call workload: `game:GuessTheNumber-v0-hard`, every env step sleeping a lognormal of median 200 ms,
    sigma 1.5, capped at 10 s (a search call or a sandbox run).
Both: the response-length model of bench/rollout.py: each (episode, turn) gets a token limit from a lognormal of
median 12 and sigma 0.8, clipped to [2, 64] (`max_new_tokens` 64, `max_episode_tokens` 4096), keyed by (seed,
episode seed, episode id, turn) so each step's episodes get their own lengths; the engine cuts the action there
(`RolloutEngine.turn_token_limit`). An untrained model's actions are noise and each of these games ends at the first
format error (checked: a random tiny model plays exactly 1 turn per episode on all three), so every env plays its
game's scripted solver whatever the action says (bench/rollout.py's `SolverDriven`, which also does the sleeping):
episodes have the games' real multi-turn lengths (Sudoku-easy ~9-10 turns, Game2048-easy up to its 50-turn limit or
the 4096-token stream budget, GuessTheNumber-hard 3-7 turns of binary search), the same in every mode. The rewards
are the solver's (mostly successes); the update still trains on the model's own sampled tokens and log-probs, so
its cost is that of a real step.

Per (workload, mode) one JSON line: `steps_per_s` and `tokens_per_s` (trained action tokens: those the policy loss
covers) over the timed steps, and their ratios to sync; `collect_s` / `update_s` (means of the steps'
`time/collect_s`, `time/update_s`); `learner_idle_frac` = 1 - update time / wall time; `sampler_idle_frac` = the
fraction of wall time the engine's loop (`RolloutEngine.run`) is not running: in this single-threaded design the
update and the trainer's host work between steps (the envs go on stepping in their threads meanwhile, but no token
is sampled); `sampler_env_wait_frac` = the fraction of wall time the loop runs but blocks on the pool because every
live episode waits for its env (nothing to decode); `slots_empty_frac` = the fraction of wall time with no live
episode at all; `slot_occupancy` = the time-average of live episodes / slots (an episode is live from its reset to
its end, env steps and waits included); the staleness of the trained tokens (updates between the policy that sampled
a token and the one it trains: mean, max, counts per value, from the trained episodes); compile seconds and
compilations inside the timed steps (a shape first met there: the programs' shapes depend on stream lengths and on
how many slots take part, so the warm-up may not meet them all; `steps_per_s_excl_compile` leaves them out).
Pipeline efficiency = max(rollout alone, update alone) / measured step time, all three per step and less compile
seconds (a long run compiles each shape once). Rollout alone: once per workload, a fresh trainer's engine (the same
initial policy, no updates) plays the timed steps' episodes with one slot set more queued behind them, so every slot
stays busy, and the time until as many episodes as the timed steps train have finished, per step. Update alone:
sync's mean `time/update_s` less the compile seconds inside the update (nothing else runs then; the mode's own when
sync is not run). The producer and the learner share one host thread and one device, so a step cannot be shorter
than the update plus the engine's own compute for a step's episodes: efficiency near 1 needs the rollout to be
bound by env latency (b), not by decoding. Goals: (b) async >= 3x sync's steps/s and efficiency >= 0.9; (a) none,
the JSON says which of rollout / update bounds the step (`bound`). A markdown table follows the JSON lines.
`--quick` checks the script end to end, every mode: Sudoku and GuessTheNumber, 1 warm-up and 2 timed steps of 8
episodes on 16 envs, at most 4 turns, latencies x0.1 (compile-bound: 5-15 minutes on a 2-core CPU; its numbers
and goals mean nothing). `--envs` keeps some of the workloads' envs, `--stale-kv recompute` the async variant.

Split meshes (`MODE@R`: the sampler on R devices, the learner on the rest, weights published after each update;
docs/scaling.md, "Split meshes"): run with simulated CPU devices, e.g. `JAX_NUM_CPU_DEVICES=8` and `sync@4 async:2@4`
beside `sync async:2` on the same 8 devices. The devices share the machine's cores, so the overlap a split buys on
real chips is bounded here by them (docs/benchmarks.md says by how much).

Role split on cores of their own (`--roles`, 2 cores or more): each mode runs in a fresh pair of JAX processes on
localhost, a role split (`--mesh.rollout-placement first`, one device each): process 0 samples (the envs, the engine)
pinned to one core, process 1 trains pinned to another, the weights published device to device after each update
while the sampler goes on generating. This is split meshes with hardware of their own per side, the setting the
pipeline is for (on one process and one device set both sides divide the same cores). Rollout alone then runs in one
process on the sampler's core, update alone is the learner process's own sync update (less compile), and the learner
columns are the learner process's. The compile seconds left out of a step are those on its critical path: all
of the learner's, and the sampler's only as far as the learner waited for episodes (`pipeline_efficiency_raw` keeps
them all in). `--episodes` is the run's global batch (half per process of the run). The processes share one
persistent compilation cache (.cache/jax-bench unless JAX_COMPILATION_CACHE_DIR is set): a second run loads what the
first compiled.

    .venv/bin/python bench/async.py --quick                   # smoke run
    .venv/bin/python bench/async.py                           # both workloads, all five modes
    .venv/bin/python bench/async.py --workloads b --modes sync async:1 async:4 --steps 20
    .venv/bin/python bench/async.py --workloads b --modes sync async:4 stream:1 stream:2 stream:4
    .venv/bin/python bench/async.py --roles --workloads b --modes sync async:4 stream:1 stream:2 stream:4
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax
import numpy as np
from rollout import CLOCK, SolverDriven, lognormal

from jgem.algos.step import train_step
from jgem.config import CurriculumConfig, EnvConfig, ModelSpec, PipelineConfig, TrainConfig
from jgem.envs.pool import EnvPool
from jgem.rollout.config import RolloutConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import exit_at_once_on_error, initialize
from jgem.train.loop import Trainer
from jgem.train.pipeline import staleness


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str  # "a" or "b"
    env_id: str
    lat_median_s: float
    lat_sigma: float
    lat_max_s: float


WORKLOADS = {
    "a": (
        Workload("a", "game:Sudoku-v0-easy", 0.003, 1.0, 0.2),
        Workload("a", "game:Game2048-v0-easy", 0.003, 1.0, 0.2),
    ),
    "b": (Workload("b", "game:GuessTheNumber-v0-hard", 0.2, 1.5, 10.0),),
}
MODES = ("sync", "off_policy:1", "async:1", "async:2", "async:4")
QUICK_ENVS = ("game:Sudoku-v0-easy", "game:GuessTheNumber-v0-hard")
ROLES = 2  # --roles: a sampler process and a learner process
LEN_MEDIAN, LEN_SIGMA, MAX_NEW_TOKENS, MAX_EPISODE_TOKENS = 12.0, 0.8, 64, 4096


def token_limit(seed: int, spec: EpisodeSpec, turn: int) -> int:
    """bench/rollout.py's response-length model, keyed by the episode's seed as well (a step's episode ids repeat)."""
    n = round(lognormal((seed, spec.seed, spec.episode_id, turn), LEN_MEDIAN, LEN_SIGMA))
    return int(np.clip(n, 2, MAX_NEW_TOKENS))


def pipeline_config(mode: str, stale_kv: str) -> PipelineConfig:
    """'sync', 'off_policy:K', 'async:N' or 'stream:N' (each optionally '@R': split meshes, R sampler devices) as a
    `PipelineConfig`."""
    name, _, k = mode.partition("@")[0].partition(":")
    if name == "sync":
        return PipelineConfig("sync")
    if name == "off_policy":
        return PipelineConfig("off_policy", lag=int(k or 1))
    if name in ("async", "stream"):
        return PipelineConfig(name, max_staleness=int(k or 1), stale_kv=stale_kv)
    raise SystemExit(f"unknown mode {mode!r}; use sync, off_policy:K, async:N or stream:N")


class BenchTrainer(Trainer):
    """A `Trainer` whose envs play their scripted solver after a lognormal sleep (`SolverDriven`, innermost, under
    the chat view's wrapper) and whose engine cuts each action at `token_limit`."""

    def __init__(self, cfg: TrainConfig, wl: Workload, lat_scale: float) -> None:
        self.wl, self.lat_scale = wl, lat_scale  # read by _make_pool, which Run.__init__ calls
        super().__init__(cfg)
        if self.engine is not None:  # None on a role split's learner process
            self.engine.turn_token_limit = partial(token_limit, cfg.seed)

    def _make_pool(self, env: EnvConfig) -> EnvPool:
        wl, k = self.wl, self.lat_scale
        solver = partial(
            SolverDriven,
            env_id=env.env_id,
            lat_median=wl.lat_median_s * k,
            lat_sigma=wl.lat_sigma,
            lat_max=wl.lat_max_s * k,
        )
        return EnvPool(
            env.env_id,
            env.num_envs,
            backend=env.backend,
            num_workers=env.num_workers,
            env_kwargs=dict(env.env_kwargs),
            wrappers=(solver, *wrappers_for_view(self.cfg.rollout.view, env.system_prompt)),
        )


class Probe:
    """Where the engine's time goes, from wrappers on one engine's methods (instance attributes): seconds inside
    `run`, seconds blocked in `_receive(block=True)`, and the time-integral of its live episodes (they change only
    in `_start_free` and `_finish`). Also the episodes each update trains on (`learn`)."""

    def __init__(self, trainer: Trainer) -> None:
        self.eng: RolloutEngine = trainer.engine
        self.trained: list[Any] = []
        self.finishes, self.learn_compile_s = 0, 0.0
        self.window()
        eng = self.eng
        run, receive, start_free, finish, learn = eng.run, eng._receive, eng._start_free, eng._finish, trainer.learn

        def run_(*a, **k):
            t = time.perf_counter()
            try:
                return run(*a, **k)
            finally:
                self.run_s += time.perf_counter() - t

        def receive_(*, block: bool, **k):
            t = time.perf_counter()
            try:
                return receive(block=block, **k)
            finally:
                if block:
                    self.env_wait_s += time.perf_counter() - t

        def start_free_():
            start_free()
            self.mark()

        def finish_(*a, **k):
            finish(*a, **k)
            self.finishes += 1
            self.mark()

        def learn_(episodes, **k):
            self.trained, c = episodes, CLOCK.seconds
            try:
                return learn(episodes, **k)
            finally:
                self.learn_compile_s = CLOCK.seconds - c  # while CLOCK is on

        eng.run, eng._receive, eng._start_free, eng._finish = run_, receive_, start_free_, finish_
        trainer.learn = learn_

    def live(self) -> int:
        return self.eng.num_live

    def window(self) -> None:
        """Start counting from now."""
        self.t0 = self.t_last = time.perf_counter()
        self.run_s = self.env_wait_s = self.live_s = self.empty_s = 0.0
        self.n_live = self.live()

    def mark(self) -> None:
        now = time.perf_counter()
        dt = now - self.t_last
        self.live_s += self.n_live * dt
        self.empty_s += dt if self.n_live == 0 else 0.0
        self.t_last, self.n_live = now, self.live()

    def close(self) -> dict[str, float]:
        """The window's wall seconds and what was counted in it (before anything untimed runs)."""
        self.mark()
        out = {"wall": self.t_last - self.t0, "run": self.run_s, "env_wait": self.env_wait_s}
        return out | {"live": self.live_s, "empty": self.empty_s}


def split_devices(mode: str) -> int:
    """R of a mode 'X@R' (split meshes: the sampler on R devices, the learner on the rest), else 0."""
    _, at, r = mode.partition("@")
    if at and (not r.isdigit() or not 0 < int(r) < jax.device_count()):
        raise SystemExit(f"mode {mode!r}: @R takes 1..{jax.device_count() - 1} devices (set JAX_NUM_CPU_DEVICES)")
    return int(r) if at else 0


def make_config(args, wl: Workload, mode: str, run_dir: str) -> TrainConfig:
    pipe = pipeline_config(mode, args.stale_kv)
    if args.roles:  # process 0 samples on its device, process 1 trains on its own; episodes per process of the run
        mesh, episodes = MeshConfig(data=-1, rollout_devices=1, rollout_placement="first"), args.episodes // ROLES
    else:
        mesh, episodes = MeshConfig(data=-1, rollout_devices=split_devices(mode)), args.episodes
    return TrainConfig(
        mesh=mesh,
        run_dir=run_dir,
        seed=args.seed,
        # beyond the timed steps: the producer keeps `ahead` steps submitted through the last timed step
        steps=args.warmup + args.steps + 8,
        episodes_per_step=episodes,
        env=EnvConfig(env_id=wl.env_id, num_envs=args.num_envs, backend="thread", num_workers=args.num_envs),
        model=ModelSpec(preset="tiny"),
        rollout=RolloutConfig(max_new_tokens=MAX_NEW_TOKENS, max_episode_tokens=MAX_EPISODE_TOKENS),
        curriculum=CurriculumConfig(horizons=(args.max_turns,)) if args.max_turns else CurriculumConfig(),
        eval_every=0,
        checkpoint_every=1 << 30,
        console=False,
        plot=False,
        resume=False,
        pipeline=pipe,
    )


def progress(wl: Workload, mode: str, phase: str, done: int, total: int, since: float, trainer: Trainer) -> None:
    """One line on stderr per step: where the run is, its seconds so far and the engine's programs compiled."""
    eng = trainer.engine
    print(
        f"[{wl.env_id} {mode}{' learner' if eng is None else ''}] {phase} step {done}/{total}: "
        f"{time.perf_counter() - since:.1f} s"
        + ("" if eng is None else f", {eng.num_compilations} engine programs compiled"),
        file=sys.stderr,
        flush=True,
    )


def run_mode(args, wl: Workload, mode: str, run_dir: str) -> dict[str, Any]:
    """Warm-up and timed steps of one mode; the row's raw numbers."""
    t = time.perf_counter()
    trainer = BenchTrainer(make_config(args, wl, mode, run_dir), wl, args.lat_scale)
    build_s = time.perf_counter() - t
    if not trainer.roles.samples:
        return learner_mode(args, wl, mode, trainer)
    probe = Probe(trainer)
    pipe = trainer.pipeline
    steps: list[dict[str, float]] = []
    hist: dict[int, int] = {}
    turns = []
    try:
        pipe.start(0)
        t = time.perf_counter()
        for step in range(args.warmup):
            trainer.train_step(step)
            progress(wl, mode, "warm-up", step + 1, args.warmup, t, trainer)
        warmup_s = time.perf_counter() - t
        compiles = (trainer.engine.num_compilations, train_step._cache_size())
        CLOCK.seconds, CLOCK.on = 0.0, True
        probe.window()
        t = time.perf_counter()
        for step in range(args.warmup, args.warmup + args.steps):
            m = trainer.train_step(step)
            progress(wl, mode, "timed", step + 1 - args.warmup, args.steps, t, trainer)
            stale = staleness(probe.trained, step)
            for v, c in zip(*np.unique(stale, return_counts=True)):
                hist[int(v)] = hist.get(int(v), 0) + int(c)
            turns += [e.num_turns for e in probe.trained]
            steps.append(m | {"tokens": int(stale.size), "update_compile_s": probe.learn_compile_s})
        w = probe.close()
        wall = w["wall"]
        CLOCK.on = False
        compile_s = CLOCK.seconds
        compiled = (trainer.engine.num_compilations - compiles[0], train_step._cache_size() - compiles[1])
        t = time.perf_counter()
        pipe.drain(args.warmup + args.steps)  # the steps played ahead, untimed (sync: nothing)
        drain_s = time.perf_counter() - t
    finally:
        trainer.close()
    n, tokens = len(steps), sum(s["tokens"] for s in steps)
    update = sum(s["time/update_s"] for s in steps)
    stale_total = sum(hist.values())
    mean = lambda k: float(np.mean([s[k] for s in steps]))
    row = {
        "kind": "result",
        "workload": wl.name,
        "env": wl.env_id,
        "mode": mode,
        "steps": n,
        "episodes_per_step": args.episodes,
        "num_envs": args.num_envs,
        "wall_s": round(wall, 3),
        "steps_per_s": round(n / wall, 4),
        "steps_per_s_excl_compile": round(n / max(1e-9, wall - compile_s), 4),
        "tokens_per_s": round(tokens / wall, 1),
        "trained_tokens": tokens,
        "step_s": round(wall / n, 3),
        "step_s_excl_compile": round((wall - compile_s) / n, 3),
        "collect_s": round(mean("time/collect_s"), 3),
        "update_s": round(mean("time/update_s"), 3),
        "update_s_excl_compile": round(mean("time/update_s") - mean("update_compile_s"), 3),
        "learner_idle_frac": round(1 - update / wall, 3),
        "sampler_idle_frac": round(1 - w["run"] / wall, 3),
        "sampler_env_wait_frac": round(w["env_wait"] / wall, 3),
        "slots_empty_frac": round(w["empty"] / wall, 3),
        "slot_occupancy": round(w["live"] / wall / args.num_envs, 3),
        "staleness_mean": round(sum(v * c for v, c in hist.items()) / max(1, stale_total), 3),
        "staleness_max": max(hist, default=0),
        "staleness_hist": {str(v): hist[v] for v in sorted(hist)},
        "staleness_max_metric": max(s["pipeline/staleness_max"] for s in steps),
        "turns_per_episode": round(float(np.mean(turns)), 2),
        "turns_per_episode_max": max(turns),
        "engine_turns": int(sum(s["collect/turns"] for s in steps)),
        "budget_truncations": int(sum(s["collect/budget_truncations"] for s in steps)),
        "faults": int(sum(s["collect/faults"] for s in steps)),
        "compile_s": round(compile_s, 3),
        "compilations_timed": {"rollout": compiled[0], "update": compiled[1]},
        "build_s": round(build_s, 2),
        "warmup_s": round(warmup_s, 2),
        "drain_s": round(drain_s, 2),
    }
    return row


def learner_mode(args, wl: Workload, mode: str, trainer: Trainer) -> dict[str, Any]:
    """A role split's learner process (`--roles`): the same steps as the sampler's, each an update on the episodes it
    receives; its own update seconds (less compile) and idle fraction over the timed steps."""
    learn, compile_s = trainer.learn, [0.0]

    def learn_(episodes, **k):
        c = CLOCK.seconds
        try:
            return learn(episodes, **k)
        finally:
            compile_s[0] = CLOCK.seconds - c

    trainer.learn = learn_
    try:
        t = time.perf_counter()
        for step in range(args.warmup):
            trainer.train_step(step)
            progress(wl, mode, "warm-up", step + 1, args.warmup, t, trainer)
        CLOCK.seconds, CLOCK.on = 0.0, True
        programs = train_step._cache_size()
        steps, t = [], time.perf_counter()
        for step in range(args.warmup, args.warmup + args.steps):
            steps.append(trainer.train_step(step) | {"update_compile_s": compile_s[0]})
            progress(wl, mode, "timed", step + 1 - args.warmup, args.steps, t, trainer)
        wall = time.perf_counter() - t
        CLOCK.on = False
        programs = train_step._cache_size() - programs
    finally:
        trainer.close()
    update = [s["time/update_s"] for s in steps]
    return {
        "kind": "learner",
        "mode": mode,
        "env": wl.env_id,
        "learner_wall_s": round(wall, 3),
        "learner_update_s": round(float(np.mean(update)), 3),
        "learner_update_s_excl_compile": round(
            float(np.mean(update) - np.mean([s["update_compile_s"] for s in steps])), 3
        ),
        "learner_idle_frac": round(1 - sum(update) / wall, 3),
        "learner_wait_s": round(float(np.mean([s["time/collect_s"] for s in steps])), 3),
        "learner_compile_s": round(CLOCK.seconds, 3),
        "learner_update_compilations_timed": programs,
    }


def rollout_alone(args, wl: Workload, run_dir: str) -> dict[str, Any]:
    """The producer alone: the timed steps' episodes, two more steps' queued behind so every slot stays busy, played
    by a fresh trainer's initial policy with no update; seconds until as many episodes as the timed steps hold have
    finished (less compile seconds), per step."""
    trainer = BenchTrainer(make_config(args, wl, "sync", run_dir), wl, args.lat_scale)
    probe = Probe(trainer)
    eng, key = trainer.engine, jax.random.key(args.seed)
    first, last = args.warmup, args.warmup + args.steps
    extra = -(-args.num_envs // args.episodes)  # steps queued behind: one slot set
    target = args.steps * args.episodes
    try:
        for s in range(first, last + extra):
            eng.submit(trainer.specs(s), key, stream=2 * s, max_turns=trainer.horizon(s), version=0)
        CLOCK.seconds, CLOCK.on = 0.0, True
        probe.window()
        probe.finishes = 0
        eng.run({0: trainer.policy()}, until=lambda: probe.finishes >= target)
        w = probe.close()
        wall = w["wall"]
        CLOCK.on = False
        compile_s = CLOCK.seconds
        eng.run({0: trainer.policy()})  # the rest, untimed
    finally:
        trainer.close()
    return {
        "rollout_alone_wall_s": round(wall, 3),
        "rollout_alone_compile_s": round(compile_s, 3),
        "rollout_alone_step_s": round((wall - compile_s) / args.steps, 3),
        "rollout_alone_slot_occupancy": round(w["live"] / wall / args.num_envs, 3),
    }


def finish_rows(rows: list[dict[str, Any]], alone: dict[str, Any]) -> None:
    """Ratios to sync, pipeline efficiency, bound and goals (in place)."""
    base = next((r for r in rows if r["mode"] == "sync"), None)
    for r in rows:
        update_alone = (base or r)["update_s_excl_compile"]
        ideal = max(alone["rollout_alone_step_s"], update_alone)
        r |= alone
        r["update_alone_s"] = update_alone
        r["update_alone_from"] = "sync" if base else r["mode"]
        r["pipeline_efficiency"] = round(ideal / r["step_s_excl_compile"], 3)
        r["pipeline_efficiency_raw"] = round(ideal / r["step_s"], 3)  # compile seconds left in
        r["bound"] = "rollout" if alone["rollout_alone_step_s"] >= update_alone else "update"
        if base:
            r["ratio_steps_per_s"] = round(r["steps_per_s"] / base["steps_per_s"], 3)
            r["ratio_tokens_per_s"] = round(r["tokens_per_s"] / base["tokens_per_s"], 3)
        if r["workload"] == "b" and r["mode"].startswith(("async", "stream")):
            r["goals"] = {"steps_per_s_ge_3x_sync": r.get("ratio_steps_per_s", 0) >= 3.0}
            r["goals"]["pipeline_efficiency_ge_0.9"] = r["pipeline_efficiency"] >= 0.9


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("steps/s", "steps_per_s"),
        ("x sync", "ratio_steps_per_s"),
        ("steps/s ex-compile", "steps_per_s_excl_compile"),
        ("tok/s", "tokens_per_s"),
        ("x sync", "ratio_tokens_per_s"),
        ("step s", "step_s"),
        ("collect s", "collect_s"),
        ("update s", "update_s"),
        ("learner idle", "learner_idle_frac"),
        ("sampler idle", "sampler_idle_frac"),
        ("env wait", "sampler_env_wait_frac"),
        ("occupancy", "slot_occupancy"),
        ("stale mean", "staleness_mean"),
        ("stale max", "staleness_max"),
        ("efficiency", "pipeline_efficiency"),
        ("efficiency raw", "pipeline_efficiency_raw"),
        ("compile s", "compile_s"),
    ]
    lines = [
        "| env | mode | " + " | ".join(h for h, _ in cols) + " | staleness counts | goals |",
        "|" + "---|" * (len(cols) + 4),
    ]
    for r in rows:
        cells = " | ".join(str(r.get(k, "-")) for _, k in cols)
        hist = " ".join(f"{v}:{c}" for v, c in r["staleness_hist"].items())
        goals = ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in r.get("goals", {}).items()) or "-"
        lines.append(f"| {r['env'].removeprefix('game:')} | {r['mode']} | {cells} | {hist} | {goals} |")
    notes = {}
    for r in rows:
        notes[r["env"]] = (
            f"{r['env'].removeprefix('game:')}: rollout alone {r['rollout_alone_step_s']} s/step (all "
            f"{r['num_envs']} slots busy), update alone {r['update_alone_s']} s/step ({r['update_alone_from']}): "
            f"{r['bound']}-bound"
        )
    return "\n".join(lines + [""] + list(notes.values()))


def child(args) -> None:
    """One process of `--roles` (`--child 0|1`: a role split's sampler or learner, one workload and one mode;
    `alone`: rollout alone, one process): its rows as JSON in `--child-out`."""
    (wl,) = [w for name in args.workloads for w in WORKLOADS[name] if w.env_id in args.envs]
    run_dir = f"{args.child_out}.run"
    if args.child == "alone":
        out = rollout_alone(_no_roles(args), wl, run_dir)
    else:
        initialize(f"127.0.0.1:{args.child_port}", ROLES, int(args.child))
        (mode,) = args.modes
        with exit_at_once_on_error():
            out = run_mode(args, wl, mode, run_dir)
    with open(args.child_out, "w") as f:
        json.dump(out, f)


def _no_roles(args) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "roles": False})


def role_split_group(args, wl: Workload, tmp: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`--roles`: each mode in a fresh pair of processes (sampler pinned to core 0, learner to core 1), then rollout
    alone in one process on core 0; the sampler's rows with the learner's update seconds and idle fraction."""
    cores = sorted(os.sched_getaffinity(0))

    def spawn(kind: str, port: int, modes: list[str], core: int) -> tuple[subprocess.Popen, str]:
        out = f"{tmp}/{wl.env_id.replace(':', '_')}-{modes[0]}-{kind}.json"
        argv = [sys.executable, __file__, "--workloads", wl.name, "--envs", wl.env_id, "--modes", *modes]
        argv += ["--steps", str(args.steps), "--warmup", str(args.warmup), "--episodes", str(args.episodes)]
        argv += ["--num-envs", str(args.num_envs), "--max-turns", str(args.max_turns)]
        argv += ["--lat-scale", str(args.lat_scale), "--stale-kv", args.stale_kv, "--seed", str(args.seed), "--roles"]
        argv += ["--child", kind, "--child-port", str(port), "--child-out", out]
        env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
        # every process a fresh runtime: one persistent compilation cache, so a program one compiled the next loads
        env.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "jax-bench"))
        env |= {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
        env["JAX_PLATFORMS"] = "cpu"
        proc = subprocess.Popen(argv, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {core}))
        return proc, out

    def wait(procs: list[tuple[subprocess.Popen, str]]) -> list[dict[str, Any]]:
        try:  # one process failing stops the others
            while any(p.poll() is None for p, _ in procs) and not any(p.poll() for p, _ in procs):
                time.sleep(0.5)
            codes = [p.poll() for p, _ in procs]
        finally:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes):
            raise SystemExit(f"--roles: a process of {wl.env_id} failed (exit codes {codes})")
        return [json.loads(open(out).read()) for _, out in procs]

    group = []
    for mode in args.modes:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        sampler, learner = wait([spawn(str(i), port, [mode], cores[i]) for i in range(ROLES)])
        row = sampler | {k: v for k, v in learner.items() if k.startswith("learner_")} | {"roles": True}
        row["sampler_update_wait_s"] = sampler["update_s"]  # from sending a step's episodes to its publication
        for k in ("update_s", "update_s_excl_compile"):
            row[k] = learner[f"learner_{k}"]
        # compile seconds on the steps' critical path: all of the learner's (nothing else runs there meanwhile) and
        # the sampler's only as far as the learner waited for episodes (it goes on playing while the learner updates)
        n, wall = row["steps"], row["wall_s"]
        row["sampler_compile_s"] = sampler["compile_s"]
        row["compile_s"] = round(
            learner["learner_compile_s"] + min(sampler["compile_s"], learner["learner_wait_s"] * n), 3
        )
        row["step_s_excl_compile"] = round((wall - row["compile_s"]) / n, 3)
        row["steps_per_s_excl_compile"] = round(n / (wall - row["compile_s"]), 4)
        group.append(row)
    (alone,) = wait([spawn("alone", 0, args.modes[:1], cores[0])])
    return group, alone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", nargs="+", default=["a", "b"], choices=sorted(WORKLOADS))
    ap.add_argument("--modes", nargs="+", default=list(MODES), help="sync, off_policy:K, async:N, stream:N")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (compilation)")
    ap.add_argument("--episodes", type=int, default=32, help="episodes per step")
    ap.add_argument("--num-envs", type=int, default=64, help="env.num_envs: the engine's slots, every mode")
    ap.add_argument("--max-turns", type=int, default=0, help="cap on turns per episode (0: the env's own limit)")
    ap.add_argument("--lat-scale", type=float, default=1.0, help="multiplies every env latency (median and cap)")
    ap.add_argument("--stale-kv", default="keep", choices=["keep", "recompute"], help="async modes")
    ap.add_argument("--envs", nargs="+", default=None, help="only these env ids of the workloads (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 timed steps of 8 episodes on 16 envs, 1 warm-up step, 4 turns at most, latencies x0.1, "
        f"(a) on {QUICK_ENVS[0]} only",
    )
    ap.add_argument(
        "--roles",
        action="store_true",
        help="every mode as a role split: 2 JAX processes on localhost, the sampler's (process 0: envs, engine) "
        "pinned to core 0 and the learner's (process 1: the update) to core 1, the weights published after each "
        "update; rollout alone in one process on core 0 (needs 2 cores)",
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # --roles: '0', '1' or 'alone'
    ap.add_argument("--child-port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.roles and args.episodes % ROLES:
        raise SystemExit(f"--roles: --episodes {args.episodes} must divide over the {ROLES} processes")
    if args.roles and any("@" in m for m in args.modes):
        raise SystemExit("--roles splits every mode over processes: give modes without @R")
    if args.roles and args.child is None and len(os.sched_getaffinity(0)) < ROLES:
        raise SystemExit(
            f"--roles pins its {ROLES} processes to cores of their own: this process may use only "
            f"{len(os.sched_getaffinity(0))}"
        )
    if args.quick:
        args.steps, args.warmup, args.episodes, args.num_envs = 2, 1, 8, 16
        args.max_turns, args.lat_scale, args.envs = 4, 0.1, args.envs or list(QUICK_ENVS)
    known = {wl.env_id for name in args.workloads for wl in WORKLOADS[name]}
    if args.envs and not set(args.envs) <= known:
        raise SystemExit(f"--envs {sorted(set(args.envs) - known)} not in workloads {args.workloads}: {sorted(known)}")
    for m in args.modes:
        pipeline_config(m, args.stale_kv)  # fail fast on a bad name
        split_devices(m)
    if args.child is not None:
        return child(args)
    # --roles: no backend here (the processes it starts are CPU ones, forked without JAX's threads)
    platform = "cpu" if args.roles else jax.devices()[0].platform
    print(json.dumps({"kind": "config", **vars(args), "platform": platform}), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="jgem-bench-async-") as tmp:
        for name in args.workloads:
            for wl in WORKLOADS[name]:
                if args.envs and wl.env_id not in args.envs:
                    continue
                if args.roles:
                    group, alone = role_split_group(args, wl, tmp)
                else:
                    group = [run_mode(args, wl, mode, f"{tmp}/{mode}") for mode in args.modes]
                    alone = rollout_alone(args, wl, f"{tmp}/alone")
                finish_rows(group, alone)
                for r in group:
                    print(json.dumps(r), flush=True)
                rows += group
    print(table(rows), flush=True)
    if args.quick:
        print("\n(--quick: latencies x0.1, short episodes, 2 steps; the goals are meant for the full workloads)")


if __name__ == "__main__":
    main()
