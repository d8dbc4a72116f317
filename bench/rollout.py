"""Rollout throughput: jgem's RolloutEngine vs jgem's static-batch path, on multi-turn games.

jgem: `RolloutEngine` (one KV-cache slot per env, continuous batching: decode chunks of `--chunk-steps` over the
generating slots, each finished action sent to its env at once, only new tokens prefilled) on a thread-backend
`EnvPool`. Peer: `StaticCollector` below, the static-batch path jgem had before the engine (the old
`jgem.rollout.collector.Collector`, chat view): the envs split into `num_groups=2` fixed groups taking turns; each
turn, a group's whole prompts are prefilled again by a static-batch generate call and `pool.step` waits for the whole
group. The generate call is `bench/baselines/static_generate.py` (the old `Sampler.generate` rebuilt on the model's
one cache type: a fresh cache per call, rows padded to the group's longest prompt, one decode loop to the group's
longest answer).
Same model (random init), tokenizer, specs, seeds, sampling settings and pool for both.

Workload: an untrained model's actions are noise, so each env plays its game's scripted solver instead
(`SolverDriven`, under the chat view's wrapper: the env ignores the action text), and episodes have the game's real
lengths and observations, the same turn for turn on both sides (asserted). Response lengths: each (episode, turn)
gets a token limit from a lognormal (median `--len-median`, sigma `--len-sigma`, clipped to [2, `--max-new-tokens`])
keyed only by (seed, episode, turn); both sides cut the action there (the engine stops the slot; the static path
generates max(limit) of its group, as it waited for the group's longest answer, and cuts each row). Env steps sleep a
lognormal time keyed by (episode, turn) (median `--lat-median-ms`, sigma `--lat-sigma`).

Each side first plays the whole workload until a pass compiles nothing new (warm-up, at most `--warmups` passes:
jgem's shapes depend on arrival order, so one pass may not meet them all), then once timed. Per (model, env), one JSON
line with, per side: turns/s, kept action tokens/s, `prefill_per_stream_token` (prompt tokens the model processed /
tokens of the episodes' streams; the static path reprocesses each turn's whole prompt), `prefill_computed_per_stream`
(the same with padding), `slot_utilisation` (decode row-steps that produced a kept token / row-steps computed; static:
the generate batch bucket x steps run per call), compilations, and where the wall time went (waiting for the device,
waiting for envs, host); then `ratio_*` = jgem / static and the issue's goals. A table follows the JSON lines.
`--profile` adds a run per side that blocks on every device call, timing each one (device ms per decode chunk,
extend and generate call; host ms per round).

    .venv/bin/python bench/rollout.py --quick                   # smoke run: tiny, 4 episodes, 4 turns
    .venv/bin/python bench/rollout.py --models tiny             # tiny on the three games
    .venv/bin/python bench/rollout.py --models 100m --envs game:Sudoku-v0-easy --episodes 8 --num-envs 4 \
        --max-turns 10 --warmups 2
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import numpy as np
from baselines.static_generate import StaticGenerate
from flax import nnx

from jgem.core import Env, Wrapper
from jgem.envs.games.solvers import solver_for
from jgem.envs.pool import EnvPool
from jgem.models.config import preset
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer
from jgem.rollout.config import RolloutConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine, RolloutStats
from jgem.rollout.episode import Episode, Transition
from jgem.rollout.views import first_prompt, next_prompt, wrappers_for_view

ENVS = ("game:Sudoku-v0-easy", "game:Minesweeper-v0-easy", "game:Game2048-v0-easy")
SEED_STRIDE = 1 << 20  # a reset seed is episode * SEED_STRIDE + game seed: the game sees the game seed only


def lognormal(key: Sequence[int], median: float, sigma: float) -> float:
    return float(median * np.exp(sigma * np.random.default_rng(list(key)).standard_normal()))


class SolverDriven(Wrapper):
    """The raw game played by its scripted solver: `step` ignores the action it is given and plays the solver's.
    Each step first sleeps a lognormal time keyed by (reset seed, turn); the game is reset with seed % SEED_STRIDE."""

    def __init__(self, env: Env, env_id: str, lat_median: float, lat_sigma: float, lat_max: float) -> None:
        super().__init__(env)
        self.env_id, self.lat = env_id, (lat_median, lat_sigma, lat_max)
        self.key, self.turn, self.solver, self.last = 0, 0, None, None

    def reset(self, seed: int | None = None):
        self.key, self.turn = seed or 0, 0
        obs, info = self.env.reset(seed=None if seed is None else seed % SEED_STRIDE)
        self.solver, self.last = solver_for(self.env_id), (obs, info)
        self.solver.reset(obs, info, self.env.unwrapped)
        return obs, info

    def step(self, action: str):
        median, sigma, cap = self.lat
        time.sleep(min(cap, lognormal((self.key, self.turn), median, sigma)))
        out = self.env.step(self.solver.act(*self.last, self.env.unwrapped))
        self.last, self.turn = (out[0], out[4]), self.turn + 1
        return out


class Timers:
    """Wall seconds spent in chosen methods of chosen objects (instance attributes: only these objects are timed).
    With `block`, a call also waits for its device results (what `--profile` times)."""

    def __init__(self) -> None:
        self.s: dict[str, float] = {}
        self.n: dict[str, int] = {}

    def wrap(self, obj: Any, name: str, label: str | Callable[..., str], block: Callable[[Any], Any] | None = None):
        fn = getattr(obj, name)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                out = fn(*a, **k)
                if block is not None:
                    block(out)
                return out
            finally:
                key = label(*a, **k) if callable(label) else label
                self.s[key] = self.s.get(key, 0.0) + time.perf_counter() - t
                self.n[key] = self.n.get(key, 0) + 1

        setattr(obj, name, timed)

    def reset(self) -> None:
        self.s.clear()
        self.n.clear()


class StaticCollector:
    """jgem's static-batch rollout path (the old `Collector`, chat view): the pool's envs split into `num_groups`
    fixed groups that take turns. A group's turn: `StaticGenerate.generate` on every live env's whole prompt (dispatched
    async, so the host steps another group's envs meanwhile), then `pool.step` waits for all of the group's envs.
    `turn_token_limit` cuts each row's action (the call generates the group's longest limit). Counts what
    `RolloutStats` counts."""

    def __init__(
        self,
        pool: EnvPool,
        chat: ChatFormat,
        generator: StaticGenerate,
        cfg: RolloutConfig,
        *,
        num_groups: int = 2,
        env_name: str = "",
        turn_token_limit: Callable[[EpisodeSpec, int], int] | None = None,
    ) -> None:
        self.pool, self.chat, self.generator, self.cfg, self.env_name = pool, chat, generator, cfg, env_name
        self.turn_token_limit = turn_token_limit
        self.groups = [list(map(int, g)) for g in np.array_split(np.arange(pool.num_envs), num_groups)]
        self.stats = RolloutStats()

    def collect(self, model: Any, specs: Sequence[EpisodeSpec], rng: jax.Array, *, max_turns: int) -> list[Episode]:
        model = nnx.split(model) if isinstance(model, nnx.Module) else model
        s, c, gen = RolloutStats(), self.cfg, self.generator
        self.stats = s
        queue, live, finished, inflight = list(reversed(specs)), {}, {}, {}

        def dispatch(g: int) -> None:
            ids = [i for i in self.groups[g] if i in live]
            if not ids:
                return
            prompts = [live[i]["prompt"] for i in ids]
            limits = [self._limit(live[i]) for i in ids]
            key = jax.random.fold_in(rng, s.decode_chunks)
            s.decode_chunks += 1
            s.prefill_tokens += sum(map(len, prompts))
            s.prefill_computed += gen.bucket_batch(len(ids)) * gen.bucket_prompt(max(map(len, prompts)))
            out = gen.generate(
                model,
                prompts,
                key,
                max_new_tokens=max(limits),
                temperature=c.temperature,
                top_p=c.top_p,
                top_k=c.top_k,
                greedy=c.greedy,
            )
            inflight[g] = (ids, limits, out)

        for g, env_ids in enumerate(self.groups):
            self._start(env_ids, queue, live)
            dispatch(g)
        while inflight:
            for g in range(len(self.groups)):
                if g not in inflight:
                    continue
                ids, limits, out = inflight.pop(g)
                tokens, logprobs, lengths = self._fetch(out)  # waits for this group's sampling only
                s.decode_rows += gen.bucket_batch(len(ids)) * int(lengths.max())
                actions = []
                for j, lim in enumerate(limits):
                    k = min(int(lengths[j]), lim)
                    actions.append((tokens[j, :k], logprobs[j, :k]))
                    s.decode_active += k
                self._advance(ids, actions, live, finished, max_turns)
                self._start([i for i in ids if i not in live], queue, live)
                dispatch(g)
        return [finished[sp.episode_id] for sp in specs]

    def _fetch(self, out: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return jax.device_get((out.tokens, out.logprobs, out.lengths))

    def _limit(self, ep: dict) -> int:
        limit = self.cfg.max_new_tokens
        if self.turn_token_limit is not None:
            limit = max(1, min(limit, int(self.turn_token_limit(ep["spec"], len(ep["transitions"])))))
        return limit

    def _start(self, env_ids: list[int], queue: list[EpisodeSpec], live: dict) -> None:
        take = env_ids[: len(queue)]
        if not take:
            return
        specs = [queue.pop() for _ in take]
        self.pool.reset(take, [sp.seed for sp in specs])
        results: dict[int, Any] = {}
        while len(results) < len(take):
            b = self.pool.recv()
            results.update(zip(b.env_ids.tolist(), b.obs))
        for i, sp in zip(take, specs):
            prompt, num_messages = first_prompt(self.chat, "chat", results[i])
            live[i] = {"spec": sp, "prompt": prompt, "num_messages": num_messages, "transitions": []}

    def _advance(self, ids: list[int], actions: list, live: dict, finished: dict, max_turns: int) -> None:
        c, chat, s = self.cfg, self.chat, self.stats
        stops = [chat.ends_with_stop(a.tolist()) for a, _ in actions]
        texts = [chat.action_text(a.tolist()) if st else c.invalid_action for (a, _), st in zip(actions, stops)]
        b = self.pool.step(ids, texts)
        for j, i in enumerate(ids):
            ep, (action, logprobs), stopped = live[i], actions[j], stops[j]
            prompt, transitions = ep["prompt"], ep["transitions"]
            transitions.append(
                Transition(
                    ep["spec"].episode_id,
                    len(transitions),
                    len(prompt),
                    action,
                    logprobs,
                    float(b.rewards[j]),
                    stopped=stopped,
                )
            )
            s.turns += 1
            s.action_tokens += action.size
            s.truncated_actions += not stopped
            truncated, info = bool(b.truncated[j]), b.infos[j]
            s.faults += "fault" in info
            done = bool(b.terminated[j]) or truncated or "fault" in info
            if not done and len(transitions) >= max_turns:
                done = truncated = True
            if not done:
                nxt, num_messages = next_prompt(chat, "chat", prompt, ep["num_messages"], action.tolist(), b.obs[j])
                if len(nxt) + c.max_new_tokens > c.max_episode_tokens:
                    s.budget_truncations += 1
                    done = truncated = True
                else:
                    ep["prompt"], ep["num_messages"] = nxt, num_messages
            if done:
                stream = np.asarray(prompt + action.tolist(), np.int32)
                s.stream_tokens += stream.size
                s.episodes += 1
                sp = ep["spec"]
                finished[sp.episode_id] = Episode(
                    sp.episode_id,
                    sp.group_id,
                    self.env_name,
                    sp.seed,
                    transitions,
                    success=bool(info.get("success", False)),
                    truncated=truncated,
                    fault=info.get("fault"),
                    stream=stream,
                )
                del live[i]


def account_chunks(slots: Any, pool: EnvPool, counts: dict[str, int]) -> None:
    """jgem: where decode row-steps go (`pad_rows`: padding rows of a chunk's power-of-two bucket; `idle_rows`: rows
    of slots whose action ended earlier in the chunk) and `sat_out`: chunks that ran between the chunk in which a
    slot's action ended and the first chunk of its next turn (summed over `turnarounds`)."""
    decode, fetch, send = slots.decode, slots.fetch, pool.send
    state: dict[str, Any] = {"chunk": 0, "sent": {}}

    def add(key: str, v: int) -> None:
        counts[key] = counts.get(key, 0) + v

    def decode_(model, ids, *a, **k):
        out = decode(model, ids, *a, **k)
        for i in ids:
            if i in state["sent"]:
                add("sat_out", state["chunk"] - state["sent"].pop(i) - 1)
                add("turnarounds", 1)
        add("slots", len(ids))
        state["chunk"] += 1
        return out

    def fetch_(handle):
        out = fetch(handle)
        steps = max(len(t) for t, _ in out)
        add("pad_rows", (handle[0].shape[0] - len(out)) * steps)
        add("idle_rows", len(out) * steps - sum(len(t) for t, _ in out))
        return out

    def send_(ids, actions):
        for i in ids:
            state["sent"][int(i)] = state["chunk"] - 1
        return send(ids, actions)

    slots.decode, slots.fetch, pool.send = decode_, fetch_, send_


