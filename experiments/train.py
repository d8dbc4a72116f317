"""The main job: `python -m experiments.train <preset> [--import MODULE ...] [--field value ...]`.

Presets are in experiments/configs; every TrainConfig field can be overridden on the command line
(`--steps 100 --gamma 0.9 --env.env-id game:Sudoku-v0-easy --mesh.fsdp 8`). `--import my_pkg.my_envs`
(repeatable) imports a module that registers your own env ids first; it is kept in `env.imports`, so resuming,
`experiments.eval` and process workers import it too. Multi-host: run the same command on every host with
JGEM_COORDINATOR, JGEM_NUM_PROCESSES and JGEM_PROCESS_ID set (or on a TPU pod, with nothing set); see
experiments/tpu_pod/.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import json
import re
import shlex
import sys
import typing
from collections.abc import Sequence
from typing import Any, NoReturn


def pop_imports(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the modules of every `--import M` / `--import=M`, the other arguments)."""
    modules, rest, args = [], [], list(argv)
    while args:
        a = args.pop(0)
        if a == "--import":
            if not args or args[0].startswith("--"):
                raise SystemExit("--import needs a module name, e.g. --import my_pkg.my_envs")
            modules.append(args.pop(0))
        elif a.startswith("--import="):
            modules.append(a.split("=", 1)[1])
        else:
            rest.append(a)
    return modules, rest


