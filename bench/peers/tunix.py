"""Head to head: jgem against Tunix (google-tunix, JAX), GRPO on the same workloads, both learning.

Tunix is what a JAX user would pick instead: its GRPO learner for single-turn tasks and its agentic GRPO learner for
multi-turn envs, on its own Qwen3 model and JAX sampler (`rollout_engine="vanilla"`, the one that runs without vLLM
or SGLang-JAX). It runs in a virtual environment of its own, `.cache/peers/tunix` (google-tunix pinned below;
created on first use), never in jgem's: this script (jgem's venv) runs each side as a subprocess of its own, one
after the other on the same machine, and gathers both.

What is identical between the sides (bench/peers/workload.py fixes it before any run):
- the model: one Qwen3-architecture checkpoint (jgem's `tiny` shape: 4 layers, hidden 128, 4 heads, 2 KV heads,
  head_dim 32, qk-norm, tied embeddings, vocab 1024), loaded by each side from the same safetensors and the same
  tokenizer and chat template; f32 on CPU;
- the starting policy: single-turn, a supervised warm start on addition problems (`sft_addition`, seeds disjoint from
  RL's); multi-turn, jgem's warm start on GuessTheNumber's scripted solver; both made once, cached under --work-dir;
- the problems and games, in the same order (the seeds of jgem's `Run.specs`), the env (multi-turn: jgem's own
  GuessTheNumber under jgem's ChatWrapper on both sides, so the messages are the same), the reward;
- GRPO: groups of `group_size` per start state, advantage (R - mean) / (std + eps) of the episode's return, one
  optimizer step per step (AdamW b1 0.9, b2 0.999, eps 1e-8, no weight decay, global-norm clip 1.0), PPO clip 0.2,
  k3 KL to the starting policy with beta 0.04, each sequence's token mean averaged over sequences; sampling at
  temperature 1 with no top-p/top-k, `max_new_tokens` per turn.
What differs, by design of each system: jgem keeps each episode's KV cache across turns and batches every
episode's decode (continuous batching); Tunix's agentic learner calls its sampler once per episode turn with the
whole conversation re-templated and re-prefilled (its rollout micro-batch is 1: tunix/rl/agentic/
agentic_rl_learner.py), and its single-turn learner samples each step's prompts as one batch. Tunix's sampler draws
from PRNGKey(seed) on every call, so the Tunix side gives each call a seed of its own (`FreshSeeds` in
bench/peers/tunix_side.py); without it every episode of a group would play the same first action.

Measured per side (over the second half of the steps, when Tunix compiles nothing new and jgem's engine only a
few programs, counted in its figure; steps/s over the whole run, compilation included, beside it): steps/s,
generated tokens/s (sampled tokens and the stop token that ended them: Tunix's sampler drops it from what it returns,
the Tunix side counts it back), train tokens/s (prompt and completion tokens of the
sequences the update holds, padding not), peak RSS, and the learning curve (each step's mean return and success).
Output: one JSON line per side and workload, a ratio line per workload (jgem / Tunix), a table, and the plot of both
curves (--plot, default docs/results/peers-tunix.png).

    .venv/bin/python bench/peers/tunix.py                    # both workloads (sets up .cache/peers/tunix first)
    .venv/bin/python bench/peers/tunix.py --quick            # smoke run: 3 steps of 2 groups per workload
    .venv/bin/python bench/peers/tunix.py --workloads multi  # one workload
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench" / "peers")]

from workload import MAX_ADDEND, SEED_STRIDE, WORKLOADS, Workload, addition, grade_addition  # noqa: E402

TUNIX_PIN = "google-tunix==0.1.7"
PEER_VENV = ROOT / ".cache" / "peers" / "tunix"  # beside bench/peers/serving.py's peers (.cache/ is ignored)
SFT_SEED_BASE = 10**9  # the warm start's problems: seeds far from RL's
SFT_STEPS, SFT_BATCH, SFT_LR = 300, 64, 1e-3
GAME_WARM_STEPS = 60


# -- set-up (not timed) --------------------------------------------------------------------------------------------


def tunix_python(venv: Path = PEER_VENV) -> Path:
    """Tunix's interpreter, its virtual environment made and google-tunix installed on first use."""
    python, stamp = venv / "bin" / "python", venv / ".installed"
    if stamp.exists() and stamp.read_text() == TUNIX_PIN:
        return python
    print(f"setting up {venv} with {TUNIX_PIN} (once)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", TUNIX_PIN], check=True)
    stamp.write_text(TUNIX_PIN)
    return python