def instrument(side: str, runner: Any, pool: EnvPool, timers: Timers, *, block: bool = False) -> None:
    """Times the waits of one side's collect: device (fetching sampled tokens), envs (blocking env calls), and the
    device calls' dispatch (or, with `block`, their whole run)."""
    sync = (lambda out: jax.block_until_ready(out)) if block else None
    if side == "jgem":
        slots = runner.slots
        account_chunks(slots, pool, timers.n)
        timers.wrap(slots, "fetch", "wait_device")
        timers.wrap(slots, "extend", "extend", (lambda _: jax.block_until_ready(slots.cache)) if block else None)
        timers.wrap(slots, "decode", "decode_chunk", (lambda out: jax.block_until_ready(out[0][0])) if block else None)
        timers.wrap(pool, "recv", lambda timeout=None, **_: "wait_env" if timeout is None else "poll_env")
    else:
        timers.wrap(runner, "_fetch", "wait_device")
        timers.wrap(runner.generator, "generate", "generate", sync)
        timers.wrap(pool, "step", "wait_env")
        timers.wrap(pool, "recv", "wait_env")


def uninstrument(*objs: Any) -> None:
    for o in objs:
        for name in ("fetch", "extend", "decode", "recv", "send", "step", "_fetch", "generate"):
            vars(o).pop(name, None)


