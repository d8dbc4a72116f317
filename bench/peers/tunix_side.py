"""The Tunix side of bench/peers/tunix.py. Runs in Tunix's own virtual environment (never jgem's), started by
bench/peers/tunix.py with the repo on PYTHONPATH for `workload` and, in the multi-turn workload, jgem's game env and
chat wrapper (pure Python: the env the model plays is the same object on both sides).

- single-turn: Tunix's `GRPOLearner` (tunix/rl/grpo/grpo_learner.py) on the chat-templated problems, the reward a
  function of the completion text.
- multi-turn: Tunix's agentic `GRPOLearner` (tunix/rl/agentic/agentic_grpo_learner.py) with `JgemGameEnv`, a
  `BaseTaskEnv` around jgem's env under jgem's `ChatWrapper`, and `PlainAgent`, Tunix's `ModelAgent` without the
  empty system message it would otherwise add (jgem's episodes have none, nor had the warm start's). Tunix's agentic
  learner caps the tokens of a whole episode's response; `CappedTurns` caps each turn at the workload's
  `max_new_tokens` too, as jgem does (it passes the smaller of the two to the same `rl_cluster.generate`).

Instrumentation (the learners untouched): `rl_cluster.update_actor` is wrapped to time each optimizer step (until
the actor's parameters are ready), `rl_cluster.generate` to count the tokens sampled (Tunix returns a row up to its
first EOS, the EOS left out; a row shorter than the call's cap stopped on one, counted back), the reward / env to
record each episode's return and success. Writes one JSON object to --out.

Left as Tunix ships it (docs/benchmarks.md says so): the actions it trains on lack the stop token it sampled (the
single-turn learner never trains the stop token; the agentic learner's training context lacks each earlier action's
stop token that its sampler saw), and an action cut at the cap is played or graded as cut (jgem plays "" instead).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import resource
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# Python put this folder first on sys.path, where bench/peers/tunix.py would shadow the `tunix` package: out with it,
# and the repo in (jgem's envs and this folder's `workload`, imported by path below).
sys.path[:] = [str(ROOT)] + [p for p in sys.path if p and Path(p).resolve() != HERE]

import grain.python as grain  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from tunix.models.qwen3 import model as qwen3_model  # noqa: E402
from tunix.models.qwen3 import params as qwen3_params  # noqa: E402
from tunix.rl import rl_cluster as rlc  # noqa: E402
from tunix.rl.agentic import agentic_grpo_learner  # noqa: E402
from tunix.rl.agentic.agents import model_agent  # noqa: E402
from tunix.rl.agentic.environments import base_environment  # noqa: E402
from tunix.rl.agentic.parser.chat_template_parser import parser  # noqa: E402
from tunix.rl.grpo import grpo_learner  # noqa: E402
from tunix.rl.rollout import base_rollout  # noqa: E402

from bench.peers.workload import WORKLOADS, Workload, addition, grade_addition  # noqa: E402

RECORD: dict = {"updates": [], "train_tokens_by_update": [], "generate_tokens_by_call": [], "episodes": []}


def model_config(ckpt: Path) -> qwen3_model.ModelConfig:
    hf = json.loads((ckpt / "config.json").read_text())
    return qwen3_model.ModelConfig(
        num_layers=hf["num_hidden_layers"],
        vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"],
        hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"],
        head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"],
        rope_theta=int(hf["rope_theta"]),
        norm_eps=hf["rms_norm_eps"],
        use_tied_embedding=hf["tie_word_embeddings"],
    )


def instrument(cluster: rlc.RLCluster, eos: int, pad: int, default_cap: int, t0: float) -> None:
    update, generate = cluster.update_actor, cluster.generate

    def timed_update(train_ds, *args, **kwargs):
        examples = list(train_ds)  # the step's training examples (a list or an iterator of them)
        out = update(examples, *args, **kwargs)
        jax.block_until_ready(jax.tree.leaves(nnx.state(cluster.actor_trainer.model, nnx.Param)))  # it returns early
        RECORD["updates"].append(time.perf_counter() - t0)
        n = 0
        for ex in examples:  # the tokens the update's forward pass holds: prompt and completion, padding not
            n += int(np.asarray(ex.prompt_mask).sum()) + int((np.asarray(ex.completion_ids) != pad).sum())
        RECORD["train_tokens_by_update"].append(n)
        return out

    def counted_generate(*args, **kwargs):
        out = generate(*args, **kwargs)
        cap = kwargs.get("max_generation_steps") or default_cap
        n = 0
        for row in out.tokens:  # Tunix returns a row up to its first EOS, the EOS left out: count it back
            row = np.asarray(row)
            hit = np.flatnonzero(row == eos)
            n += int(hit[0] + 1) if hit.size else row.size + int(row.size < cap)
        RECORD["generate_tokens_by_call"].append((time.perf_counter() - t0, n))
        return out

    cluster.update_actor, cluster.generate = timed_update, counted_generate


class FreshSeeds(dict):
    """The rollout config by mode, each read with a seed of its own. Tunix's sampler draws from
    PRNGKey(rollout_config.seed) on each call (PRNGKey(0) when None: tunix/generate/sampler.py), so the agentic
    learner's one-prompt calls would sample one and the same action for all of a group's equal first prompts.
    (jgem's engine gives each episode a key of its own.)"""

    def __init__(self, configs, seed: int) -> None:
        super().__init__(configs)
        self.calls = itertools.count(seed * 1_000_003)

    def __getitem__(self, mode):
        seed = getattr(CALL, "seed", None)  # the agentic calls': (group, episode, turn), whatever the threads' order
        return dataclasses.replace(super().__getitem__(mode), seed=next(self.calls) if seed is None else seed)


CALL = threading.local()  # the seed of the sampler call this thread makes (`CappedTurns`)


class ChatML(parser.QwenChatTemplateParser):
    """Tunix's Qwen chat parser without Qwen's default system message: the text is then the shipped tokenizer's
    own chat template's (ChatML, what jgem renders). The agentic learner needs a parser: without one it hands
    a single conversation to `rl_cluster.generate` as if it were a list of them (tunix 0.1.7)."""

    def _handle_first_message(self, messages):
        return ""


class PlainAgent(model_agent.ModelAgent):
    """Tunix's ModelAgent, without the empty system message (jgem's chat view has none)."""

    def _init_messages(self, system_prompt: str | None) -> None:
        self._messages = [{"role": "system", "content": system_prompt}] if system_prompt else []


class JgemGameEnv(base_environment.BaseTaskEnv):
    """jgem's env (under its ChatWrapper) as a Tunix task env: the task is {"seed": s}; each step's observation is
    the content of the wrapper's new user message, as jgem's chat view appends it."""

    def __init__(self, single_example, *, env_id: str, max_turns: int, **kwargs):
        super().__init__(task=dict(single_example), max_steps=max_turns, **kwargs)
        import jgem.envs  # noqa: F401  (registers the game ids)
        from jgem.envs.wrappers import ChatWrapper
        from jgem.registry import make

        self.env = ChatWrapper(make(env_id))
        self.ret, self.success = 0.0, False

    def _initial_observation(self):
        messages, _ = self.env.reset(seed=int(np.asarray(self.task["seed"]).reshape(-1)[0]))
        return messages[-1]["content"]

    def _step_impl(self, action):
        text = action.action if hasattr(action, "action") else action
        messages, reward, terminated, truncated, info = self.env.step(text)
        self.ret += float(reward)
        self.success = self.success or bool(info.get("success", reward >= 1.0))
        done = terminated or truncated or self.step_count >= self.max_steps
        if done:
            RECORD["episodes"].append((time.perf_counter(), self.ret, float(self.success)))
        obs = None if done else messages[-1]["content"]
        return base_environment.EnvStepResult(observation=obs, reward=float(reward), done=done, info={})


def run(w: Workload, ckpt: Path) -> dict:
    devices = np.array(jax.devices()[:1]).reshape(1, 1)
    mesh = jax.sharding.Mesh(devices, ("fsdp", "tp"))
    cfg = model_config(ckpt)
    t_setup = time.perf_counter()
    actor = qwen3_params.create_model_from_safe_tensors(str(ckpt), cfg, mesh)
    reference = qwen3_params.create_model_from_safe_tensors(str(ckpt), cfg, mesh)
    tok = PreTrainedTokenizerFast.from_pretrained(str(ckpt))
    multi = w.max_turns > 1
    optimizer = optax.chain(
        optax.clip_by_global_norm(w.max_grad_norm),
        optax.adamw(w.lr, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.0),
    )
    # Buffers sized to the workload: the longest conversation of the game is ~310 tokens (a 143-token first prompt,
    # 4 turns of 12 action and ~30 observation tokens), its completion part ~170; the agentic learner wants the
    # per-call cap equal to its episode cap, and `CappedTurns` asks for 12 tokens a call.
    prompt_len, response_len = (384, 256) if multi else (48, w.max_new_tokens)
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=response_len,
        max_prompt_length=prompt_len,
        kv_cache_size=prompt_len + 16,
        temperature=w.temperature,
        top_p=1.0,  # top_p None would make Tunix's sampler greedy, whatever the temperature (tunix/generate/sampler.py)
        top_k=None,
        return_logprobs=multi,
        eos_tokens=[tok.eos_token_id],
    )
    cluster = rlc.RLCluster(
        actor=actor,
        reference=reference,
        tokenizer=tok,
        cluster_config=rlc.ClusterConfig(
            role_to_mesh={rlc.Role.ACTOR: mesh, rlc.Role.REFERENCE: mesh, rlc.Role.ROLLOUT: mesh},
            rollout_engine="vanilla",
            offload_to_cpu=False,
            training_config=rlc.RLTrainingConfig(
                actor_optimizer=optimizer, eval_every_n_steps=10**9, max_steps=w.steps
            ),
            rollout_config=FreshSeeds({rlc.Mode.TRAIN: rollout}, w.seed),
        ),
    )
    common = dict(num_generations=w.group_size, num_iterations=1, beta=w.beta, epsilon=w.clip)
    common |= dict(kl_loss_mode="low_var_kl", loss_agg_mode="sequence-mean-token-mean")
    seeds = [s for step in range(w.steps) for s in w.seeds(step)]
    if multi:

        class CappedTurns(agentic_grpo_learner.GRPOLearner):
            def _model_call(self, chat_lists, env=None, max_generation_steps=None):
                cap = w.max_new_tokens if max_generation_steps is None else min(max_generation_steps, w.max_new_tokens)
                group, pair = env.extra_kwargs["group_id"], env.extra_kwargs["pair_index"]
                CALL.seed = w.seed * 10**9 + (group * w.group_size + pair) * 64 + env.step_count
                try:
                    return super()._model_call(chat_lists, env, max_generation_steps=cap)
                finally:
                    CALL.seed = None

        learner = CappedTurns(
            rl_cluster=cluster,
            algo_config=agentic_grpo_learner.GRPOConfig(
                **common, max_response_length=response_len, max_concurrency=w.episodes_per_step
            ),
            chat_parser=ChatML(tok),
            agent_class=PlainAgent,
            agent_kwargs={"system_prompt": ""},
            env_class=JgemGameEnv,
            env_kwargs={"env_id": w.env_id, "max_turns": w.max_turns},
        )
        data = grain.MapDataset.source([{"seed": s} for s in seeds]).batch(w.prompts_per_step)
    else:
        rows = [addition(s) for s in seeds]
        texts = [
            tok.apply_chat_template(
                [{"role": "user", "content": r["problem"]}], tokenize=False, add_generation_prompt=True
            )
            for r in rows
        ]

        def reward(prompts, completions, answer, **_):
            now = time.perf_counter()
            out = [grade_addition(c, a) for c, a in zip(completions, answer, strict=True)]
            RECORD["episodes"] += [(now, r, r) for r in out]
            return out

        learner = grpo_learner.GRPOLearner(
            rl_cluster=cluster, algo_config=grpo_learner.GRPOConfig(**common), reward_fns=reward
        )
        items = [{"prompts": t, "answer": r["answer"]} for t, r in zip(texts, rows, strict=True)]
        data = grain.MapDataset.source(items).batch(w.prompts_per_step)
    setup_s = time.perf_counter() - t_setup
    t0 = time.perf_counter()
    instrument(cluster, tok.eos_token_id, tok.pad_token_id, w.max_new_tokens, t0)
    RECORD["episodes"] = []
    learner.train(data)
    wall = time.perf_counter() - t0
    return {"setup_s": setup_s, "wall_s": wall, "t0": t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    ap.add_argument("--ckpt", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    w = w.quick() if args.quick else w
    timing = run(w, args.ckpt)
    t0 = timing.pop("t0")
    episodes = [(t - t0, r, s) for t, r, s in RECORD["episodes"]]
    import importlib.metadata as md

    out = {
        "side": "tunix",
        "version": md.version("google-tunix"),
        "jax": jax.__version__,
        **timing,
        "update_end_s": RECORD["updates"],
        "episodes": episodes,
        "train_tokens_by_update": RECORD["train_tokens_by_update"],
        "generate_tokens_by_call": RECORD["generate_tokens_by_call"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    args.out.write_text(json.dumps(out))


if __name__ == "__main__":
    main()