def sft_addition(out: Path, *, steps: int = SFT_STEPS, batch: int = SFT_BATCH, lr: float = SFT_LR) -> dict:
    """The single-turn workload's starting checkpoint: the tiny model from random init, `steps` supervised steps on
    `batch` addition problems each (the answer `\\boxed{sum}` and EOS), saved as an HF checkpoint in `out`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx

    from jgem.models.config import preset
    from jgem.models.hf import save_pretrained
    from jgem.models.tokenizer import ChatFormat, load_tokenizer
    from jgem.models.transformer import Transformer

    cfg, tok = preset("tiny"), load_tokenizer()
    chat = ChatFormat(tok)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(lr, weight_decay=0.0))
    opt_state = tx.init(params)

    def loss_fn(params, tokens, mask):
        m = nnx.merge(graphdef, params, rest)
        positions = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        logits, _ = m(tokens, positions)
        logp = jax.nn.log_softmax(logits[:, :-1])
        nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
        return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()

    @jax.jit
    def update(params, opt_state, tokens, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, mask)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    width = 48
    for s in range(steps):
        tokens = np.zeros((batch, width), np.int32)
        mask = np.zeros((batch, width), np.float32)
        for i in range(batch):
            row = addition(SFT_SEED_BASE + s * batch + i)
            prompt = chat.start([{"role": "user", "content": row["problem"]}])
            answer = chat.action_ids(f"\\boxed{{{row['answer']}}}")
            seq = (prompt + answer)[:width]
            tokens[i, : len(seq)] = seq
            mask[i, len(prompt) : len(seq)] = 1.0
        params, opt_state, loss = update(params, opt_state, jnp.asarray(tokens), jnp.asarray(mask))
    nnx.update(model, params)
    save_pretrained(model, cfg, out)
    tok.save_pretrained(str(out))
    return {"sft_steps": steps, "sft_final_loss": float(loss)}


def warm_start_game(out: Path, w: Workload, work: Path) -> dict:
    """The multi-turn workload's starting checkpoint: jgem's warm start (the tiny preset's, GAME_WARM_STEPS steps
    imitating the scripted binary-search player) exported as an HF checkpoint in `out`."""
    from experiments.configs import tiny
    from experiments.export import export
    from jgem.train import train

    cfg = tiny()
    cfg = dataclasses.replace(
        cfg,
        run_dir=str(work / "warm-start-run"),
        env=dataclasses.replace(cfg.env, env_id=w.env_id),
        steps=0,
        resume=False,
        eval_every=0,
        plot=False,
        console=False,
        warm_start=dataclasses.replace(cfg.warm_start, steps=GAME_WARM_STEPS),
    )
    train(cfg)
    export(cfg.run_dir, out)
    return {"warm_start_steps": GAME_WARM_STEPS}


def starting_checkpoint(name: str, w: Workload, work: Path) -> Path:
    """The workload's starting checkpoint, made once and cached under `work` (keyed by how it is made)."""
    recipe = {"single": [SFT_STEPS, SFT_BATCH, SFT_LR, MAX_ADDEND], "multi": [GAME_WARM_STEPS, w.env_id]}[name]
    out = work / f"start-{name}"
    stamp = out / "recipe.json"
    if stamp.exists() and json.loads(stamp.read_text()) == recipe:
        return out
    print(f"making the {name} workload's starting checkpoint in {out} (once)", file=sys.stderr, flush=True)
    info = sft_addition(out) if name == "single" else warm_start_game(out, w, work)
    (out / "made.json").write_text(json.dumps(info))
    stamp.write_text(json.dumps(recipe))
    return out


