"""What an eager forward costs the host, counted without a clock: Python calls.

Why: on a GPU the eager backbone is host-bound. MAViT-T's eager bf16 forward
at 512x2048 took 19.7 ms on an H100 for 2.9 ms of GPU work, Swin-T's 14.2 ms
(``benchmarks/results/gpu-h100-2026-11-27b/part-2/backbones.json``), although
MAViT-T dispatches fewer aten ops (the op census). The difference is Python:
the GPU check's profile counted 17,479 Python calls in one MAViT-T forward
against Swin-T's 3,830 (``gpu-h200-2026-11-27/part-1/model-profile.json``).
Each is a fraction of a microsecond, and they add up to milliseconds.

This module is the one home of that count. :func:`cuda_path_on_cpu` runs the
host code that CUDA runs, on CPU tensors: the fused ops' dispatch, custom ops
and launch arithmetic (``mala_impl`` / ``depthwise_impl='triton'``, whose
device check is told that the interpreter may run them), the 1x1
convolutions as matrix products, and the kernels replaced by stubs that only
count their launches (so their outputs are uninitialised memory: count, do
not compare). Not counted: Triton's own launch path (its binder and the
driver's launcher; ``benchmarks/mala_host_overhead.py`` times it with a stub
driver), and what only CUDA does on the host (the caching allocator, the
stream).

:func:`count_python_calls` counts the calls a function makes, as
``sys.setprofile`` sees them: every Python function entered (a generator
step included) and every builtin called. ``issued`` is the share the
package's own code makes, the part its changes move: calls whose caller is a
frame of ``mavit_mm`` code, and the package's functions themselves.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from unittest import mock

import torch


@dataclass
class PythonCalls:
    """The calls of one call of a function (module docstring)."""
    total: int       # every Python function entered and builtin called
    issued: int      # those made by mavit_mm's code, and mavit_mm's functions entered


def count_python_calls(fn: Callable[[], object]) -> PythonCalls:
    """Call ``fn()`` once, counting its calls (on this thread). Not under
    another profiler (cProfile): ``sys.setprofile`` holds one at a time."""
    import mavit_mm
    package = os.path.dirname(os.path.abspath(mavit_mm.__file__)) + os.sep
    total = issued = 0

    def profile(frame, event, arg):
        nonlocal total, issued
        if event == 'call':
            total += 1
            caller = frame.f_back
            if frame.f_code.co_filename.startswith(package) or (
                    caller is not None and caller.f_code.co_filename.startswith(package)):
                issued += 1
        elif event == 'c_call' and arg is not sys.setprofile:   # (the count's own end)
            total += 1
            if frame.f_code.co_filename.startswith(package):
                issued += 1

    if sys.getprofile() is not None:
        raise RuntimeError('count_python_calls needs sys.setprofile to itself: another '
                           'profiler is running')
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return PythonCalls(total, issued)


class KernelStub:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args, **meta)``
    counts the launch and runs nothing."""

    def __init__(self, name: str):
        self.name = name
        self.launches = 0

    def __getitem__(self, grid):
        return self._launch

    def _launch(self, *args, **meta):
        self.launches += 1


@dataclass
class StubbedLaunches:
    """The stubs :func:`cuda_path_on_cpu` put in place of the kernels."""
    stubs: dict[str, KernelStub]

    @property
    def count(self) -> int:
        return sum(stub.launches for stub in self.stubs.values())


@contextlib.contextmanager
def cuda_path_on_cpu() -> Iterator[StubbedLaunches]:
    """Inside, a MAViT built with ``mala_impl='triton'`` and
    ``depthwise_impl='triton'`` runs CUDA's host code on CPU tensors, its
    kernels stubbed (module docstring). Needs triton (the fused ops' modules
    import it)."""
    import mavit_mm.ops.pointwise_conv as pointwise_conv
    from mavit_mm.ops import fast_paths, triton_support
    from mavit_mm.ops.depthwise.dispatch import DEPTHWISE_DISPATCH
    from mavit_mm.ops.mala.dispatch import MALA_DISPATCH

    stubs = {}
    with contextlib.ExitStack() as patches:
        for dispatch in (MALA_DISPATCH, DEPTHWISE_DISPATCH):
            kernels = dispatch.function().kernels
            for name in [name for name in vars(kernels) if name.endswith('_kernel')]:
                stubs[name] = KernelStub(name)
                patches.enter_context(mock.patch.object(kernels, name, stubs[name]))
        # As on CUDA: the device check lets CPU tensors through, a
        # channels_last 1x1 convolution is a matrix product, and a switch
        # set to 'cpu' is off.
        patches.enter_context(mock.patch.object(triton_support, 'triton_interpreter_enabled',
                                                lambda: True))
        # (create: a --package-root checkout may be older than the condition)
        patches.enter_context(mock.patch.object(fast_paths, 'CPU_DEVICE_TYPE', 'cuda',
                                                create=True))
        patches.enter_context(mock.patch.object(pointwise_conv, 'runs_as_matmul',
                                                _runs_as_matmul_on_cuda))
        yield StubbedLaunches(stubs)


def eager_pass(model: torch.nn.Module, image: torch.Tensor, which: str) -> Callable[[], None]:
    """One eager pass of ``model`` on ``image`` in bf16 autocast, the model
    put in its mode: ``'forward'``, eval under ``no_grad``; ``'train'``,
    training mode, forward and backward of the outputs' mean squares."""
    if which == 'forward':
        model.eval()

        def run():
            with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
                model(image)
        return run
    if which != 'train':
        raise ValueError(f"a pass is 'forward' or 'train', got {which!r}")
    model.train()

    def run():
        with torch.autocast('cpu', dtype=torch.bfloat16):
            outputs = model(image)
        sum(out.float().square().mean() for out in outputs).backward()
    return run


def _runs_as_matmul_on_cuda(x: torch.Tensor) -> bool:
    return x.is_contiguous(memory_format=torch.channels_last) and x.numel() > 0


__all__ = ['KernelStub', 'PythonCalls', 'StubbedLaunches', 'count_python_calls',
           'cuda_path_on_cpu', 'eager_pass']
