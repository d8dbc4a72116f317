"""`python -m experiments.eval RUN --agents`: a multi-agent run's policy against the game's scripted players.

For each checkpoint asked for (`--checkpoints last` by default, `all`, or step numbers) and each scripted player
(`--opponents`, default every player of the game that fills the other seats), the policy plays the trainer's
held-out eval seeds at alternating seats (the `agents` workflow's evaluation, `rollout.eval_opponent` set to the
player), and the table gives wins, draws and losses per seat with the win rate's 95% Wilson interval (games cut
before their end, by a turn or token limit, counted apart; faulted ones left out). Every pair of
checkpoints plays too: the later one's policy is loaded beside the earlier one's and the engine pins the other
seats' streams to it (`rollout.eval_opponent policy:-1`). Each pair of scripted players also plays once (in process, on
the same seeds, seats alternating), and a Bradley-Terry league table puts every checkpoint and player on one Elo
scale (`jgem.train.league`; not for a cooperative game, whose "wins" are a pair's successes).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments.restore import load_run, resolve


def evaluate_agents(
    path: str | Path,
    *,
    opponents: Sequence[str] | None = None,
    checkpoints: Sequence[str] = ("last",),
    episodes: int | None = None,
    greedy: bool | None = None,
    max_turns: int | None = None,
    say: Any = lambda _: None,
) -> dict[str, Any]:
    from jgem.checkpoint import CheckpointConfig, Checkpointer
    from jgem.config import agent_seats, load_run_config
    from jgem.envs.multiagent.base import play_match
    from jgem.registry import make
    from jgem.rollout.workflows.agents import POLICY, player_for, players_of, seat_errors
    from jgem.train.league import Tally, bradley_terry

    t0 = time.perf_counter()
    run_dir, step = resolve(path)
    overrides: dict[str, Any] = {}
    if episodes is not None:
        overrides["eval_episodes"] = episodes
    if greedy is not None:
        overrides["eval_greedy"] = greedy
    if max_turns is not None:
        overrides["eval_max_turns"] = max_turns
    trained = load_run_config(run_dir)  # checked before the model is built
    env_id = trained.env.env_id
    agents = agent_seats(trained.env)
    if trained.rollout.workflow != "agents" or not agents:
        raise ValueError(f"--agents evaluates multi-agent runs (rollout.workflow agents); {run_dir} plays {env_id}")
    players = players_of(env_id)
    names = list(opponents or [p for p in players if not _errors(env_id, agents, p, seat_errors)])
    for name in names:
        errors = _errors(env_id, agents, name, seat_errors) if name in players else [f"{name!r} is not one"]
        if errors:
            raise ValueError(
                f"--opponents: {'; '.join(errors).replace('rollout.eval_opponent ', '')} (the players of "
                f"{env_id}: {', '.join(players) or 'none'})"
            )
    run, first = load_run(path, **overrides)
    try:
        cfg = run.cfg
        with Checkpointer(CheckpointConfig(str(run_dir / "checkpoints"))) as ckpt:
            saved = ckpt.all_steps()
        steps = _steps(checkpoints, saved, first if step is None else step)
        if len(steps) > 1 and run.engine.slots.lockstep:
            raise ValueError(
                "checkpoints against each other need the sampler on one process (a frozen policy's streams are not "
                "played in lockstep); evaluate one checkpoint at a time"
            )
        seeds = [spec.seed for spec in run.specs(0, eval=True)]  # the games every side plays (the eval seeds)
        faults, seen = 0, set()
        results: dict[str, dict[str, Any]] = {}
        games: list[tuple[str, str, float]] = []
        for s in steps:
            run.restore_policy(run_dir / "checkpoints", s)
            me = f"step {s}"
            results[me] = {}
            for name in names:
                run.engine.cfg = dataclasses.replace(run.engine.cfg, eval_opponent=name)
                eps = run.collect(s, eval=True)
                seats = {a: Tally() for a in agents}
                for e in eps:
                    if e.fault:  # the env failed: no seat played it out
                        faults += 1
                        continue
                    seats[agents[e.role]].add(e.outcome, e.episode_return)
                    games += _league_game(me, name, e.outcome)
                    seen.add(e.outcome)
                results[me][name] = {a: t.row() for a, t in seats.items()}
                say(
                    f"{me} vs {name}: "
                    + ", ".join(f"as {a} {t.wins}-{t.draws}-{t.losses}" for a, t in seats.items())
                    + f" ({time.perf_counter() - t0:.0f} s)"
                )
        frozen: dict[str, dict[str, Any]] = {}
        for i, a_step in enumerate(steps):  # every pair of checkpoints: the later one frozen at the other seats
            for b_step in steps[i + 1 :]:
                run.restore_policy(run_dir / "checkpoints", b_step)
                other = run.policy()  # holds b's arrays; restoring a replaces the run's, not these
                run.restore_policy(run_dir / "checkpoints", a_step)
                run.engine.cfg = dataclasses.replace(run.engine.cfg, eval_opponent=f"{POLICY}{FROZEN}")
                eps = run.collect(a_step, eval=True, others={FROZEN: other})
                tally = Tally()
                for e in eps:
                    if e.fault:
                        faults += 1
                        continue
                    tally.add(e.outcome, e.episode_return)
                    games += _league_game(f"step {a_step}", f"step {b_step}", e.outcome)
                    seen.add(e.outcome)
                frozen.setdefault(f"step {a_step}", {})[f"step {b_step}"] = tally.row()
                say(f"step {a_step} vs step {b_step}: {tally.wins}-{tally.draws}-{tally.losses}")
        env = make(env_id, **cfg.env.env_kwargs)
        scripted: dict[str, dict[str, Any]] = {}
        for i, a_name in enumerate(names):  # each pair of players, once, seats alternating: the common ground
            for b_name in names[i + 1 :]:
                tally = Tally()
                for k, seed in enumerate(seeds):
                    seat = agents[k % len(agents)]  # a_name's seat; b_name at the others
                    players = {
                        x: player_for(env_id, a_name if x == seat else b_name, x)(
                            np.random.default_rng([cfg.seed, k, i])
                        )
                        for i, x in enumerate(agents)
                    }
                    returns, last = play_match(env, players, seed=seed)
                    tally.add(last[seat].get("outcome"), returns[seat])
                    games += _league_game(a_name, b_name, last[seat].get("outcome"))
                    seen.add(last[seat].get("outcome"))
                scripted.setdefault(a_name, {})[b_name] = tally.row()
        env.close()
        cooperative = bool(seen & {"success", "failure"})  # one team: success rates, no league of strengths
        league = {} if cooperative else bradley_terry(games)
    finally:
        run.close()
    return {
        "run": str(run_dir),
        "env_id": env_id,
        "seats": agents,
        "opponents": names,
        "greedy": cfg.eval_greedy,
        "episodes": cfg.eval_episodes,
        "policy": results,
        "scripted": scripted,
        "checkpoints": frozen,
        "faults": faults,
        "cooperative": cooperative,
        "league": dict(sorted(league.items(), key=lambda kv: -kv[1])),
    }


FROZEN = -1  # the policy version a checkpoint-against-checkpoint game's other seats are pinned to


def _errors(env_id: str, agents: list[str], name: str, seat_errors: Any) -> list[str]:
    return seat_errors(env_id, agents, name, "alternate", 1, "rollout.eval_opponent", evaluation=True)


def _league_game(a: str, b: str, outcome: str | None) -> list[tuple[str, str, float]]:
    """The game for the league table: a's score (1 win, 0.5 draw, 0 loss); none for a game cut before it ended."""
    score = {"win": 1.0, "draw": 0.5, "loss": 0.0, "success": 1.0, "failure": 0.0}.get(outcome or "")
    return [] if score is None else [(a, b, score)]


