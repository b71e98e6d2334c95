#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment at .venv.
#
#   torch 2.13.0 first (or the torch already in .venv, e.g. a CUDA build: kept),
#   then mmengine 0.10.7, mmcv 2.1.0 with C++ ops (built from source once, in
#   the background while the other requirements download and install; the
#   wheel is cached under $MAVIT_CACHE_DIR, default ~/.cache/mavit-mm), mmdet
#   3.3.0, mmsegmentation 1.2.2, triton, pycocotools, mmdeploy 1.3.1 with onnx and
#   onnxruntime (requirements/deploy.txt), and mavit_mm (editable).
#
# Every pip call runs under one constraints file: the torch pin plus
# requirements/constraints.txt (setuptools>=77,<82, for pkg_resources).
# Idempotent: when nothing it depends on changed, a second run takes seconds.
# Environment: PYTHON (interpreter for the venv, default python3),
# TORCH_SPEC (default torch==2.13.0), MAVIT_CACHE_DIR, MAX_JOBS (mmcv build).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
CACHE_DIR="${MAVIT_CACHE_DIR:-$HOME/.cache/mavit-mm}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
MMCV_VERSION=2.1.0
STAMP="$VENV/.mavit-setup-stamp"

log() { printf '[setup] %s\n' "$*"; }
# pip's status survives the filter (pipefail; the filter itself never fails).
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@" 2>&1 | { grep -v "is ignored" || true; }; }

