"""Suite evaluation for `experiments.eval --suite NAME | --attempts K`: GEM's per-id and average tables.

Every id of the suite (`jgem.envs.suites.EVAL_SUITES`: math, code, qa; or a comma-separated list of ids) is played
by the checkpoint's policy: each problem `attempts` times, the attempts of a problem a group (one start state, the
prompt prefilled once). A dataset id (GEM's `eval:` ids and the other Hugging Face dataset ids) plays every row once
per attempt (seed i serves row i, `index_seeds`), reading its local copy from `--data-dir` or `$JGEM_DATA`; any
other id plays the run's held-out eval seeds. Per id: pass@j for j = 1, 2, 4, ... up to `attempts` (Chen et al.
2021's unbiased estimator), mean@k (the mean success over all attempts), the mean return, action tokens and faults;
then their unweighted average over the ids, as GEM's tables average. The run's env config (its tools, tool format,
backend, view) is kept; only the env id changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np


class SuiteError(ValueError):
    """A suite evaluation asked for what cannot run (flags that conflict, unknown ids, data that cannot be used)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. (2021)'s unbiased estimator of pass@k from `n` attempts of which `c` were correct:
    1 - C(n - c, k) / C(n, k), the chance that k attempts drawn without replacement hold a correct one."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def k_values(attempts: int) -> list[int]:
    """The k of the pass@k columns: 1, 2, 4, ... below `attempts`, and `attempts` itself."""
    return sorted({1, attempts} | {2**i for i in range(1, attempts.bit_length()) if 2**i < attempts})


def suite_ids(suite: str) -> tuple[str, tuple[str, ...]]:
    """(the suite's name, its ids) from a suite name or a comma-separated list of registered ids."""
    from jgem.envs.suites import EVAL_SUITES
    from jgem.registry import spec

    if suite in EVAL_SUITES:
        return suite, EVAL_SUITES[suite]
    ids = tuple(i.strip() for i in suite.split(",") if i.strip())
    if not ids or not all(":" in i for i in ids):
        raise SuiteError(
            f"--suite {suite!r} is neither a suite ({', '.join(EVAL_SUITES)}) nor a comma-separated list of env ids"
        )
    for i in ids:
        try:
            spec(i)
        except KeyError as e:  # with the nearest registered names
            raise SuiteError(f"--suite: {e.args[0]}") from None
    return ",".join(ids), ids


def is_dataset_id(env_id: str) -> bool:
    """Whether `env_id` reads a Hugging Face dataset's local copy (it takes data_dir= and index_seeds=)."""
    from jgem.registry import spec

    return "dataset" in spec(env_id).kwargs


def id_kwargs(env_id: str, env_kwargs: dict[str, Any], data_dir: str | None) -> dict[str, Any]:
    """`env_kwargs` for `env_id`, with `data_dir` and `index_seeds` for a dataset id."""
    kwargs = dict(env_kwargs)
    if is_dataset_id(env_id):
        kwargs.setdefault("index_seeds", True)
        if data_dir is not None:
            kwargs["data_dir"] = data_dir
    return kwargs


def num_rows(env_id: str, kwargs: dict[str, Any]) -> int | None:
    """How many problems a dataset env serves (its data is read here: a missing copy fails before any model is
    built), or None for an env that draws its episodes from the seed."""
    import jgem

    env = jgem.make(env_id, **kwargs)
    try:
        rows = getattr(env.unwrapped, "rows", None)
        return None if rows is None or not getattr(env.unwrapped, "index_seeds", False) else len(rows)
    finally:
        env.close()


