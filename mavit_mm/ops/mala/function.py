"""Autograd function and launch logic of the fused Triton MALA.

Imported only when the Triton path is taken (it imports triton). What the
kernels compute is described in ``kernels.py``; what is saved for backward is
q, k, v (the caller's own tensors, no copies) and one fp32 ``(B*heads, d + 3, d)``
stats tensor: the centred KV matrix, mean k, mean rotated k and mean v.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import triton
from torch.autograd.function import once_differentiable

from . import kernels

# fp32 inputs get exact fp32 dots. Half inputs use tf32 tensor cores on fp32
# operands: fp32 range (a half KV would overflow at large activations) and,
# thanks to the centring in the kernels, an error that is not amplified.
DOT_PRECISION = {torch.float32: 'ieee', torch.float16: 'tf32', torch.bfloat16: 'tf32'}
# A chunk's partial sums cost a (d + 5) x d fp32 write + read: with at least
# this many tokens per chunk that stays a few percent of reading k and v.
MIN_TOKENS_PER_CHUNK = 1024
# Enough split-N programs to fill the GPU even when B * heads is 1.
PROGRAMS_PER_SM = 2
COMBINE_ROWS = 16
# (tokens per tile, warps) per kernel, for heads up to 64 channels and wider
# ones. Chosen from ahead-of-time sm_80/sm_90 compiles (registers, spills,
# shared memory: ``bench_mala.py --compile-report``), not from GPU timings.
KERNEL_TILES = {
    'narrow': dict(output=(64, 4), partials=(32, 8), query=(32, 8), key=(32, 4)),
    'wide': dict(output=(32, 8), partials=(16, 8), query=(16, 8), key=(16, 8)),
}
# Peak shared memory per block (KiB) of the forward / backward kernels with
# those tiles: the largest seen over dtypes and shapes on sm_80 and sm_90 with Triton 3.9
# (``bench_mala.py --compile-report 80 90``). GPUs with ~99 KiB per block
# (sm_86, sm_89) cannot run the wide-head backward.
SHARED_MEMORY_KIB = {'narrow': (48, 57), 'wide': (81, 152)}


@dataclass(frozen=True)
class KernelTile:
    block_n: int    # tokens per tile (>= 16 for tl.dot)
    num_warps: int


@dataclass(frozen=True)
class LaunchPlan:
    block_p: int           # channel pairs per tile (padded, >= 16 for tl.dot)
    block_d: int           # channels per tile (padded, >= 16 for tl.dot)
    output: KernelTile     # forward output pass
    partials: KernelTile   # forward split-N reduction
    query: KernelTile      # backward query pass (split-N)
    key: KernelTile        # backward key pass
    tokens_per_chunk: int  # tokens one split-N program reduces
    num_chunks: int
    dot_precision: str


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != 'cuda':
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def _default_tokens_per_chunk(num_tokens: int, batch_heads: int, block_n: int,
                              device: torch.device) -> int:
    wanted_programs = PROGRAMS_PER_SM * _sm_count(device)
    chunks = min(triton.cdiv(wanted_programs, batch_heads),
                 triton.cdiv(num_tokens, MIN_TOKENS_PER_CHUNK))
    chunks = max(chunks, 1)
    return triton.cdiv(triton.cdiv(num_tokens, chunks), block_n) * block_n


def tile_family(head_dim: int) -> str:
    return 'narrow' if triton.next_power_of_2(head_dim) <= 64 else 'wide'


@functools.lru_cache(maxsize=None)
def _max_shared_memory_kib(device_index: int) -> Optional[int]:
    try:
        from triton.runtime import driver
        properties = driver.active.utils.get_device_properties(device_index)
        return properties['max_shared_mem'] // 1024
    except Exception:  # unknown driver API: let the launch decide
        return None


def shared_memory_shortfall(head_dim: int, device: torch.device, backward: bool) -> Optional[str]:
    """Why this GPU lacks the shared memory the kernels need, or ``None``."""
    if device.type != 'cuda':
        return None
    needed = SHARED_MEMORY_KIB[tile_family(head_dim)][1 if backward else 0]
    index = device.index if device.index is not None else torch.cuda.current_device()
    available = _max_shared_memory_kib(index)
    if available is None or available >= needed:
        return None
    which = 'backward' if backward else 'forward'
    return (f'head dim {head_dim} needs ~{needed} KiB of shared memory per block in the '
            f'{which} kernels, {torch.cuda.get_device_name(index)} offers {available} KiB')


def make_launch_plan(num_tokens: int, batch_heads: int, head_dim: int, dtype: torch.dtype,
                     device: torch.device, block_n: Optional[int] = None,
                     tokens_per_chunk: Optional[int] = None) -> LaunchPlan:
    """Tile sizes and the split-N chunking. ``block_n`` (every kernel) and
    ``tokens_per_chunk`` override the defaults; tests use them to get several
    blocks and chunks out of a few tokens."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_p = max(16, triton.next_power_of_2(head_dim // 2))
    tiles = {name: KernelTile(*tile) for name, tile in KERNEL_TILES[tile_family(head_dim)].items()}
    if block_n is not None:
        if block_n < 16 or block_n & (block_n - 1):
            raise ValueError(f'block_n must be a power of two >= 16, got {block_n}')
        tiles = {name: KernelTile(block_n, tile.num_warps) for name, tile in tiles.items()}
    reduce_block_n = max(tiles['partials'].block_n, tiles['query'].block_n)
    if tokens_per_chunk is None:
        tokens_per_chunk = _default_tokens_per_chunk(num_tokens, batch_heads, reduce_block_n,
                                                     device)
    if tokens_per_chunk < 1:
        raise ValueError(f'tokens_per_chunk must be positive, got {tokens_per_chunk}')
    return LaunchPlan(block_p=block_p, block_d=block_d, **tiles,
                      tokens_per_chunk=tokens_per_chunk,
                      num_chunks=triton.cdiv(num_tokens, tokens_per_chunk),
                      dot_precision=DOT_PRECISION[dtype])