def _steps(asked: Sequence[str], saved: Sequence[int], default: int) -> list[int]:
    """The checkpoints to evaluate, in training order (the later of a pair is the frozen one)."""
    if list(asked) == ["last"]:
        return [default]
    if list(asked) == ["all"]:
        return sorted(saved)
    steps = set()
    for a in asked:
        if not a.isdigit() or int(a) not in saved:
            raise ValueError(f"--checkpoints {a!r}: the run has checkpoints {list(saved)} (or say last, all)")
        steps.add(int(a))
    return sorted(steps)


def table(result: dict[str, Any]) -> str:
    lines = [f"{result['run']} on {result['env_id']}: {result['episodes']} games per opponent, seats alternating"]
    head = (
        f"{'policy':<12} {'opponent':<14} {'seat':<10} {'W-D-L':>9} {'cut':>4} {'win rate (95% CI)':>22} {'return':>8}"
    )
    lines.append(head)
    for me, per in result["policy"].items():
        for name, seats in per.items():
            for seat, r in seats.items():
                lines.append(_row(me, name, seat, r))
    for me, per in result["checkpoints"].items():
        for other, r in per.items():
            lines.append(_row(me, other, "both", r))
    if result["faults"]:
        lines.append(f"{result['faults']} games faulted (the env failed) and are left out")
    if result["cooperative"]:
        lines.append("a cooperative game: the win rate is the pair's success rate; no league table of strengths")
        return "\n".join(lines)
    lines.append("league (Bradley-Terry, Elo points, mean 0; games cut before their end left out):")
    lines += [f"  {name:<16} {elo:+8.1f}" for name, elo in result["league"].items()]
    return "\n".join(lines)


def _row(side: str, opponent: str, seat: str, r: dict[str, Any]) -> str:
    wdl = f"{r['wins']}-{r['draws']}-{r['losses']}"
    ci = f"{r['win_rate']:.2f} [{r['win_rate_lo']:.2f}, {r['win_rate_hi']:.2f}]"
    return f"{side:<12} {opponent:<14} {seat:<10} {wdl:>9} {r['cut']:>4} {ci:>22} {r['mean_return']:>8.3f}"
