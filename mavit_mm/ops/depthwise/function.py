"""The fused depthwise stages as PyTorch operators, with their autograd.

Imported only where the Triton path is taken: it imports triton. Each stage
is a ``torch.library`` custom op (``mavit_mm::position_norm``,
``mavit_mm::gated_lepe``, ``mavit_mm::ffn_middle``) with a fake
implementation, so that torch.compile keeps it as one opaque node and CUDA
graphs capture it, and a backward op of its own. Outputs are channels_last
maps in the input's dtype; weights are read in whatever dtype they have
(the kernels compute in fp32), so autocast casts none of them. The ops take
the depthwise kernel as ``(k * k, C)``, read through its strides: tap-major
(``dispatch.tap_major``) or a view of the ``(C, 1, k, k)`` parameter
(``dispatch.tap_view``); its gradient comes tap-major.
"""
from __future__ import annotations

import contextlib
import functools
import math
from typing import NamedTuple

import torch

from ..triton_support import (
    cdiv,
    check_triton_release,
    next_power_of_2,
    on_device,
    refuse_second_derivative,
)

check_triton_release()

from . import kernels  # noqa: E402

# The rules' tiles (launch_tile). The norm holds every channel of its pixels,
# so fewer pixels.
BLOCK_W = 16
BLOCK_C = 64
NORM_TILE = 2048            # BLOCK_W * BLOCK_C of the stages with the norm
# The 5x5 backward keeps 25 taps' loads in flight: at 64 channels Triton 3.6
# gives it 255 registers and spills 56 B on sm_90 (a desk review's compile);
# at 32, 151 registers and no spill with 3.6 and 3.9
# (benchmarks/results/compile-report-sm90-depthwise-*-b62358c.txt).
WIDE_BACKWARD_BLOCK_C = 32


class DepthwiseTile(NamedTuple):
    """A launch's programs: ``block_w`` pixels times ``block_c`` channels, on
    ``num_warps`` warps (4: Triton's default)."""
    block_w: int
    block_c: int
    num_warps: int = 4


# The stages' launches, by stage and pass; True where the launch normalises.
LAUNCHES = {'position_norm.forward': True, 'position_norm.norm_backward': True,
            'position_norm.backward': False, 'gated_lepe.forward': False,
            'gated_lepe.backward': False, 'ffn_middle.forward': False,
            'ffn_middle.backward': False}
# Timed tiles, (launch, channels) -> DepthwiseTile, from the JSON of
# benchmarks/tune_depthwise.py committed beside them; elsewhere the rules below.
TUNED_TILES: dict[tuple[str, int], DepthwiseTile] = {}
_tried: dict[str, DepthwiseTile] = {}


