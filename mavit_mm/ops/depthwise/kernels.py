"""Triton kernels of the block's depthwise stages (formulas: ``reference.py``).

Maps are read through their strides with the channel stride 1: the
backbone's channels_last maps, and channel slices of them (v and the gate o
are slices of the qkvo output, whose pixel stride is 4C). A program owns
``BLOCK_W`` pixels of one image row and ``BLOCK_C`` channels; each tap of the
``K x K`` kernel is one masked load of that tile, shifted (zero padding by
masking). The kernel ``Wt`` is read as ``(K * K, C)`` through its strides
(``swt`` a tap, ``swc`` a channel): tap-major (``dispatch.tap_major``, ``swc``
1), a tap's weights for the program's channels are one contiguous vector load;
the parameter itself, ``(C, 1, K, K)`` in place (``swc`` ``K * K``), a load per
channel.
Everything is computed in fp32 registers; only loads and stores touch the
maps' dtype.

forward (``_depthwise_forward_kernel``): ``y = [x +] dwconv(act(x)) + b``,
``act`` GELU or the identity, then one epilogue:
  * ``GATE``: ``y = o * (a + y)``, and ``s = a + y`` written where backward
    needs it;
  * ``NORM``: ``y`` written, and ``LN(y)`` over the channels (one program
    holds every channel of its pixels), with the pixels' mean and 1/std.

backward:
  * ``_depthwise_backward_kernel``: the input gradient, ``dx = [dz +]
    dwconv(dz, flipped kernel)`` [times GELU'(x)], and per program the
    partial weight and bias gradients ``sum dz * act(x shifted)``, ``sum dz``,
    summed over programs by the caller;
  * ``_norm_backward_kernel``: LayerNorm's input gradient added to the
    stream's, and per program the partial norm weight and bias gradients.
"""
from __future__ import annotations

import triton
import triton.language as tl

_SQRT_HALF = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)


@triton.jit
def _gelu(x):
    return 0.5 * x * (1.0 + tl.math.erf(x * _SQRT_HALF))


@triton.jit
def _gelu_grad(x):
    return 0.5 * (1.0 + tl.math.erf(x * _SQRT_HALF)) + x * _INV_SQRT_2PI * tl.exp(-0.5 * x * x)


