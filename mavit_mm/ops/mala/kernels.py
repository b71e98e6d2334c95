"""Triton kernels of fused MALA (forward and backward).

Grids are (token blocks or split-N chunks, batch * heads). The big tensors
are read through their strides, so any layout is consumed as it is
(``docs/mala-op.md`` names the layouts). A head's channels are rotated as
interleaved RoPE pairs, one tile per parity (``_load_pairs``), joined back
into channel order (``_whole``) before every product, so each term is one
(d x d) tensor-core product a tile. The split-N loops keep their token sums
per row in registers and reduce them once after the loop: no iteration waits
on a cross-warp reduction. Rotation angles come from each token's row /
column and the stage's angle vector (no sin / cos tables). All arithmetic is
fp32; each pass reads or writes every big tensor exactly once.

Passes (``s = d ** -0.5``, per (b, h), ``N`` tokens):

forward
  1. ``_forward_partials_kernel``  (split-N) reads k, v once. Per chunk of
     tokens: ``sum ka``, and shifted sums ``sum (kr - kr_shift)^T (v - v_shift)``,
     ``sum (kr - kr_shift)``, ``sum (v - v_shift)``; the shifts are the means of
     the chunk's first block.
  2. ``_forward_combine_kernel`` merges the chunks into the per-head stats:
     ``km``, ``krm = mean kr``, ``vm`` and the *centred* ``KVc = (s/N) sum_j
     kr_j^T (v_j - vm)``, a block of chunks at a time (``tl.sum`` over the
     block), grid (row blocks of KVc, batch * heads).
  3. ``_forward_output_kernel`` reads q once, writes out once:
     ``out = g * (qr @ KVc) + (g * s * (qr . krm) - z) * vm`` with
     ``g = 1 + 1/(z + eps)``, which equals ``g * (qr @ KV) - z * vm``.

backward
  1. ``_backward_query_kernel`` (split-N) reads q and dout once, writes dq, and
     reduces per chunk ``dKV``, ``sum g (dout . vm) qr``, ``sum dz qa`` and
     ``sum c dout`` (already scaled by ``s/N`` or ``1/N``).
  2. The chunks are summed (``torch.sum`` over a small fp32 workspace).
  3. ``_backward_key_kernel`` reads k and v once, writes dk and dv.

Why the centring: ``z * vm`` and ``qr @ KV`` can both be ~1e5 and cancel. The
dot products may run on tensor cores (tf32 for half inputs), whose ~1e-3
relative error would be amplified by that cancellation; subtracting the means
first leaves only the small, non-cancelling part to the dots while the large
parts are combined exactly in fp32. The same holds in the backward.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..triton_support import triton_interpreter_enabled
from . import naive

MALA_EPS = tl.constexpr(naive.MALA_EPS)
# 2*pi split in two (Cody-Waite): the first part has 8 significant bits, so
# ``turns * _TWO_PI_HI`` is exact for any position of a real feature map.
_INV_TWO_PI = tl.constexpr(0.15915494309189535)
_TWO_PI_HI = tl.constexpr(6.28125)
_TWO_PI_LO = tl.constexpr(0.0019353071795864769)

# Row layouts of the small fp32 buffers, (rows, d) per (b, h) [and chunk]. The
# first d rows are always a (d, d) matrix in natural channel order.
# Forward workspace, per chunk: KV partial, then
FWD_ROW_K_SUM = tl.constexpr(0)      # sum ka
FWD_ROW_KR_DEV = tl.constexpr(1)     # sum (kr - kr_shift)
FWD_ROW_KR_SHIFT = tl.constexpr(2)   # kr_shift
FWD_ROW_V_DEV = tl.constexpr(3)      # sum (v - v_shift)
FWD_ROW_V_SHIFT = tl.constexpr(4)    # v_shift
FWD_EXTRA_ROWS = tl.constexpr(5)
# Forward stats (saved for backward): KVc = (s/N) sum kr^T (v - vm), then
STATS_ROW_KM = tl.constexpr(0)       # mean ka
STATS_ROW_KRM = tl.constexpr(1)      # mean kr
STATS_ROW_VM = tl.constexpr(2)       # mean v
STATS_EXTRA_ROWS = tl.constexpr(3)
# Backward workspace per chunk / summed key-side grads: (s/N) dKV, then
GRAD_ROW_QVEC = tl.constexpr(0)      # (s/N) sum g (dout . vm) qr
GRAD_ROW_DKM = tl.constexpr(1)       # (s/N) sum dz qa    (= dkm / N)
GRAD_ROW_CDOUT = tl.constexpr(2)     # (1/N) sum c dout   (= (s/N) krm dKV + dvm / N)
GRAD_EXTRA_ROWS = tl.constexpr(3)


# -- Elementwise pieces ------------------------------------------------------
@triton.jit
def _elu_plus_one(x):
    # exp of the clamped value: no overflow in the branch tl.where discards.
    return tl.where(x > 0, x + 1.0, tl.exp(tl.minimum(x, 0.0)))


@triton.jit
def _elu_grad(x):
    return tl.where(x > 0, 1.0, tl.exp(tl.minimum(x, 0.0)))


@triton.jit
def _activate_pairs(even, odd, mask):
    """elu + 1 of both tiles, exactly zero outside ``mask`` (padding must not
    add to the sums: elu(0) + 1 = 1)."""
    return (tl.where(mask, _elu_plus_one(even), 0.0),
            tl.where(mask, _elu_plus_one(odd), 0.0))


@triton.jit
def _rotate(even, odd, cos, sin):
    """RoPE on interleaved pairs: (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin)."""
    return even * cos - odd * sin, odd * cos + even * sin


@triton.jit
def _rotate_back(even, odd, cos, sin):
    """The transpose of ``_rotate`` (rotation by -theta), for gradients."""
    return even * cos + odd * sin, odd * cos - even * sin


@triton.jit
def _pair_angles(pairs, angle_ptr, head_dim):
    """Angle of each channel pair and whether it encodes the row (first half).
    The d/2 angles hold each frequency twice: a pair's is at its even channel."""
    half_dim = head_dim // 2
    even_channel = 2 * pairs
    angle = tl.load(angle_ptr + even_channel % half_dim, mask=pairs < half_dim, other=0.0)
    return angle.to(tl.float32), even_channel < half_dim


