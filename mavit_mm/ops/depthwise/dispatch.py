"""Which path runs a depthwise stage: the fused Triton op or the plain formula.

``impl`` (the backbone's ``depthwise_impl``), as ``mala_impl`` for MALA:

* ``'auto'``: the fused kernels on CUDA where they can run; the plain formula
  off CUDA, silently, and on CUDA cases the kernels cannot run, with one
  warning per reason.
* ``'triton'``: the fused kernels, or a clear error saying why not. On CPU
  they run in Triton's interpreter under ``TRITON_INTERPRET=1`` (how CI tests
  them).
* ``'torch'``: the plain formula.

Exporting (ONNX, TorchScript tracing, ``torch.export``) takes the plain
formula whatever ``impl`` says: no exported format holds a Triton kernel.
"""
from __future__ import annotations

import importlib
import warnings

import torch

from ..triton_support import exporting, index_extent, triton_interpreter_enabled
from .reference import ffn_middle_reference, gated_lepe_reference, position_norm_reference

DEPTHWISE_IMPLS = ('auto', 'torch', 'triton')
KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_NORM_CHANNELS = 4096          # the norm holds a pixel's channels in one program

_function = None
_import_error: str | None = None
_import_tried = False
_warned: set[str] = set()


def check_depthwise_impl(impl: str) -> str:
    if impl not in DEPTHWISE_IMPLS:
        raise ValueError(f'depthwise_impl must be one of {DEPTHWISE_IMPLS}, got {impl!r}')
    return impl


@torch.compiler.assume_constant_result
def _triton_unavailable() -> str | None:
    """Import the op module once; the error text if that fails (a constant to
    Dynamo, as for MALA: a fresh process may compile before any eager call)."""
    global _function, _import_error, _import_tried
    if not _import_tried:
        _import_tried = True
        try:
            _function = importlib.import_module('.function', __package__)
        except ImportError as exc:
            _import_error = f'triton is not available ({exc})'
    return _import_error


def kernels_unsupported(x: torch.Tensor, *others: torch.Tensor, weight: torch.Tensor,
                        allow_interpreter: bool, norm_channels: int | None = None
                        ) -> tuple[str, type] | None:
    """``None`` when the fused kernels can run this case, else ``(why not,
    the error 'triton' raises)``."""
    device = x.device
    if device.type != 'cuda' and not (allow_interpreter and triton_interpreter_enabled()):
        return (f'tensors are on {device.type}, the Triton kernels need CUDA (or '
                "TRITON_INTERPRET=1 to run them in the CPU interpreter with "
                "depthwise_impl='triton')", RuntimeError)
    if device.type == 'cuda' and torch.version.hip is not None:
        return 'the Triton kernels are written and checked for NVIDIA GPUs only', RuntimeError
    import_error = _triton_unavailable()
    if import_error is not None:
        return import_error, RuntimeError
    for t in (x, *others):
        if t.dtype not in KERNEL_DTYPES:
            return f'dtype {t.dtype} is not supported (float16, bfloat16 or float32)', ValueError
        if t.device != device:
            return f'the maps must share one device, got {device} and {t.device}', ValueError
    if weight.dim() != 4 or weight.shape[1] != 1 or weight.shape[-1] % 2 == 0 \
            or weight.shape[-1] != weight.shape[-2]:
        return (f'the weight must be a depthwise (C, 1, k, k) kernel of odd k, got '
                f'{tuple(weight.shape)}', ValueError)
    if norm_channels is not None and norm_channels > MAX_NORM_CHANNELS:
        return (f'{norm_channels} channels: the fused norm holds at most '
                f'{MAX_NORM_CHANNELS}', ValueError)
    # Per image: v and the gate, slices of the qkvo map, reach 4x their own size.
    widest = max(index_extent(t, 1) for t in (x, *others))
    if widest >= 2 ** 31:
        return (f'a map reaching {widest} elements past its image\'s first: the kernels index '
                'an image in int32', ValueError)
    return None


