#!/usr/bin/env bash
# Training on a Slurm cluster: srun starts one process per GPU, on as many
# nodes as needed; tools/train.py joins them with --launcher slurm.
#
#   [GPUS=16] [GPUS_PER_NODE=8] bash tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py options...]
#
# Environment (defaults in brackets):
#   GPUS           total number of processes / GPUs (--ntasks)            [8]
#   GPUS_PER_NODE  processes and GPUs per node (--ntasks-per-node, --gres) [min(GPUS, 8)]
#   CPUS_PER_TASK  CPU cores per process (--cpus-per-task)                [5]
#   SRUN_ARGS      further srun options, split on spaces, e.g. "--quotatype=auto --time=72:00:00"
#   PYTHON         interpreter on the compute nodes [the repo's .venv if present, else python]
# The master address and port come from the job (scontrol's first host;
# MASTER_PORT, else 29500). Set MASTER_PORT to run two jobs on one node.
set -euo pipefail

usage() {  # the comment block above
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    usage
    exit 0
fi
if [[ $# -lt 4 ]]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [train.py options...]  (--help for more)" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
shift 4
GPUS=${GPUS:-8}
for name in GPUS GPUS_PER_NODE CPUS_PER_TASK; do
    value=${!name:-}
    if [[ -n "$value" && ! "$value" =~ ^[1-9][0-9]*$ ]]; then
        echo "$0: error: $name must be a positive integer, got '$value'" >&2
        exit 2
    fi
done
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
read -r -a EXTRA_SRUN_ARGS <<< "${SRUN_ARGS:-}"
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$TOOLS_DIR")"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then PYTHON="$REPO_ROOT/.venv/bin/python"; else PYTHON=python; fi
fi
if ! command -v srun > /dev/null; then
    echo "$0: error: srun not found: run this on a Slurm login node (tools/dist_train.sh starts processes without Slurm)" >&2
    exit 127
fi

set -x
PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec srun -p "$PARTITION" \
    --job-name="$JOB_NAME" \
    --gres="gpu:$GPUS_PER_NODE" \
    --ntasks="$GPUS" \
    --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" \
    --kill-on-bad-exit=1 \
    ${EXTRA_SRUN_ARGS[@]+"${EXTRA_SRUN_ARGS[@]}"} \
    "$PYTHON" -u "$TOOLS_DIR/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher=slurm "$@"