# On NVIDIA, sin/cos of the reduced angle use the hardware approximations
# (abs. error ~1e-6 on [-pi, pi]); the accurate library versions carry a
# Payne-Hanek slow path (local memory, registers) these angles never need.
# The interpreter and other backends have no such intrinsics.
if not triton_interpreter_enabled() and torch.version.hip is None:
    from triton.language.extra.cuda import libdevice as _libdevice

    @triton.jit
    def _cos_sin_of_reduced(theta):
        return _libdevice.fast_cosf(theta), _libdevice.fast_sinf(theta)
else:
    @triton.jit
    def _cos_sin_of_reduced(theta):
        return tl.cos(theta), tl.sin(theta)


@triton.jit
def _cos_sin(theta):
    # Reduce to [-pi, pi] first: fast GPU sin/cos are only accurate there, and
    # positions times angles reach a few hundred radians at high resolution.
    turns = tl.floor(theta * _INV_TWO_PI + 0.5)
    theta = theta - turns * _TWO_PI_HI - turns * _TWO_PI_LO
    return _cos_sin_of_reduced(theta)


@triton.jit
def _token_rotation(tokens, angle, is_row_pair, width):
    """cos / sin of a (tokens, pairs) tile; token n sits at (n // W, n % W)."""
    row = tokens // width
    col = tokens - row * width
    position = tl.where(is_row_pair[None, :], row[:, None], col[:, None]).to(tl.float32)
    return _cos_sin(position * angle[None, :])


# -- Strided tile access -----------------------------------------------------
@triton.jit
def _head_base(ptr, bh, num_heads, stride_b, stride_h):
    batch = bh // num_heads
    head = bh - batch * num_heads
    return ptr + batch.to(tl.int64) * stride_b + head.to(tl.int64) * stride_h


@triton.jit
def _matrix_base(ptr, index, rows, head_dim):
    """Start of the ``index``-th (rows, d) fp32 buffer in a contiguous stack."""
    return ptr + index * rows * head_dim


@triton.jit
def _load_pairs(base, tokens, pairs, stride_n, stride_d, token_ok, pair_ok, head_dim,
                WHOLE_PAIRS: tl.constexpr):
    """Even- and odd-channel tiles (tokens x pairs) in fp32, zero outside the
    valid tokens and pairs.

    ``WHOLE_PAIRS`` (channel stride 1): the (tokens x 2 * pairs) tile is read
    whole, in vector loads, and split into its parities in registers; its mask
    is built from the channel index so that the compiler sees it constant over
    a vector. Otherwise each parity is a tile of its own.
    """
    if WHOLE_PAIRS:
        channels = tl.arange(0, 2 * pairs.shape[0])
        offsets = tokens[:, None] * stride_n + channels[None, :]
        tile = tl.load(base + offsets, mask=token_ok[:, None] & (channels < head_dim)[None, :],
                       other=0.0)
        even, odd = tl.split(tl.reshape(tile, (tokens.shape[0], pairs.shape[0], 2)))
    else:
        offsets = tokens[:, None] * stride_n + (2 * pairs)[None, :] * stride_d
        mask = token_ok[:, None] & pair_ok[None, :]
        even = tl.load(base + offsets, mask=mask, other=0.0)
        odd = tl.load(base + offsets + stride_d, mask=mask, other=0.0)
    return even.to(tl.float32), odd.to(tl.float32)