def kernels_run(impl: str, x: torch.Tensor, *others: torch.Tensor, weight: torch.Tensor,
                norm_channels: int | None = None) -> bool:
    """Whether the fused op runs (see the module docstring); raises under
    ``'triton'`` where it cannot."""
    if impl == 'torch' or (impl == 'auto' and x.device.type != 'cuda'):
        return False
    if torch.jit.is_tracing() or exporting():
        return False
    if x.numel() == 0:
        return False
    unsupported = kernels_unsupported(x, *others, weight=weight,
                                      allow_interpreter=impl == 'triton',
                                      norm_channels=norm_channels)
    if unsupported is None:
        return True
    reason, error = unsupported
    if impl == 'triton':
        raise error(f"depthwise_impl='triton' cannot run this case: {reason}")
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(f'the depthwise stages fall back to the PyTorch path: {reason}. Pass '
                      "depthwise_impl='torch' to choose it explicitly.", RuntimeWarning,
                      stacklevel=3)
    return False


def position_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                  norm_weight: torch.Tensor, norm_bias: torch.Tensor, eps: float,
                  impl: str = 'auto') -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + dwconv(x) + b, LN(x + dwconv(x) + b))``
    (:func:`.reference.position_norm_reference`)."""
    if kernels_run(impl, x, weight=weight, norm_channels=x.shape[1]):
        return fused_position_norm(x, tap_major(weight), bias, norm_weight, norm_bias, eps)
    return position_norm_reference(x, weight, bias, norm_weight, norm_bias, eps)


def gated_lepe(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               attention: torch.Tensor, gate: torch.Tensor, impl: str = 'auto') -> torch.Tensor:
    """``gate * (attention + dwconv(v) + b)`` (:func:`.reference.gated_lepe_reference`)."""
    if kernels_run(impl, v, attention, gate, weight=weight):
        return fused_gated_lepe(v, tap_major(weight), bias, attention, gate)
    return gated_lepe_reference(v, weight, bias, attention, gate)


def ffn_middle(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
               impl: str = 'auto') -> torch.Tensor:
    """``GELU(h) + dwconv(GELU(h)) + b`` (:func:`.reference.ffn_middle_reference`)."""
    if kernels_run(impl, h, weight=weight):
        return fused_ffn_middle(h, tap_major(weight), bias)
    return ffn_middle_reference(h, weight, bias)


def tap_major(weight: torch.Tensor) -> torch.Tensor:
    """A depthwise ``(C, 1, k, k)`` kernel as the fused ops read it fastest:
    ``(k * k, C)``, each tap's channels contiguous, so that the kernels read a
    tap in one vector load (a copy; the model keeps it while no gradient
    flows, switch ``tap_major_weights``: ``models.layers.CachedCastConv2d.depthwise_taps``)."""
    return tap_view(weight).contiguous()


def tap_view(weight: torch.Tensor) -> torch.Tensor:
    """The same ``(k * k, C)`` as a view of the parameter, no copy: the
    kernels then read a tap one channel a load, at stride ``k * k``."""
    return weight.reshape(weight.shape[0], -1).t()


# The fused ops themselves, for a caller that has asked kernels_run (the
# model, whose own modules are its fallback), with the kernel tap-major.

def fused_position_norm(x, taps, bias, norm_weight, norm_bias, eps: float):
    stream, normed, _, _ = _function.position_norm_op(x, taps, bias, norm_weight, norm_bias,
                                                      float(eps))
    return stream, normed


def fused_gated_lepe(v, taps, bias, attention, gate):
    keep_sum = torch.is_grad_enabled() and any(
        t.requires_grad for t in (v, taps, bias, attention, gate))
    return _function.gated_lepe_op(v, taps, bias, attention, gate, keep_sum)[0]


def fused_ffn_middle(h, taps, bias):
    return _function.ffn_middle_op(h, taps, bias)
