"""Collector pipeline: turns/s with async overlap (`num_groups=2`) vs lockstep (`num_groups=1`).

Peer: the same Collector in lockstep (generate for every env, then step every env). Async: two env groups
take turns, so the host steps one group's envs while the device samples the other's. Same model, specs,
seeds and sampling key in both modes; modes interleave within each repetition so load drift hits both.

The env is GuessTheNumber-v0-easy (4 turns) whose `step` sleeps `latency` seconds on a thread-backend
pool (a sleeping step holds no GIL), and whose unparsable actions are wasted turns instead of format
errors, so that every episode of the random-init tiny model plays all its turns. The latency is
calibrated first: the mean time the sampler takes for one async group's turn (blocking, same prompts),
divided by the waves a group needs on `--workers` threads, so stepping one group costs about as much
as generating for it. The first collect of each mode is a warm-up (compiles every prompt bucket).

    .venv/bin/python bench/pipeline.py                       # 16 envs, parallel env threads
    .venv/bin/python bench/pipeline.py --workers 1           # host-bound envs: steps run one at a time

A third mode, `sequential`, runs the async mode's two groups with blocking sampling (same batch shapes,
no overlap): async / sequential is the overlap alone, async / lockstep also includes the effect of
generating for N/2 instead of N prompts per call.

Prints JSON lines: `calibration`, one `sample` per (rep, mode) with a round's time split into waiting for
the device, waiting for env steps and host work (a round = one turn of every env), and a `summary` with
median turns/s per mode, `ratio` (async / lockstep), `overlap_ratio` (async / sequential) and `bound`: the
best async / lockstep ratio this rep's measured times allow, lockstep round G(N) + S(N) over
2 max(G(N/2), S(N/2)) (G: generation, S: stepping the envs, G(N/2) from the sequential round).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import jax
from flax import nnx

from jgem.envs.games.guess_the_number import _GUESS, GuessTheNumberEnv
from jgem.envs.pool import EnvPool
from jgem.models.config import preset
from jgem.models.sampler import Sampler
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer
from jgem.registry import register
from jgem.rollout.collector import Collector, EpisodeSpec, RolloutConfig, SamplerPolicy, wrappers_for_view

ENV_ID = "bench:SlowGuessTheNumber-v0-easy"
_LATENCY = [0.0]  # seconds per step; module-level so one pool serves calibration, warm-up and timing


class SlowGuessTheNumber(GuessTheNumberEnv):
    """GuessTheNumber whose step sleeps `_LATENCY[0]`; an action with no `\\boxed{n}` is a wasted turn."""

    def step(self, action: str):
        time.sleep(_LATENCY[0])
        if _GUESS.search(action) is None:
            action = "\\boxed{0}"  # out of range: a wasted turn, so the random model's episodes run to max_turns
        return super().step(action)


register(ENV_ID, SlowGuessTheNumber, overwrite=True, min_number=1, max_number=10, max_turns=4)


class TimedPolicy(SamplerPolicy):
    """Blocks in `dispatch` and records how long each group's generation took (calibration only)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[float] = []

    def dispatch(self, prompts: list[list[int]], rng: jax.Array):
        t = time.perf_counter()
        out = jax.block_until_ready(super().dispatch(prompts, rng))
        self.times.append(time.perf_counter() - t)
        return out


class Probe:
    """Splits a collect's wall time into waiting for the device (fetch), waiting for env steps, and the rest
    (host work: decoding, tokenizing observations, resets, building and dispatching prompts)."""

    def __init__(self, pool: EnvPool) -> None:
        self.pool, self.fetch_s, self.step_s = pool, 0.0, 0.0
        step = pool.step

        def timed_step(*a, **k):
            t = time.perf_counter()
            try:
                return step(*a, **k)
            finally:
                self.step_s += time.perf_counter() - t

        pool.step = timed_step  # instance attribute: only this bench's pool is timed

    def wrap(self, policy: SamplerPolicy) -> SamplerPolicy:
        fetch = policy.fetch

        def timed_fetch(handle):
            t = time.perf_counter()
            try:
                return fetch(handle)
            finally:
                self.fetch_s += time.perf_counter() - t

        policy.fetch = timed_fetch
        return policy

    def reset(self) -> None:
        self.fetch_s = self.step_s = 0.0


