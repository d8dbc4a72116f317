#!/usr/bin/env bash
# bench/async.py's tool-call workload (b) on the GPU machine (docs/benchmarks.md, "async"): the five modes in three
# processes at once, each with its own rollout-alone pass (sync | off_policy:1 async:4 | async:1 async:2), so that the
# whole benchmark fits one device call (sync alone takes ~4 minutes: each of its 12 steps waits ~19 s for its slowest
# episode). The processes share the GPU and 16 host cores; the tiny model's work is a small part of a step.
# Runs with the machine's own python3 (jax[cuda], flax, optax, orbax preinstalled); tyro and tensorboardX travel as
# wheels in .whl/ (docs: /work/.library/device/README.md). Usage: scripts/gpu_async.sh OUTDIR [extra bench args];
# MODE_GROUPS picks the processes' modes, '|' between processes, e.g. the stream rows:
#   MODE_GROUPS='sync|stream:4 stream:2|async:4 stream:1' scripts/gpu_async.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/gpu_async.sh OUTDIR [extra bench/async.py args]}
shift
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # three processes share the GPU: each takes what it uses
# Compilation, not the steps, bounded the first GPU try (34 engine programs at ~4.8 s each in one warm-up step):
# no autotuning of the tiny model's GEMMs (XLA's default level tries kernels per fusion on the device), and one
# persistent cache the three processes share (a shape one compiles, the others load).
export XLA_FLAGS="--xla_gpu_autotune_level=0${XLA_FLAGS:+ $XLA_FLAGS}"
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache} JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
python3 -c "import jax, flax, optax, orbax.checkpoint, tyro, tensorboardX; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__)" | tee -a "$out/gpu.txt" || exit 1
git log -1 --format='commit %h %s' 2>/dev/null | tee -a "$out/gpu.txt"
limit=${BENCH_TIMEOUT:-520}
i=0
IFS='|' read -ra groups <<<"${MODE_GROUPS:-sync|async:4 off_policy:1|async:2 async:1}"
for modes in "${groups[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  timeout "$limit" python3 bench/async.py --workloads b --modes $modes "$@" >"$out/async$i.jsonl" 2>"$out/async$i.err" &
done
wait
tail -n 3 "$out"/async*.err
cat "$out"/async*.jsonl | grep -v '"kind": "config"'
