#!/usr/bin/env bash
# Evaluation on a Slurm cluster: srun starts one process per GPU, on as many
# nodes as needed; tools/test.py joins them with --launcher slurm.
#
#   [GPUS=8] [GPUS_PER_NODE=8] bash tools/slurm_test.sh PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options...]
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
source "$(dirname "${BASH_SOURCE[0]}")/_launch_common.sh"
show_help_if_asked "$@"
if [[ $# -lt 4 ]]; then
    echo "usage: $0 PARTITION JOB_NAME CONFIG CHECKPOINT [test.py options...]  (--help for more)" >&2
    exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
CHECKPOINT=$4
shift 4
slurm_launch "$PARTITION" "$JOB_NAME" test.py "$CONFIG" "$CHECKPOINT" -- "$@"
