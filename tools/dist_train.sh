#!/usr/bin/env bash
# Distributed (data-parallel) training with torchrun: one process per GPU, on
# one or several nodes. Without CUDA it runs GPUS_PER_NODE processes on the CPU
# cores (gloo backend; SyncBN synchronised over gloo).
#
#   bash tools/dist_train.sh CONFIG GPUS_PER_NODE [train.py options...]
#
# Several nodes: run it on every node with the same MASTER_ADDR/PORT and
# NNODES, and NODE_RANK = 0..NNODES-1, e.g.
#   NNODES=2 NODE_RANK=0 MASTER_ADDR=10.0.0.1 bash tools/dist_train.sh CONFIG 8
#   NNODES=2 NODE_RANK=1 MASTER_ADDR=10.0.0.1 bash tools/dist_train.sh CONFIG 8
# Environment: NNODES (default 1), NODE_RANK (0), MASTER_ADDR (127.0.0.1),
# PORT (29500; another one for a second job on the same machine),
# PYTHON (python interpreter; default: the repo's .venv if present).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_launch_common.sh"
show_help_if_asked "$@"
if [[ $# -lt 2 ]]; then
    echo "usage: $0 CONFIG GPUS_PER_NODE [train.py options...]  (--help for more)" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
torchrun_launch "$GPUS" train.py "$CONFIG" -- "$@"
