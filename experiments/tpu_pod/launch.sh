#!/usr/bin/env bash
# Run the same `python -m experiments.train <preset> ...` on every host of a TPU pod slice.
#
#   experiments/tpu_pod/launch.sh <tpu-name> <zone> <preset> [train args ...]
#   experiments/tpu_pod/launch.sh my-v5e-32 us-west4-a qwen3-1.7b-games --model.path /mnt/models/Qwen3-1.7B-Base \
#       --run-dir /mnt/shared/runs/qwen3-games --mesh.fsdp -1
#
# Multi-host setup: every host gets JGEM_COORDINATOR (worker 0's internal IP and JGEM_PORT),
# JGEM_NUM_PROCESSES (the slice's host count) and JGEM_PROCESS_ID (the host's worker number, read on the
# host from the TPU metadata server), so jgem.sharding.mesh.initialize() starts jax.distributed before the
# run. Set JGEM_COORDINATOR / JGEM_NUM_PROCESSES here to skip the `gcloud describe` lookup.
#
# Environment (all optional):
#   PROJECT       gcloud project (default: gcloud's configured one)
#   REPO_DIR      the jgem checkout on every host (default: ~/jgem); it must hold the same code everywhere
#   PYTHON        interpreter on the hosts, relative to REPO_DIR or absolute (default: .venv/bin/python)
#   JGEM_PORT     coordinator port (default: 8476)
#   SYNC=1        first copy this checkout (without .venv, runs, .git) to REPO_DIR on every host
#   DRY_RUN=1     print the gcloud commands instead of running them
#   EXTRA_ENV     more `NAME=value` pairs exported on every host (e.g. "XLA_FLAGS=... JAX_LOG_COMPILES=1")
set -euo pipefail

if [[ $# -lt 3 ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  echo "error: need <tpu-name> <zone> <preset> [train args ...]" >&2
  exit 2
fi
TPU_NAME=$1
ZONE=$2
shift 2
REPO_DIR=${REPO_DIR:-'~/jgem'}
PYTHON=${PYTHON:-.venv/bin/python}
JGEM_PORT=${JGEM_PORT:-8476}
GCLOUD=(gcloud compute tpus tpu-vm)
LOC=(--zone "$ZONE")
[[ -n ${PROJECT:-} ]] && LOC+=(--project "$PROJECT")

run() {  # run or, with DRY_RUN=1, print a command
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    printf '%q ' "$@"
    echo
  else
    "$@"
  fi
}

# The coordinator is worker 0; the process count is the number of hosts in the slice.
if [[ -z ${JGEM_COORDINATOR:-} || -z ${JGEM_NUM_PROCESSES:-} ]]; then
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    JGEM_COORDINATOR=${JGEM_COORDINATOR:-'<worker-0-ip>'}:$JGEM_PORT
    JGEM_NUM_PROCESSES=${JGEM_NUM_PROCESSES:-'<num-hosts>'}
  else
    ips=$("${GCLOUD[@]}" describe "$TPU_NAME" "${LOC[@]}" --format='value(networkEndpoints[].ipAddress)' | tr ';,' '  ')
    read -r -a ip_list <<<"$ips"
    if [[ ${#ip_list[@]} -eq 0 ]]; then
      echo "error: no network endpoints for TPU $TPU_NAME in $ZONE; check the name, zone and PROJECT" >&2
      exit 1
    fi
    JGEM_COORDINATOR=${JGEM_COORDINATOR:-${ip_list[0]}:$JGEM_PORT}
    JGEM_NUM_PROCESSES=${JGEM_NUM_PROCESSES:-${#ip_list[@]}}
  fi
fi

if [[ ${SYNC:-0} == 1 ]]; then
  here=$(cd "$(dirname "$0")/../.." && pwd)
  tarball=$(mktemp /tmp/jgem-src.XXXXXX.tar.gz)
  run tar -C "$here" --exclude=.venv --exclude=runs --exclude=.git --exclude=__pycache__ -czf "$tarball" .
  run "${GCLOUD[@]}" scp "$tarball" "$TPU_NAME:/tmp/jgem-src.tar.gz" "${LOC[@]}" --worker=all
  run "${GCLOUD[@]}" ssh "$TPU_NAME" "${LOC[@]}" --worker=all \
    --command "mkdir -p $REPO_DIR && tar -C $REPO_DIR -xzf /tmp/jgem-src.tar.gz"
  rm -f "$tarball"
fi

# The worker number comes from each host's own metadata, so one command line serves every host.
worker_id='$(curl -s -H Metadata-Flavor:Google http://metadata.google.internal/computeMetadata/v1/instance/attributes/agent-worker-number)'
train_args=$(printf '%q ' "$@")
train_args=${train_args% }
remote="cd $REPO_DIR && export JGEM_COORDINATOR=$JGEM_COORDINATOR JGEM_NUM_PROCESSES=$JGEM_NUM_PROCESSES \
JGEM_PROCESS_ID=$worker_id ${EXTRA_ENV:-} && exec $PYTHON -m experiments.train $train_args"
run "${GCLOUD[@]}" ssh "$TPU_NAME" "${LOC[@]}" --worker=all --command "$remote"
