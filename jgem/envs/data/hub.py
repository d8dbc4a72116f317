"""GEM's Hugging Face datasets, read from a local copy: nothing is ever downloaded.

A dataset `org/name` lives in the folder `<data dir>/org/name/`; the data dir is `data_dir=` (experiments.eval's
`--data-dir`) or else `$JGEM_DATA`. The folder holds one of:
- a copy of the dataset's repository (`hf download org/name --repo-type dataset --local-dir <data dir>/org/name`):
  parquet or JSONL files such as `data/<split>-00000-of-00001.parquet`, read with `datasets`;
- one file per split: `<split>.parquet`, `<split>.jsonl` or `<split>.json` (a one-split dataset: any one file);
- what `datasets`' `save_to_disk` wrote.
`path=` names one such file, or such a folder, instead. What was read is cached per process (one copy of a
dataset however many envs a pool builds), keyed by the files' modification times.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from jgem.envs.data.dataset import Rows, load_rows, read_file

DATA_ENV = "JGEM_DATA"
EXTS = (".parquet", ".jsonl", ".json")


class MissingDataError(FileNotFoundError):
    """A dataset env's local data is not where it is looked for; the message says what goes where."""


def data_root(data_dir: str | os.PathLike | None = None) -> Path | None:
    """`data_dir`, else `$JGEM_DATA`, else None."""
    root = data_dir if data_dir is not None else os.environ.get(DATA_ENV) or None
    return Path(root).expanduser() if root else None


def dataset_rows(
    *,
    path: str | os.PathLike | None,
    dataset: str | None,
    split: str | None,
    data_dir: str | os.PathLike | None,
    columns: Sequence[str],
    what: str,
) -> Rows | list[dict]:
    """The rows a dataset env serves: `path` (a file, or a dataset folder) when given, else the local copy of the
    Hugging Face `dataset` (its `split`) under the data dir; without a `dataset` name only `path` can say where."""
    if dataset is None or (path is not None and not Path(path).is_dir()):
        return load_rows(path, columns, what)
    if path is not None:
        folder, root = Path(path), None
    else:
        root = data_root(data_dir)
        folder = root / dataset if root is not None else None
        if folder is None or not folder.is_dir():
            raise MissingDataError(expected(dataset, split, columns, root, what))
    rows = _read_folder(str(folder.resolve()), split, _stamp(folder))
    if not len(rows):
        raise ValueError(f"{folder} has no rows in split {split!r}; " + expected(dataset, split, columns, root, what))
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise ValueError(
            f"{folder} (split {split!r}) lacks column(s) {missing}: it has {sorted(rows[0])}; {what} needs "
            f"{', '.join(map(repr, columns))} (rename with question_key= / answer_key=)"
        )
    return rows


def expected(dataset: str, split: str | None, columns: Sequence[str], root: Path | None, what: str = "this env") -> str:
    """Where the local copy of `dataset` (split `split`) goes and what it holds: the missing-data message."""
    where = f"{root / dataset}" if root is not None else f"$JGEM_DATA/{dataset}"
    of = f"the split {split!r} of the" if split else "the"
    files = f"{split}.parquet or {split}.jsonl" if split else "one .parquet or .jsonl file"
    msg = (
        f"{what} reads {of} Hugging Face dataset {dataset!r} (columns {', '.join(map(repr, columns))}) from a "
        f"local copy, and there is none: put a copy of the dataset's repository in the folder {where}/ (`hf download "
        f"{dataset} --repo-type dataset --local-dir {where}`), or {files} there"
    )
    if root is None:
        msg += (
            f"; ${DATA_ENV} is not set: set it to your data folder, or pass data_dir=... (experiments.eval --data-dir)"
        )
    return msg + ", or path=... to one file"


def _stamp(folder: Path) -> tuple[int, ...]:
    return tuple(sorted(f.stat().st_mtime_ns for f in folder.rglob("*") if f.is_file()))


@functools.lru_cache(maxsize=16)
def _read_folder(folder: str, split: str | None, stamp: tuple[int, ...]) -> Rows:
    """The rows of `split` (None: the only split) of the dataset copy in `folder`. `stamp` keys the cache."""
    root = Path(folder)
    if split is not None:
        for ext in EXTS:
            if (root / f"{split}{ext}").is_file():
                return Rows(read_file(root / f"{split}{ext}"))
    else:
        files = [f for f in sorted(root.iterdir()) if f.suffix in EXTS and f.is_file()]
        if len(files) == 1:
            return Rows(read_file(files[0]))
    splits = _with_datasets(folder, stamp)
    if split is None:
        if len(splits) != 1:
            raise ValueError(f"{root} holds the splits {list(splits)}; name one with split=...")
        split = next(iter(splits))
    if split not in splits:
        raise MissingDataError(
            f"{root} holds the splits {list(splits)}, not {split!r}: copy the whole dataset repository there, or put "
            f"the split in {root}/{split}.parquet or .jsonl"
        )
    return splits[split]


@functools.lru_cache(maxsize=8)
def _with_datasets(folder: str, stamp: tuple[int, ...]) -> dict[str, Rows]:
    """Every split of the dataset copy in `folder`, read with `datasets` (a repository copy or save_to_disk)."""
    root = Path(folder)
    try:
        import datasets
    except ImportError as e:
        raise ImportError(
            f"reading the dataset copy in {root} needs the `datasets` package: pip install -e '.[tools]' (or put "
            "each split in one file there: <split>.parquet or <split>.jsonl)"
        ) from e
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # the "Generating split" bars
    try:
        if (root / "dataset_dict.json").is_file() or (root / "dataset_info.json").is_file():
            data = datasets.load_from_disk(folder)
        else:  # datasets converts the files to its own cache: under $JGEM_CACHE_DIR when set, else its default
            cache = os.environ.get("JGEM_CACHE_DIR")
            data = datasets.load_dataset(folder, cache_dir=os.path.join(cache, "datasets") if cache else None)
    except (ValueError, FileNotFoundError) as e:  # no data files, or files datasets cannot tell apart
        raise MissingDataError(f"{root} holds no dataset that `datasets` can read ({e})") from e
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    if isinstance(data, datasets.Dataset):
        return {"train": Rows(data.to_list())}
    return {name: Rows(part.to_list()) for name, part in data.items()}
