#!/usr/bin/env bash
# The GPU rows of docs/benchmarks.md: generate, train_step (also at 8,192-token rows) and the rollout engine, jgem vs its
# peers (transformers/PyTorch; the static-batch path) on the same GPU.
# Runs with the machine's own python3 (jax[cuda], torch, transformers preinstalled) and the repo on PYTHONPATH.
# Usage: scripts/gpu_bench.sh OUTDIR [generate] [train] [long] [rollout] [all]   (all, the default: ~25 min on an H100)
set -uo pipefail
out=${1:?usage: scripts/gpu_bench.sh OUTDIR [generate] [train] [long] [rollout] [all]}
parts=" ${*:2} "
[[ $parts == "  " ]] && parts=" all "
want() { [[ $parts == *" $1 "* || $parts == *" all "* ]]; }
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # JAX and PyTorch share the GPU: each takes what it uses
py=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv | tee "$out/gpu.txt"
$py -c "import jax, flax, torch, transformers; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$out/gpu.txt"
if want generate; then
  timeout 400 $py bench/generate.py --dtype bfloat16 --models tiny 100m qwen3-0.6b --batches 1 8 32 --reps 3 \
    2>"$out/generate.err" | tee "$out/generate_bf16.jsonl"
fi
if want train; then
  timeout 120 $py bench/train_step.py --dtype bfloat16 --sizes tiny 100m --batch 8 --seq 256 --steps 5 \
    2>"$out/train.err" | tee "$out/train_bf16_256.jsonl"
  timeout 220 $py bench/train_step.py --dtype bfloat16 --sizes qwen3-0.6b --batch 8 --seq 1024 --steps 5 \
    2>>"$out/train.err" | tee "$out/train_bf16_0.6b.jsonl"
fi
if want long; then
  # the pod presets' row length: one 8,192-token row per step, each decoder layer recomputed in the backward
  # pass on both sides (jgem remat "full", PyTorch gradient checkpointing)
  timeout 500 $py bench/train_step.py --dtype bfloat16 --sizes qwen3-0.6b qwen3-1.7b --batch 1 --seq 8192 \
    --steps 5 --remat full 2>"$out/long.err" | tee "$out/train_bf16_8192.jsonl"
fi
if want rollout; then
  # the rollout engine vs the static-batch path, on the GPU (random-init models play the games' solvers)
  timeout 550 $py bench/rollout.py --models 100m qwen3-0.6b --envs game:Sudoku-v0-easy --episodes 16 \
    --num-envs 8 --max-turns 10 --warmups 2 2>"$out/rollout.err" | tee "$out/rollout.txt"
fi
tail -n 5 "$out"/*.err
