#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment at .venv.
#
#   torch 2.13.0 first (or the torch already in .venv, e.g. a CUDA build: kept),
#   then mmengine 0.10.7, mmcv 2.1.0 with C++ ops (built from source once; the
#   wheel is cached under $MAVIT_CACHE_DIR, default ~/.cache/mavit-mm), mmdet
#   3.3.0, mmsegmentation 1.2.2, triton, pycocotools, and mavit_mm (editable).
#
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
import torch, mmengine, mmcv, mmcv.ops, mmdet, mmseg, pycocotools, triton, pytest, mavit_mm
PY
}

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$(fingerprint)" ]] && stack_imports; then
    log "environment at .venv is up to date"
    exit 0
fi

if [[ ! -x "$PY" ]]; then
    log "creating virtual environment at .venv"
    "${PYTHON:-python3}" -m venv "$VENV"
fi
# mmcv's build and mmengine's 'mmdet::' config bases import pkg_resources.
pip_install "setuptools<82" wheel ninja

if "$PY" -c "import torch" 2>/dev/null; then
    log "keeping installed torch $("$PY" -c 'import torch; print(torch.__version__)')"
else
    log "installing $TORCH_SPEC"
    pip_install "$TORCH_SPEC"
fi
TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__)')"
# Every later install is constrained to this torch, so nothing can pull another.
CONSTRAINTS="$VENV/torch-constraint.txt"
echo "torch==$TORCH_VERSION" > "$CONSTRAINTS"

log "installing runtime requirements"
pip_install -c "$CONSTRAINTS" -r "$ROOT/requirements/runtime.txt" -r "$ROOT/requirements/tests.txt"
# A CUDA torch brings its own matching triton; only the CPU build needs one.
"$PY" -c "import triton" 2>/dev/null || pip_install -c "$CONSTRAINTS" triton

if "$PY" -c "import mmcv.ops" 2>/dev/null; then
    log "mmcv $MMCV_VERSION with ops already installed"
else
    PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info.major}{sys.version_info.minor}")')"
    WHEEL_DIR="$CACHE_DIR/wheels/mmcv-$MMCV_VERSION-torch$TORCH_VERSION-$PY_TAG"
    mkdir -p "$WHEEL_DIR"
    if ! ls "$WHEEL_DIR"/mmcv-*.whl >/dev/null 2>&1; then
        log "building mmcv $MMCV_VERSION with C++ ops from source (about 20-25 minutes on 2 cores)"
        log "  log: $WHEEL_DIR/build.log; the wheel is cached for later set-ups"
        BUILD_TMP="$(mktemp -d)"
        ( cd "$BUILD_TMP" && MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
            "$PY" -m pip wheel --disable-pip-version-check --no-deps --no-build-isolation \
            -w "$BUILD_TMP" "mmcv==$MMCV_VERSION" > "$WHEEL_DIR/build.log" 2>&1 ) &
        BUILD_PID=$!
        while kill -0 "$BUILD_PID" 2>/dev/null; do
            sleep 60
            log "  still building mmcv ($(grep -c 'Building\|\[[0-9]*/[0-9]*\]' "$WHEEL_DIR/build.log" || true) build steps so far)"
        done
        if ! wait "$BUILD_PID"; then
            tail -n 30 "$WHEEL_DIR/build.log"
            log "mmcv build failed; full log: $WHEEL_DIR/build.log"
            exit 1
        fi
        mv "$BUILD_TMP"/mmcv-*.whl "$WHEEL_DIR"/
        rm -rf "$BUILD_TMP"
    fi
    log "installing cached $(basename "$WHEEL_DIR"/mmcv-*.whl)"
    pip_install --no-deps "$WHEEL_DIR"/mmcv-*.whl
fi

log "installing mmdet 3.3.0, mmsegmentation 1.2.2 and mavit_mm (editable)"
pip_install --no-deps mmdet==3.3.0 mmsegmentation==1.2.2
pip_install --no-deps --no-build-isolation -e "$ROOT"

if ! stack_imports; then
    log "the environment does not import cleanly:"
    "$PY" -c "import torch, mmengine, mmcv.ops, mmdet, mmseg, triton, mavit_mm"
    exit 1
fi
fingerprint > "$STAMP"
log "ready: torch $TORCH_VERSION, $("$PY" -c 'import mmcv, mmdet, mmseg; print(f"mmcv {mmcv.__version__}, mmdet {mmdet.__version__}, mmseg {mmseg.__version__}")')"
