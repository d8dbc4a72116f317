#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md: generate and train_step, jgem vs transformers/PyTorch on the same GPU.
# Runs with the machine's own python3 (jax[cuda], torch, transformers preinstalled) and the repo on PYTHONPATH.
# Usage: scripts/gpu_bench.sh OUTDIR [generate|train|all]   (all takes about 12 minutes on an H100)
set -uo pipefail
out=${1:?usage: scripts/gpu_bench.sh OUTDIR [generate|train|all]}
what=${2:-all}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX and PyTorch share the GPU: each takes what it uses
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
$py -c "import jax, flax, torch, transformers; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
if [[ $what == generate || $what == all ]]; then
  timeout 400 $py bench/generate.py --dtype bfloat16 --models tiny 100m qwen3-0.6b --batches 1 8 32 --reps 3 \
    2>"$out/generate.err" | tee "$out/generate_bf16.jsonl"
fi
if [[ $what == train || $what == all ]]; then
  timeout 120 $py bench/train_step.py --dtype bfloat16 --sizes tiny 100m --batch 8 --seq 256 --steps 5 \
    2>"$out/train.err" | tee "$out/train_bf16_256.jsonl"
  # batch 8 x 1024 does not fit both frameworks' peaks (jgem's attention keeps f32 scores for the backward)
  timeout 220 $py bench/train_step.py --dtype bfloat16 --sizes qwen3-0.6b --batch 4 --seq 1024 --steps 5 \
    2>>"$out/train.err" | tee "$out/train_bf16_0.6b.jsonl"
fi
tail -n 5 "$out"/*.err