@triton.jit
def _store_pairs(base, tokens, pairs, stride_n, stride_d, token_ok, pair_ok, head_dim,
                 even, odd, WHOLE_PAIRS: tl.constexpr):
    """The inverse of ``_load_pairs``: with ``WHOLE_PAIRS`` the parities are
    interleaved in registers and stored as one tile."""
    if WHOLE_PAIRS:
        channels = tl.arange(0, 2 * pairs.shape[0])
        offsets = tokens[:, None] * stride_n + channels[None, :]
        tile = tl.reshape(tl.join(even, odd), (tokens.shape[0], 2 * pairs.shape[0]))
        tl.store(base + offsets, tile.to(base.dtype.element_ty),
                 mask=token_ok[:, None] & (channels < head_dim)[None, :])
    else:
        offsets = tokens[:, None] * stride_n + (2 * pairs)[None, :] * stride_d
        mask = token_ok[:, None] & pair_ok[None, :]
        tl.store(base + offsets, even.to(base.dtype.element_ty), mask=mask)
        tl.store(base + offsets + stride_d, odd.to(base.dtype.element_ty), mask=mask)


@triton.jit
def _load_tile(base, tokens, channels, stride_n, stride_d, mask):
    offsets = tokens[:, None] * stride_n + channels[None, :] * stride_d
    return tl.load(base + offsets, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _store_tile(base, tokens, channels, stride_n, stride_d, mask, value):
    offsets = tokens[:, None] * stride_n + channels[None, :] * stride_d
    tl.store(base + offsets, value.to(base.dtype.element_ty), mask=mask)


@triton.jit
def _load_vector_pairs(vector_ptr, pairs, mask):
    even = tl.load(vector_ptr + 2 * pairs, mask=mask, other=0.0)
    odd = tl.load(vector_ptr + 2 * pairs + 1, mask=mask, other=0.0)
    return even, odd


@triton.jit
def _key_value_block(k_base, v_base, tokens, pairs, channels, token_ok, pair_ok, channel_ok,
                     head_dim, angle, is_row_pair, width,
                     stride_kn, stride_kd, stride_vn, stride_vd, WHOLE_PAIRS: tl.constexpr):
    """ka (pairs), kr (pairs) and v of one block, exactly zero outside the masks."""
    pair_mask = token_ok[:, None] & pair_ok[None, :]
    k_even, k_odd = _load_pairs(k_base, tokens, pairs, stride_kn, stride_kd, token_ok, pair_ok,
                                head_dim, WHOLE_PAIRS)
    ka_even, ka_odd = _activate_pairs(k_even, k_odd, pair_mask)
    cos, sin = _token_rotation(tokens, angle, is_row_pair, width)
    kr_even, kr_odd = _rotate(ka_even, ka_odd, cos, sin)
    v = _load_tile(v_base, tokens, channels, stride_vn, stride_vd,
                   token_ok[:, None] & channel_ok[None, :])
    return ka_even, ka_odd, kr_even, kr_odd, v


@triton.jit
def _query_terms(q_even, q_odd, pair_mask, tokens, angle, is_row_pair, width,
                 km_even, km_odd, krm_even, krm_odd, scale):
    """What every query-side pass derives from raw q (all fp32, per token).

    Returns qa, qr (pairs), the rotation, ``z`` (before RoPE), ``a = qr . krm``,
    ``inv = 1/(z+eps)``, ``gain = 1 + inv`` and ``coef = gain*s*a - z``.
    """
    qa_even, qa_odd = _activate_pairs(q_even, q_odd, pair_mask)
    z = scale * (tl.sum(qa_even * km_even[None, :], axis=1)
                 + tl.sum(qa_odd * km_odd[None, :], axis=1))
    cos, sin = _token_rotation(tokens, angle, is_row_pair, width)
    qr_even, qr_odd = _rotate(qa_even, qa_odd, cos, sin)
    a = tl.sum(qr_even * krm_even[None, :], axis=1) + tl.sum(qr_odd * krm_odd[None, :], axis=1)
    inv = 1.0 / (z + MALA_EPS)
    gain = 1.0 + inv
    coef = gain * scale * a - z
    return qa_even, qa_odd, qr_even, qr_odd, cos, sin, z, a, inv, gain, coef


# -- Forward -----------------------------------------------------------------
@triton.jit
def _whole(even, odd):
    """The (tokens, 2 * pairs) tile in natural channel order of its two parities
    (the inverse of the split in ``_load_pairs``; pairs stay within a thread)."""
    return tl.reshape(tl.join(even, odd), (even.shape[0], 2 * even.shape[1]))


@triton.jit
def _forward_partials_kernel(
        k_ptr, v_ptr, angle_ptr, ws_ptr,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        num_heads, num_tokens, width, head_dim, tokens_per_chunk,
        BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT_PRECISION: tl.constexpr, WHOLE_PAIRS: tl.constexpr):
    """Shifted k / v sums of one chunk of tokens (see the module docstring)."""
    chunk = tl.program_id(0)
    bh = tl.program_id(1)
    num_chunks = tl.num_programs(0)
    k_base = _head_base(k_ptr, bh, num_heads, stride_kb, stride_kh)
    v_base = _head_base(v_ptr, bh, num_heads, stride_vb, stride_vh)
    pairs = tl.arange(0, BLOCK_P)
    channels = tl.arange(0, BLOCK_D)
    key_channels = tl.arange(0, 2 * BLOCK_P)   # the keys' natural order (pairs joined)
    pair_ok = pairs < head_dim // 2
    channel_ok = channels < head_dim
    angle, is_row_pair = _pair_angles(pairs, angle_ptr, head_dim)
    chunk_start = chunk * tokens_per_chunk
    chunk_end = tl.minimum(chunk_start + tokens_per_chunk, num_tokens)

    # Shifts: the means of the chunk's first block (re-read from cache below).
    # Distinct names: a name reassigned in the loop would become loop-carried.
    first_tokens = chunk_start + tl.arange(0, BLOCK_N)
    first_ok = first_tokens < chunk_end
    _, _, first_kr_even, first_kr_odd, first_v = _key_value_block(
        k_base, v_base, first_tokens, pairs, channels, first_ok, pair_ok, channel_ok,
        head_dim, angle, is_row_pair, width, stride_kn, stride_kd, stride_vn, stride_vd,
        WHOLE_PAIRS)
    first_count = tl.sum(first_ok.to(tl.float32), axis=0)
    kr_shift = tl.sum(_whole(first_kr_even, first_kr_odd), axis=0) / first_count
    v_shift = tl.sum(first_v, axis=0) / first_count

    kv = tl.zeros((2 * BLOCK_P, BLOCK_D), dtype=tl.float32)
    ka_rows = tl.zeros((BLOCK_N, 2 * BLOCK_P), dtype=tl.float32)
    kr_rows = tl.zeros((BLOCK_N, 2 * BLOCK_P), dtype=tl.float32)
    v_rows = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for block_start in range(chunk_start, chunk_end, BLOCK_N):
        tokens = block_start + tl.arange(0, BLOCK_N)
        token_ok = tokens < chunk_end
        ka_even, ka_odd, kr_even, kr_odd, v = _key_value_block(
            k_base, v_base, tokens, pairs, channels, token_ok, pair_ok, channel_ok,
            head_dim, angle, is_row_pair, width, stride_kn, stride_kd, stride_vn, stride_vd,
            WHOLE_PAIRS)
        kr = tl.where(token_ok[:, None] & (key_channels < head_dim)[None, :],
                      _whole(kr_even, kr_odd) - kr_shift[None, :], 0.0)
        v = tl.where(token_ok[:, None] & channel_ok[None, :], v - v_shift[None, :], 0.0)
        kv = tl.dot(tl.trans(kr), v, kv, input_precision=DOT_PRECISION)
        ka_rows += _whole(ka_even, ka_odd)
        kr_rows += kr
        v_rows += v

    ws_chunk = _matrix_base(ws_ptr, bh.to(tl.int64) * num_chunks + chunk,
                            head_dim + FWD_EXTRA_ROWS, head_dim)
    key_ok = key_channels < head_dim
    tl.store(ws_chunk + key_channels[:, None] * head_dim + channels[None, :], kv,
             mask=key_ok[:, None] & channel_ok[None, :])
    extra = ws_chunk + head_dim * head_dim
    tl.store(extra + FWD_ROW_K_SUM * head_dim + key_channels, tl.sum(ka_rows, axis=0),
             mask=key_ok)
    tl.store(extra + FWD_ROW_KR_DEV * head_dim + key_channels, tl.sum(kr_rows, axis=0),
             mask=key_ok)
    tl.store(extra + FWD_ROW_KR_SHIFT * head_dim + key_channels, kr_shift, mask=key_ok)
    tl.store(extra + FWD_ROW_V_DEV * head_dim + channels, tl.sum(v_rows, axis=0),
             mask=channel_ok)
    tl.store(extra + FWD_ROW_V_SHIFT * head_dim + channels, v_shift, mask=channel_ok)


@triton.jit
def _chunk_block(first, CHUNKS: tl.constexpr, num_chunks, tokens_per_chunk, num_tokens,
                 chunk_size, head_dim):
    """Chunks ``first .. first + CHUNKS`` of a head: which exist, their token
    counts (0 past the last chunk) and the offsets of their extra rows."""
    chunks = first + tl.arange(0, CHUNKS)
    chunk_ok = chunks < num_chunks
    tokens = tl.minimum(tokens_per_chunk, num_tokens - chunks * tokens_per_chunk)
    count = tl.where(chunk_ok, tokens.to(tl.float32), 0.0)
    return chunks, chunk_ok, count, chunks * chunk_size + head_dim * head_dim


@triton.jit
def _load_chunk_rows(ws_head, extra_offsets, chunk_ok, row, head_dim, index, index_ok):
    """Entries ``index`` of extra row ``row`` of a block of chunks: (chunks, index)."""
    offsets = (extra_offsets + row * head_dim)[:, None] + index[None, :]
    return tl.load(ws_head + offsets, mask=chunk_ok[:, None] & index_ok[None, :], other=0.0)


@triton.jit
def _forward_combine_kernel(
        ws_ptr, stats_ptr, num_chunks, num_tokens, tokens_per_chunk, head_dim, kv_scale,
        ROWS: tl.constexpr, BLOCK_D: tl.constexpr, MEAN_CHUNKS: tl.constexpr,
        KV_CHUNKS: tl.constexpr):
    """Per-head stats from the chunk partials; one program per ROWS rows of KVc.

    Each chunk's shifted sums are re-centred on the global means with exact
    fp32 outer products of small (deviation-sized) vectors:
    sum_j (kr_j - krm)^T (v_j - vm) = P + dk^T Dv + Dk^T dv + n dk^T dv with
    dk = kr_shift - krm, dv = v_shift - vm, Dk / Dv the summed deviations.

    Chunks are summed a block at a time (``MEAN_CHUNKS`` for the means,
    ``KV_CHUNKS`` for the matrix), so hundreds of chunks cost a few rounds of
    independent loads, not one L2 round trip each. Every program writes the
    mean-k entries of its own rows; program 0 also writes vm.
    """
    row_block = tl.program_id(0)
    bh = tl.program_id(1)
    rows = row_block * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < head_dim
    col_ok = cols < head_dim
    chunk_size = (head_dim + FWD_EXTRA_ROWS) * head_dim
    ws_head = ws_ptr + bh.to(tl.int64) * num_chunks * chunk_size

    # Pass 1: the means (this program's rows of the k ones, all of vm).
    k_sum = tl.zeros((ROWS,), dtype=tl.float32)
    kr_sum = tl.zeros((ROWS,), dtype=tl.float32)
    v_sum = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for first in range(0, num_chunks, MEAN_CHUNKS):
        _, chunk_ok, count, extra = _chunk_block(first, MEAN_CHUNKS, num_chunks,
                                                 tokens_per_chunk, num_tokens, chunk_size,
                                                 head_dim)
        k_sum += tl.sum(_load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_K_SUM, head_dim,
                                         rows, row_ok), axis=0)
        kr_sum += tl.sum(
            count[:, None] * _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_KR_SHIFT,
                                              head_dim, rows, row_ok)
            + _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_KR_DEV, head_dim, rows, row_ok),
            axis=0)
        v_sum += tl.sum(
            count[:, None] * _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_V_SHIFT,
                                              head_dim, cols, col_ok)
            + _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_V_DEV, head_dim, cols, col_ok),
            axis=0)
    krm = kr_sum / num_tokens
    vm = v_sum / num_tokens

    # Pass 2: the centred KV rows.
    kv = tl.zeros((ROWS, BLOCK_D), dtype=tl.float32)
    matrix_ok = row_ok[:, None] & col_ok[None, :]
    matrix_offsets = rows[:, None] * head_dim + cols[None, :]
    for first in range(0, num_chunks, KV_CHUNKS):
        chunks, chunk_ok, count, extra = _chunk_block(first, KV_CHUNKS, num_chunks,
                                                      tokens_per_chunk, num_tokens, chunk_size,
                                                      head_dim)
        partial = tl.load(ws_head + (chunks * chunk_size)[:, None, None] + matrix_offsets[None],
                          mask=chunk_ok[:, None, None] & matrix_ok[None], other=0.0)
        row_mask = chunk_ok[:, None] & row_ok[None, :]
        col_mask = chunk_ok[:, None] & col_ok[None, :]
        k_offset = tl.where(row_mask, _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_KR_SHIFT,
                                                       head_dim, rows, row_ok) - krm[None, :], 0.0)
        k_dev = _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_KR_DEV, head_dim, rows, row_ok)
        v_offset = tl.where(col_mask, _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_V_SHIFT,
                                                       head_dim, cols, col_ok) - vm[None, :], 0.0)
        v_dev = _load_chunk_rows(ws_head, extra, chunk_ok, FWD_ROW_V_DEV, head_dim, cols, col_ok)
        kv += tl.sum(partial + k_offset[:, :, None] * v_dev[:, None, :]
                     + k_dev[:, :, None] * v_offset[:, None, :]
                     + (count[:, None] * k_offset)[:, :, None] * v_offset[:, None, :], axis=0)

    stats_head = _matrix_base(stats_ptr, bh.to(tl.int64), head_dim + STATS_EXTRA_ROWS, head_dim)
    tl.store(stats_head + matrix_offsets, kv * kv_scale, mask=matrix_ok)
    stats_extra = stats_head + head_dim * head_dim
    tl.store(stats_extra + STATS_ROW_KM * head_dim + rows, k_sum / num_tokens, mask=row_ok)
    tl.store(stats_extra + STATS_ROW_KRM * head_dim + rows, krm, mask=row_ok)
    if row_block == 0:  # vm is written once
        tl.store(stats_extra + STATS_ROW_VM * head_dim + cols, vm, mask=col_ok)