@triton.jit
def _row_tile(H, W, C, BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """The program's tile: its grid row (image ``b``, row ``h``), ``BLOCK_W``
    pixels ``ws`` of that row and ``BLOCK_C`` channels ``cs``, with their
    masks. ``h`` is a vector over the pixels: Triton's interpreter rejects
    masks that combine scalar and vector conditions."""
    row = tl.program_id(0)
    ws = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    cs = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    h = row % H + tl.zeros([BLOCK_W], dtype=tl.int32)
    return row, row // H, h, ws, cs, ws < W, cs < C


@triton.jit
def _tile(P, b, sb, sh, sw, h, ws, cs):
    """Pointers to the tile at image ``b`` (its offset in int64), row ``h``,
    pixels ``ws`` and channels ``cs`` of a map with strides ``sb, sh, sw``."""
    return P + b.to(tl.int64) * sb + h[:, None] * sh + ws[:, None] * sw + cs[None, :]


@triton.jit
def _depthwise_forward_kernel(
        X, sxb, sxh, sxw, Wt, swt, swc, Bias,
        A, sab, sah, saw, G, sgb, sgh, sgw,
        Y, syb, syh, syw, S, ssb, ssh, ssw,
        NW, NB, MEAN, RSTD,
        H, W, C, eps,
        K: tl.constexpr, PRE_GELU: tl.constexpr, ADD_INPUT: tl.constexpr,
        GATE: tl.constexpr, STORE_SUM: tl.constexpr, NORM: tl.constexpr,
        BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    row, b, h, ws, cs, in_w, in_c = _row_tile(H, W, C, BLOCK_W, BLOCK_C)
    pad: tl.constexpr = K // 2
    x_image = X + b.to(tl.int64) * sxb
    acc = tl.zeros([BLOCK_W, BLOCK_C], dtype=tl.float32)
    for kh in tl.static_range(K):
        hh = h + kh - pad
        for kw in tl.static_range(K):
            wi = ws + kw - pad
            mask = ((wi >= 0) & (wi < W) & (hh >= 0) & (hh < H))[:, None] & in_c[None, :]
            x = tl.load(x_image + hh[:, None] * sxh + wi[:, None] * sxw + cs[None, :], mask=mask,
                        other=0.0).to(tl.float32)
            if PRE_GELU:
                x = _gelu(x)
            tap = tl.load(Wt + (kh * K + kw) * swt + cs * swc, mask=in_c, other=0.0)
            acc += x * tap.to(tl.float32)[None, :]
            if ADD_INPUT and kh == pad and kw == pad:
                acc += x
    acc += tl.load(Bias + cs, mask=in_c, other=0.0).to(tl.float32)[None, :]
    mask = in_w[:, None] & in_c[None, :]
    if GATE:
        a = tl.load(_tile(A, b, sab, sah, saw, h, ws, cs), mask=mask, other=0.0).to(tl.float32)
        o = tl.load(_tile(G, b, sgb, sgh, sgw, h, ws, cs), mask=mask, other=0.0).to(tl.float32)
        acc = acc + a
        if STORE_SUM:
            tl.store(_tile(S, b, ssb, ssh, ssw, h, ws, cs), acc.to(S.dtype.element_ty), mask=mask)
        acc = o * acc
    y = acc.to(Y.dtype.element_ty)
    tl.store(_tile(Y, b, syb, syh, syw, h, ws, cs), y, mask=mask)
    if NORM:
        # The norm reads the stream as stored (rounded to its dtype), as the
        # plain formula's LayerNorm does.
        xs = tl.where(mask, y.to(tl.float32), 0.0)
        mean = tl.sum(xs, axis=1) / C
        centred = tl.where(mask, xs - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / C + eps)
        nw = tl.load(NW + cs, mask=in_c, other=0.0).to(tl.float32)
        nb = tl.load(NB + cs, mask=in_c, other=0.0).to(tl.float32)
        z = centred * rstd[:, None] * nw[None, :] + nb[None, :]
        tl.store(_tile(S, b, ssb, ssh, ssw, h, ws, cs), z.to(S.dtype.element_ty), mask=mask)
        stat = row.to(tl.int64) * W + ws
        tl.store(MEAN + stat, mean, mask=in_w)
        tl.store(RSTD + stat, rstd, mask=in_w)


@triton.jit
def _depthwise_backward_kernel(
        DZ, sdb, sdh, sdw, X, sxb, sxh, sxw, Wt, swt, swc,
        DX, sob, soh, sow, PARTIALS,
        H, W, C,
        K: tl.constexpr, PRE_GELU: tl.constexpr, ADD_INPUT: tl.constexpr,
        BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    row, b, h, ws, cs, in_w, in_c = _row_tile(H, W, C, BLOCK_W, BLOCK_C)
    mask = in_w[:, None] & in_c[None, :]
    pad: tl.constexpr = K // 2
    dz_image = DZ + b.to(tl.int64) * sdb
    x_image = X + b.to(tl.int64) * sxb
    dz = tl.load(dz_image + h[:, None] * sdh + ws[:, None] * sdw + cs[None, :], mask=mask,
                 other=0.0).to(tl.float32)
    # partial sums of this program, rows: the K*K taps, then the bias
    part = PARTIALS + ((row * tl.num_programs(1) + tl.program_id(1)).to(tl.int64)
                       * (K * K + 1) * C)
    dx = tl.zeros([BLOCK_W, BLOCK_C], dtype=tl.float32)
    for kh in tl.static_range(K):
        for kw in tl.static_range(K):
            tap = tl.load(Wt + (kh * K + kw) * swt + cs * swc, mask=in_c, other=0.0)
            # dx[p] += dz[p - offset] * w[offset]
            hs = h - (kh - pad)
            wi = ws - (kw - pad)
            src = ((wi >= 0) & (wi < W) & (hs >= 0) & (hs < H))[:, None] & in_c[None, :]
            dz_src = tl.load(dz_image + hs[:, None] * sdh + wi[:, None] * sdw + cs[None, :], mask=src,
                             other=0.0).to(tl.float32)
            dx += dz_src * tap.to(tl.float32)[None, :]
            # dw[offset] += dz[p] * act(x[p + offset])
            hx = h + (kh - pad)
            wx = ws + (kw - pad)
            at = (in_w & (wx >= 0) & (wx < W) & (hx >= 0) & (hx < H))[:, None] & in_c[None, :]
            x = tl.load(x_image + hx[:, None] * sxh + wx[:, None] * sxw + cs[None, :], mask=at,
                        other=0.0).to(tl.float32)
            if PRE_GELU:
                x = _gelu(x)
            tl.store(part + (kh * K + kw) * C + cs, tl.sum(dz * x, axis=0), mask=in_c)
    tl.store(part + (K * K) * C + cs, tl.sum(dz, axis=0), mask=in_c)
    if ADD_INPUT:
        dx += dz
    if PRE_GELU:
        x = tl.load(x_image + h[:, None] * sxh + ws[:, None] * sxw + cs[None, :], mask=mask,
                    other=0.0).to(tl.float32)
        dx = dx * _gelu_grad(x)
    tl.store(_tile(DX, b, sob, soh, sow, h, ws, cs), dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _norm_backward_kernel(
        DZ, sdb, sdh, sdw, Y, syb, syh, syw, DS, ssb, ssh, ssw,
        MEAN, RSTD, NW, DY, sob, soh, sow, PARTIALS,
        H, W, C, HAS_DS: tl.constexpr,
        BLOCK_W: tl.constexpr, BLOCK_C: tl.constexpr):
    """``dy = ds + LN'(y)^T dz`` for pixels of one row, all channels; per
    program the partial ``sum dz * yhat`` and ``sum dz`` (rows 0 and 1)."""
    row, b, h, ws, cs, in_w, in_c = _row_tile(H, W, C, BLOCK_W, BLOCK_C)   # (grid: 2-D)
    mask = in_w[:, None] & in_c[None, :]
    dz = tl.load(_tile(DZ, b, sdb, sdh, sdw, h, ws, cs), mask=mask, other=0.0).to(tl.float32)
    y = tl.load(_tile(Y, b, syb, syh, syw, h, ws, cs), mask=mask, other=0.0).to(tl.float32)
    stat = row.to(tl.int64) * W + ws
    mean = tl.load(MEAN + stat, mask=in_w, other=0.0)
    rstd = tl.load(RSTD + stat, mask=in_w, other=0.0)
    yhat = tl.where(mask, (y - mean[:, None]) * rstd[:, None], 0.0)
    nw = tl.load(NW + cs, mask=in_c, other=0.0).to(tl.float32)
    g = dz * nw[None, :]
    dy = rstd[:, None] * (g - (tl.sum(g, axis=1) / C)[:, None]
                          - yhat * (tl.sum(g * yhat, axis=1) / C)[:, None])
    if HAS_DS:
        dy += tl.load(_tile(DS, b, ssb, ssh, ssw, h, ws, cs), mask=mask, other=0.0).to(tl.float32)
    tl.store(_tile(DY, b, sob, soh, sow, h, ws, cs), dy.to(DY.dtype.element_ty), mask=mask)
    part = PARTIALS + (row * tl.num_programs(1) + tl.program_id(1)).to(tl.int64) * 2 * C
    tl.store(part + cs, tl.sum(dz * yhat, axis=0), mask=in_c)
    tl.store(part + C + cs, tl.sum(dz, axis=0), mask=in_c)
