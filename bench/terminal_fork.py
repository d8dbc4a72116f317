"""Reset and fork of a terminal session: jgem's copy-on-write session against full copies of the task directory.

    python bench/terminal_fork.py [--mb 50] [--repeat 7]

On a generated task tree (`--mb` MiB in many files of mixed sizes), each row is the median over `--repeat` runs:
- jgem reset: a new `ShellSession` on the tree (a worker that holds the tree unpacked: an overlay with a fresh
  tmpfs upper), and the same on a worker that does not hold it yet (the tree unpacked once);
- jgem fork: `session.fork()` after a few files were changed (a worker holding the tree; the parent's upper layer
  copied), and the fork's first command (bash started in the parent's directory with its exports);
- peer 1: `cp -a` of the tree (into /dev/shm: memory, as the sessions' tmpfs);
- peer 2: a fresh sandbox session over a full copy of the tree (`ShellConfig(copy_on_write=False)`: the tar sent and
  unpacked per session, as jgem's reset did before copy-on-write).
Also the alternatives weighed for the design: a hard-link farm (`cp -al`, on the same filesystem) and a reflink copy
(`cp --reflink=always`, which the filesystem may refuse). Bytes written: what the reset or fork wrote (the session's
`written`), the tree's bytes for the copies. Prints one JSON line per row, then the ratios peer / jgem.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def make_tree(root: Path, mb: int, seed: int = 0) -> tuple[int, int]:
    """`mb` MiB in nested directories: 2000 small text files (64 B .. 8 KiB, log-uniform), the rest in binary files of
    16 KiB .. 2 MiB (log-uniform); (files, bytes)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    target, total, n = mb << 20, 0, 0
    while total < target:
        small = n < 2000
        lo, hi = (64, 8192) if small else (16384, 2 << 20)
        size = int(min(np.exp(rng.uniform(np.log(lo), np.log(hi))), target - total))
        d = root / f"pkg{n % 17}" / f"mod{n % 5}"
        d.mkdir(parents=True, exist_ok=True)
        name = d / (f"f{n}.txt" if small else f"f{n}.bin")
        name.write_bytes((b"line of text\n" * (size // 13 + 1))[:size] if small else rng.bytes(size))
        total += size
        n += 1
    return n, total


CHANGES = (  # a few files changed before the fork: edits of small files, new files, a deletion
    "cd /app && for f in $(ls pkg1/mod1/*.txt | head -3); do echo edited >> $f; done && "
    "head -c 8192 /dev/urandom > pkg2/new.bin && echo hello > notes.md && rm -f $(ls pkg3/mod3/* | head -1) && "
    "mkdir -p build && cd build && export STAGE=forked"
)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    from jgem.envs.tools.shell import ShellConfig, ShellSession, pack_dir

    work = Path(tempfile.mkdtemp(prefix="jgem-bench-fork-"))
    shm = Path(tempfile.mkdtemp(prefix="jgem-bench-fork-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    rows = []
    try:
        tree = work / "task"
        tree.mkdir()
        nfiles, nbytes = make_tree(tree, args.mb)
        cfg = ShellConfig(command_timeout=30, workdir_mb=args.mb * 2 + 64, memory_mb=2048)
        full = ShellConfig(command_timeout=30, workdir_mb=args.mb * 2 + 64, memory_mb=2048, copy_on_write=False)
        t = time.perf_counter()
        files = pack_dir(tree)
        pack_s = time.perf_counter() - t
        t = time.perf_counter()
        assert pack_dir(tree) is files
        repack_s = time.perf_counter() - t

        def row(name: str, secs: list[float], written: list[int], **extra: object) -> None:
            rec = {"impl": name, "ms": round(_median(secs) * 1e3, 2), "bytes_written": int(_median(written))}
            rec.update(extra)
            rows.append(rec)
            print(json.dumps(rec), flush=True)

        # jgem reset on a worker that does not hold the tree (the first session of a task on a worker)
        cold, cold_w = [], []
        for _ in range(min(args.repeat, 3)):
            from jgem.envs.tools import shell

            shell._close_idle()  # no idle worker: each run starts one and unpacks the tree
            warm = ShellSession(b"", config=cfg)  # a started worker, without the tree
            warm.close()
            t = time.perf_counter()
            s = ShellSession(files, config=cfg)
            cold.append(time.perf_counter() - t)
            cold_w.append(s.written)
            s.close()
        row("jgem reset, worker without the tree (once per task and worker)", cold, cold_w)

        # two workers that hold the tree (the parent's and the fork's)
        a, b = ShellSession(files, config=cfg), ShellSession(files, config=cfg)
        a.close()
        b.close()
        secs, written = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            s = ShellSession(files, config=cfg)
            secs.append(time.perf_counter() - t)
            written.append(s.written)
            s.close()
        row("jgem reset (copy-on-write)", secs, written)
        t_env = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            s = ShellSession(pack_dir(tree), config=cfg)  # as the env's reset: the tar looked up (a stat walk)
            t_env.append(time.perf_counter() - t)
            s.close()
        row("jgem reset with pack_dir's stat walk (the env's reset)", t_env, written)

        fork_s, fork_w, first_s, upper = [], [], [], []
        for _ in range(args.repeat):
            parent = ShellSession(files, config=cfg)
            assert parent.run(CHANGES).ok
            upper.append(parent.changed()["bytes"])
            t = time.perf_counter()
            child = parent.fork()
            fork_s.append(time.perf_counter() - t)
            fork_w.append(child.written)
            t = time.perf_counter()
            r = child.run("echo $STAGE; pwd")
            first_s.append(time.perf_counter() - t)
            assert r.output == "forked\n/app/build\n", r.output
            child.close()
            parent.close()
        row("jgem fork", fork_s, fork_w, upper_bytes=int(_median(upper)))
        row("jgem fork's first command (bash start, exports)", first_s, [0])

        # peer 1: cp -a of the tree
        cp_s = []
        for i in range(args.repeat):
            dst = shm / f"cp{i}"
            t = time.perf_counter()
            subprocess.run(["cp", "-a", str(tree), str(dst)], check=True)
            cp_s.append(time.perf_counter() - t)
            shutil.rmtree(dst)
        row("peer 1: cp -a of the tree", cp_s, [nbytes])

        # peer 2: a fresh session over a full copy (jgem's reset before copy-on-write)
        ShellSession(files, config=full).close()
        full_s, full_w = [], []
        for _ in range(args.repeat):
            t = time.perf_counter()
            s = ShellSession(files, config=full)
            full_s.append(time.perf_counter() - t)
            full_w.append(s.written)
            s.close()
        row("peer 2: fresh session over a full copy", full_s, full_w)

        # the alternatives weighed: hard links (same filesystem, no size limit, no copy-up) and reflinks
        ln_s = []
        for i in range(args.repeat):
            dst = work / f"ln{i}"
            t = time.perf_counter()
            subprocess.run(["cp", "-al", str(tree), str(dst)], check=True)
            ln_s.append(time.perf_counter() - t)
            shutil.rmtree(dst)
        row("alternative: hard-link farm (cp -al)", ln_s, [0])
        probe = subprocess.run(
            ["cp", "--reflink=always", str(next(tree.rglob("*.bin"))), str(work / "reflink")],
            capture_output=True,
            text=True,
        )
        fs = subprocess.run(["stat", "-f", "-c", "%T", str(work)], capture_output=True, text=True).stdout.strip()
        reflink = "ok" if probe.returncode == 0 else probe.stderr.strip().rsplit(": ", 1)[-1]
        print(json.dumps({"alternative": "reflink", "filesystem": fs, "result": reflink}))

        ours = {r["impl"]: r for r in rows}
        reset, fork = ours["jgem reset (copy-on-write)"], ours["jgem fork"]
        cp, full = ours["peer 1: cp -a of the tree"]["ms"], ours["peer 2: fresh session over a full copy"]["ms"]
        summary = {
            "tree": {"files": nfiles, "bytes": nbytes},
            "pack_dir_first_ms": round(pack_s * 1e3, 1),
            "pack_dir_cached_ms": round(repack_s * 1e3, 1),
            "fork_bytes_fraction_of_tree": round(fork["bytes_written"] / nbytes, 6),
            "ratios_time_peer_over_jgem": {
                "cp -a / reset": round(cp / reset["ms"], 1),
                "cp -a / fork": round(cp / fork["ms"], 1),
                "full-copy session / reset": round(full / reset["ms"], 1),
                "full-copy session / fork": round(full / fork["ms"], 1),
            },
            "ratios_bytes_peer_over_jgem_fork": round(nbytes / max(fork["bytes_written"], 1), 1),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}",
            "python": platform.python_version(),
        }
        print(json.dumps(summary))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


if __name__ == "__main__":
    main()
