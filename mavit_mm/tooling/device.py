"""What the benchmarks record about the machine they ran on, and measure on it
(the checkout's commit is ``devtools.checkout.git_commit``'s: the installed
package assumes no checkout)."""
from __future__ import annotations

import importlib
import platform
from collections.abc import Callable
from pathlib import Path

import torch


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


def cpu_model() -> str | None:
    """The CPU's model name, with the vector ISA torch's kernels dispatch to
    (e.g. ``AMD EPYC, AVX512``): one model name covers CPUs with and without
    AVX-512, and the speed ratios move with it."""
    name = None
    try:
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                name = line.split(':', 1)[1].strip()
                break
    except OSError:
        pass
    name = name or platform.processor() or None
    capability = torch.backends.cpu.get_cpu_capability()
    return f'{name}, {capability}' if name else None


def cuda_peak_extra_bytes(call: Callable[[], object], device: torch.device) -> int:
    """Bytes ``call`` allocates on a CUDA device at its peak, beyond what was
    allocated before it (the caching allocator's own counters)."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    call()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before