def _empty_like_layout(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised (B, heads, N, d) tensor laid out like ``x``.

    Token-contiguous inputs (the backbone's (B, heads, d, N) views) get a
    token-contiguous result, so the backbone's transpose + reshape back to
    (B, C, H, W) is a free view instead of a copy.
    """
    batch, heads, num_tokens, head_dim = x.shape
    if x.stride(-2) == 1 and x.stride(-1) != 1:
        return x.new_empty(batch, heads, head_dim, num_tokens).transpose(-1, -2)
    return x.new_empty(batch, heads, num_tokens, head_dim)


def _tile_meta(plan: LaunchPlan, tile: KernelTile) -> dict:
    return dict(BLOCK_N=tile.block_n, BLOCK_P=plan.block_p, BLOCK_D=plan.block_d,
                DOT_PRECISION=plan.dot_precision, num_warps=tile.num_warps)


def mala_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
                 width: int, plan: LaunchPlan) -> Tuple[torch.Tensor, torch.Tensor]:
    """Returns ``out`` and the per-head fp32 stats saved for backward."""
    batch, heads, num_tokens, head_dim = q.shape
    batch_heads = batch * heads
    scale = head_dim ** -0.5
    workspace = torch.empty(batch_heads, plan.num_chunks, head_dim + kernels.FWD_EXTRA_ROWS.value,
                            head_dim, device=q.device, dtype=torch.float32)
    stats = torch.empty(batch_heads, head_dim + kernels.STATS_EXTRA_ROWS.value, head_dim,
                        device=q.device, dtype=torch.float32)
    out = _empty_like_layout(q)

    kernels._forward_partials_kernel[(plan.num_chunks, batch_heads)](
        k, v, angle, workspace, *k.stride(), *v.stride(),
        heads, num_tokens, width, head_dim, plan.tokens_per_chunk,
        **_tile_meta(plan, plan.partials))
    kernels._forward_combine_kernel[(triton.cdiv(head_dim, COMBINE_ROWS), batch_heads)](
        workspace, stats, plan.num_chunks, num_tokens, plan.tokens_per_chunk, head_dim,
        scale / num_tokens, ROWS=COMBINE_ROWS, BLOCK_D=plan.block_d, num_warps=4)
    kernels._forward_output_kernel[(triton.cdiv(num_tokens, plan.output.block_n), batch_heads)](
        q, stats, angle, out, *q.stride(), *out.stride(),
        heads, num_tokens, width, head_dim, scale, **_tile_meta(plan, plan.output))
    return out, stats


def mala_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  angle: torch.Tensor, stats: torch.Tensor, width: int,
                  plan: LaunchPlan) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch, heads, num_tokens, head_dim = q.shape
    batch_heads = batch * heads
    scale = head_dim ** -0.5
    workspace = torch.empty(batch_heads, plan.num_chunks, head_dim + kernels.GRAD_EXTRA_ROWS.value,
                            head_dim, device=q.device, dtype=torch.float32)
    dq, dk, dv = _empty_like_layout(q), _empty_like_layout(k), _empty_like_layout(v)

    kernels._backward_query_kernel[(plan.num_chunks, batch_heads)](
        q, dout, stats, angle, dq, workspace, *q.stride(), *dout.stride(), *dq.stride(),
        heads, num_tokens, width, head_dim, plan.tokens_per_chunk, scale,
        **_tile_meta(plan, plan.query))
    # Partials are pre-scaled in the kernel; summing the chunks is all that is left.
    key_grads = workspace[:, 0] if plan.num_chunks == 1 else workspace.sum(dim=1)
    kernels._backward_key_kernel[(triton.cdiv(num_tokens, plan.key.block_n), batch_heads)](
        k, v, stats, key_grads, angle, dk, dv,
        *k.stride(), *v.stride(), *dk.stride(), *dv.stride(),
        heads, num_tokens, width, head_dim, **_tile_meta(plan, plan.key))
    return dq, dk, dv


def _on_device(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(device) if device.type == 'cuda' else contextlib.nullcontext()


class FusedMALAFunction(torch.autograd.Function):
    """MALA over (B, heads, N, d) pre-activation q, k and v, fused in Triton."""

    @staticmethod
    def forward(ctx, q, k, v, angle, width, block_n, tokens_per_chunk):
        batch, heads, num_tokens, head_dim = q.shape
        plan = make_launch_plan(num_tokens, batch * heads, head_dim, q.dtype, q.device,
                                block_n, tokens_per_chunk)
        angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
        with _on_device(q.device):
            out, stats = mala_forward(q, k, v, angle, width, plan)
        ctx.save_for_backward(q, k, v, angle, stats)
        ctx.width = width
        ctx.plan = plan
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, angle, stats = ctx.saved_tensors
        with _on_device(q.device):
            dq, dk, dv = mala_backward(dout, q, k, v, angle, stats, ctx.width, ctx.plan)
        return dq, dk, dv, None, None, None, None


def fused_mala(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
               width: int, block_n: Optional[int] = None,
               tokens_per_chunk: Optional[int] = None) -> torch.Tensor:
    """Fused MALA; the caller has checked the case is supported (see ``__init__``)."""
    return FusedMALAFunction.apply(q, k, v, angle, width, block_n, tokens_per_chunk)