# -- the jgem side (a subprocess of its own, jgem's venv) ----------------------------------------------------------


def addition_env(**kwargs):
    """The single-turn workload as a jgem env: reset(seed) serves `addition(seed)`; graded by `grade_addition`."""
    from jgem.envs.data.dataset import SingleTurnEnv

    class AdditionEnv(SingleTurnEnv):
        def _next_row(self, seed):
            return addition(int(seed))

        def prompt(self, row):
            return row["problem"]

        def grade(self, action, row):
            return grade_addition(action, row["answer"]), {}

    return AdditionEnv(**kwargs)


def jgem_config(w: Workload, ckpt: Path, run_dir: Path):
    from jgem.algos.config import LearnerConfig
    from jgem.config import EnvConfig, ModelSpec, TrainConfig
    from jgem.rollout.config import RolloutConfig

    return TrainConfig(
        run_dir=str(run_dir),
        seed=w.seed,
        steps=w.steps,
        algorithm="grpo",
        gamma=1.0,
        episodes_per_step=w.episodes_per_step,
        group_size=w.group_size,
        env=EnvConfig(env_id=w.env_id, num_envs=w.episodes_per_step, backend="inline"),
        model=ModelSpec(path=str(ckpt)),
        rollout=RolloutConfig(
            view="chat",
            max_new_tokens=w.max_new_tokens,
            max_episode_tokens=w.max_episode_tokens,
            temperature=w.temperature,
        ),
        learner=LearnerConfig(
            policy_loss="ppo",
            temperature=w.temperature,
            lr=w.lr,
            max_grad_norm=w.max_grad_norm,
            clip_low=w.clip,
            kl_coef=w.beta,
            kl_estimator="k3",
            aggregation="seq_mean_token_mean",
            epochs=1,
            minibatches=1,
        ),
        eval_every=0,
        eval_at_start=False,
        checkpoint_every=w.steps,
        resume=False,
        plot=False,
        console=False,
    )


def jgem_side(name: str, w: Workload, ckpt: Path, run_dir: Path) -> dict:
    """Trains `w` from `ckpt` with jgem's Trainer, step by step (`train_step`: the rollout, then the update)."""
    import jax

    import jgem.envs  # noqa: F401
    from jgem.registry import register
    from jgem.train.loop import Trainer
    from jgem.train.run import SEED_STRIDE as JGEM_STRIDE

    assert SEED_STRIDE == JGEM_STRIDE, "bench/peers/workload.py's SEED_STRIDE is not jgem's"
    register("bench:Addition-v0", addition_env, overwrite=True)
    t = time.perf_counter()
    trainer = Trainer(jgem_config(w, ckpt, run_dir))
    setup_s = time.perf_counter() - t
    ends, steps = [], []
    t0 = time.perf_counter()
    try:
        trainer.pipeline.start(0)
        for step in range(w.steps):
            m = trainer.train_step(step)
            ends.append(time.perf_counter() - t0)
            steps.append(m)
    finally:
        trainer.close()
    seeds = [[int(s.seed) for s in trainer.specs(step)][:: w.group_size] for step in range(w.steps)]
    assert seeds == [w.seeds(step) for step in range(w.steps)], "jgem's start states are not the workload's"
    return {
        "side": "jgem",
        "jax": jax.__version__,
        "setup_s": setup_s,
        "wall_s": ends[-1],
        "update_end_s": ends,
        "step_return": [m["rollout/return"] for m in steps],
        "step_success": [m["rollout/success_rate"] for m in steps],
        "step_generated_tokens": [m["rollout/action_tokens"] * w.episodes_per_step for m in steps],
        "step_train_tokens": [m["batch/tokens"] for m in steps],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_metrics": steps,
    }


