"""Checkpoints: orbax `CheckpointManager` over the device TrainState plus a JSON host state.

Each step directory holds `state` (any pytree of jax arrays, saved asynchronously; sharded arrays
restore onto the shardings of the target you pass) and `host` (JSON: `step`, the caller's host dict, and the
run config with its fingerprint). The trainer's host dict is `Trainer.host` (jgem/train/loop.py, keys `HOST_KEYS`):
`step`, `episodes` and `warm_start_done`. Nothing else is needed to resume exactly: episode seeds, the
sampling key and the curriculum stage are functions of the step, and the metrics log is rewound to it.
Orbax writes a step into a temporary directory and renames it only when complete, so a run killed
mid-save never leaves a step that `latest_step` would pick up. Resuming under a different config
is refused with the list of fields that differ.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import logging
import math
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as ocm


class ConfigMismatchError(ValueError):
    """The checkpoint was written by a run with a different config. `fields` holds (field path, the checkpoint's
    value, the value now) for each differing field (`MISSING` where a config lacks it), `saved` the checkpoint's
    flattened run config, `directory` and `step` where it was found."""

    def __init__(
        self,
        message: str,
        fields: list[tuple[str, Any, Any]] | None = None,
        saved: dict[str, Any] | None = None,
        directory: str = "",
        step: int | None = None,
    ) -> None:
        super().__init__(message)
        self.fields = list(fields or [])
        self.saved = dict(saved or {})
        self.directory = directory
        self.step = step


MISSING = "<missing>"

# Run-config fields never compared on resume, nor shown: the env servers' token older jgem stored (a field that is
# gone; jgem.config.REMOVED_FIELDS drops it from config.json the same way), and the file the token is read from now
# (how the run reaches its servers, not what it trains).
UNCOMPARED_CONFIG_FIELDS = ("env.remote_token", "env.remote_token_file")


class CorruptCheckpointError(ValueError):
    """No checkpoint step in the directory could be restored."""


@dataclass(frozen=True)
class CheckpointConfig:
    """Where and what to keep: the last `keep_last` steps plus the `keep_best` best by `best_metric`."""

    directory: str
    keep_last: int = 3
    keep_best: int = 1
    best_metric: str | None = None  # a key of the eval metrics passed to `save`, e.g. "eval/success"
    best_mode: Literal["max", "min"] = "max"
    async_save: bool = True

    def __post_init__(self) -> None:
        if self.keep_last < 1:
            raise ValueError(f"keep_last must be >= 1 (the latest step is needed to resume), got {self.keep_last}")
        if self.keep_best < 0:
            raise ValueError(f"keep_best must be >= 0, got {self.keep_best}")
        if self.best_mode not in ("max", "min"):
            raise ValueError(f"best_mode must be 'max' or 'min', got {self.best_mode!r}")


@dataclass(frozen=True)
class Restored:
    step: int
    state: Any
    host: dict[str, Any]


def _plain(x: Any) -> Any:
    """A JSON-able view of a config value (dataclasses and tuples included)."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_plain(v) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else repr(x)
    return repr(x)


def flatten_config(config: Any) -> dict[str, Any]:
    """`{"model.num_layers": 2, ...}` for a (nested) dataclass or dict config."""
    out: dict[str, Any] = {}

    def walk(prefix: str, x: Any) -> None:
        if isinstance(x, dict) and x:
            for k, v in x.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = x

    walk("", _plain(config))
    return out


