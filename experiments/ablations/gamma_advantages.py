"""What the discount factor does to ReBN's advantages on the gamma experiment's games, with no model in the loop.

    .venv/bin/python -m experiments.ablations.gamma_advantages                 # the tiny-gamma preset's game
    .venv/bin/python -m experiments.ablations.gamma_advantages --games 2000 --out runs/ablations/gamma

Plays `--games` games of the preset's env with its warm-start teacher (the policy every arm of the gamma sweep
starts from imitates it, so its batches have these turn counts and rewards), then computes, for each gamma, the
advantages the learner would: `jgem.algos.advantages.rebn` on the games' per-turn rewards (G_t = sum_k gamma^k
r_{t+k}), normalised over every turn of a batch of `--batch` games (the preset's episodes a step). With gamma 1
every turn of every won game has the same return, so a first guess that led to a win in 3 turns is reinforced
exactly as much as one that led to a win in 11: ReBN's only push towards fewer turns is the turn limit (games
that run out lose). With gamma < 1 the first turn of a game won at turn T has return gamma^(T-1), so shorter
wins get larger advantages. Reported per gamma: the mean advantage of the first turn of games won in at most
`--fast` turns, of those won in more, and of lost games; the gap between the first two (the push towards fewer
turns, in the batch's standard deviations), and the correlation of a won game's first-turn advantage with its
number of turns. Writes `<out>/advantages.md` and `.json` with `--out`; prints the table.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

GAMMAS = (0.5, 0.8, 0.9, 0.99, 1.0)


def play_games(env_id: str, env_kwargs: dict, teacher: str, games: int, seed: int) -> list[tuple[list[float], bool]]:
    """(per-turn rewards, won) of `games` games of the teacher, seeds `seed`..; its moves from (seed, game)."""
    from jgem.envs.games.solvers import solver_for
    from jgem.registry import make

    env = make(env_id, **env_kwargs)
    out = []
    for i in range(games):
        player = solver_for(env_id, teacher, np.random.default_rng([seed, i]))
        obs, info = env.reset(seed=seed + i)
        player.reset(obs, info, env.unwrapped)
        rewards, done = [], False
        while not done:
            obs, reward, terminated, truncated, info = env.step(player.act(obs, info, env.unwrapped))
            rewards.append(float(reward))
            done = terminated or truncated
        out.append((rewards, bool(info.get("success", False))))
    return out


def first_turn_advantages(games: list[tuple[list[float], bool]], gamma: float, batch: int) -> np.ndarray:
    """ReBN's advantage of each game's first turn, computed as the learner does, on batches of `batch` games (a
    step's episodes: the returns are normalised within each)."""
    from jgem.algos.advantages import rebn

    k = max(len(r) for r, _ in games)
    rewards = np.zeros((len(games), k), np.float32)
    mask = np.zeros((len(games), k), bool)
    for e, (r, _) in enumerate(games):
        rewards[e, : len(r)], mask[e, : len(r)] = r, True
    return np.concatenate(
        [np.asarray(rebn(rewards[i : i + batch], mask[i : i + batch], gamma=gamma).advantages)[:, 0]
         for i in range(0, len(games), batch)]
    )  # fmt: skip


def table(games: list[tuple[list[float], bool]], gammas: Sequence[float], fast: int, batch: int) -> list[dict]:
    turns = np.array([len(r) for r, _ in games])
    won = np.array([w for _, w in games])
    rows = []
    for g in gammas:
        a = first_turn_advantages(games, g, batch)
        short, long = a[won & (turns <= fast)], a[won & (turns > fast)]
        corr = float(np.corrcoef(a[won], turns[won])[0, 1]) if np.ptp(a[won]) > 0 else 0.0
        rows.append(
            {
                "gamma": g,
                f"won_in_le_{fast}": float(short.mean()),
                f"won_in_gt_{fast}": float(long.mean()),
                "lost": float(a[~won].mean()) if (~won).any() else None,
                "gap": float(short.mean() - long.mean()),
                "corr_with_turns": corr,
            }
        )
    return rows


def markdown(rows: list[dict], games: list[tuple[list[float], bool]], fast: int, batch: int) -> str:
    turns = np.array([len(r) for r, _ in games])
    won = np.array([w for _, w in games])
    head = (
        f"{len(games)} teacher games: {won.mean():.3f} won, {turns.mean():.2f} turns on average "
        f"({turns[won].mean():.2f} over the won); {int((won & (turns <= fast)).sum())} won in at most {fast} turns, "
        f"{int((won & (turns > fast)).sum())} in more, {int((~won).sum())} lost.\n\n"
        f"ReBN advantage of a game's first turn, returns normalised within batches of {batch} games (a step's), "
        "in standard deviations of the batch's returns:\n\n"
        f"| gamma | won in <= {fast} turns | won in > {fast} | lost | gap (fast - slow) "
        "| corr(advantage, turns), won |\n"
        "|---:|---:|---:|---:|---:|---:|\n"
    )
    fmt = lambda v: "-" if v is None else f"{v:+.3f}"  # noqa: E731
    lines = [
        f"| {r['gamma']:g} | {fmt(r[f'won_in_le_{fast}'])} | {fmt(r[f'won_in_gt_{fast}'])} | {fmt(r['lost'])} | "
        f"{fmt(r['gap'])} | {fmt(r['corr_with_turns'])} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--preset", default="tiny-gamma", help="the experiments.train preset whose game and teacher to play"
    )
    ap.add_argument("--games", type=int, default=1000)
    ap.add_argument("--gammas", type=float, nargs="+", default=list(GAMMAS))
    ap.add_argument("--fast", type=int, default=5, help="a win in at most this many turns counts as fast")
    ap.add_argument("--batch", type=int, default=None, help="games a batch (default: the preset's episodes_per_step)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write advantages.md and advantages.json here")
    args = ap.parse_args(argv)
    from experiments.configs import PRESETS

    cfg = PRESETS[args.preset][1]
    games = play_games(
        cfg.env.env_id, dict(cfg.env.env_kwargs), cfg.warm_start.teacher, args.games, args.seed + 5 * 10**9
    )
    batch = args.batch or cfg.episodes_per_step
    rows = table(games, args.gammas, args.fast, batch)
    text = markdown(rows, games, args.fast, batch)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "advantages.md").write_text(text)
        meta = {"preset": args.preset, "games": args.games, "batch": batch, "fast": args.fast}
        (out / "advantages.json").write_text(json.dumps(meta | {"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