def _empty_like_map(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A channels_last map (NHWC memory) of ``x``'s shape."""
    batch, channels, height, width = x.shape
    return torch.empty(batch, height, width, channels, dtype=dtype or x.dtype,
                       device=x.device).permute(0, 3, 1, 2)


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    """(batch, row, pixel) strides of a map whose channel stride is 1."""
    batch, _, row, pixel = t.stride()     # one call, not three: a launch asks ~7 times
    return batch, row, pixel


def check_tile(launch: str, tile, channels: int | None = None) -> DepthwiseTile:
    """``tile`` as a :class:`DepthwiseTile`, or a ``ValueError`` saying why
    ``launch`` cannot run it (at ``channels``, where given)."""
    if launch not in LAUNCHES:
        raise ValueError(f'no depthwise launch {launch!r}: one of {", ".join(LAUNCHES)}')
    tile = DepthwiseTile(*tile)
    if any(v < 1 or v & (v - 1) for v in tile) or tile.num_warps > 32:
        raise ValueError(f'{launch}: {tile} is not powers of two with at most 32 warps')
    if LAUNCHES[launch] and channels is not None and (
            tile.block_c < channels or tile.block_w > max(1, NORM_TILE // tile.block_c)):
        raise ValueError(f'{launch} at {channels} channels: {tile} does not hold every channel '
                         f'of its pixels (block_c >= {channels}) within NORM_TILE ({NORM_TILE})')
    return tile


def launch_tile(launch: str, channels: int, ksize: int) -> DepthwiseTile:
    """The tile of ``launch`` at ``channels`` with a ``ksize`` kernel: the one
    :func:`launch_tiles` tries, else ``TUNED_TILES``'s, else the rules'."""
    tried = _tried.get(launch)
    if tried is not None:   # a candidate, checked at its width here
        return check_tile(launch, tried, channels)
    tuned = TUNED_TILES.get((launch, channels))
    if tuned is not None:   # checked once, at import (below)
        return tuned
    return _rule_tile(launch, channels, ksize)


@functools.cache   # host work at every launch otherwise
def _rule_tile(launch: str, channels: int, ksize: int) -> DepthwiseTile:
    # Reads the rules' constants (BLOCK_W, BLOCK_C, NORM_TILE, ...) once per
    # key: to change them at run time, call _rule_tile.cache_clear() too.
    block_c = next_power_of_2(channels)
    if LAUNCHES[launch]:    # every channel of the pixels
        return DepthwiseTile(max(1, min(BLOCK_W, NORM_TILE // block_c)), block_c)
    wide = launch.endswith('.backward') and ksize >= 5
    return DepthwiseTile(BLOCK_W, min(WIDE_BACKWARD_BLOCK_C if wide else BLOCK_C, block_c))


# The table is checked once, not at every launch of the hot path.
TUNED_TILES.update({(launch, channels): check_tile(launch, tile, channels)
                    for (launch, channels), tile in TUNED_TILES.items()})


@contextlib.contextmanager
def launch_tiles(tiles: dict):
    """Launch with ``tiles`` (launch -> tile) inside, e.g. ``{'ffn_middle.forward':
    DepthwiseTile(16, 128, 8)}``: the tuner's candidates. Process-wide, so that
    autograd's backward thread sees them: not for concurrent use."""
    checked = {launch: check_tile(launch, tile) for launch, tile in tiles.items()}
    before = dict(_tried)
    _tried.update(checked)
    try:
        yield
    finally:
        _tried.clear()
        _tried.update(before)


def _grid(x: torch.Tensor, block_w: int, block_c: int) -> tuple[int, int, int]:
    """One program per image row, ``block_w`` pixels and ``block_c`` channels."""
    batch, channels, height, width = x.shape
    return batch * height, cdiv(width, block_w), cdiv(channels, block_c)


def _gated_dtype(v: torch.Tensor, attention: torch.Tensor, gate: torch.Tensor) -> torch.dtype:
    """The dtype of ``gate * (attention + dwconv(v))``, as PyTorch promotes it."""
    return torch.promote_types(torch.promote_types(v.dtype, attention.dtype), gate.dtype)


def _forward(x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, *,
             launch: str, pre_gelu: bool = False, add_input: bool = False,
             attention: torch.Tensor | None = None, gate: torch.Tensor | None = None,
             second: torch.Tensor | None = None, norm: tuple | None = None) -> None:
    """Launch ``_depthwise_forward_kernel``: ``out`` (and ``second``: the
    gate's sum, or the normed map) written."""
    _, channels, height, width = x.shape
    ksize = _kernel_size(taps)
    block_w, block_c, num_warps = launch_tile(launch, channels, ksize)
    gate_args = (attention, *_strides(attention), gate, *_strides(gate)) if gate is not None \
        else (x, 0, 0, 0, x, 0, 0, 0)
    second_args = (second, *_strides(second)) if second is not None else (x, 0, 0, 0)
    # Without the norm, its pointers are placeholders the kernel never reads.
    norm_weight, norm_bias, mean, rstd, eps = norm if norm is not None else (bias,) * 4 + (0.0,)
    with on_device(x.device):
        kernels._depthwise_forward_kernel[_grid(x, block_w, block_c)](
            x, *_strides(x), taps, *taps.stride(), bias.contiguous(), *gate_args,
            out, *_strides(out), *second_args, norm_weight.contiguous(),
            norm_bias.contiguous(), mean, rstd, height, width, channels, eps,
            K=ksize, PRE_GELU=pre_gelu, ADD_INPUT=add_input, GATE=gate is not None,
            STORE_SUM=gate is not None and second is not None, NORM=norm is not None,
            BLOCK_W=block_w, BLOCK_C=block_c, num_warps=num_warps)


def _backward(dz: torch.Tensor, x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor, *,
              launch: str, pre_gelu: bool = False, add_input: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dtaps, dbias)`` of ``[x +] dwconv(act(x)) + b`` given the
    gradient ``dz`` of its result (``dtaps`` tap-major, as ``taps``)."""
    _, channels, height, width = x.shape
    ksize = _kernel_size(taps)
    block_w, block_c, num_warps = launch_tile(launch, channels, ksize)
    grid = _grid(x, block_w, block_c)
    dx = _empty_like_map(x)
    partials = torch.empty(grid[0] * grid[1], ksize * ksize + 1, channels, dtype=torch.float32,
                           device=x.device)
    with on_device(x.device):
        kernels._depthwise_backward_kernel[grid](
            dz, *_strides(dz), x, *_strides(x), taps, *taps.stride(), dx, *_strides(dx),
            partials, height, width, channels, K=ksize, PRE_GELU=pre_gelu,
            ADD_INPUT=add_input, BLOCK_W=block_w, BLOCK_C=block_c, num_warps=num_warps)
    return dx, partials[:, :-1].sum(0).to(taps.dtype), partials[:, -1].sum(0).to(bias.dtype)


def _kernel_size(taps: torch.Tensor) -> int:
    return math.isqrt(taps.shape[0])


def _channel_stride_one(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(1) == 1 else t.contiguous(memory_format=torch.channels_last)


# -- position + first norm ----------------------------------------------------------

@torch.library.custom_op('mavit_mm::position_norm', mutates_args=())
def position_norm_op(x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor,
                     norm_weight: torch.Tensor, norm_bias: torch.Tensor, eps: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x + dwconv(x) + b``, its LayerNorm, and the norm's fp32 mean and 1/std."""
    x = _channel_stride_one(x)
    batch, _, height, width = x.shape
    stream, normed = _empty_like_map(x), _empty_like_map(x)
    mean = torch.empty(batch * height * width, dtype=torch.float32, device=x.device)
    rstd = torch.empty_like(mean)
    _forward(x, taps, bias, stream, launch='position_norm.forward', add_input=True, second=normed,
             norm=(norm_weight, norm_bias, mean, rstd, eps))
    return stream, normed, mean, rstd


@position_norm_op.register_fake
def _position_norm_fake(x, taps, bias, norm_weight, norm_bias, eps):
    batch, _, height, width = x.shape
    mean = x.new_empty(batch * height * width, dtype=torch.float32)
    return _empty_like_map(x), _empty_like_map(x), mean, torch.empty_like(mean)


@torch.library.custom_op('mavit_mm::position_norm_backward', mutates_args=())
def position_norm_backward_op(d_stream: torch.Tensor, d_normed: torch.Tensor, x: torch.Tensor,
                              stream: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                              taps: torch.Tensor, bias: torch.Tensor,
                              norm_weight: torch.Tensor
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                         torch.Tensor, torch.Tensor]:
    x, d_stream, d_normed = map(_channel_stride_one, (x, d_stream, d_normed))
    _, channels, height, width = x.shape
    block_w, block_c, num_warps = launch_tile('position_norm.norm_backward', channels, 0)
    grid = _grid(x, block_w, block_c)[:2]          # every channel in one program
    dy = _empty_like_map(x)
    partials = torch.empty(grid[0] * grid[1], 2, channels, dtype=torch.float32, device=x.device)
    with on_device(x.device):
        kernels._norm_backward_kernel[grid](
            d_normed, *_strides(d_normed), stream, *_strides(stream), d_stream,
            *_strides(d_stream), mean, rstd, norm_weight.contiguous(), dy, *_strides(dy),
            partials, height, width, channels, HAS_DS=True, BLOCK_W=block_w, BLOCK_C=block_c,
            num_warps=num_warps)
    dnorm_weight = partials[:, 0].sum(0).to(norm_weight.dtype)
    dnorm_bias = partials[:, 1].sum(0).to(norm_weight.dtype)
    dx, dtaps, dbias = _backward(dy, x, taps, bias, launch='position_norm.backward', add_input=True)
    return dx, dtaps, dbias, dnorm_weight, dnorm_bias


@position_norm_backward_op.register_fake
def _position_norm_backward_fake(d_stream, d_normed, x, stream, mean, rstd, taps, bias,
                                 norm_weight):
    return (_empty_like_map(x), taps.new_empty(taps.shape), torch.empty_like(bias),
            torch.empty_like(norm_weight), torch.empty_like(norm_weight))


def _position_norm_setup(ctx, inputs, output):
    x, taps, bias, norm_weight, _, _ = inputs
    stream, _, mean, rstd = output
    ctx.save_for_backward(x, stream, mean, rstd, taps, bias, norm_weight)


def _position_norm_autograd(ctx, d_stream, d_normed, _d_mean, _d_rstd):
    # The saved tensors in the backward op's order; no gradient for eps.
    return (*position_norm_backward_op(d_stream, d_normed, *ctx.saved_tensors), None)


position_norm_op.register_autograd(_position_norm_autograd, setup_context=_position_norm_setup)
refuse_second_derivative(position_norm_backward_op, 'the fused depthwise kernels', 'depthwise_impl')


# -- LePE + gate ----------------------------------------------------------------------

@torch.library.custom_op('mavit_mm::gated_lepe', mutates_args=())
def gated_lepe_op(v: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor,
                  attention: torch.Tensor, gate: torch.Tensor, keep_sum: bool
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``gate * (attention + dwconv(v) + b)``, and the sum in brackets where
    ``keep_sum`` (backward's ``dgate``); else an empty tensor."""
    v, attention, gate = map(_channel_stride_one, (v, attention, gate))
    dtype = _gated_dtype(v, attention, gate)
    out = _empty_like_map(v, dtype)
    total = _empty_like_map(v, dtype) if keep_sum else v.new_empty(0, dtype=dtype)
    _forward(v, taps, bias, out, launch='gated_lepe.forward', attention=attention, gate=gate,
             second=total if keep_sum else None)
    return out, total


@gated_lepe_op.register_fake
def _gated_lepe_fake(v, taps, bias, attention, gate, keep_sum):
    dtype = _gated_dtype(v, attention, gate)
    total = _empty_like_map(v, dtype) if keep_sum else v.new_empty(0, dtype=dtype)
    return _empty_like_map(v, dtype), total


@torch.library.custom_op('mavit_mm::gated_lepe_backward', mutates_args=())
def gated_lepe_backward_op(dout: torch.Tensor, v: torch.Tensor, taps: torch.Tensor,
                           bias: torch.Tensor, gate: torch.Tensor, total: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                      torch.Tensor]:
    """``(dv, dtaps, dbias, d_inner, dgate)``; ``d_inner`` is the gradient of
    the bracket, i.e. also the attention's."""
    d_inner = _channel_stride_one(dout * gate).to(v.dtype)
    dgate = (dout * total).to(gate.dtype)
    dv, dtaps, dbias = _backward(d_inner, _channel_stride_one(v), taps, bias,
                                 launch='gated_lepe.backward')
    return dv, dtaps, dbias, d_inner, dgate


@gated_lepe_backward_op.register_fake
def _gated_lepe_backward_fake(dout, v, taps, bias, gate, total):
    return (_empty_like_map(v), taps.new_empty(taps.shape), torch.empty_like(bias),
            _empty_like_map(v), _empty_like_map(gate))


def _gated_lepe_setup(ctx, inputs, output):
    v, taps, bias, attention, gate, _ = inputs
    ctx.save_for_backward(v, taps, bias, gate, output[1])
    ctx.attention_dtype = attention.dtype


def _gated_lepe_autograd(ctx, dout, _dtotal):
    v, taps, bias, gate, total = ctx.saved_tensors
    if total.numel() == 0:
        raise RuntimeError('mavit_mm::gated_lepe ran without keep_sum, so it saved nothing '
                           'for backward; call it through fused_gated_lepe()')
    dv, dtaps, dbias, d_inner, dgate = gated_lepe_backward_op(dout, v, taps, bias, gate, total)
    return dv, dtaps, dbias, d_inner.to(ctx.attention_dtype), dgate, None


gated_lepe_op.register_autograd(_gated_lepe_autograd, setup_context=_gated_lepe_setup)
refuse_second_derivative(gated_lepe_backward_op, 'the fused depthwise kernels', 'depthwise_impl')


# -- the FFN's middle -----------------------------------------------------------------

@torch.library.custom_op('mavit_mm::ffn_middle', mutates_args=())
def ffn_middle_op(h: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``GELU(h) + dwconv(GELU(h)) + b``."""
    h = _channel_stride_one(h)
    out = _empty_like_map(h)
    _forward(h, taps, bias, out, launch='ffn_middle.forward', pre_gelu=True, add_input=True)
    return out


@ffn_middle_op.register_fake
def _ffn_middle_fake(h, taps, bias):
    return _empty_like_map(h)


@torch.library.custom_op('mavit_mm::ffn_middle_backward', mutates_args=())
def ffn_middle_backward_op(dout: torch.Tensor, h: torch.Tensor, taps: torch.Tensor,
                           bias: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(_channel_stride_one(dout), _channel_stride_one(h), taps, bias,
                     launch='ffn_middle.backward', pre_gelu=True, add_input=True)


@ffn_middle_backward_op.register_fake
def _ffn_middle_backward_fake(dout, h, taps, bias):
    return _empty_like_map(h), taps.new_empty(taps.shape), torch.empty_like(bias)


def _ffn_middle_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _ffn_middle_autograd(ctx, dout):
    return ffn_middle_backward_op(dout, *ctx.saved_tensors)


ffn_middle_op.register_autograd(_ffn_middle_autograd, setup_context=_ffn_middle_setup)
refuse_second_derivative(ffn_middle_backward_op, 'the fused depthwise kernels', 'depthwise_impl')
