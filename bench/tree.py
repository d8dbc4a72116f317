"""Tree rollouts against plain groups: model work per trained token, on the same episodes.

jgem's `tree` workflow (jgem/rollout/workflows/tree.py): a group's trunk plays `--fork-turn` turns once, then forks
into the group (the KV-cache row copied on the device, the env copied with get_state/set_state) and the branches play
on. Peer: the same groups played as plain episodes by the default workflow (`turns`: every episode plays its own
trunk; the group's first prompt is already prefilled once and copied, so the peer has jgem's own prefix sharing).

Workload, fixed in advance: `--env` played by its scripted solver (bench/rollout.py's `SolverDriven`: the env ignores
the action text, so both sides play the same games turn for turn, asserted), response lengths from a lognormal keyed
by (group, turn) (an action ends there or at a sampled stop token: the sides' trained tokens differ by those, so the
measures are per trained token), `--groups` groups of `--group-size`, a random-init `--model`. Measured per side,
from the engine's counters (they hold on any hardware):
- prefill tokens per trained token: prompt positions the model processed / action tokens the batch trains;
- model tokens per trained token: prefill plus decoded tokens / action tokens trained;
- the trunk's share of a branch's stream, and the engine's wall seconds of a second pass (the first compiles; CPU
  here: indicative only).
The ratio is plain / tree (above 1: the tree does less work for the same training tokens). One JSON line, then a
table.

    .venv/bin/python bench/tree.py                      # the row in docs/benchmarks.md
    .venv/bin/python bench/tree.py --quick              # smoke run: 2 groups of 4
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

import jax
import numpy as np
from flax import nnx
from rollout import SEED_STRIDE, SolverDriven, lognormal

from jgem.envs.pool import EnvPool
from jgem.models.config import preset
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer
from jgem.rollout.config import RolloutConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine
from jgem.rollout.views import wrappers_for_view


def play(workflow: str, args, model, mcfg, chat) -> dict:
    rcfg = RolloutConfig(
        view="chat",
        max_new_tokens=args.max_new_tokens,
        max_episode_tokens=args.max_episode_tokens,
        workflow=workflow,
        fork_turn=args.fork_turn,
    )

    def limit(spec: EpisodeSpec, turn: int) -> int:  # keyed by group: a branch samples as many tokens as its peer
        n = round(lognormal((args.seed, spec.group_id, turn), args.len_median, 0.5))
        return int(np.clip(n, 2, args.max_new_tokens))

    g = args.group_size
    n = args.groups * g
    specs = [EpisodeSpec(i, i // g, (i // g) * SEED_STRIDE + 1000 + args.seed + i // g) for i in range(n)]
    wrappers = [partial(SolverDriven, env_id=args.env, lat_median=0.0, lat_sigma=0.0, lat_max=0.0)]
    wrappers += wrappers_for_view("chat")
    with EnvPool(args.env, args.num_envs, backend="thread", wrappers=wrappers) as pool:
        engine = RolloutEngine(mcfg, pool, chat, rcfg, env_name=args.env, turn_token_limit=limit)
        t = time.perf_counter()
        episodes = engine.collect(model, specs, jax.random.key(args.seed), max_turns=args.max_turns)
        wall = time.perf_counter() - t
    s = engine.stats
    trained = sum(e.num_action_tokens for e in episodes)
    trunk = [e.transitions[min(args.fork_turn, e.num_turns - 1)].prompt_len / e.stream.size for e in episodes]
    return {
        "turns": [e.num_turns for e in episodes],
        "trained_tokens": trained,
        "prefill_tokens": s.prefill_tokens,
        "decoded_tokens": s.decode_active,
        "prefill_per_trained": s.prefill_tokens / trained,
        "model_tokens_per_trained": (s.prefill_tokens + s.decode_active) / trained,
        "trunk_share": float(np.mean(trunk)),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="game:GuessTheNumber-v0-hard")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--num-envs", type=int, default=32)
    ap.add_argument("--fork-turn", type=int, default=4)
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--max-episode-tokens", type=int, default=1024)
    ap.add_argument("--len-median", type=float, default=12.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="2 groups of 4 on 8 envs (checks the path, not the ratio)")
    args = ap.parse_args()
    if args.quick:
        args.groups, args.group_size, args.num_envs = 2, 4, 8
    chat = ChatFormat(load_tokenizer())
    mcfg = preset(args.model)
    model = Transformer(mcfg, rngs=nnx.Rngs(0))
    for w in ("turns", "tree"):  # warm-up: each side's programs compiled before its timed pass
        play(w, args, model, mcfg, chat)
    rows = {w: play(w, args, model, mcfg, chat) for w in ("turns", "tree")}
    if rows["turns"]["turns"] != rows["tree"]["turns"]:
        raise AssertionError("the two sides played different games")
    plain, tree = rows["turns"], rows["tree"]
    out = {
        "bench": "tree",
        "env": args.env,
        "model": args.model,
        "groups": args.groups,
        "group_size": args.group_size,
        "fork_turn": args.fork_turn,
        "plain": {k: v for k, v in plain.items() if k != "turns"},
        "tree": {k: v for k, v in tree.items() if k != "turns"},
        "ratio_prefill_per_trained": plain["prefill_per_trained"] / tree["prefill_per_trained"],
        "ratio_model_tokens_per_trained": plain["model_tokens_per_trained"] / tree["model_tokens_per_trained"],
        "quick": args.quick,
    }
    print(json.dumps(out))
    print(f"\n{'':28}{'plain groups':>14}{'tree':>10}{'plain/tree':>12}")
    for name, key in (
        ("prefill / trained token", "prefill_per_trained"),
        ("model / trained token", "model_tokens_per_trained"),
    ):
        print(f"{name:28}{plain[key]:>14.3f}{tree[key]:>10.3f}{plain[key] / tree[key]:>11.2f}x")
    print(f"{'trunk share of a stream':28}{'':>14}{tree['trunk_share']:>10.2f}")
    print(f"{'engine wall s (CPU)':28}{plain['wall_s']:>14.1f}{tree['wall_s']:>10.1f}")


if __name__ == "__main__":
    main()