COMPILE_EVENTS = (  # jax.monitoring's duration events of making a program: trace, lower, compile
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class CompileClock:
    """Seconds spent making programs (tracing, lowering, XLA compilation) while `on`, from jax.monitoring.

    Which shapes a pass meets depends on when the envs answer, so even after the warm-up a timed pass can
    compile a program or two; a training run compiles each shape once, so the steady-state rate is the pass's
    turns over its wall time less these seconds (reported beside the raw rate)."""

    def __init__(self) -> None:
        self.seconds, self.on = 0.0, False
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, event: str, duration: float, **_: Any) -> None:
        if self.on and event in COMPILE_EVENTS:
            self.seconds += duration


CLOCK = CompileClock()


def side_row(
    stats: RolloutStats, wall: float, timers: Timers, compiles: tuple[int, int], compile_s: float = 0.0
) -> dict[str, Any]:
    s, t = stats, timers.s
    waits = t.get("wait_device", 0.0) + t.get("wait_env", 0.0)
    return {
        "wall_s": round(wall, 3),
        "turns": s.turns,
        "episodes": s.episodes,
        "turns_per_s": round(s.turns / wall, 2),
        "compile_s": round(compile_s, 3),
        "turns_per_s_excl_compile": round(s.turns / max(1e-9, wall - compile_s), 2),
        "gen_tokens_per_s": round(s.action_tokens / wall, 1),
        "action_tokens": s.action_tokens,
        "stream_tokens": s.stream_tokens,
        "prefill_tokens": s.prefill_tokens,
        "prefill_computed": s.prefill_computed,
        "shared_prefix_tokens": s.shared_prefix_tokens,
        "prefill_per_stream_token": round(s.prefill_tokens / max(1, s.stream_tokens), 3),
        "prefill_computed_per_stream": round(s.prefill_computed / max(1, s.stream_tokens), 3),
        "slot_utilisation": round(s.decode_active / max(1, s.decode_rows), 3),
        "decode_rows": s.decode_rows,
        "decode_active": s.decode_active,
        "device_calls": s.decode_chunks,
        "truncated_actions": s.truncated_actions,
        "compilations_warmup": compiles[0],
        "compilations_timed": compiles[1],
        "wait_device_s": round(t.get("wait_device", 0.0), 3),
        "wait_env_s": round(t.get("wait_env", 0.0), 3),
        "host_s": round(wall - waits, 3),
        "dispatch_s": round(sum(t.get(k, 0.0) for k in ("extend", "decode_chunk", "generate")), 3),
    } | chunk_row(s, timers.n)


