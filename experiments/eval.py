"""Evaluate a trained policy: `python -m experiments.eval RUN_DIR_OR_CHECKPOINT [--env-id ID] [--episodes N]
[--greedy | --no-greedy] [--out results.json]`, or a suite: `... --suite math|code|qa [--attempts K] [--data-dir D]`.

RUN_DIR restores the run's latest checkpoint; RUN_DIR/checkpoints/STEP restores that step. The policy plays the
trainer's held-out eval seeds (of the run's env, or of `--env-id`) through the trainer's own evaluation path
(`Run.collect(step, eval=True)`), to the env's turn limit unless `--max-turns` is given. Prints a table and,
with `--out`, writes the metrics and every episode as JSON. Defaults (episodes, greedy) are the run's.
`--suite` (or `--attempts`) plays every eval id of a suite, each problem K times, and prints GEM's table of pass@k
and mean@k per id and on average (experiments/eval_suite.py); with `--out X.json` it also writes `X.md`.
`--agents` evaluates a multi-agent run against the game's scripted players (`--opponents`, `--checkpoints last|all|
STEP ...`): wins, draws and losses per seat with 95% intervals, and a Bradley-Terry league table
(experiments/eval_agents.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from experiments.eval_suite import SuiteError, id_kwargs, is_dataset_id, run_suite_cli, suite_flags
from experiments.restore import load_run, resolve, run_env

__all__ = ["evaluate", "load_run", "main", "resolve", "table"]


def evaluate(
    path: str | Path,
    *,
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    episodes: int | None = None,
    greedy: bool | None = None,
    max_turns: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The checkpoint's eval metrics and episodes on the trainer's held-out seeds (see the module docstring). With
    `progress`, lines on stderr say what is evaluated and how many episodes have finished."""
    overrides: dict[str, Any] = {}
    env: dict[str, Any] = {}
    if env_id is not None:
        env = {"env_id": env_id, "env_kwargs": dict(env_kwargs or {})}
    elif env_kwargs is not None:
        env = {"env_kwargs": dict(env_kwargs)}
    if episodes is not None:
        overrides["eval_episodes"] = episodes
    if greedy is not None:
        overrides["eval_greedy"] = greedy
    if max_turns is not None:
        overrides["eval_max_turns"] = max_turns
    from jgem.train.evaluate import eval_metrics

    t0 = time.perf_counter()
    say = _say if progress else (lambda _: None)
    run_dir, _ = resolve(path)  # a path that is no run fails before anything is built
    say(f"loading {path}: building the model and restoring the checkpoint")
    run, step = load_run(path, env=env, **overrides)
    cfg = run.cfg
    total = len(run.specs(step, eval=True))
    say(
        f"evaluating step {step} of {run_dir} on {cfg.env.env_id}: {total} episodes, "
        f"{'greedy' if cfg.eval_greedy else 'sampled'}, up to {run.horizon(step, eval=True)} turns "
        f"({time.perf_counter() - t0:.0f} s so far; the first turns compile)"
    )
    try:
        with _episode_progress(run, total, say, t0):
            eps = run.collect(step, eval=True)
        metrics = eval_metrics(run, step, eps)
    finally:
        run.close()
    say(f"evaluated {len(eps)} episodes in {time.perf_counter() - t0:.0f} s")
    return {
        "checkpoint": str(Path(path)),
        "step": step,
        "env_id": cfg.env.env_id,
        "env_kwargs": dict(cfg.env.env_kwargs),
        "greedy": cfg.eval_greedy,
        "episodes": len(eps),
        "metrics": metrics,
        "per_episode": [
            {
                "seed": e.seed,
                "success": bool(e.success),
                "return": float(e.episode_return),
                "turns": e.num_turns,
                "truncated": bool(e.truncated),
                "fault": e.fault,
            }
            for e in eps
        ],
    }


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _episode_progress(run: Any, total: int, say: Any, t0: float, every_s: float = 5.0) -> Iterator[None]:
    """While the body collects, a line `k/total episodes done` whenever more have finished, at most every
    `every_s` seconds (plain lines: fine when stderr is a file or a pipe)."""
    stop = threading.Event()

    def watch() -> None:
        shown = 0
        while not stop.wait(every_s):
            stats = getattr(run.engine, "stats", None)
            done = getattr(stats, "episodes", 0)
            if done != shown and done < total:
                say(f"  {done}/{total} episodes done ({time.perf_counter() - t0:.0f} s)")
                shown = done

    thread = threading.Thread(target=watch, name="eval-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def table(result: dict[str, Any]) -> str:
    head = (
        f"{result['checkpoint']} (step {result['step']}) on {result['env_id']}: {result['episodes']} episodes, "
        f"{'greedy' if result['greedy'] else 'sampled'}"
    )
    width = max(len(k) for k in result["metrics"])
    rows = [f"{k:<{width}}  {v:10.4f}" for k, v in sorted(result["metrics"].items())]
    return "\n".join([head, f"{'metric':<{width}}  {'value':>10}", *rows])


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m experiments.eval", description=__doc__.split("\n\n")[1])
    parser.add_argument("path", help="a run directory (latest checkpoint) or RUN_DIR/checkpoints/STEP")
    parser.add_argument("--env-id", help="evaluate on this env id instead of the run's")
    parser.add_argument("--env-kwargs", type=json.loads, help="JSON object of env kwargs, e.g. '{\"size\": 3}'")
    parser.add_argument("--episodes", type=int, help="episodes (held-out seeds); default: the run's eval_episodes")
    parser.add_argument("--greedy", action=argparse.BooleanOptionalAction, help="default: the run's eval_greedy")
    parser.add_argument("--max-turns", type=int, help="cut episodes here; default: the env's own limit")
    parser.add_argument("--out", help="write the result (metrics and every episode) here as JSON")
    parser.add_argument("--import", dest="imports", action="append", default=[], help="import MODULE first")
    suite_flags(parser)
    agents = parser.add_argument_group("multi-agent runs")
    agents.add_argument("--agents", action="store_true", help="play the game's scripted players; a league table")
    agents.add_argument("--opponents", nargs="+", help="scripted players to play (default: every one of the game)")
    agents.add_argument("--checkpoints", nargs="+", default=["last"], help="last (default), all, or step numbers")
    args = parser.parse_args(argv)
    from experiments.train import fail
    from jgem.config import ConfigError
    from jgem.registry import import_modules

    if args.out:
        _say(f"the results go to {args.out} (metrics and every episode, JSON)")
    try:
        import_modules(args.imports)  # ids a custom module registers (runs trained with --import keep it themselves)
        if args.agents:
            return _agents_cli(args)
        if args.opponents or args.checkpoints != ["last"]:
            raise SuiteError("--opponents and --checkpoints are for multi-agent runs: add --agents")
        if args.suite or args.attempts:
            return run_suite_cli(args, _say, lambda result, table: _write_suite(args.out, result, table))
        env_kwargs = args.env_kwargs
        if args.data_dir is not None:  # a dataset id reads its local copy there
            env_id, kwargs = run_env(args.path)
            if args.env_id is not None:
                env_id, kwargs = args.env_id, {}
            if not is_dataset_id(env_id):
                raise SuiteError(f"--data-dir is where GEM's dataset ids read their data; {env_id} reads none")
            env_kwargs = id_kwargs(env_id, kwargs if env_kwargs is None else env_kwargs, args.data_dir)
        result = evaluate(
            args.path,
            env_id=args.env_id,
            env_kwargs=env_kwargs,
            episodes=args.episodes,
            greedy=args.greedy,
            max_turns=args.max_turns,
            progress=True,
        )
    except ConfigError as e:  # the run's config with this command's overrides cannot run
        fail(e.render(lambda p: EVAL_FLAGS.get(p) or f"the run's {p}", header=f"cannot evaluate {args.path}:"))
    except (FileNotFoundError, ImportError, SuiteError) as e:
        fail(str(e))
    print(table(result))
    if args.out:
        _write_json(args.out, result)
        print(f"wrote the metrics and every episode to {args.out}")
    else:
        print("(--out FILE writes the metrics and every episode as JSON)")
    return result


def _agents_cli(args: argparse.Namespace) -> dict[str, Any]:
    from experiments import eval_agents
    from experiments.train import fail

    other = [
        f
        for f, v in (
            ("--env-id", args.env_id),
            ("--env-kwargs", args.env_kwargs),
            ("--suite", args.suite),
            ("--attempts", args.attempts),
            ("--data-dir", args.data_dir),
        )
        if v
    ]
    if other:
        fail(f"--agents evaluates a multi-agent run on its own game; drop {', '.join(other)}")
    try:
        result = eval_agents.evaluate_agents(
            args.path,
            opponents=args.opponents,
            checkpoints=args.checkpoints,
            episodes=args.episodes,
            greedy=args.greedy,
            max_turns=args.max_turns,
            say=_say,
        )
    except ValueError as e:
        fail(str(e))
    print(eval_agents.table(result))
    if args.out:
        _write_json(args.out, result)
        print(f"wrote the tables to {args.out}")
    return result


def _write_json(out: str, result: dict[str, Any]) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    return path


def _write_suite(out: str | None, result: dict[str, Any], table: str) -> None:
    if not out:
        print("(--out FILE.json writes the results, per problem too, as JSON and the table as FILE.md)")
        return
    path = _write_json(out, result)
    path.with_suffix(".md").write_text(table + "\n")
    print(f"wrote the results to {path} and the table to {path.with_suffix('.md')}")


# the config fields this command's own flags set
EVAL_FLAGS = {
    "env.env_id": "--env-id",
    "env.env_kwargs": "--env-kwargs",
    "env.imports": "--import",
    "eval_episodes": "--episodes",
    "eval_greedy": "--greedy",
    "eval_max_turns": "--max-turns",
}


if __name__ == "__main__":
    main()