def fail(message: str) -> NoReturn:
    """A user's mistake: the message alone on stderr (no traceback) and exit status 2, as for a bad flag."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def check_preset(args: Sequence[str], presets: Sequence[str]) -> None:
    """Refuse an unknown preset name (the first argument) with its close matches, before tyro's long answer."""
    if not args or args[0].startswith("-") or args[0] in presets:
        return
    close = difflib.get_close_matches(args[0], list(presets), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    fail(
        f"unknown preset {args[0]!r}{hint}\npresets: {', '.join(presets)} (`python -m experiments.train --help` "
        "describes them; the preset comes first, then its --field overrides)"
    )


def _unboxed(text: str) -> str:
    """tyro's boxed error text as one line."""
    lines = [line.strip().strip("│╭╮╰╯").strip() for line in text.splitlines()]
    return " ".join(" ".join(lines).split())


def _types_along(path: str) -> list[Any]:
    """The declared types along a TrainConfig field path (`"rollout.max_new_tokens"` -> [RolloutConfig, int]), cut
    after the first part that names no field (its entry None) or that leads out of the dataclasses."""
    from jgem.config import TrainConfig

    cls: Any = TrainConfig
    out: list[Any] = []
    for part in path.split("."):
        cls = typing.get_type_hints(cls).get(part) if dataclasses.is_dataclass(cls) else None
        out.append(cls)
        if cls is None or not dataclasses.is_dataclass(cls):
            break
    return out


def nested_value_error(text: str) -> str | None:
    """tyro's message for a ValueError a nested config raised while it was built (`Error parsing
    __tyro-dummy-inner__.rollout: need 1 <= max_new_tokens ...`), with its fields written as flags; None for any
    other text."""
    from jgem.config import cli_flag

    m = re.search(
        r"Error parsing (?:__tyro-dummy-inner__\.)?([\w.-]+): (.*?)\s*(?:─|For full helptext|$)", _unboxed(text)
    )
    if m is None:
        return None
    if m.group(1).startswith("-"):  # a flag's own bad value (`--steps abc`): tyro's message and help say it best
        return None
    path, message = m.group(1).replace("-", "_"), m.group(2)
    types = _types_along(path)
    if len(types) < path.count(".") + 1 or not dataclasses.is_dataclass(cls := types[-1]):
        return None  # not a nested config's own check: leave tyro's message as it is
    for f in dataclasses.fields(cls):
        flag = cli_flag(f"{path}.{f.name}")
        message = re.sub(rf"\b{cls.__name__}\.{f.name}\b", flag, message)
        if "_" in f.name:  # a bare name only when it cannot be an ordinary word
            message = re.sub(rf"(?<![\w.-]){f.name}\b", flag, message)
    return message


PROG = "python -m experiments.train"  # the usage line's command (tyro's default: this file's absolute path)


def _boxed(template: str, content: str) -> str:
    """`content` in place of `template`'s text, at its indent and inside its box if it has one (`content` is no
    longer, so the box keeps its width)."""
    if "│" not in template:  # tyro's plain layout (no box: stderr is not a terminal that takes it)
        return template[: len(template) - len(template.lstrip())] + content + "\n"
    left, right = template.index("│") + 1, template.rindex("│")
    indent = len(template[left:right]) - len(template[left:right].lstrip())
    return template[:left] + (" " * indent + content).ljust(right - left) + template[right:]


def one_entry_per_flag(text: str, preset: str | None) -> str:
    """tyro's "Perhaps you meant" box with each flag once. tyro lists a flag's help once per variant among the
    presets (`(default: 60)` `in <prog> tiny --help`, `(default: 500)` `in <prog> qwen3-1.7b-games --help`, ...);
    this keeps the variant of `preset` (the one on the command line) without its `in` lines, or without a preset
    the first variant, naming its preset."""
    lines = text.splitlines(keepends=True)
    inner = lambda line: line.rstrip().removesuffix("│").rstrip()[2:]  # the content, boxed or not, and its indent
    where = re.compile(r"^ {8}in .* (\S+) --help$")  # tyro's `in <prog> <preset> --help`
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        i += 1
        if not inner(out[-1]).startswith("    -"):
            continue
        # the flag's lines: variants, each its help lines, then the `in` lines of the presets sharing it
        variants: list[tuple[list[str], list[tuple[str, str]]]] = []
        while i < len(lines) and inner(lines[i]).startswith(" " * 8):
            m = where.match(inner(lines[i]))
            if not variants or (m is None and variants[-1][1]):
                variants.append(([], []))
            if m is None:
                variants[-1][0].append(lines[i])
            else:
                variants[-1][1].append((m.group(1), lines[i]))
            i += 1
        if i < len(lines) and inner(lines[i]) == "    [...]":  # tyro's mark for more variants of this flag
            i += 1
        if not variants:
            continue
        mine = [v for v in variants if any(p == preset for p, _ in v[1])]
        out += mine[0][0] if mine else variants[0][0]
        if not mine and variants[0][1]:
            name, line = variants[0][1][0]
            out.append(_boxed(line, f"in preset {name}"))
    return "".join(out)


def parse(args: Sequence[str]) -> Any:
    """The TrainConfig of `args` (a preset, then overrides) through tyro, as `main` builds it; a nested config's
    ValueError comes back as a one-line error naming flags."""
    import tyro

    from experiments.configs import PRESETS

    check_preset(args, list(PRESETS))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            cfg = tyro.extras.overridable_config_cli(PRESETS, prog=PROG, args=list(args))
    except SystemExit as e:
        message = nested_value_error(err.getvalue()) if e.code not in (0, None) else None
        if message is not None:
            fail(message)
        preset = args[0] if args and args[0] in PRESETS else None
        sys.stderr.write(one_entry_per_flag(err.getvalue(), preset))
        raise
    sys.stderr.write(err.getvalue())
    return cfg


def cli_value(path: str, value: Any) -> list[str]:
    """The command-line arguments that set the TrainConfig field `path` to `value` (as a checkpoint stores it)."""
    from jgem.config import cli_flag

    *groups, name = path.split(".")
    if _types_along(path)[-1] is bool and isinstance(value, bool):
        return [cli_flag(path) if value else cli_flag(".".join([*groups, "no_" + name]))]
    if isinstance(value, dict):
        return [cli_flag(path), shlex.quote(json.dumps(value))]
    if isinstance(value, list | tuple):
        return [cli_flag(path), *(shlex.quote(str(v)) for v in value)]
    return [cli_flag(path), "None" if value is None else shlex.quote(str(value))]


def _field_of(key: str) -> str | None:
    """The TrainConfig field path a flattened checkpoint key belongs to (`env.env_kwargs.path` -> `env.env_kwargs`)."""
    types = _types_along(key)
    if types[-1] is None or dataclasses.is_dataclass(types[-1]):
        return None
    return ".".join(key.split(".")[: len(types)])


def _saved_value(path: str, saved: dict[str, Any], defaults: dict[str, Any]) -> Any:
    """The value of field `path` in a checkpoint's flattened config (a dict field is spread over `path.*` keys;
    a field the checkpoint lacks had its default)."""
    from jgem.checkpoint import MISSING

    if path in saved:
        return defaults.get(path) if saved[path] == MISSING else saved[path]
    spread = {k[len(path) + 1 :]: v for k, v in saved.items() if k.startswith(path + ".")}
    if not spread:
        return defaults.get(path)
    out: dict[str, Any] = {}
    for k, v in spread.items():  # unflatten nested dicts
        *heads, last = k.split(".")
        node = out
        for h in heads:
            node = node.setdefault(h, {})
        node[last] = v
    return out


def mismatch_message(e: Any, cfg: Any) -> str:
    """What to type after a resume was refused (a `ConfigMismatchError`): the differing fields as flags with the
    checkpoint's values, or a new run directory."""
    from pathlib import Path

    from jgem.checkpoint import MISSING, flatten_config
    from jgem.config import TrainConfig, cli_flag

    defaults = flatten_config(TrainConfig())
    now = flatten_config(cfg)
    paths = list(dict.fromkeys(p for p in (_field_of(k) for k, _, _ in e.fields) if p is not None))
    rows, resume = [], []
    for path in paths:
        then = _saved_value(path, e.saved, defaults)
        current = _saved_value(path, now, defaults)
        shown = [" ".join(cli_value(path, v)[1:]) or "(none)" for v in (then, current)]
        if isinstance(then, bool):
            shown = [str(then), str(current)]
        rows.append(f"  {cli_flag(path)}: checkpoint {shown[0]}, now {shown[1]}")
        resume += cli_value(path, then)
    unknown = [k for k, _, _ in e.fields if _field_of(k) is None]
    rows += [f"  {k}: checkpoint {a!r}, now {b!r}" for k, a, b in e.fields if k in unknown and a is not MISSING]
    where = f"step {e.step} in " if e.step is not None else ""
    run_dir = Path(cfg.run_dir)  # a sibling, never inside it (`runs/tiny/` -> `runs/tiny-2`)
    new_dir = next(d for i in range(2, 10_000) if not (d := run_dir.with_name(f"{run_dir.name}-{i}")).exists())
    lines = [f"cannot resume: the checkpoint ({where}{e.directory}) was trained with a different config:", *rows]
    new = f"start a new run in another directory, e.g. --run-dir {shlex.quote(str(new_dir))}"
    if resume:
        lines += ["to resume the run as it was, run the same command with", f"  {' '.join(resume)}", "or " + new]
    else:
        lines.append(new)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    from jgem.hostmem import keep_host_memory
    from jgem.sharding.mesh import initialize

    keep_host_memory()  # if JGEM_KEEP_HOST_MEMORY=1: before JAX's first computation (docs/benchmarks.md)
    try:
        modules, args = pop_imports(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        fail(str(e.code))
    cfg = parse(args)
    if modules:
        imports = tuple(dict.fromkeys((*cfg.env.imports, *modules)))
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, imports=imports))
    initialize()  # multi-host from JGEM_* env vars or TPU auto-detection; a no-op on one machine

    from pathlib import Path

    import jax

    from jgem.checkpoint import ConfigMismatchError, CorruptCheckpointError
    from jgem.config import ConfigError, run_dir_errors
    from jgem.models.tokenizer import TemplateRewriteError
    from jgem.rollout.config import PromptBudgetError
    from jgem.sharding.mesh import RUN, exit_at_once_on_error, log_to_run_dir, post_stop
    from jgem.train import train

    def refuse(message: str) -> NoReturn:
        """`fail`; with several processes, first posted for the others (one that waits for this one's messages
        stops with it, where a refusal met by one process only, a checkpoint a learner restores, would leave it
        waiting)."""
        if jax.process_count() > 1:
            post_stop(f"process {jax.process_index()} refused the run: {message.splitlines()[0]}")
        fail(message)

    RUN.checkpoints = Path(cfg.run_dir) / "checkpoints"  # what an interrupted start tells the user to resume from
    if not run_dir_errors(cfg.run_dir):  # else Run refuses it, as one line
        log_to_run_dir(cfg.run_dir)  # several processes: XLA's own messages and tracebacks to <run_dir>/logs/
    # Ctrl-C ends on one line (where, how to resume); several processes: an unexpected error ends this one at once
    # on one line (its peers then stop); the errors below exit with their message
    with exit_at_once_on_error():
        try:
            train(cfg)  # Trainer's first act is validate(cfg): a ConfigError comes before anything is built
        except ConfigError as e:
            refuse(e.render())  # the message alone, with flag names
        except ConfigMismatchError as e:
            refuse(mismatch_message(e, cfg))
        except CorruptCheckpointError as e:
            refuse(str(e))
        except (PromptBudgetError, TemplateRewriteError) as e:  # the config does not fit what an episode met
            refuse(str(e))


if __name__ == "__main__":
    main()