def collect(collector: Collector, policy: SamplerPolicy, specs: list[EpisodeSpec], turns: int) -> tuple[int, float]:
    """(turns played, wall seconds) of one collect."""
    t = time.perf_counter()
    collector.collect(policy, specs, jax.random.key(0), max_turns=turns)
    return collector.stats.turns, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", type=int, default=16, help="envs in the pool (async: two groups of envs/2)")
    ap.add_argument("--episodes-per-env", type=int, default=2, help="episodes per env per collect (resets included)")
    ap.add_argument("--new-tokens", type=int, default=32, help="max_new_tokens per turn")
    ap.add_argument("--workers", type=int, default=None, help="pool threads (default: one per env)")
    ap.add_argument("--latency", type=float, default=None, help="env step seconds (default: calibrated)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--preset", default="tiny")
    args = ap.parse_args()
    if args.envs < 2 or args.envs % 2:
        raise SystemExit(f"--envs must be an even number >= 2 (two groups), got {args.envs}")
    turns = 4
    workers = args.workers or args.envs

    chat = ChatFormat(load_tokenizer())
    mcfg = preset(args.preset)
    model = Transformer(mcfg, rngs=nnx.Rngs(0))
    sampler = Sampler(mcfg, eos_ids=chat.stop_token_ids, pad_id=chat.pad_id)
    pool = EnvPool(ENV_ID, args.envs, backend="thread", num_workers=workers, wrappers=wrappers_for_view("chat"))
    specs = [EpisodeSpec(i, i, 1000 + i) for i in range(args.envs * args.episodes_per_env)]
    cfgs = {g: RolloutConfig(num_groups=g, max_new_tokens=args.new_tokens, max_episode_tokens=1024) for g in (1, 2)}
    collectors = {g: Collector(pool, chat, c, env_name=ENV_ID) for g, c in cfgs.items()}
    probe = Probe(pool)
    # mode -> (groups, policy). "sequential" is the async mode's two groups with blocking sampling: same batch
    # shapes as async, no overlap, so async / sequential isolates the overlap from the batch-size effect.
    modes = {
        "lockstep": (1, probe.wrap(SamplerPolicy(sampler, model, cfgs[1]))),
        "sequential": (2, probe.wrap(TimedPolicy(sampler, model, cfgs[2]))),
        "async": (2, probe.wrap(SamplerPolicy(sampler, model, cfgs[2]))),
    }
    rounds = args.episodes_per_env * turns  # every env plays this many turns, one per round

    try:
        # Warm-up (compiles every prompt/batch bucket both group sizes meet), then calibration: generation time
        # per dispatch with blocking sampling, both group sizes interleaved twice, median of the means.
        _LATENCY[0] = 0.0
        for g in cfgs:
            collect(collectors[g], SamplerPolicy(sampler, model, cfgs[g]), specs, turns)
        gen_samples: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(2):
            for g, c in cfgs.items():
                timed = TimedPolicy(sampler, model, c)
                collect(collectors[g], timed, specs, turns)
                gen_samples[g].append(statistics.mean(timed.times))
        gen_all, gen_group = (statistics.median(gen_samples[g]) for g in (1, 2))
        waves_group = math.ceil(args.envs / 2 / workers)  # sleeping steps a group needs on `workers` threads
        waves_all = math.ceil(args.envs / workers)
        latency = args.latency if args.latency is not None else gen_group / waves_group
        step_group, step_all = latency * waves_group, latency * waves_all
        print(
            json.dumps(
                {
                    "kind": "calibration",
                    "envs": args.envs,
                    "workers": workers,
                    "new_tokens": args.new_tokens,
                    "gen_all_s": round(gen_all, 4),
                    "gen_group_s": round(gen_group, 4),
                    "latency_s": round(latency, 4),
                    "step_group_s": round(step_group, 4),
                    "step_all_s": round(step_all, 4),
                    "bound": round((gen_all + step_all) / (2 * max(gen_group, step_group)), 3),
                }
            ),
            flush=True,
        )

        _LATENCY[0] = latency
        rates: dict[str, list[float]] = {m: [] for m in modes}
        bounds = []
        names = list(modes)
        for rep in range(args.reps):
            rot = names[rep % len(names) :] + names[: rep % len(names)]  # rotate the order: drift hits all modes
            round_s = {}
            for m in rot:
                g, policy = modes[m]
                probe.reset()
                if isinstance(policy, TimedPolicy):
                    policy.times.clear()
                n, dt = collect(collectors[g], policy, specs, turns)
                rates[m].append(n / dt)
                device = probe.fetch_s + (sum(policy.times) if isinstance(policy, TimedPolicy) else 0.0)
                round_s[m] = dt / rounds
                print(
                    json.dumps(
                        {
                            "kind": "sample",
                            "rep": rep,
                            "mode": m,
                            "turns": n,
                            "seconds": round(dt, 3),
                            "turns_per_s": round(n / dt, 2),
                            "round_s": round(dt / rounds, 4),
                            "wait_device_s": round(device / rounds, 4),
                            "wait_env_s": round(probe.step_s / rounds, 4),
                            "host_s": round((dt - device - probe.step_s) / rounds, 4),
                        }
                    ),
                    flush=True,
                )
            # This rep's generation times: lockstep round = G(N) + S(N), sequential round = 2 (G(N/2) + S(N/2)).
            g_half = round_s["sequential"] / 2 - step_group
            bounds.append(round_s["lockstep"] / (2 * max(g_half, step_group)))
        med = {m: statistics.median(r) for m, r in rates.items()}
        print(
            json.dumps(
                {
                    "kind": "summary",
                    "envs": args.envs,
                    "workers": workers,
                    "latency_s": round(latency, 4),
                    **{f"{m}_turns_per_s": round(v, 2) for m, v in med.items()},
                    "ratio": round(med["async"] / med["lockstep"], 3),
                    "ratio_per_rep": [round(a / b, 3) for a, b in zip(rates["async"], rates["lockstep"])],
                    "overlap_ratio": round(med["async"] / med["sequential"], 3),
                    "bound": round(statistics.median(bounds), 3),
                    "bound_per_rep": [round(b, 3) for b in bounds],
                    "platform": jax.devices()[0].platform,
                    "load_avg_1m": round(_load(), 2),
                }
            ),
            flush=True,
        )
    finally:
        pool.close()


def _load() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except OSError:
        return float("nan")


if __name__ == "__main__":
    main()