def id_metrics(correct: np.ndarray, returns: np.ndarray, tokens: np.ndarray, faults: int) -> dict[str, float]:
    """One id's metrics from `correct[P, K]`, `returns[P, K]`, `tokens[P, K]` (problems x attempts)."""
    problems, attempts = correct.shape
    out: dict[str, float] = {"problems": float(problems), "attempts": float(attempts)}
    counts = correct.sum(axis=1)
    for k in k_values(attempts):
        out[f"pass@{k}"] = float(np.mean([pass_at_k(attempts, int(c), k) for c in counts]))
    out[f"mean@{attempts}"] = float(correct.mean())
    out["return"] = float(returns.mean())
    out["action_tokens"] = float(tokens.mean())
    out["faults"] = float(faults)
    return out


def average(results: dict[str, dict[str, float]]) -> dict[str, float]:
    """The unweighted mean over ids of every rate (GEM's tables average the ids, not the problems)."""
    keys = [k for k in next(iter(results.values())) if k.startswith(("pass@", "mean@")) or k == "return"]
    return {k: float(np.mean([r[k] for r in results.values()])) for k in keys}


def markdown(result: dict[str, Any]) -> str:
    """GEM's table: one column per id and the average, one row per rate (in %) and the mean return, then the
    problem counts."""
    ids = list(result["results"])

    def cell(key: str, value: float) -> str:
        return f"{value:.3f}" if key == "return" else f"{100 * value:.1f}"

    rows = [
        "| metric | " + " | ".join(i.removeprefix("eval:") for i in ids) + " | average |",
        "|:--|" + "--:|" * (len(ids) + 1),
    ]
    for key, avg in result["average"].items():
        cells = [cell(key, result["results"][i][key]) for i in ids]
        rows.append(f"| {key} | " + " | ".join(cells) + f" | {cell(key, avg)} |")
    rows.append("| problems | " + " | ".join(str(int(result["results"][i]["problems"])) for i in ids) + " | |")
    mode = "greedy" if result["greedy"] else "sampled"
    title = (
        f"{result['checkpoint']} (step {result['step']}), suite {result['suite']}: {result['attempts']} "
        f"attempt(s) per problem, {mode}; rates in %"
    )
    return "\n".join([title, "", *rows])


