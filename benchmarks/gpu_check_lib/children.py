"""The GPU check's child processes (the tests, bench_mala.py, tune_mala.py,
benchmark_fps.py: each killed at its step's budget, its output appended to
the one log of the part) and the results files it writes."""
from __future__ import annotations

import importlib.util
import subprocess
import time
from pathlib import Path

from mavit_mm.tooling.results_file import write_json

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_child(command: list[str], budget_s: float, log: Path) -> dict:
    """Run ``command`` in the repository, killed at ``budget_s``; its output is
    appended to ``log`` either way."""
    started = time.time()
    try:
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=budget_s)
        output, returncode, timed_out = result.stdout + result.stderr, result.returncode, False
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        returncode, timed_out = None, True
        output += f'\n[gpu_check] killed at its budget of {budget_s:.0f} s\n'
    with log.open('a') as handle:   # one log for all steps: few files come back from a GPU
        handle.write(f'\n===== {" ".join(command)}\n{output}')
    return dict(returncode=returncode, timed_out=timed_out, output=output,
                seconds=round(time.time() - started, 1), log=log.name)


def _text(data) -> str:
    if data is None:
        return ''
    return data.decode(errors='replace') if isinstance(data, bytes) else data


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def write_results(path: Path, data) -> None:
    write_json(path, data, default=str)
