#!/usr/bin/env bash
# The wheels a bare GPU machine needs for benchmarks/gpu_check.py, for CPython
# 3.12 on manylinux x86-64 (the machine itself has no network). It has torch
# (CUDA), triton, numpy, scipy, regex, pytest, timm, opencv, matplotlib, rich
# and pyyaml; what is missing:
# - mmengine and its small pure-Python needs;
# - for UperNet and Swin from mmseg (gpu_check's upernet-fps step): mmseg
#   1.2.2 and its small needs, and mmcv 2.1.0 built here WITHOUT its C++ ops
#   (MMCV_WITH_OPS=0; its setup.py then names it mmcv-lite, a py3-none-any
#   wheel), with scripts/mmcv_ext_stub.py as mmcv/_ext.py: `import mmcv.ops`
#   works, and a call of an op raises "mmcv was built without its C++ ops".
#   mmdet is not needed (mmseg imports it only where it is there).
# regex is in the machine's image; its cp312 wheel travels anyway (0.8 MB),
# so mmseg's tokenizer import never depends on the image. setuptools<82 too:
# mmengine finds mmseg's config bases ('mmseg::') with pkg_resources, which
# setuptools 82 dropped (requirements/constraints.txt), and the image's
# setuptools is not pinned.
#
#   bash scripts/gpu_wheels.sh [DEST]          # default DEST: .whl (git ignores it)
#   bash scripts/gpu_wheels.sh --help          # this text
#
# Building mmcv needs torch (its setup.py imports it): PYTHON (default
# .venv/bin/python, as scripts/setup.sh makes it) runs that build, under
# requirements/constraints.txt (setuptools<82: mmcv's setup.py needs
# pkg_resources).
#
# The GPU machine gets the tree with DEST carried beside it (the device tool's
# `carry`: .whl is ignored by git, so name it), about 6 MB. There, first in
# every command (a machine may be fresh each time):
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
# (docs/gpu.md, "Running the GPU check", has the whole commands.)
set -euo pipefail
case "${1:-}" in
    -h|--help)   # the comment above is the help
        sed -n '2,/^set -euo pipefail/{/^set -euo pipefail/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
        exit 0 ;;
    -*) echo "gpu_wheels.sh: unknown option $1 (usage: bash scripts/gpu_wheels.sh [DEST]; --help)" >&2
        exit 2 ;;
esac
if [[ $# -gt 1 ]]; then
    echo "gpu_wheels.sh: takes one DEST folder, got $# arguments (--help)" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-.whl}"
py="${PYTHON:-$root/.venv/bin/python}"
mkdir -p "$dest"
python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -d "$dest" \
    mmengine==0.10.7 addict termcolor yapf platformdirs \
    mmsegmentation==1.2.2 prettytable==3.18.0 wcwidth==0.9.4 ftfy==6.3.1 regex==2026.11.19 \
    setuptools==81.0.0

# mmcv 2.1.0 without C++ ops, the stub as mmcv/_ext.py (packaged with mmcv/).
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
"$py" -m pip download --quiet --disable-pip-version-check --no-deps --no-binary=:all: \
    --no-build-isolation -c "$root/requirements/constraints.txt" -d "$build" mmcv==2.1.0
tar xzf "$build"/mmcv-2.1.0.tar.gz -C "$build"
cp "$root/scripts/mmcv_ext_stub.py" "$build/mmcv-2.1.0/mmcv/_ext.py"
rm -f "$dest"/mmcv_lite-*.whl
MMCV_WITH_OPS=0 "$py" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    --no-build-isolation -c "$root/requirements/constraints.txt" -w "$dest" "$build/mmcv-2.1.0"
"$py" - "$dest" <<'EOF'
import glob, sys, zipfile
wheels = glob.glob(f'{sys.argv[1]}/mmcv_lite-2.1.0-*.whl')
assert len(wheels) == 1, wheels
names = zipfile.ZipFile(wheels[0]).namelist()
assert wheels[0].endswith('py3-none-any.whl'), f'{wheels[0]}: not a pure Python wheel'
assert 'mmcv/_ext.py' in names, 'the _ext stub is not in the wheel'
assert not any(name.endswith('.so') for name in names), 'the wheel has compiled ops'
print(f'{wheels[0]}: pure Python, mmcv/_ext.py is the stub')
EOF
ls -1 "$dest"
