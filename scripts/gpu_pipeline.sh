#!/usr/bin/env bash
# The pipeline modes' learning table (docs/benchmarks.md, "Pipeline modes and learning") on the GPU machine:
# experiments.ablations.pipeline_modes, 3 seeds x (sync, off_policy lag 1, async max-staleness 2), all runs at once.
# Runs with the machine's own python3 (jax[cuda], flax, optax, orbax preinstalled); the packages it lacks (tyro,
# tensorboardX) travel as wheels in .whl/ (docs: /work/.library/device/README.md). Usage: scripts/gpu_pipeline.sh OUTDIR
set -uo pipefail
out=${1:?usage: scripts/gpu_pipeline.sh OUTDIR}
mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # nine runs share the GPU: each takes what it uses
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpu.txt"
python3 -c "import jax, flax, optax, orbax.checkpoint, tyro, tensorboardX; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__)" | tee -a "$out/gpu.txt" || exit 1
runs=/tmp/pipeline_runs
timeout ${SWEEP_TIMEOUT:-480} python3 -m experiments.ablations.pipeline_modes --seeds 0 1 2 --jobs 9 --out "$runs" \
  2>&1 | tee "$out/sweep.txt"
# what comes back: one archive (the runs' metrics, summaries, logs and configs; no checkpoints) and the table
(cd "$runs" && tar czf "$out/runs.tgz" results.* */seed*/metrics.jsonl */seed*/summary.json */seed*/sweep.log \
  */seed*/config.json 2>/dev/null)
cp "$runs"/results.md "$out/" 2>/dev/null
tail -n 3 "$runs"/*/seed*/sweep.log