@triton.jit
def _head_setup(stats_ptr, angle_ptr, bh, head_dim, BLOCK_P: tl.constexpr,
                BLOCK_D: tl.constexpr):
    """What the output, query and key kernels set up per head: the pair and
    channel indices and masks, the pair angles and the forward means (km, krm
    as pairs; vm). The partials kernel sets up the first three itself."""
    pairs = tl.arange(0, BLOCK_P)
    channels = tl.arange(0, BLOCK_D)
    pair_ok = pairs < head_dim // 2
    channel_ok = channels < head_dim
    angle, is_row_pair = _pair_angles(pairs, angle_ptr, head_dim)
    stats_head = _matrix_base(stats_ptr, bh.to(tl.int64), head_dim + STATS_EXTRA_ROWS, head_dim)
    extra = stats_head + head_dim * head_dim
    km_even, km_odd = _load_vector_pairs(extra + STATS_ROW_KM * head_dim, pairs, pair_ok)
    krm_even, krm_odd = _load_vector_pairs(extra + STATS_ROW_KRM * head_dim, pairs, pair_ok)
    vm = tl.load(extra + STATS_ROW_VM * head_dim + channels, mask=channel_ok, other=0.0)
    return (pairs, channels, pair_ok, channel_ok, angle, is_row_pair,
            km_even, km_odd, krm_even, krm_odd, vm)


