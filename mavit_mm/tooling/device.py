"""What the benchmarks record about the machine they ran on, and measure on it."""
from __future__ import annotations

import importlib
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[2]


def device_name(device: torch.device) -> str:
    """The GPU's name, or ``cpu <model name>`` (from /proc/cpuinfo where there is one)."""
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f'cpu {cpu_model() or platform.machine()}'


def library_versions() -> dict[str, str]:
    """Python's and the stack's versions, for results files."""
    found = dict(python=platform.python_version())
    for name in ('torch', 'mmengine', 'mmcv', 'mmdet', 'mmseg', 'triton'):
        try:
            found[name] = importlib.import_module(name).__version__
        except ImportError:
            pass
    return found


def git_commit(repo_root: Path = REPO_ROOT) -> str | None:
    """The checkout's short commit, ``+changes`` when tracked files differ from it."""
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=repo_root,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                               cwd=repo_root, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ('+changes' if dirty.stdout.strip() else '') or None
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str | None:
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cuda_peak_extra_bytes(call: Callable[[], object], device: torch.device) -> int:
    """Bytes ``call`` allocates on a CUDA device at its peak, beyond what was
    allocated before it (the caching allocator's own counters)."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    call()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before
