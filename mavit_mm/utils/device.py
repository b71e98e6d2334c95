"""What the benchmarks record about the machine they ran on."""
from __future__ import annotations

import platform
from pathlib import Path

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