def chunk_row(s: RolloutStats, n: dict[str, int]) -> dict[str, Any]:
    """jgem's decode accounting (`account_chunks`); empty for the static side."""
    if "slots" not in n:
        return {}
    rows = max(1, s.decode_rows)
    return {
        "slots_per_chunk": round(n["slots"] / max(1, s.decode_chunks), 2),
        "pad_row_share": round(n.get("pad_rows", 0) / rows, 3),
        "idle_row_share": round(n.get("idle_rows", 0) / rows, 3),
        "sat_out_chunks_per_turn": round(n.get("sat_out", 0) / max(1, n.get("turnarounds", 0)), 2),
    }


def profile_row(side: str, stats: RolloutStats, wall: float, timers: Timers) -> dict[str, Any]:
    """Per call, with every device call blocking: device ms per decode chunk / extend / generate, and host ms per
    round (a round: one decode chunk for jgem, one group's generate for static)."""
    t, n = timers.s, timers.n
    ms = lambda k: round(1e3 * t.get(k, 0.0) / max(1, n.get(k, 0)), 2)
    device = sum(t.get(k, 0.0) for k in ("extend", "decode_chunk", "generate"))
    env = t.get("wait_env", 0.0)
    rounds = stats.decode_chunks
    row = {"kind": "profile", "side": side, "wall_s": round(wall, 3), "device_s": round(device, 3)}
    row |= {"wait_env_s": round(env, 3), "host_s": round(wall - device - env, 3), "rounds": rounds}
    row["host_ms_per_round"] = round(1e3 * (wall - device - env) / max(1, rounds), 2)
    if side == "jgem":
        row |= {"decode_chunk_ms": ms("decode_chunk"), "extend_ms": ms("extend"), "extend_calls": n.get("extend", 0)}
        row["tokens_per_chunk"] = round(stats.decode_active / max(1, rounds), 2)
        row["poll_env_ms_per_round"] = round(1e3 * t.get("poll_env", 0.0) / max(1, rounds), 3)
        row |= chunk_row(stats, n)
    else:
        row["generate_ms"] = ms("generate")
    return row


