#!/usr/bin/env bash
# Download the wheels a bare GPU machine needs for benchmarks/gpu_check.py,
# for CPython 3.12 on manylinux x86-64 (the machine itself has no network).
# It has torch (CUDA), triton, numpy, pytest, timm, opencv, matplotlib, rich
# and pyyaml; what is missing is mmengine and its small pure-Python needs.
#
#   bash scripts/gpu_wheels.sh [DEST]          # default DEST: .whl
#
# There, before running the check:
#   python3 -m pip install --no-index --no-deps --target /tmp/site DEST/*.whl
#   export PYTHONPATH=/tmp/site
set -euo pipefail
dest="${1:-.whl}"
mkdir -p "$dest"
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$dest" \
    mmengine==0.10.7 addict termcolor yapf platformdirs
ls -1 "$dest"
