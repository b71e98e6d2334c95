"""How both fused ops (MALA, the depthwise stages) reach their Triton kernels
(:class:`FusedOpDispatch`), and what the kernels need of Triton's runtime (the
CPU interpreter, the supported releases, the launch device, int32 offsets).
Importing this module does not import triton.

``impl`` (``mala_impl``, ``depthwise_impl``) is one of ``FUSED_IMPLS``:

* ``'auto'``: the fused kernels on CUDA where they can run; the plain formula
  off CUDA, silently (nothing better runs there), and on CUDA cases the
  kernels cannot run, with one warning per reason.
* ``'triton'``: the fused kernels, or a clear error saying why not. On CPU
  they run in Triton's interpreter under ``TRITON_INTERPRET=1`` (how CI tests
  them).
* ``'torch'``: the plain formula.

The export policy, the same for both ops: no exported format holds a Triton
kernel, so an ONNX export (either exporter) and ``torch.export`` take the
plain formula whatever ``impl`` says (:func:`exporting`). A plain
``torch.jit.trace`` is mmengine's FLOP counter (mmdet's and mmseg's
get_flops.py): it records what runs, and keeps a fused op only where the
counter has that op's formula, so that a count does not depend on where the op
ran. MALA's is registered (``mala/flops.py``); the depthwise stages have none
and take their plain formula there. ``torch.compile`` keeps the fused ops.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import warnings
from typing import NamedTuple

import torch

from .graph_capture import recording_graph

FUSED_IMPLS = ('auto', 'torch', 'triton')
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


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for launch grids and plans on the host, where Triton's
    own ``triton.cdiv`` (a constexpr function) costs about 1.4 us a call."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """``triton.next_power_of_2(n)`` for ``n >= 1``, on the host (as ``cdiv``)."""
    return 1 << (n - 1).bit_length()


def index_extent(t: torch.Tensor, start_dim: int) -> int:
    """The largest element offset a kernel forms in ``t`` from the first
    element of one slice of its dimensions before ``start_dim`` (the kernels
    take those slices' offsets in int64 and index within one in int32): more
    than the slice's element count for a view into a wider tensor."""
    extent = 0
    for size, stride in zip(t.shape[start_dim:], t.stride()[start_dim:]):
        if size:     # a loop, not sum(...): no generator call per dimension on the launch path
            extent += (size - 1) * abs(stride)
    return extent


def compile_constant(fn):
    """``torch.compiler.assume_constant_result(fn)``: a compile runs ``fn`` as
    Python and takes its result as a constant.

    Marked as that decorator marks it, without its import of Dynamo: about
    0.7 s of the start of every process that imports mavit_mm, where tools,
    config parsing and data workers never compile. (transformers marks its
    compile constants so, for the same reason.) A test checks that the mark is
    the one the public decorator sets on this torch.
    """
    fn._dynamo_marked_constant = True
    return fn


@compile_constant
def exporting() -> bool:
    """Whether an export is tracing: ONNX (either exporter) or ``torch.export``.

    A constant to Dynamo, run as Python: torch 2.11's Dynamo folds
    ``torch.compiler.is_exporting()`` to True in every ``torch.compile`` trace.
    ``torch.export`` sets the flag before it traces, so the constant is right
    there too.
    """
    return torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting()


def on_device(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(device) if device.type == 'cuda' else contextlib.nullcontext()


def refuse_second_derivative(backward_op, what: str, option: str) -> None:
    """Register on a fused op's backward an autograd formula that names the
    way out: the kernels have no second derivative (gradients of gradients,
    ``create_graph=True``), and torch's own error would not say what to do."""
    def refuse(ctx, *grads):
        raise RuntimeError(f'{what} have no second derivative (a gradient of their gradients, '
                           f"as create_graph=True asks): run them on the PyTorch path, {option}='torch'")

    backward_op.register_autograd(refuse, setup_context=lambda ctx, inputs, output: None)


class Unsupported(NamedTuple):
    """Why the fused kernels cannot run a case, and the error ``'triton'`` raises."""
    reason: str
    error: type


class FusedOpDispatch:
    """The part of a fused op's dispatch that both ops share: its ``impl``
    check, the cases that take the plain formula before any check, the device
    check, the lazy import of ``package.function`` (the module that imports
    triton) and the warn-once fallback.

    ``setting`` names the op's ``impl`` argument in messages, ``kernels`` its
    kernels, ``falls_back`` opens its fallback warning; ``counted_when_traced``:
    mmengine's FLOP counter has the fused op's formula (the export policy).
    """

    def __init__(self, package: str, setting: str, kernels: str, falls_back: str,
                 counted_when_traced: bool):
        self.name = package
        self.setting = setting
        self.kernels = kernels
        self.falls_back = falls_back
        self.counted_when_traced = counted_when_traced
        self._function = None           # the function module, once imported
        self._import_error: str | None = None
        self._import_tried = False
        self._warned: set[str] = set()
        _DISPATCHES[package] = self

    def check_impl(self, impl: str) -> str:
        if impl not in FUSED_IMPLS:
            raise ValueError(f'{self.setting} must be one of {FUSED_IMPLS}, got {impl!r}')
        return impl

    def takes_plain_formula(self, impl: str, x: torch.Tensor) -> bool:
        """``'torch'``, an empty input, ``'auto'`` off CUDA, or a trace the
        export policy gives the plain formula: no check needed, nothing to warn."""
        # The settings first (the every-call case of a CPU model), then the
        # traces (an export records one: the cheap check first), then the
        # size: a jit.trace records x.numel() as a tensor.
        return (impl == 'torch' or (impl == 'auto' and x.device.type != 'cuda')
                or (recording_graph() and (
                    exporting() or (not self.counted_when_traced and torch.jit.is_tracing())))
                or x.numel() == 0)

    def device_unsupported(self, device: torch.device, allow_interpreter: bool
                           ) -> Unsupported | None:
        """Why no kernel of the op can run on ``device`` (or triton is
        missing), else ``None``."""
        if device.type != 'cuda' and not (allow_interpreter and triton_interpreter_enabled()):
            return Unsupported(f'tensors are on {device.type}, the Triton kernels need CUDA '
                               '(or TRITON_INTERPRET=1 to run them in the CPU interpreter '
                               f"with {self.setting}='triton')", RuntimeError)
        if device.type == 'cuda' and torch.version.hip is not None:
            return Unsupported('the Triton kernels are written and checked for NVIDIA GPUs '
                               'only, not ROCm', RuntimeError)
        import_error = self.import_error()
        return None if import_error is None else Unsupported(import_error, RuntimeError)

    def import_error(self) -> str | None:
        """Import the function module once; the error text if that fails."""
        return _import_function_module(self.name)

    def function(self):
        """The function module, imported on first use; a RuntimeError where
        triton is not available."""
        import_error = self.import_error()
        if import_error is not None:
            raise RuntimeError(f'{self.kernels} cannot run: {import_error}')
        return self._function

    def fall_back(self, impl: str, unsupported: Unsupported,
                  cause: BaseException | None = None) -> None:
        """A case the kernels cannot run: ``'triton'`` raises its error,
        ``'auto'`` warns once per reason (the caller then takes the plain
        formula)."""
        if impl == 'triton':
            raise unsupported.error(f"{self.setting}='triton' cannot run this case: "
                                    f'{unsupported.reason}') from cause
        if unsupported.reason in self._warned:
            return
        self._warned.add(unsupported.reason)
        # stacklevel: the caller of the op's dispatching entry.
        warnings.warn(f'{self.falls_back} to the PyTorch path: {unsupported.reason}. Pass '
                      f"{self.setting}='torch' to choose it explicitly.", RuntimeWarning,
                      stacklevel=3)

    def _import_once(self) -> str | None:
        if not self._import_tried:
            self._import_tried = True
            try:
                self._function = importlib.import_module('.function', self.name)
            except ImportError as exc:
                self._import_error = f'triton is not available ({exc})'
        return self._import_error


_DISPATCHES: dict[str, FusedOpDispatch] = {}


@compile_constant
def _import_function_module(package: str) -> str | None:
    """A constant to Dynamo (keyed by a string, a constant on every torch
    release): a model compiled before its first eager call runs the import
    when the graph is traced, instead of breaking the graph on an import
    (which Dynamo refuses to trace)."""
    return _DISPATCHES[package]._import_once()


__all__ = ['FUSED_IMPLS', 'SUPPORTED_TRITON', 'FusedOpDispatch', 'Unsupported',
           'check_triton_release', 'compile_constant', 'exporting', 'index_extent', 'on_device',
           'refuse_second_derivative', 'triton_interpreter_enabled']
