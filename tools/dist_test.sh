#!/usr/bin/env bash
# Distributed evaluation with torchrun: one process per GPU, on one or several
# nodes (without CUDA: GPUS_PER_NODE processes on the CPU cores, gloo backend).
# The metrics equal those of tools/test.py in one process.
#
#   bash tools/dist_test.sh CONFIG CHECKPOINT GPUS_PER_NODE [test.py options...]
#
# Environment: NNODES (default 1), NODE_RANK (0), MASTER_ADDR (127.0.0.1),
# PORT (29500; another one for a second job on the same machine),
# PYTHON (python interpreter; default: the repo's .venv if present).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_launch_common.sh"
show_help_if_asked "$@"
if [[ $# -lt 3 ]]; then
    echo "usage: $0 CONFIG CHECKPOINT GPUS_PER_NODE [test.py options...]  (--help for more)" >&2
    exit 2
fi
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
shift 3
torchrun_launch "$GPUS" test.py "$CONFIG" "$CHECKPOINT" -- "$@"