@triton.jit
def _load_natural_kv(matrix_ptr, bh, head_dim, ROWS: tl.constexpr, channels, channel_ok,
                     extra_rows: tl.constexpr = STATS_EXTRA_ROWS):
    """The (d, d) matrix at the head of a per-head fp32 buffer, in channel order,
    padded to ``ROWS`` rows."""
    head = _matrix_base(matrix_ptr, bh.to(tl.int64), head_dim + extra_rows, head_dim)
    rows = tl.arange(0, ROWS)
    return tl.load(head + rows[:, None] * head_dim + channels[None, :],
                   mask=(rows < head_dim)[:, None] & channel_ok[None, :], other=0.0)


@triton.jit
def _forward_output_kernel(
        q_ptr, stats_ptr, angle_ptr, out_ptr,
        stride_qb, stride_qh, stride_qn, stride_qd,
        stride_ob, stride_oh, stride_on, stride_od,
        num_heads, num_tokens, width, head_dim, scale, tokens_per_program,
        BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT_PRECISION: tl.constexpr, WHOLE_PAIRS: tl.constexpr):
    """out for ``tokens_per_program`` tokens: the (d, d) stats are loaded once
    per program, not once per tile (they come from L2 and outweigh a tile of q)."""
    program = tl.program_id(0)
    bh = tl.program_id(1)
    (pairs, channels, pair_ok, channel_ok, angle, is_row_pair,
     km_even, km_odd, krm_even, krm_odd, vm) = _head_setup(
        stats_ptr, angle_ptr, bh, head_dim, BLOCK_P, BLOCK_D)
    kv = _load_natural_kv(stats_ptr, bh, head_dim, 2 * BLOCK_P, channels, channel_ok)

    q_base = _head_base(q_ptr, bh, num_heads, stride_qb, stride_qh)
    out_base = _head_base(out_ptr, bh, num_heads, stride_ob, stride_oh)
    first = program * tokens_per_program
    last = tl.minimum(first + tokens_per_program, num_tokens)
    for block_start in range(first, last, BLOCK_N):
        tokens = block_start + tl.arange(0, BLOCK_N)
        token_ok = tokens < last
        pair_mask = token_ok[:, None] & pair_ok[None, :]
        q_even, q_odd = _load_pairs(q_base, tokens, pairs, stride_qn, stride_qd, token_ok,
                                    pair_ok, head_dim, WHOLE_PAIRS)
        _, _, qr_even, qr_odd, _, _, _, _, _, gain, coef = _query_terms(
            q_even, q_odd, pair_mask, tokens, angle, is_row_pair, width,
            km_even, km_odd, krm_even, krm_odd, scale)
        attended = tl.dot(_whole(qr_even, qr_odd), kv, input_precision=DOT_PRECISION)
        out = gain[:, None] * attended + coef[:, None] * vm[None, :]
        _store_tile(out_base, tokens, channels, stride_on, stride_od,
                    token_ok[:, None] & channel_ok[None, :], out)