def run_env(args, model_name: str, mcfg, model, chat: ChatFormat, env_id: str) -> dict[str, Any]:
    rcfg = RolloutConfig(
        view="chat",
        max_new_tokens=args.max_new_tokens,
        max_episode_tokens=args.max_episode_tokens,
        chunk_steps=args.chunk_steps,
    )

    def limit(spec: EpisodeSpec, turn: int) -> int:
        n = round(lognormal((args.seed, spec.episode_id, turn), args.len_median, args.len_sigma))
        return int(np.clip(n, 2, args.max_new_tokens))

    g = args.group_size
    specs = [EpisodeSpec(i, i // g, i * SEED_STRIDE + 1000 + args.seed + i // g) for i in range(args.episodes)]
    lat = (args.lat_median_ms / 1e3, args.lat_sigma, args.lat_max_ms / 1e3)
    wrappers = [partial(SolverDriven, env_id=env_id, lat_median=lat[0], lat_sigma=lat[1], lat_max=lat[2])]
    wrappers += wrappers_for_view("chat")
    pool = EnvPool(env_id, args.num_envs, backend="thread", wrappers=wrappers)
    engine = RolloutEngine(mcfg, pool, chat, rcfg, env_name=env_id, turn_token_limit=limit)
    generator = StaticGenerate(mcfg, eos_ids=chat.stop_token_ids, pad_id=chat.pad_id)
    static = StaticCollector(pool, chat, generator, rcfg, num_groups=2, env_name=env_id, turn_token_limit=limit)
    runners = {"jgem": engine, "static": static}
    key = jax.random.key(args.seed)
    out: dict[str, Any] = {"kind": "result", "model": model_name, "env": env_id}
    episodes: dict[str, list[Episode]] = {}
    try:
        compiled = {"jgem": lambda: engine.num_compilations, "static": lambda: generator.num_compilations}
        for side, r in runners.items():  # warm-up: the same workload, until a pass compiles no new shape
            t = time.perf_counter()
            passes = 0
            while passes < args.warmups:
                before, passes = compiled[side](), passes + 1
                r.collect(model, specs, key, max_turns=args.max_turns)
                if compiled[side]() == before:
                    break
            out[f"{side}_warmup_s"] = round(time.perf_counter() - t, 2)
            out[f"{side}_warmup_passes"] = passes
        warm = {side: fn() for side, fn in compiled.items()}
        for side, r in runners.items():
            timers = Timers()
            instrument(side, r, pool, timers)
            CLOCK.seconds, CLOCK.on = 0.0, True
            t = time.perf_counter()
            episodes[side] = r.collect(model, specs, key, max_turns=args.max_turns)
            wall = time.perf_counter() - t
            CLOCK.on = False
            uninstrument(r, pool, generator, getattr(r, "slots", r))
            counts = (warm[side], compiled[side]() - warm[side])
            out[side] = side_row(r.stats, wall, timers, counts, CLOCK.seconds)
        for side, r in runners.items() if args.profile else ():
            timers = Timers()
            instrument(side, r, pool, timers, block=True)
            t = time.perf_counter()
            r.collect(model, specs, key, max_turns=args.max_turns)
            wall = time.perf_counter() - t
            uninstrument(r, pool, generator, getattr(r, "slots", r))
            print(json.dumps(profile_row(side, r.stats, wall, timers) | {"model": model_name, "env": env_id}))
    finally:
        pool.close()
    # Same episodes on both sides: the solver drives the env, so turn counts and outcomes must match.
    for a, b in zip(episodes["jgem"], episodes["static"]):
        assert a.episode_id == b.episode_id and len(a.transitions) == len(b.transitions), (
            f"episode {a.episode_id}: jgem played {len(a.transitions)} turns, static {len(b.transitions)}"
        )
        assert a.success == b.success and a.fault is None and b.fault is None, (a, b)
    for side in runners:
        st = runners[side].stats
        assert st.budget_truncations == 0, f"{side}: {st.budget_truncations} budget truncations; raise max_episode"
    assert out["jgem"]["turns"] == out["static"]["turns"]
    j, s = out["jgem"], out["static"]
    out["max_turns"] = args.max_turns
    out["turns_per_episode_max"] = max(len(e.transitions) for e in episodes["jgem"])
    out["stream_tokens_max"] = max(e.stream.size for e in episodes["jgem"])
    out["ratio_turns_per_s"] = round(j["turns_per_s"] / s["turns_per_s"], 3)
    out["ratio_tokens_per_s"] = round(j["gen_tokens_per_s"] / s["gen_tokens_per_s"], 3)
    out["ratio_turns_per_s_excl_compile"] = round(j["turns_per_s_excl_compile"] / s["turns_per_s_excl_compile"], 3)
    speed_goal = 3.0 if "Game2048" in env_id else 2.0
    out["goals"] = {
        "prefill_per_stream_le_1.05": j["prefill_per_stream_token"] <= 1.05,
        "slot_utilisation_ge_0.85": j["slot_utilisation"] >= 0.85,
        f"turns_per_s_ratio_ge_{speed_goal:g}": out["ratio_turns_per_s"] >= speed_goal,
    }
    print(json.dumps(out), flush=True)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("turns/s", "turns_per_s"),
        ("tok/s", "gen_tokens_per_s"),
        ("wall s", "wall_s"),
        ("turns", "turns"),
        ("prefill/stream", "prefill_per_stream_token"),
        ("padded/stream", "prefill_computed_per_stream"),
        ("util", "slot_utilisation"),
        ("dev wait s", "wait_device_s"),
        ("env wait s", "wait_env_s"),
        ("host s", "host_s"),
        ("compiles", "compilations_warmup"),
    ]
    head = f"{'model':6} {'env':26} {'side':6} " + " ".join(f"{h:>14}" for h, _ in cols)
    lines = [head, "-" * len(head)]
    for r in rows:
        for side in ("jgem", "static"):
            cells = " ".join(f"{r[side][k]:>14}" for _, k in cols)
            lines.append(f"{r['model']:6} {r['env'].removeprefix('game:'):26} {side:6} {cells}")
        goals = ", ".join(f"{k}={'PASS' if v else 'FAIL'}" for k, v in r["goals"].items())
        lines.append(
            f"{'':6} {'':26} {'ratio':6} turns/s x{r['ratio_turns_per_s']} "
            f"(x{r['ratio_turns_per_s_excl_compile']} less compile time), tok/s x{r['ratio_tokens_per_s']}; {goals}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny"], help="presets, e.g. tiny 100m")
    ap.add_argument("--envs", nargs="+", default=list(ENVS))
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--num-envs", type=int, default=8, help="envs in the pool = jgem's slots (static: two groups)")
    ap.add_argument("--group-size", type=int, default=1, help="episodes per start state (GRPO groups)")
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--chunk-steps", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--max-episode-tokens", type=int, default=4096)
    ap.add_argument("--len-median", type=float, default=12.0, help="response token limit: lognormal median")
    ap.add_argument("--len-sigma", type=float, default=0.8)
    ap.add_argument("--lat-median-ms", type=float, default=3.0, help="env step latency: lognormal median")
    ap.add_argument("--lat-sigma", type=float, default=1.0)
    ap.add_argument("--lat-max-ms", type=float, default=200.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmups", type=int, default=4, help="warm-up passes at most (until one compiles nothing)")
    ap.add_argument("--profile", action="store_true", help="one more run per side, blocking on every device call")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny, 4 episodes on 4 envs, 4 turns")
    args = ap.parse_args()
    if args.quick:
        args.models, args.episodes, args.num_envs, args.max_turns = ["tiny"], 4, 4, 4
    if args.episodes % args.group_size:
        raise SystemExit(f"--episodes {args.episodes} is not a multiple of --group-size {args.group_size}")
    print(json.dumps({"kind": "config", **vars(args), "platform": jax.devices()[0].platform}), flush=True)
    chat = ChatFormat(load_tokenizer())
    rows = []
    for name in args.models:
        mcfg = preset(name)
        model = nnx.split(Transformer(mcfg, rngs=nnx.Rngs(0)))
        for env_id in args.envs:
            rows.append(run_env(args, name, mcfg, model, chat, env_id))
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()