fingerprint() {
    cat "$ROOT/scripts/setup.sh" "$ROOT/setup.py" "$ROOT"/requirements/*.txt | sha256sum | cut -d' ' -f1
}

stack_imports() {
    "$PY" - <<'PY' 2>/dev/null
import pkg_resources, torch, mmengine, mmcv, mmcv.ops, mmdet, mmseg, pycocotools, triton, pytest, xdist, filelock, importlinter, onnx, onnxruntime, onnxscript, mmdeploy.apis, mavit_mm
PY
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(fingerprint)" ]] && stack_imports; then
    log "environment at .venv is up to date"
    exit 0
fi

# Python 3.10 to 3.12: mmcv 2.1.0 and mmdet 3.3.0 need numpy<2, which has no
# wheels for 3.13; torch 2.13 needs 3.10 or newer.
if [[ -x "$PY" ]]; then
    VENV_PYTHON="$PY" REMEDY="remove .venv, then name another with PYTHON=..."
else
    VENV_PYTHON="${PYTHON:-python3}" REMEDY="name another with PYTHON=..."
fi
if ! "$VENV_PYTHON" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null; then
    log "$VENV_PYTHON is $("$VENV_PYTHON" -V 2>/dev/null || echo 'not a Python that runs'):" \
        "this project needs Python 3.10, 3.11 or 3.12; $REMEDY (docs/installation.md)"
    exit 1
fi

if [[ ! -x "$PY" ]]; then
    log "creating virtual environment at .venv"
    "${PYTHON:-python3}" -m venv "$VENV"
fi

# One constraints file for every pip call below: the torch pin (the torch
# already in .venv, e.g. a CUDA build, or $TORCH_SPEC) plus
# requirements/constraints.txt (setuptools>=77,<82). torch 2.13 needs
# setuptools>=77 and would otherwise pull one without pkg_resources.
CONSTRAINTS="$VENV/mavit-constraints.txt"
if "$PY" -c "import torch" 2>/dev/null; then
    TORCH_PIN="torch==$("$PY" -c 'import torch; print(torch.__version__)')"
else
    TORCH_PIN="$TORCH_SPEC"
fi
{ echo "$TORCH_PIN"; cat "$ROOT/requirements/constraints.txt"; } > "$CONSTRAINTS"
pip_c() { pip_install -c "$CONSTRAINTS" "$@"; }

pip_c setuptools wheel ninja
if "$PY" -c "import torch" 2>/dev/null; then
    log "keeping installed $TORCH_PIN"
else
    log "installing $TORCH_SPEC"
    pip_c "$TORCH_SPEC"
fi
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"

"$PY" -c "import pkg_resources" 2>/dev/null || {
    log "setuptools $("$PY" -c 'import setuptools; print(setuptools.__version__)') has no pkg_resources"
    exit 1
}

# Prints the mmcv build's progress every 30 s: ninja's [N/M] compile steps and
# an estimate of the time left from the compile rate so far. pip -v indents
# the build's output, hence the leading blanks in the pattern.
watch_build() {
    local pid=$1 log_file=$2 start=$SECONDS compile_start="" step total elapsed eta
    while kill -0 "$pid" 2>/dev/null; do
        sleep 30
        kill -0 "$pid" 2>/dev/null || break
        elapsed=$((SECONDS - start))
        step="" total=""
        read -r step total < <(grep -oE '^[[:space:]]*\[[0-9]+/[0-9]+\]' "$log_file" | tail -n 1 \
            | tr -d '[] ' | tr '/' ' ') || true
        if [[ -n "$step" && -n "$total" && "$step" -gt 0 ]]; then
            # the rate counts from the first compile step seen, not from pip's download/prepare
            [[ -n "$compile_start" ]] || compile_start=$((SECONDS - 30))
            eta=$(( (SECONDS - compile_start) * (total - step) / step ))
            log "  mmcv build: compiled $step/$total, $((elapsed / 60))m$((elapsed % 60))s so far, about $((eta / 60))m$((eta % 60))s left"
        else
            log "  mmcv build: preparing the sources (no compile step yet), $((elapsed / 60))m$((elapsed % 60))s so far"
        fi
    done
}

# mmcv with its C++ ops: the cached wheel, or a build from source that runs in
# the background while the other requirements download and install (the
# build needs only torch, setuptools and ninja, installed above; numpy
# first, so that the build's torch import never meets a half-installed one).
BUILD_PID="" WATCH_PID="" MMCV_INSTALLED=""
if "$PY" -c "import mmcv.ops" 2>/dev/null; then
    MMCV_INSTALLED=1
    log "mmcv $MMCV_VERSION with ops already installed"
else
    PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info.major}{sys.version_info.minor}")')"
    WHEEL_DIR="$CACHE_DIR/wheels/mmcv-$MMCV_VERSION-torch$TORCH_VERSION-$PY_TAG"
    mkdir -p "$WHEEL_DIR"
    if ! ls "$WHEEL_DIR"/mmcv-*.whl >/dev/null 2>&1; then
        pip_c "numpy<2"
        JOBS="${MAX_JOBS:-$(nproc)}"
        log "building mmcv $MMCV_VERSION with C++ ops from source ($JOBS jobs; about 11 minutes on 2 cores)"
        log "  log: $WHEEL_DIR/build.log; the wheel is cached for later set-ups"
        BUILD_TMP="$(mktemp -d)"
        # -v passes ninja's [N/M] lines into the log; .venv/bin on PATH lets
        # torch's extension builder find the ninja installed above.
        ( cd "$BUILD_TMP" && PATH="$VENV/bin:$PATH" MMCV_WITH_OPS=1 MAX_JOBS="$JOBS" \
            "$PY" -m pip wheel -v --disable-pip-version-check --no-cache-dir --no-deps \
            --no-build-isolation -c "$CONSTRAINTS" -w "$BUILD_TMP" "mmcv==$MMCV_VERSION" \
            > "$WHEEL_DIR/build.log" 2>&1 ) &
        BUILD_PID=$!
        watch_build "$BUILD_PID" "$WHEEL_DIR/build.log" &
        WATCH_PID=$!
        trap '[[ -z "$BUILD_PID" ]] || kill "$BUILD_PID" "$WATCH_PID" 2>/dev/null || true' EXIT
    fi
fi

log "installing runtime requirements${BUILD_PID:+ (while mmcv builds)}"
pip_c -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt" \
    -r "$ROOT/requirements/deploy.txt"
# A CUDA torch brings its own matching triton; only the CPU build needs one.
"$PY" -c "import triton" 2>/dev/null || pip_c triton

if [[ -n "$BUILD_PID" ]]; then
    [[ -z "$(jobs -rp | grep -x "$BUILD_PID")" ]] || log "requirements installed; waiting for the mmcv build"
    if ! wait "$BUILD_PID"; then
        BUILD_PID=""
        tail -n 30 "$WHEEL_DIR/build.log"
        log "mmcv build failed; full log: $WHEEL_DIR/build.log"
        exit 1
    fi
    BUILD_PID=""
    kill "$WATCH_PID" 2>/dev/null || true
    mv "$BUILD_TMP"/mmcv-*.whl "$WHEEL_DIR"/
    rm -rf "$BUILD_TMP"
fi
if [[ -z "$MMCV_INSTALLED" ]]; then
    log "installing cached $(basename "$WHEEL_DIR"/mmcv-*.whl)"
    pip_c --no-deps "$WHEEL_DIR"/mmcv-*.whl
fi

log "installing mmdet 3.3.0, mmsegmentation 1.2.2, mmdeploy 1.3.1 and mavit_mm (editable)"
# mmdeploy without its protobuf<=3.20.2 pin (requirements/deploy.txt says why).
pip_c --no-deps mmdet==3.3.0 mmsegmentation==1.2.2 mmdeploy==1.3.1
pip_c --no-deps --no-build-isolation -e "$ROOT"

if ! stack_imports; then
    log "the environment does not import cleanly:"
    "$PY" -c "import pkg_resources, torch, mmengine, mmcv.ops, mmdet, mmseg, triton, onnx, onnxruntime, mmdeploy.apis, mavit_mm"
    exit 1
fi
fingerprint > "$STAMP"
log "ready: torch $TORCH_VERSION, $("$PY" -c 'import mmcv, mmdet, mmseg; print(f"mmcv {mmcv.__version__}, mmdet {mmdet.__version__}, mmseg {mmseg.__version__}")')"