# -- gathering -----------------------------------------------------------------------------------------------------


def tunix_rows(w: Workload, out: dict) -> dict:
    """The Tunix side's record in the jgem side's shape: episodes in order of completion, `episodes_per_step` a
    step (the learners are on-policy: a step's rollouts end before its update)."""
    eps = out.pop("episodes")
    n = w.episodes_per_step
    # an episode Tunix ended without recording it would shift every later step's chunk: none may be missing
    assert len(eps) == n * w.steps, f"Tunix recorded {len(eps)} episodes, not {w.steps} steps x {n}"
    chunks = [eps[i * n : (i + 1) * n] for i in range(w.steps)]
    out["step_return"] = [sum(r for _, r, _ in c) / max(len(c), 1) for c in chunks]
    out["step_success"] = [sum(s for _, _, s in c) / max(len(c), 1) for c in chunks]
    return out


def summary(name: str, w: Workload, side: dict) -> dict:
    """A side's row. Warm figures are over the second half of the steps (`h`..N): Tunix's sampler pads every prompt to
    the one `max_prompt_length` and compiles nothing new there; jgem's engine compiles a program per new bucket of
    slots, lengths and windows, most in the first steps (the few left count in its figure); the whole run's steps/s,
    compilation included, beside them."""
    ends = side["update_end_s"]
    n = len(ends)
    h = n // 2
    warm_s = ends[-1] - ends[h - 1] if n > 1 else float("nan")
    k = max(1, w.steps // 4)
    row = {
        "workload": name,
        "side": side["side"],
        "steps": n,
        "steps_per_s": (n - h) / warm_s,
        "steps_per_s_with_compile": n / ends[-1],  # both sides: from the first step's start to the last update's end
        "return_first": sum(side["step_return"][:k]) / k,
        "return_last": sum(side["step_return"][-k:]) / k,
        "success_first": sum(side["step_success"][:k]) / k,
        "success_last": sum(side["step_success"][-k:]) / k,
        "peak_rss_mib": side["peak_rss_mib"],
        "setup_s": side["setup_s"],
    }
    if side["side"] == "jgem":
        row["generated_tokens_per_s"] = sum(side["step_generated_tokens"][h:]) / warm_s
        row["train_tokens_per_s"] = sum(side["step_train_tokens"][h:]) / warm_s
        row["compilations"] = side["step_metrics"][-1].get("compile/rollout", 0) + side["step_metrics"][-1].get(
            "compile/update", 0
        )
    else:
        calls = side["generate_tokens_by_call"]
        row["generated_tokens_per_s"] = sum(c for t, c in calls if ends[h - 1] < t <= ends[-1]) / warm_s
        row["train_tokens_per_s"] = sum(side["train_tokens_by_update"][h:]) / warm_s
        row["sampler_calls"] = len(calls)
        row["version"] = side["version"]
    return row


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
    for ax, (name, sides) in zip(axes[0], curves.items(), strict=True):
        for side, ys in sides.items():
            ax.plot(range(1, len(ys) + 1), ys, marker=".", label=side)
        ax.set_title(f"{WORKLOADS[name].name}: GRPO")
        ax.set_xlabel("step")
        ax.set_ylabel("mean return of the step's episodes")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="single,multi")
    ap.add_argument("--quick", action="store_true", help="3 steps of 2 groups per workload (a smoke run)")
    ap.add_argument("--work-dir", type=Path, default=ROOT / "runs" / "bench-peers-tunix")
    ap.add_argument("--tunix-python", type=Path, default=None, help="default: .cache/peers/tunix (made on first use)")
    ap.add_argument("--plot", type=Path, default=ROOT / "docs" / "results" / "peers-tunix.png")
    ap.add_argument("--side", choices=["jgem", "tunix"], help=argparse.SUPPRESS)  # a subprocess's role
    ap.add_argument("--ckpt", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    names = [n for n in args.workloads.split(",") if n]
    for n in names:
        if n not in WORKLOADS:
            ap.error(f"unknown workload {n!r}; choose from {', '.join(WORKLOADS)}")
    if args.side == "jgem":  # the jgem side's subprocess
        w = WORKLOADS[names[0]]
        w = w.quick() if args.quick else w
        args.out.write_text(json.dumps(jgem_side(names[0], w, args.ckpt, args.out.parent / "jgem-run")))
        return
    python = args.tunix_python or tunix_python()
    work = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    curves, rows = {}, []
    for name in names:
        w = WORKLOADS[name].quick() if args.quick else WORKLOADS[name]
        ckpt = starting_checkpoint(name, w, work)
        sides = {}
        for side in ("jgem", "tunix"):
            out = work / f"{name}-{side}.json"
            out.unlink(missing_ok=True)
            if side == "jgem":
                cmd = [sys.executable, __file__, "--side", "jgem", "--workloads", name]
            else:
                cmd = [str(python), str(ROOT / "bench" / "peers" / "tunix_side.py"), "--workload", name]
            cmd += ["--ckpt", str(ckpt), "--out", str(out)] + (["--quick"] if args.quick else [])
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            t = time.perf_counter()
            proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"the {side} side of {name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
            record = json.loads(out.read_text())
            record["process_s"] = time.perf_counter() - t
            sides[side] = tunix_rows(w, record) if side == "tunix" else record
        for record in sides.values():
            row = summary(name, w, record)
            rows.append(row)
            print(json.dumps(row), flush=True)
        j, t = rows[-2], rows[-1]
        ratio = {
            "workload": name,
            "ratio_steps_per_s": j["steps_per_s"] / t["steps_per_s"],
            "ratio_steps_per_s_with_compile": j["steps_per_s_with_compile"] / t["steps_per_s_with_compile"],
            "ratio_generated_tokens_per_s": j["generated_tokens_per_s"] / t["generated_tokens_per_s"],
            "ratio_train_tokens_per_s": j["train_tokens_per_s"] / t["train_tokens_per_s"],
            "ratio_peak_rss": j["peak_rss_mib"] / t["peak_rss_mib"],
            "goal_steps_per_s": 1.5,
        }
        rows.append(ratio)
        print(json.dumps(ratio), flush=True)
        curves[name] = {side: record["step_return"] for side, record in sides.items()}
    if args.plot and not args.quick:
        plot(curves, args.plot)
    header = [
        "workload",
        "side",
        "steps/s",
        "with compile",
        "gen tok/s",
        "train tok/s",
        "return first->last",
        "RSS MiB",
    ]
    print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    for r in rows:
        if "side" in r:
            ret = f"{r['return_first']:.3f} -> {r['return_last']:.3f}"
            cells = [r["workload"], r["side"], f"{r['steps_per_s']:.3f}", f"{r['steps_per_s_with_compile']:.3f}"]
            cells += [f"{r['generated_tokens_per_s']:.0f}", f"{r['train_tokens_per_s']:.0f}", ret]
            cells += [f"{r['peak_rss_mib']:.0f}"]
        else:
            cells = [r["workload"], "jgem / Tunix", f"{r['ratio_steps_per_s']:.2f}x"]
            cells += [f"{r['ratio_steps_per_s_with_compile']:.2f}x", f"{r['ratio_generated_tokens_per_s']:.2f}x"]
            cells += [f"{r['ratio_train_tokens_per_s']:.2f}x", "", f"{r['ratio_peak_rss']:.2f}x"]
        print("| " + " | ".join(cells) + " |")
    if args.quick:
        print("\n--quick: 3 steps a workload; the half measured is 1-2 steps in which jgem's engine still compiles:")
        print("these ratios check the path, not the speed (the full run: no --quick)")


if __name__ == "__main__":
    main()
