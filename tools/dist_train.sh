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

usage() {  # the comment block above
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
}
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    usage
    exit 0
fi
if [[ $# -lt 2 ]]; then
    echo "usage: $0 CONFIG GPUS_PER_NODE [train.py options...]  (--help for more)" >&2
    exit 2
fi
CONFIG=$1
GPUS=$2
shift 2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$TOOLS_DIR")"
source "$TOOLS_DIR/_launch_checks.sh"
check_launch_settings
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then PYTHON="$REPO_ROOT/.venv/bin/python"; else PYTHON=python; fi
fi

PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" \
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" \
    --node_rank="$NODE_RANK" \
    --master_addr="$MASTER_ADDR" \
    --master_port="$PORT" \
    --nproc_per_node="$GPUS" \
    "$TOOLS_DIR/train.py" "$CONFIG" --launcher pytorch "$@"