def config_fingerprint(config: Any) -> str:
    """sha256 of the canonical JSON of the config (16 hex digits)."""
    blob = json.dumps(flatten_config(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def differing_fields(
    saved: dict[str, Any], current: dict[str, Any], ignore: tuple[str, ...] = (), defaults: dict[str, Any] | None = None
) -> list[tuple[str, Any, Any]]:
    """(field, saved value, current value) for the fields that differ between two flattened configs (`MISSING`
    where one lacks the field); `ignore` holds field prefixes. With `defaults` (the flattened default config), a
    field `saved` lacks (a run older than the field) matches a current value equal to its default."""
    out = []
    defaults = defaults or {}
    for key in sorted(set(saved) | set(current)):
        if any(key == p or key.startswith(p + ".") for p in ignore):
            continue
        a, b = saved.get(key, MISSING), current.get(key, MISSING)
        if key not in saved and key in defaults and b == defaults[key]:
            continue
        if a != b:
            out.append((key, a, b))
    return out


def config_diff(
    saved: dict[str, Any], current: dict[str, Any], ignore: tuple[str, ...] = (), defaults: dict[str, Any] | None = None
) -> list[str]:
    """`differing_fields` as readable lines, `key: checkpoint=... now=...`."""
    return [f"{k}: checkpoint={a!r} now={b!r}" for k, a, b in differing_fields(saved, current, ignore, defaults)]


def committed_steps(checkpoints: str | Path) -> list[int]:
    """The steps saved under `checkpoints` as they stand on disk, in order (orbax's step directories; a save still
    being written has a temporary name), without an orbax manager: for a process that does not save."""
    p = Path(checkpoints)
    return sorted(int(d.name) for d in p.iterdir() if d.name.isdigit()) if p.is_dir() else []


class _UnrankedSave(logging.Filter):
    """Drops orbax's warning for a save without metrics while steps are ranked by one (absl's logger): a step saved
    between evaluations has none by design and ranks last (`Checkpointer._metric`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return str(record.msg) != "Requested `tracked_metric`; did not provide metrics."


def _quiet_unranked_saves() -> None:
    logger = logging.getLogger("absl")  # absl.logging's records go through this logger
    if not any(isinstance(f, _UnrankedSave) for f in logger.filters):
        logger.addFilter(_UnrankedSave())


class Checkpointer:
    """Saves and restores (device state, host state) under `config.directory`.

    `run_config` (a dataclass or dict) is stored with every step; restoring under a run_config that
    differs outside `ignore_fields` (field-path prefixes like "logging") raises ConfigMismatchError. Fields a
    checkpoint lacks (written before they existed) match when they hold their value in `defaults` (the run config's
    type at its defaults) now.
    """

    def __init__(
        self,
        config: CheckpointConfig,
        *,
        run_config: Any = None,
        ignore_fields: tuple[str, ...] = (),
        defaults: Any = None,
        processes: list[int] | None = None,
    ):
        """`processes`: the processes that save and restore (a role split's learners, `jgem.train.roles`), the
        first of them the primary; default: all of them, process 0 the primary."""
        self.config = config
        self._primary = processes[0] if processes else 0
        self.run_config = flatten_config(run_config) if run_config is not None else {}
        self.defaults = flatten_config(defaults) if defaults is not None else {}
        self.fingerprint = config_fingerprint(run_config) if run_config is not None else None
        self.ignore_fields = tuple(ignore_fields)
        policies: list[ocm.PreservationPolicy] = [ocm.LatestN(n=config.keep_last)]
        best_fn = None
        if config.best_metric is not None and config.keep_best > 0:
            best_fn = self._metric
            _quiet_unranked_saves()
            policies.append(
                ocm.BestN(
                    get_metric_fn=self._metric,
                    reverse=config.best_mode == "min",
                    n=config.keep_best,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocm.AnyPreservationPolicy(policies),
            best_fn=best_fn,
            best_mode=config.best_mode,
            enable_async_checkpointing=config.async_save,
            cleanup_tmp_directories=True,  # remove the leftovers of a save that was killed
            create=not processes,  # orbax creates the directory only over all processes (it is made below)
            multiprocessing_options=ocp.options.MultiprocessingOptions(
                primary_host=self._primary, active_processes=set(processes) if processes else None
            ),
        )
        Path(config.directory).mkdir(parents=True, exist_ok=True)
        registry = None
        if processes:  # every handler with the same processes and primary (the default ones wait for process 0)
            mp = options.multiprocessing_options
            # arrays' metadata (.zarray) is written by the array handler's primary host: one of these processes
            handler = ocp.type_handlers.ArrayHandler(primary_host=self._primary)
            ocp.type_handlers.register_type_handler(jax.Array, handler, override=True)
            state = ocp.handlers.StandardCheckpointHandler(multiprocessing_options=mp)
            registry = ocp.handlers.DefaultCheckpointHandlerRegistry()
            registry.add("state", ocp.args.StandardSave, state)
            registry.add("state", ocp.args.StandardRestore, state)
            registry.add(
                "state", ocp.args.PyTreeRestore, ocp.handlers.PyTreeCheckpointHandler(multiprocessing_options=mp)
            )
            host = ocp.handlers.JsonCheckpointHandler(multiprocessing_options=mp)
            registry.add("host", ocp.args.JsonSave, host)
            registry.add("host", ocp.args.JsonRestore, host)
        self._manager = ocp.CheckpointManager(
            Path(config.directory).resolve(),
            options=options,
            item_names=None if registry else ("state", "host"),
            handler_registry=registry,
        )

    def _metric(self, metrics: dict[str, Any]) -> float:
        # Steps saved without the metric rank last in either mode.
        worst = -math.inf if self.config.best_mode == "max" else math.inf
        value = (metrics or {}).get(self.config.best_metric)
        return worst if value is None else float(value)

    # -- saving ------------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Any,
        host: dict[str, Any] | None = None,
        *,
        metrics: dict[str, float] | None = None,
        force: bool = False,
    ) -> bool:
        """Start saving `state` (returns once the arrays are copied; the write continues in the background)
        and the JSON `host` state. `metrics` (e.g. eval results) rank steps for keep-best."""
        host_doc = {
            "step": int(step),
            **(host or {}),
            "config": self.run_config,
            "config_fingerprint": self.fingerprint,
        }
        try:
            # a deep copy: the write finishes in the background, after the caller may have mutated `host`
            host_doc = json.loads(json.dumps(host_doc))
        except TypeError as e:
            raise TypeError(f"host state must be JSON-serialisable ({e}); convert arrays with .tolist()") from e
        # non-finite values would poison the best-step ranking
        metrics = {k: float(v) for k, v in (metrics or {}).items() if math.isfinite(float(v))} or None
        return self._manager.save(
            int(step),
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), host=ocp.args.JsonSave(host_doc)),
            metrics=metrics,
            force=force,
        )

    def delete(self, step: int) -> None:
        """Remove saved step `step`."""
        self._manager.delete(int(step))

    def wait(self) -> None:
        """Block until pending asynchronous saves are on disk."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        self._manager.wait_until_finished()
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- restoring ---------------------------------------------------------------------------------

    def all_steps(self) -> list[int]:
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def latest_step(self) -> int | None:
        self._manager.reload()
        return self._manager.latest_step()

    def best_step(self) -> int | None:
        if self.config.best_metric is None:
            raise ValueError("best_step needs CheckpointConfig.best_metric (the eval metric to rank steps by)")
        self._manager.reload()
        return self._manager.best_step()

    def restore(self, step: int, target: Any) -> Restored:
        """Restore `step` into the structure, dtypes and shardings of `target` (arrays or ShapeDtypeStructs).

        The run config is checked first, from the host state alone: a checkpoint of another config (whose state
        may not even fit `target`'s structure) is refused, not mistaken for a corrupt one."""
        host = dict(self._manager.restore(step, args=ocp.args.Composite(host=ocp.args.JsonRestore())).host)
        self.check_config(host, step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
        out = self._manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
        return Restored(step=step, state=out.state, host=host)

    def restore_part(self, step: int, part: dict[str, Any]) -> dict[str, Any]:
        """Some top-level fields of step `step`'s saved state (e.g. `{"params": ..., "model_state": ...}` of a
        `TrainState`), each restored into the structure, dtypes and shardings of `part`'s value; the other fields
        (the optimizer's moments, the critic) are not read. No run config check: for evaluation and export."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, part)
        args = ocp.args.PyTreeRestore(
            item=abstract,
            restore_args=ocp.checkpoint_utils.construct_restore_args(abstract),
            partial_restore=True,
        )
        return dict(self._manager.restore(step, args=ocp.args.Composite(state=args)).state)

    def restore_latest(self, target: Any) -> Restored | None:
        """The newest step that restores, or None when there is none (a fresh run).

        A step that fails to restore (corrupt or missing files) is moved to `<directory>.corrupt/<step>` for
        inspection, out of the way of later saves, with a warning naming it; the next newest is tried. When no
        step restores, `CorruptCheckpointError` names them all."""
        steps = self.all_steps()
        bad: list[str] = []
        for step in reversed(steps):
            try:
                return self.restore(step, target)
            except ConfigMismatchError:
                raise
            except Exception as e:
                kept = self._set_aside(step)
                bad.append(f"step {step} ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})")
                warnings.warn(
                    f"checkpoint step {step} in {self.config.directory} could not be restored "
                    f"({type(e).__name__}); moved to {kept} for inspection, trying an older step",
                    RuntimeWarning,
                    stacklevel=2,
                )
        if bad:
            raise CorruptCheckpointError(
                f"no checkpoint in {self.config.directory} could be restored: " + "; ".join(bad) + ". They were "
                f"moved to {self.config.directory}.corrupt/; start a new run directory, or fix and move them back"
            )
        return None

    def _set_aside(self, step: int) -> Path:
        src = Path(self.config.directory).resolve() / str(step)
        dst = Path(str(Path(self.config.directory).resolve()) + ".corrupt") / str(step)
        if jax.process_index() == self._primary and src.exists():
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.exists():
                dst = dst.with_name(f"{step}-{int(time.time())}")
            shutil.move(str(src), str(dst))
        self._manager.reload()
        return dst

    def restore_best(self, target: Any) -> Restored | None:
        step = self.best_step()
        return None if step is None else self.restore(step, target)

    def check_config(self, host: dict[str, Any], step: int | None = None) -> None:
        """Refuse a checkpoint written under a different run config."""
        if not self.run_config:
            return
        saved = {
            k: v
            for k, v in (host.get("config") or {}).items()
            if not any(k == p or k.startswith(p + ".") for p in UNCOMPARED_CONFIG_FIELDS)
        }
        ignore = (*self.ignore_fields, *UNCOMPARED_CONFIG_FIELDS)
        fields = differing_fields(saved, self.run_config, ignore, self.defaults)
        if fields:
            where = f"step {step} in " if step is not None else ""
            raise ConfigMismatchError(
                f"checkpoint {where}{self.config.directory} was written with a different config:\n  "
                + "\n  ".join(f"{k}: checkpoint={a!r} now={b!r}" for k, a, b in fields)
                + "\nresume with the original config, start a new run directory, or list fields that may change "
                "in ignore_fields",
                fields,
                saved,
                self.config.directory,
                step,
            )