# -- Backward ----------------------------------------------------------------
@triton.jit
def _backward_query_kernel(
        q_ptr, dout_ptr, stats_ptr, angle_ptr, dq_ptr, ws_ptr,
        stride_qb, stride_qh, stride_qn, stride_qd,
        stride_gb, stride_gh, stride_gn, stride_gd,
        stride_dqb, stride_dqh, stride_dqn, stride_dqd,
        num_heads, num_tokens, width, head_dim, tokens_per_chunk, scale,
        BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT_PRECISION: tl.constexpr, WHOLE_PAIRS: tl.constexpr):
    """dq, and the per-chunk reductions the key side needs.

    With w = dout . vm, u = dout . (qr KVc) and qr KV = qr KVc + s a vm:
      dz  = -(u + s a w) inv^2 - w
      dqr = g dout KVc^T + s g w krm
      dqa = rope^T(dqr) + s dz km
    """
    chunk = tl.program_id(0)
    bh = tl.program_id(1)
    num_chunks = tl.num_programs(0)
    (pairs, channels, pair_ok, channel_ok, angle, is_row_pair,
     km_even, km_odd, krm_even, krm_odd, vm) = _head_setup(
        stats_ptr, angle_ptr, bh, head_dim, BLOCK_P, BLOCK_D)
    query_channels = tl.arange(0, 2 * BLOCK_P)   # the queries' natural order (pairs joined)
    query_ok = query_channels < head_dim
    kv = _load_natural_kv(stats_ptr, bh, head_dim, 2 * BLOCK_P, channels, channel_ok)
    stats_extra = (_matrix_base(stats_ptr, bh.to(tl.int64), head_dim + STATS_EXTRA_ROWS, head_dim)
                   + head_dim * head_dim)
    krm = tl.load(stats_extra + STATS_ROW_KRM * head_dim + query_channels, mask=query_ok,
                  other=0.0)   # in channel order too, for the joined dqr
    q_base = _head_base(q_ptr, bh, num_heads, stride_qb, stride_qh)
    dout_base = _head_base(dout_ptr, bh, num_heads, stride_gb, stride_gh)
    dq_base = _head_base(dq_ptr, bh, num_heads, stride_dqb, stride_dqh)
    chunk_start = chunk * tokens_per_chunk
    chunk_end = tl.minimum(chunk_start + tokens_per_chunk, num_tokens)

    dkv = tl.zeros((2 * BLOCK_P, BLOCK_D), dtype=tl.float32)
    qvec_rows = tl.zeros((BLOCK_N, 2 * BLOCK_P), dtype=tl.float32)
    dz_qa_rows = tl.zeros((BLOCK_N, 2 * BLOCK_P), dtype=tl.float32)
    coef_dout_rows = tl.zeros((BLOCK_N, BLOCK_D), dtype=tl.float32)
    for block_start in range(chunk_start, chunk_end, BLOCK_N):
        tokens = block_start + tl.arange(0, BLOCK_N)
        token_ok = tokens < chunk_end
        pair_mask = token_ok[:, None] & pair_ok[None, :]
        q_even, q_odd = _load_pairs(q_base, tokens, pairs, stride_qn, stride_qd, token_ok,
                                    pair_ok, head_dim, WHOLE_PAIRS)
        qa_even, qa_odd, qr_even, qr_odd, cos, sin, z, a, inv, gain, coef = _query_terms(
            q_even, q_odd, pair_mask, tokens, angle, is_row_pair, width,
            km_even, km_odd, krm_even, krm_odd, scale)
        qr = _whole(qr_even, qr_odd)
        dout = _load_tile(dout_base, tokens, channels, stride_gn, stride_gd,
                          token_ok[:, None] & channel_ok[None, :])

        attended = tl.dot(qr, kv, input_precision=DOT_PRECISION)
        u = tl.sum(dout * attended, axis=1)
        w = tl.sum(dout * vm[None, :], axis=1)
        dz = -(u + scale * a * w) * inv * inv - w

        dqr = (gain[:, None] * tl.dot(dout, tl.trans(kv), input_precision=DOT_PRECISION)
               + (scale * gain * w)[:, None] * krm[None, :])
        dqr_even, dqr_odd = tl.split(tl.reshape(dqr, (BLOCK_N, BLOCK_P, 2)))
        dqa_even, dqa_odd = _rotate_back(dqr_even, dqr_odd, cos, sin)
        dqa_even += scale * dz[:, None] * km_even[None, :]
        dqa_odd += scale * dz[:, None] * km_odd[None, :]
        _store_pairs(dq_base, tokens, pairs, stride_dqn, stride_dqd, token_ok, pair_ok, head_dim,
                     dqa_even * _elu_grad(q_even), dqa_odd * _elu_grad(q_odd), WHOLE_PAIRS)

        gqr = gain[:, None] * qr
        dkv = tl.dot(tl.trans(gqr), dout, dkv, input_precision=DOT_PRECISION)
        qvec_rows += gqr * w[:, None]
        dz_qa_rows += dz[:, None] * _whole(qa_even, qa_odd)
        coef_dout_rows += coef[:, None] * dout

    key_scale = scale / num_tokens
    ws_chunk = _matrix_base(ws_ptr, bh.to(tl.int64) * num_chunks + chunk,
                            head_dim + GRAD_EXTRA_ROWS, head_dim)
    tl.store(ws_chunk + query_channels[:, None] * head_dim + channels[None, :],
             dkv * key_scale, mask=query_ok[:, None] & channel_ok[None, :])
    extra = ws_chunk + head_dim * head_dim
    tl.store(extra + GRAD_ROW_QVEC * head_dim + query_channels,
             tl.sum(qvec_rows, axis=0) * key_scale, mask=query_ok)
    tl.store(extra + GRAD_ROW_DKM * head_dim + query_channels,
             tl.sum(dz_qa_rows, axis=0) * key_scale, mask=query_ok)
    tl.store(extra + GRAD_ROW_CDOUT * head_dim + channels,
             tl.sum(coef_dout_rows, axis=0) / num_tokens, mask=channel_ok)


