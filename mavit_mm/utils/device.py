"""What the benchmarks record about the machine they ran on, and measure on it."""
from __future__ import annotations

import platform
from pathlib import Path
from typing import Callable

import torch


def device_name(device: torch.device) -> str:
    """The GPU's name, or ``cpu <model name>`` (from /proc/cpuinfo where there is one)."""
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f'cpu {cpu_model() or platform.machine()}'


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
