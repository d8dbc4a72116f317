"""Play every game id with its scripted solver and with a random agent, through an EnvPool.

    python -m experiments.play_games [--seeds 5] [--backend thread] [--only Sudoku]
    python -m experiments.play_games --watch --only Minesweeper-v0-easy    # one game, turn by turn

The agents run inside the pool's envs (an `AgentHint` wrapper puts the next action in
`info["hint"]`), so the driver below is the same loop a trainer's collector runs: recv a partial
batch, send actions, reset finished envs with fresh seeds, read `info["episode"]` at the end.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import numpy as np
from rich.console import Console
from rich.table import Table

from jgem.core import Env, StepResult, Wrapper
from jgem.envs.games import GAME_IDS
from jgem.envs.games.solvers import solver_for
from jgem.envs.pool import EnvPool
from jgem.envs.wrappers import EpisodeStatistics

Agent = Literal["solver", "random"]


class AgentHint(Wrapper):
    """Computes the agent's next action next to the env and returns it as `info["hint"]`."""

    def __init__(self, env: Env, agent: Agent, env_id: str) -> None:
        super().__init__(env)
        self.agent, self.env_id = agent, env_id
        self.solver: Any = None

    def _hint(self, obs: str, info: dict[str, Any]) -> dict[str, Any]:
        if self.agent == "solver":
            info["hint"] = self.solver.act(obs, info, self.env.unwrapped)
        else:
            info["hint"] = self.env.sample_random_action()
        return info

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed)
        if self.agent == "solver":
            self.solver = solver_for(self.env_id)
            self.solver.reset(obs, info, self.env.unwrapped)
        return obs, self._hint(obs, info)

    def step(self, action: str) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            info = self._hint(obs, info)
        return obs, reward, terminated, truncated, info


@dataclass(frozen=True)
class Score:
    win_rate: float
    mean_turns: float
    mean_return: float
    faults: int


def evaluate(env_id: str, agent: Agent, seeds: list[int], backend: str, num_envs: int) -> Score:
    """Play one episode per seed with `num_envs` envs in flight; partial batches of whatever is ready."""
    wrappers = [EpisodeStatistics, partial(AgentHint, agent=agent, env_id=env_id)]
    episodes: list[dict] = []
    todo = list(seeds)
    n = min(num_envs, len(seeds))
    with EnvPool(env_id, n, batch_size=max(1, n // 2), backend=backend, wrappers=wrappers) as pool:
        pool.reset(list(range(n)), [todo.pop(0) for _ in range(n)])
        while pool.num_in_flight:
            b = pool.recv()
            live, actions, finished = [], [], []
            for i, term, trunc, info in zip(b.env_ids.tolist(), b.terminated, b.truncated, b.infos):
                if term or trunc:
                    episodes.append(info.get("episode", {"return": 0.0, "length": 0, "success": False}))
                    finished.append(i)
                else:
                    live.append(i)
                    actions.append(info["hint"])
            if live:
                pool.send(live, actions)
            again = finished[: len(todo)]
            if again:
                pool.reset(again, [todo.pop(0) for _ in again])
        faults = pool.num_faults
    return Score(
        win_rate=float(np.mean([e["success"] for e in episodes])),
        mean_turns=float(np.mean([e["length"] for e in episodes])),
        mean_return=float(np.mean([e["return"] for e in episodes])),
        faults=faults,
    )


def watch(env_id: str, agent: Agent, seed: int, console: Console) -> None:
    """Play one episode of `env_id` with `agent` and print it turn by turn: observation, action, reward."""
    from jgem.registry import make

    env = AgentHint(EpisodeStatistics(make(env_id)), agent, env_id)
    try:
        obs, info = env.reset(seed=seed)
        console.rule(f"{env_id}, seed {seed}, {agent} agent")
        console.print(obs, markup=False, highlight=False)
        done, turn = False, 0
        while not done:
            turn += 1
            action = info["hint"]
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            console.print(f"[bold cyan]turn {turn}: {action}[/]  reward {reward:+.2f}", highlight=False)
            console.print(obs, markup=False, highlight=False)
        ep = info.get("episode", {})
        console.print(
            f"[bold]{'won' if ep.get('success') else 'lost'} in {turn} turns, return {ep.get('return', 0):+.2f}"
        )
    finally:
        env.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5, help="episodes per id and agent (seeds 0..N-1)")
    ap.add_argument("--backend", default="thread", choices=["inline", "thread", "process"])
    ap.add_argument("--num-envs", type=int, default=4, help="envs in flight per id")
    ap.add_argument("--only", default="", help="only ids containing this text")
    ap.add_argument(
        "--watch", action="store_true", help="print one game per id turn by turn instead of the table (with --only)"
    )
    ap.add_argument("--agent", default="solver", choices=["solver", "random"], help="who plays with --watch")
    args = ap.parse_args()
    if args.watch:
        ids = [i for i in GAME_IDS if args.only in i]
        if not args.only or not ids:
            ap.error(f"--watch needs --only matching game ids (e.g. --only GuessTheNumber-v0-easy); got {args.only!r}")
        for env_id in ids:
            watch(env_id, args.agent, 0, Console())
        return

    console = Console()
    if console.width < 130:  # pipes and CI logs default to 80 columns, too narrow for the ids
        console = Console(width=130)
    table = Table(title=f"jgem games: scripted solver vs random agent ({args.seeds} seeds each, {args.backend} pool)")
    table.add_column("env id", style="bold", no_wrap=True)
    for who in ("solver", "random"):
        table.add_column(f"{who} win", justify="right")
        table.add_column(f"{who} turns", justify="right")
        table.add_column(f"{who} return", justify="right")
    faults = 0
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    for env_id in GAME_IDS:
        if args.only not in env_id:
            continue
        row = [env_id]
        for agent in ("solver", "random"):
            s = evaluate(env_id, agent, seeds, args.backend, args.num_envs)  # type: ignore[arg-type]
            faults += s.faults
            row += [f"{s.win_rate:.0%}", f"{s.mean_turns:.1f}", f"{s.mean_return:+.2f}"]
        table.add_row(*row)
    console.print(table)
    console.print(f"{len(table.rows)} ids, {faults} env faults, {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
