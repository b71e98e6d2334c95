"""Which path runs a depthwise stage: the fused Triton op or the plain formula.

``impl`` (the backbone's ``depthwise_impl``) works as for MALA, with the same
export policy (:mod:`mavit_mm.ops.triton_support`): no FLOP formula for the
fused stages is registered, so a ``jit.trace`` takes the plain formula too.

Each stage has one entry: :func:`kernels_run` says whether the fused kernels
run a call (raising under ``'triton'`` where they cannot), and then the stage's
``fused_*`` op runs it; elsewhere the caller runs the stage's plain formula
(the model its own modules; :mod:`.reference` holds the formulas).
"""
from __future__ import annotations

import math

import torch

from ..triton_support import FusedOpDispatch, Unsupported, index_extent

KERNEL_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_NORM_CHANNELS = 4096          # the norm holds a pixel's channels in one program

DEPTHWISE_DISPATCH = FusedOpDispatch(__package__, 'depthwise_impl', 'the fused depthwise kernels',
                                     'the depthwise stages fall back', counted_when_traced=False)


def check_depthwise_impl(impl: str) -> str:
    return DEPTHWISE_DISPATCH.check_impl(impl)


def kernels_unsupported(x: torch.Tensor, *others: torch.Tensor, weight: torch.Tensor,
                        allow_interpreter: bool, norm_channels: int | None = None
                        ) -> Unsupported | None:
    """``None`` when the fused kernels can run this case, else why not."""
    device = x.device
    unsupported = DEPTHWISE_DISPATCH.device_unsupported(device, allow_interpreter)
    if unsupported is not None:
        return unsupported
    problem = _maps_problem(x, others)
    if problem is not None:
        return Unsupported(problem, ValueError)
    for t in (x, *others):
        if t.dtype not in KERNEL_DTYPES:
            return Unsupported(f'dtype {t.dtype} is not supported (float16, bfloat16 or float32)',
                               ValueError)
        if t.device != device:
            return Unsupported(f'the maps must share one device, got {device} and {t.device}',
                               ValueError)
    if weight.dim() != 4 or weight.shape[0] != x.shape[1] or weight.shape[1] != 1 \
            or weight.shape[-1] % 2 == 0 or weight.shape[-1] != weight.shape[-2]:
        return Unsupported(f'the weight must be a depthwise ({x.shape[1]}, 1, k, k) kernel of odd '
                           f'k for the map\'s {x.shape[1]} channels, got {tuple(weight.shape)}',
                           ValueError)
    if norm_channels is not None and norm_channels > MAX_NORM_CHANNELS:
        return Unsupported(f'{norm_channels} channels: the fused norm holds at most '
                           f'{MAX_NORM_CHANNELS}', ValueError)
    # Per image: v and the gate, slices of the qkvo map, reach 4x their own size.
    widest = max([index_extent(t, 1) for t in (x, *others)])
    if widest >= 2 ** 31:
        return Unsupported(f'a map reaching {widest} elements past its image\'s first: the '
                           'kernels index an image in int32', ValueError)
    return None


def kernels_run(impl: str, x: torch.Tensor, *others: torch.Tensor, weight: torch.Tensor,
                norm_channels: int | None = None) -> bool:
    """Whether the fused op runs this call; raises under ``'triton'`` where it cannot."""
    if DEPTHWISE_DISPATCH.takes_plain_formula(impl, x):
        return False
    unsupported = kernels_unsupported(x, *others, weight=weight,
                                      allow_interpreter=impl == 'triton',
                                      norm_channels=norm_channels)
    if unsupported is None:
        return True
    DEPTHWISE_DISPATCH.fall_back(impl, unsupported)
    return False


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


def check_operands(x: torch.Tensor, taps: torch.Tensor, *vectors: torch.Tensor,
                   maps: tuple[torch.Tensor, ...] = ()) -> None:
    """What a fused op reads, shaped for ``x``'s ``C`` channels: ``taps`` the
    ``(k * k, C)`` kernel, each of ``vectors`` (bias, norm weight and bias)
    ``(C,)``, each of ``maps`` ``x``'s shape; else a ValueError naming it
    (the kernels index them by ``x``'s shape)."""
    problem = _maps_problem(x, maps)
    if problem is not None:
        raise ValueError(problem)
    channels = x.shape[1]
    if taps.dim() != 2 or taps.shape[1] != channels or math.isqrt(taps.shape[0]) ** 2 != taps.shape[0]:
        raise ValueError(f'taps must be the (k * k, {channels}) kernel of the map\'s {channels} '
                         f'channels (tap_major or tap_view of it), got {tuple(taps.shape)}')
    for t in vectors:
        if t.shape != (channels,):
            raise ValueError(f'a bias or norm parameter of the map\'s {channels} channels must be '
                             f'({channels},), got {tuple(t.shape)}')


def _maps_problem(x: torch.Tensor, others) -> str | None:
    """Why the maps cannot go to the kernels as they are: ``x`` not 4-D, or
    another map of another shape (``kernels_unsupported`` and ``check_operands``)."""
    if x.dim() != 4:
        return f'the fused stages take (B, C, H, W) maps, got shape {tuple(x.shape)}'
    for t in others:
        if t.shape != x.shape:
            return f'the maps must share one shape, got {tuple(x.shape)} and {tuple(t.shape)}'
    return None


# The fused ops, for a call kernels_run has let through; ``taps`` is the
# depthwise kernel as (k * k, C) (tap_major or tap_view).

def fused_position_norm(x, taps, bias, norm_weight, norm_bias, eps: float):
    """``(x + dwconv(x) + b, LN(x + dwconv(x) + b))``
    (:func:`.reference.position_norm_reference`)."""
    check_operands(x, taps, bias, norm_weight, norm_bias)
    stream, normed, _, _ = DEPTHWISE_DISPATCH.function().position_norm_op(
        x, taps, bias, norm_weight, norm_bias, float(eps))
    return stream, normed


def fused_gated_lepe(v, taps, bias, attention, gate):
    """``gate * (attention + dwconv(v) + b)`` (:func:`.reference.gated_lepe_reference`)."""
    check_operands(v, taps, bias, maps=(attention, gate))
    keep_sum = torch.is_grad_enabled() and any(
        t.requires_grad for t in (v, taps, bias, attention, gate))
    return DEPTHWISE_DISPATCH.function().gated_lepe_op(v, taps, bias, attention, gate,
                                                       keep_sum)[0]


def fused_ffn_middle(h, taps, bias):
    """``GELU(h) + dwconv(GELU(h)) + b`` (:func:`.reference.ffn_middle_reference`)."""
    check_operands(h, taps, bias)
    return DEPTHWISE_DISPATCH.function().ffn_middle_op(h, taps, bias)
