#!/usr/bin/env bash
# Try the multi-host path on one machine: N CPU processes of `python -m experiments.train`, joined by
# jax.distributed through JGEM_COORDINATOR / JGEM_NUM_PROCESSES / JGEM_PROCESS_ID.
#
#   experiments/tpu_pod/local_multiprocess.sh <num-processes> <preset> [train args ...]
#   experiments/tpu_pod/local_multiprocess.sh 2 tiny --steps 4 --run-dir runs/mp-tiny --env.num-envs 8
#
# Environment (all optional):
#   DEVICES_PER_PROCESS  simulated CPU devices per process (default: 1)
#   JGEM_PORT            coordinator port on localhost (default: 8476)
#   LOG_DIR              where proc<i>.log go (default: runs/multiprocess-logs)
#   PYTHON               interpreter (default: .venv/bin/python)
#   DRY_RUN=1            print the commands instead of running them
# Process 0's output is shown live; every process also logs to LOG_DIR. Exit status: the first failure's.
set -euo pipefail

if [[ $# -lt 2 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  echo "error: need <num-processes> (a positive integer) <preset> [train args ...]" >&2
  exit 2
fi
N=$1
shift
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-.venv/bin/python}
PORT=${JGEM_PORT:-8476}
LOG_DIR=${LOG_DIR:-runs/multiprocess-logs}
DEVICES=${DEVICES_PER_PROCESS:-1}

env_for() {  # the environment of process $1
  echo "JAX_PLATFORMS=cpu JAX_NUM_CPU_DEVICES=$DEVICES JGEM_COORDINATOR=localhost:$PORT JGEM_NUM_PROCESSES=$N JGEM_PROCESS_ID=$1"
}

if [[ ${DRY_RUN:-0} == 1 ]]; then
  for ((i = 0; i < N; i++)); do
    echo "$(env_for "$i") $PYTHON -m experiments.train $(printf '%q ' "$@")"
  done
  exit 0
fi

mkdir -p "$LOG_DIR"
pids=()
cleanup() {  # stop only the processes this script started
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup INT TERM
for ((i = 0; i < N; i++)); do
  : >"$LOG_DIR/proc$i.log"  # exists before the tail below opens it
  # shellcheck disable=SC2046
  env $(env_for "$i") "$PYTHON" -m experiments.train "$@" >"$LOG_DIR/proc$i.log" 2>&1 &
  pids+=($!)
done
echo "started ${#pids[@]} processes (pids ${pids[*]}); logs in $LOG_DIR" >&2
tail -n +1 -f "$LOG_DIR/proc0.log" --pid "${pids[0]}" &
tailer=$!
status=0
for ((i = 0; i < N; i++)); do
  rc=0
  wait "${pids[$i]}" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "process $i exited with status $rc; see $LOG_DIR/proc$i.log" >&2
    [[ $status -eq 0 ]] && status=$rc
    cleanup  # the others would wait forever in a collective
  fi
done
wait "$tailer" 2>/dev/null || true
exit $status
