# Sourced by tools/dist_train.sh and tools/dist_test.sh: clear errors for
# settings torchrun would reject with a traceback.
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