def evaluate_suite(
    path: str,
    *,
    suite: str,
    attempts: int = 1,
    env_kwargs: dict[str, Any] | None = None,
    data_dir: str | None = None,
    problems: int | None = None,
    greedy: bool | None = None,
    max_turns: int | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Play every id of `suite` with the checkpoint at `path` (see the module docstring); `problems` keeps the first
    problems of each id (a dataset's first rows; the run's first held-out seeds otherwise)."""
    import jax

    from experiments.restore import load_run, resolve
    from jgem.rollout.engine import EpisodeSpec

    if attempts < 1:
        raise SuiteError(f"--attempts must be >= 1, got {attempts}")
    if problems is not None and problems < 1:
        raise SuiteError(f"--episodes must be >= 1, got {problems}")
    if greedy and attempts > 1:
        raise SuiteError(
            f"--greedy with --attempts {attempts} plays {attempts} identical attempts; drop --greedy (attempts are "
            "sampled at the run's temperature) or use --attempts 1"
        )
    resolve(path)  # a path that is no run fails first
    name, ids = suite_ids(suite)
    kwargs = {i: id_kwargs(i, env_kwargs or {}, data_dir) for i in ids}
    rows: dict[str, int | None] = {}
    for i in ids:  # every id's data before any model is built; the first missing copy is the error
        try:
            rows[i] = num_rows(i, kwargs[i])
        except FileNotFoundError as e:
            others = [j for j in ids[ids.index(i) + 1 :] if j not in rows]
            more = f" ({len(others)} more id(s) of the suite not checked: {', '.join(others)})" if others else ""
            raise FileNotFoundError(f"{i}: {e}{more}") from e
        except ValueError as e:  # data that is there but cannot be used (its columns, its splits)
            raise SuiteError(f"{i}: {e}") from e
    if attempts > 1:
        greedy = False  # attempts are samples (greedy ones would all be the same)
    t0 = time.perf_counter()
    say(f"loading {path}: building the model and restoring the checkpoint")
    overrides: dict[str, Any] = {} if max_turns is None else {"eval_max_turns": max_turns}
    if problems is not None:  # the held-out seeds of an id that is no dataset
        overrides["eval_episodes"] = problems
    run, step = load_run(path, env={"env_id": ids[0], "env_kwargs": kwargs[ids[0]]}, **overrides)
    if greedy is None:  # one attempt: the run's own eval mode
        greedy = run.cfg.eval_greedy
    key = jax.random.fold_in(jax.random.key(run.cfg.seed), 2 * step + 1)
    results: dict[str, dict[str, float]] = {}
    per_problem: dict[str, list[dict[str, Any]]] = {}
    try:
        for n, env_id in enumerate(ids):
            if n:
                run.use_env(env_id, kwargs[env_id])
            if rows[env_id] is not None:
                seeds = list(range(rows[env_id]))
            else:
                seeds = [s.seed for s in run.specs(step, eval=True)]
            seeds = seeds[:problems] if problems is not None else seeds
            specs = [
                EpisodeSpec(p * attempts + a, group_id=p, seed=s) for p, s in enumerate(seeds) for a in range(attempts)
            ]
            horizon = run.horizon(step, eval=True)
            say(
                f"{env_id}: {len(seeds)} problems x {attempts} attempt(s), {'greedy' if greedy else 'sampled'}, "
                f"up to {horizon} turns ({time.perf_counter() - t0:.0f} s so far)"
            )
            eps = run.engine.collect(run.policy(), specs, key, max_turns=horizon, greedy=greedy, evaluation=True)
            shape = (len(seeds), attempts)
            correct = np.array([e.success for e in eps], dtype=bool).reshape(shape)
            returns = np.array([e.episode_return for e in eps], dtype=np.float64).reshape(shape)
            tokens = np.array([e.num_action_tokens for e in eps], dtype=np.float64).reshape(shape)
            faults = sum(e.fault is not None for e in eps)
            results[env_id] = id_metrics(correct, returns, tokens, faults)
            per_problem[env_id] = [
                {"seed": s, "correct": correct[p].tolist(), "returns": returns[p].tolist()} for p, s in enumerate(seeds)
            ]
            say(f"{env_id}: pass@1 {results[env_id]['pass@1']:.3f} ({time.perf_counter() - t0:.0f} s so far)")
    finally:
        run.close()
    return {
        "checkpoint": str(path),
        "step": step,
        "suite": name,
        "ids": list(ids),
        "attempts": attempts,
        "greedy": greedy,
        "data_dir": data_dir,
        "env_kwargs": dict(env_kwargs or {}),
        "results": results,
        "average": average(results),
        "per_problem": per_problem,
    }


def suite_flags(parser: Any) -> None:
    """experiments.eval's suite flags."""
    parser.add_argument(
        "--suite",
        help="evaluate every eval id of a suite (math, code, qa) or of a comma-separated id list: GEM's table",
    )
    parser.add_argument(
        "--attempts", type=int, help="attempts per problem: pass@k (unbiased) and mean@k; implies a suite evaluation"
    )
    parser.add_argument(
        "--data-dir", help="where GEM's datasets are (one folder per Hugging Face dataset); default: $JGEM_DATA"
    )


def run_suite_cli(args: Any, say: Callable[[str], None], write: Callable[[dict, str], None]) -> dict[str, Any]:
    """The suite path of experiments.eval's main: the table on stdout, and with --out the JSON and markdown."""
    from experiments.restore import run_env

    if args.suite and args.env_id:
        raise SuiteError("--suite and --env-id both name what to evaluate; give one")
    result = evaluate_suite(
        args.path,
        suite=args.suite or args.env_id or run_env(args.path)[0],
        attempts=args.attempts or 1,
        env_kwargs=args.env_kwargs,
        data_dir=args.data_dir,
        problems=args.episodes,
        greedy=args.greedy,
        max_turns=args.max_turns,
        say=say,
    )
    table = markdown(result)
    print(table)
    write(result, table)
    return result
