"""What both fused ops (MALA, the depthwise stages) need of Triton's runtime:
whether kernels run in the CPU interpreter, the Triton releases they support,
the device a launch goes to, and whether an export is tracing (no exported
format holds a Triton kernel). Importing this module does not import triton.
"""
from __future__ import annotations

import contextlib
import os

import torch

# setup.py's 'triton' extra says the same.
SUPPORTED_TRITON = ('3.2', '3.10')   # [lowest, first unsupported)


def triton_interpreter_enabled() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET)."""
    # The values Triton itself reads as true (its knobs' env_bool), so this and
    # Triton never disagree.
    return os.environ.get('TRITON_INTERPRET', '0').strip().lower() in (
        '1', 'true', 'yes', 'on', 'y')


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split('.')[:2]
    return int(major), int(''.join(ch for ch in minor if ch.isdigit()) or 0)


def check_triton_release() -> None:
    """ImportError outside the supported releases: each op's function module
    calls it before importing its kernels, so ``impl='auto'`` keeps the
    PyTorch path and ``impl='triton'`` says why it cannot run."""
    import triton
    if not _release(SUPPORTED_TRITON[0]) <= _release(triton.__version__) < _release(
            SUPPORTED_TRITON[1]):
        raise ImportError(f'triton {triton.__version__} is outside the versions the fused '
                          f'kernels support (>={SUPPORTED_TRITON[0]},<{SUPPORTED_TRITON[1]})')


def index_extent(t: torch.Tensor, start_dim: int) -> int:
    """The largest element offset a kernel forms in ``t`` from the first
    element of one slice of its dimensions before ``start_dim`` (the kernels
    take those slices' offsets in int64 and index within one in int32): more
    than the slice's element count for a view into a wider tensor."""
    return sum((size - 1) * abs(stride)
               for size, stride in zip(t.shape[start_dim:], t.stride()[start_dim:]) if size)


@torch.compiler.assume_constant_result
def exporting() -> bool:
    """Whether an export is tracing: ONNX (either exporter) or ``torch.export``.

    Run as Python, a constant to Dynamo, not traced: torch 2.11's Dynamo folds
    ``torch.compiler.is_exporting()`` to True in every ``torch.compile`` trace
    (2.13 reads the flag), which sent compiled models down the PyTorch paths
    (benchmarks/results/gpu-h100-2026-11-27). ``torch.export`` sets the flag
    before it traces, so the constant is right there too.
    """
    return torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting()


def on_device(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(device) if device.type == 'cuda' else contextlib.nullcontext()


__all__ = ['SUPPORTED_TRITON', 'check_triton_release', 'exporting', 'index_extent', 'on_device',
           'triton_interpreter_enabled']
