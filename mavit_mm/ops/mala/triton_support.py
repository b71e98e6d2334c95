"""The Triton releases the fused MALA kernels support, checked on import.

Imported before the kernels: outside the supported releases the import fails
with the reason, so ``impl='auto'`` keeps the PyTorch path and
``impl='triton'`` says why it cannot run.
"""
from __future__ import annotations

import contextlib

import torch
import triton

# setup.py's 'triton' extra says the same.
SUPPORTED_TRITON = ('3.2', '3.10')   # [lowest, first unsupported)


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split('.')[:2]
    return int(major), int(''.join(ch for ch in minor if ch.isdigit()) or 0)


if not _release(SUPPORTED_TRITON[0]) <= _release(triton.__version__) < _release(
        SUPPORTED_TRITON[1]):
    raise ImportError(f'triton {triton.__version__} is outside the versions the fused MALA '
                      f'kernels support (>={SUPPORTED_TRITON[0]},<{SUPPORTED_TRITON[1]})')

try:  # where Triton raises it when a compiled kernel needs more than the GPU has
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - older layouts
    from triton.runtime.autotuner import OutOfResources



def on_device(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(device) if device.type == 'cuda' else contextlib.nullcontext()


__all__ = ['SUPPORTED_TRITON', 'OutOfResources', 'on_device']
