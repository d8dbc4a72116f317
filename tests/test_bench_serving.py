"""bench/peers/serving.py (jgem's rollout engine against vLLM and SGLang) on CPU: the recorded multi-turn workload, the
peers' replay of it, the check of jgem's episodes against it, and the dry run end to end (jgem really executed, a
peer that does not import reported as not installed)."""

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jgem.rollout.episode import Episode, Transition

REPO = Path(__file__).resolve().parents[1]
_PATH = REPO / "bench" / "peers" / "serving.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_serving", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


serving = _load()


@pytest.fixture(scope="module")
def recording():
    return serving.record_multiturn(
        "game:Sudoku-v0-easy", episodes=3, max_turns=4, seed=0, len_median=5.0, len_sigma=0.8, max_new_tokens=9
    )


def test_recording_is_bench_rollouts_workload(recording):
    """Per-turn lengths are bench/rollout.py's lognormal of (seed, episode, turn), clipped to [2, max]; every turn
    but the last has the tokens that follow it; a slot holds the longest stream."""
    rollout = serving.bench_rollout()
    for e in recording["episodes"]:
        assert 1 <= len(e["turns"]) <= 4 and e["prompt"]
        for k, t in enumerate(e["turns"]):
            want = int(np.clip(round(rollout.lognormal((0, e["id"], k), 5.0, 0.8)), 2, 9))
            assert t["new"] == want
            assert (t["then"] is None) == (k == len(e["turns"]) - 1)
    stats = serving.recording_stats(recording)
    assert stats["turns"] == sum(len(e["turns"]) for e in recording["episodes"])
    assert recording["max_episode_tokens"] >= stats["stream_max"] + 9


def _fake_peer(short: int = 0):
    """A stand-in engine: each request returns n - `short` made-up tokens, requests finishing in a random order."""
    rng = random.Random(0)
    pending: list[tuple[int, list[int], int]] = []

    def submit(i, ids, n):
        pending.append((i, list(ids), n))

    def wait():
        rng.shuffle(pending)
        k = rng.randint(1, len(pending))
        done, pending[:] = pending[:k], pending[k:]
        return [(i, [7] * (n - short), len(ids) // 2) for i, ids, n in done]

    def batch(prompts, ns):
        return [([7] * (n - short), 0) for n in ns]

    return submit, wait, batch


def test_peer_replay_has_the_recorded_token_counts(recording):
    submit, wait, batch = _fake_peer()
    want = serving.recording_stats(recording)
    for stats in (serving.replay_continuous(recording, submit, wait), serving.replay_rounds(recording, batch)):
        assert stats["gen_tokens"] == want["gen_tokens"] and stats["requests"] == want["turns"]
        assert stats["stream_tokens"] == want["stream_tokens"]
        assert stats["prefill_computed"] == stats["prompt_tokens"] - stats["cached_tokens"]
    submit, wait, batch = _fake_peer(short=1)  # a peer that stops early (EOS honoured) is refused
    with pytest.raises(serving.TokenCountError):
        serving.replay_continuous(recording, submit, wait)
    with pytest.raises(serving.TokenCountError):
        serving.replay_rounds(recording, batch)


def _played(recording):
    """Episodes as jgem's engine leaves them when it played the recording: its own action tokens, the recorded
    tokens between them."""
    out = []
    for e in recording["episodes"]:
        stream, trs = list(e["prompt"]), []
        for k, t in enumerate(e["turns"]):
            action = np.full(t["new"], 3, np.int32)
            trs.append(Transition(e["id"], k, len(stream), action, np.zeros(t["new"], np.float32), stopped=False))
            stream += action.tolist() + list(t["then"] or ())
        out.append(Episode(e["id"], e["group"], "env", e["seed"], trs, stream=np.asarray(stream, np.int32)))
    return out


def test_check_replay_finds_a_different_workload(recording):
    played = _played(recording)
    assert serving.check_replay(recording, played) == []
    longer = json.loads(json.dumps(recording))
    longer["episodes"][0]["turns"][0]["new"] += 1
    assert serving.check_replay(longer, played)
    other_obs = json.loads(json.dumps(recording))
    other_obs["episodes"][1]["turns"][0]["then"][-2] += 1
    assert serving.check_replay(other_obs, played)
    assert serving.check_replay({**recording, "episodes": recording["episodes"][:2]}, played)


def test_roofline_bytes():
    from jgem.models.config import preset

    cfg = preset("qwen3-0.6b")
    w = serving.weight_bytes(cfg)
    assert w == cfg.num_params * 2  # tied: the head is the embedding, read every step
    kv = serving.kv_bytes_per_pos(cfg)
    assert kv == 28 * 2 * 8 * 128 * 2
    got = serving.plain_decode_bytes(cfg, batch=4, prompt=32, new=3)  # steps at contexts 33 and 34
    assert got == 2 * w + 4 * (33 + 34) * kv
    rec = {"episodes": [{"prompt": [0] * 10, "turns": [{"new": 2, "then": [0] * 5}, {"new": 3, "then": None}]}]}
    assert serving.multiturn_decode_bytes(cfg, rec) == 5 * w + ((11 + 12) + (18 + 19 + 20)) * kv
    assert serving.peak_gb_s("NVIDIA H200") == 4800.0 and serving.peak_gb_s("NVIDIA H100 80GB HBM3") == 3350.0
    assert serving.peak_gb_s("NVIDIA GH200 480GB") == 4000.0 and serving.peak_gb_s(None) is None


@pytest.mark.slow
def test_dry_run(tmp_path):
    """The whole script on CPU: jgem's rows (the multi-turn workload replayed with the recorded token counts), a
    peer reported as not installed, the roofline fractions, ratio fields, the summary and the table."""
    cmd = [sys.executable, str(_PATH), "--dry-run", "--sides", "jgem,vllm", "--vllm-python", str(tmp_path / "none")]
    cmd += ["--batches", "1,2", "--new-tokens", "8", "--episodes", "2", "--max-turns", "2", "--peak-gb-s", "10"]
    cmd += ["--out-dir", str(tmp_path / "work"), "--budget-s", "240"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    rows = {(r["side"], r["row"]): r for r in lines if r["kind"] == "row"}
    workload = next(r for r in lines if r["kind"] == "workload")
    for rid in ("a1", "a2", "b"):
        j = rows[("jgem", rid)]
        assert j["status"] == "ok" and j["tok_s"] > 0 and j["tokens_match"], j
        assert j["frac_of_bw"] > 0 and "ratio_vs_vllm" in j and "ratio_vs_sglang" in j
        assert rows[("vllm", rid)]["status"].startswith("not installed")
    b = rows[("jgem", "b")]
    assert b["workload_match"] and b["workload_problems"] == []
    assert b["gen_tokens"] == workload["gen_tokens"] and b["turns"] == workload["turns"]
    assert b["stream_tokens"] == workload["stream_tokens"]
    assert rows[("jgem", "a2")]["gen_tokens"] == 2 * 8
    summary = next(r for r in lines if r["kind"] == "summary")
    assert summary["ratios"]["tiny/a1"] == {"vs_vllm": None, "vs_sglang": None}
    assert "tiny/b_vs_vllm_ge_1.0" in summary["goals"]
    assert "jgem tok/s" in out.stdout and "jgem/vllm" in out.stdout
