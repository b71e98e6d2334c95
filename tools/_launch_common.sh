# Sourced by tools/dist_{train,test}.sh and tools/slurm_{train,test}.sh: what
# the four launchers share (help, interpreter, checks, the launch itself), so
# that each script only says which tool it starts with which arguments.

# --help / -h: print the calling script's header comment.
show_help_if_asked() {
    if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
        awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
        exit 0
    fi
}

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(dirname "$TOOLS_DIR")"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$REPO_ROOT/.venv/bin/python" ]]; then PYTHON="$REPO_ROOT/.venv/bin/python"; else PYTHON=python; fi
fi

# Clear errors for settings torchrun would reject with a traceback.
check_launch_settings() {
    local name value
    for name in GPUS NNODES; do
        value=${!name}
        if [[ ! "$value" =~ ^[1-9][0-9]*$ ]]; then
            echo "$0: error: ${name/GPUS/GPUS_PER_NODE} must be a positive whole number, got '$value'" >&2
            exit 2
        fi
    done
    for name in NODE_RANK PORT; do
        value=${!name}
        if [[ ! "$value" =~ ^[0-9]+$ ]]; then
            echo "$0: error: $name must be a whole number, got '$value'" >&2
            exit 2
        fi
    done
    if (( NODE_RANK >= NNODES )); then
        echo "$0: error: NODE_RANK=$NODE_RANK must be below NNODES=$NNODES (nodes are numbered 0..NNODES-1)" >&2
        exit 2
    fi
}

# Splits "ARGS... -- EXTRA..." into TOOL_ARGS (before the launcher option)
# and EXTRA_ARGS (the user's options, after it).
split_tool_args() {
    TOOL_ARGS=()
    while [[ $# -gt 0 && "$1" != "--" ]]; do TOOL_ARGS+=("$1"); shift; done
    [[ $# -gt 0 ]] && shift
    EXTRA_ARGS=("$@")
}

# torchrun_launch GPUS_PER_NODE TOOL TOOL_ARGS... -- USER_OPTIONS...: one
# process per GPU (or per CPU slot) on this node; NNODES / NODE_RANK /
# MASTER_ADDR / PORT from the environment.
torchrun_launch() {
    GPUS=$1
    local tool=$2
    shift 2
    split_tool_args "$@"
    NNODES=${NNODES:-1}
    NODE_RANK=${NODE_RANK:-0}
    PORT=${PORT:-29500}
    MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
    check_launch_settings
    PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" \
    exec "$PYTHON" -m torch.distributed.run \
        --nnodes="$NNODES" \
        --node_rank="$NODE_RANK" \
        --master_addr="$MASTER_ADDR" \
        --master_port="$PORT" \
        --nproc_per_node="$GPUS" \
        "$TOOLS_DIR/$tool" "${TOOL_ARGS[@]}" --launcher pytorch ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"}
}

# slurm_launch PARTITION JOB_NAME TOOL TOOL_ARGS... -- USER_OPTIONS...: srun one
# process per GPU; GPUS / GPUS_PER_NODE / CPUS_PER_TASK / SRUN_ARGS from the
# environment.
slurm_launch() {
    local partition=$1 job_name=$2 tool=$3 name value
    shift 3
    split_tool_args "$@"
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
    local -a extra_srun_args
    read -r -a extra_srun_args <<< "${SRUN_ARGS:-}"
    if ! command -v srun > /dev/null; then
        echo "$0: error: srun not found: run this on a Slurm login node (tools/dist_train.sh starts processes without Slurm)" >&2
        exit 127
    fi
    set -x
    PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}" \
    exec srun -p "$partition" \
        --job-name="$job_name" \
        --gres="gpu:$GPUS_PER_NODE" \
        --ntasks="$GPUS" \
        --ntasks-per-node="$GPUS_PER_NODE" \
        --cpus-per-task="$CPUS_PER_TASK" \
        --kill-on-bad-exit=1 \
        ${extra_srun_args[@]+"${extra_srun_args[@]}"} \
        "$PYTHON" -u "$TOOLS_DIR/$tool" "${TOOL_ARGS[@]}" --launcher=slurm ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"}
}
