"""The GPU check, run from the repository root on a GPU machine, one part per
command (``--help`` says what it does; docs/gpu.md, "Running the GPU check",
how to run it):

    python3 benchmarks/gpu_check.py --part N --commit SHA --out DIR
    python3 benchmarks/gpu_check.py --dry-run     # no GPU: the plan and its checks

Its code is the package ``benchmarks/gpu_check_lib/``.
"""
import sys
from pathlib import Path

# Run as a script, sys.path[0] is benchmarks/: the package imports from the root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.gpu_check_lib.runner import main  # noqa: E402

if __name__ == '__main__':
    sys.exit(main())