@triton.jit
def _backward_key_kernel(
        k_ptr, v_ptr, stats_ptr, grads_ptr, angle_ptr, dk_ptr, dv_ptr,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_dkb, stride_dkh, stride_dkn, stride_dkd,
        stride_dvb, stride_dvh, stride_dvn, stride_dvd,
        num_heads, num_tokens, width, head_dim, tokens_per_program,
        BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_D: tl.constexpr,
        DOT_PRECISION: tl.constexpr, WHOLE_PAIRS: tl.constexpr):
    """dk and dv of ``tokens_per_program`` tokens, centred like the forward
    (dKVs = (s/N) dKV); the small per-head sums are loaded once per program:

      dkr = (v - vm) dKVs^T + (s/N) sum_i g w qr ;  dka = rope^T(dkr) + dkm/N
      dv  = (kr - krm) dKVs + (1/N) sum_i c dout
    """
    program = tl.program_id(0)
    bh = tl.program_id(1)
    (pairs, channels, pair_ok, channel_ok, angle, is_row_pair,
     _, _, krm_even, krm_odd, vm) = _head_setup(
        stats_ptr, angle_ptr, bh, head_dim, BLOCK_P, BLOCK_D)
    grads_head = _matrix_base(grads_ptr, bh.to(tl.int64), head_dim + GRAD_EXTRA_ROWS, head_dim)
    dkv = _load_natural_kv(grads_ptr, bh, head_dim, 2 * BLOCK_P, channels, channel_ok,
                           GRAD_EXTRA_ROWS)
    key_channels = tl.arange(0, 2 * BLOCK_P)
    extra = grads_head + head_dim * head_dim
    qvec = tl.load(extra + GRAD_ROW_QVEC * head_dim + key_channels,
                   mask=key_channels < head_dim, other=0.0)
    dkm_even, dkm_odd = _load_vector_pairs(extra + GRAD_ROW_DKM * head_dim, pairs, pair_ok)
    coef_dout = tl.load(extra + GRAD_ROW_CDOUT * head_dim + channels, mask=channel_ok, other=0.0)

    k_base = _head_base(k_ptr, bh, num_heads, stride_kb, stride_kh)
    v_base = _head_base(v_ptr, bh, num_heads, stride_vb, stride_vh)
    dk_base = _head_base(dk_ptr, bh, num_heads, stride_dkb, stride_dkh)
    dv_base = _head_base(dv_ptr, bh, num_heads, stride_dvb, stride_dvh)
    first = program * tokens_per_program
    last = tl.minimum(first + tokens_per_program, num_tokens)
    for block_start in range(first, last, BLOCK_N):
        tokens = block_start + tl.arange(0, BLOCK_N)
        token_ok = tokens < last
        pair_mask = token_ok[:, None] & pair_ok[None, :]
        channel_mask = token_ok[:, None] & channel_ok[None, :]
        k_even, k_odd = _load_pairs(k_base, tokens, pairs, stride_kn, stride_kd, token_ok,
                                    pair_ok, head_dim, WHOLE_PAIRS)
        ka_even, ka_odd = _activate_pairs(k_even, k_odd, pair_mask)
        cos, sin = _token_rotation(tokens, angle, is_row_pair, width)
        kr_even, kr_odd = _rotate(ka_even, ka_odd, cos, sin)
        v = _load_tile(v_base, tokens, channels, stride_vn, stride_vd, channel_mask)

        v_centred = tl.where(channel_mask, v - vm[None, :], 0.0)
        dkr = tl.dot(v_centred, tl.trans(dkv), input_precision=DOT_PRECISION) + qvec[None, :]
        dkr_even, dkr_odd = tl.split(tl.reshape(dkr, (BLOCK_N, BLOCK_P, 2)))
        dka_even, dka_odd = _rotate_back(dkr_even, dkr_odd, cos, sin)
        _store_pairs(dk_base, tokens, pairs, stride_dkn, stride_dkd, token_ok, pair_ok, head_dim,
                     (dka_even + dkm_even[None, :]) * _elu_grad(k_even),
                     (dka_odd + dkm_odd[None, :]) * _elu_grad(k_odd), WHOLE_PAIRS)

        kr_centred = _whole(tl.where(pair_mask, kr_even - krm_even[None, :], 0.0),
                            tl.where(pair_mask, kr_odd - krm_odd[None, :], 0.0))
        dv = tl.dot(kr_centred, dkv, input_precision=DOT_PRECISION) + coef_dout[None, :]
        _store_tile(dv_base, tokens, channels, stride_dvn, stride_dvd, channel_mask, dv)
