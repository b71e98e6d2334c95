"""The fused MALA's host side: launch plans, launches, and the PyTorch
operators with their autograd (the kernels are :mod:`.kernels`). Imported
only when the Triton path is taken (it imports triton).
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from ..triton_support import cdiv, check_triton_release, on_device, refuse_second_derivative

check_triton_release()

import triton  # noqa: E402
from triton.runtime.errors import OutOfResources  # noqa: E402,F401  (dispatch catches it)

from . import kernels  # noqa: E402

# -- Plans --------------------------------------------------------------------
# fp32 inputs get exact fp32 dots. Half inputs use tf32 on fp32 operands: fp32
# range (a half KV would overflow) with an error the centring keeps small
# (:mod:`.kernels`); bf16 operands would miss the bf16 test tolerance for dq.
DOT_PRECISION = {torch.float32: 'ieee', torch.float16: 'tf32', torch.bfloat16: 'tf32'}
# A chunk's partial sums cost a (d + 5) x d fp32 write + read, about as much as
# reading d + 5 more tokens (PARTIAL_SUM_TOKENS: that cost in the chunk model);
# with MIN_TOKENS_PER_CHUNK tokens a chunk they stay a few percent of k and v.
MIN_TOKENS_PER_CHUNK = 512
PARTIAL_SUM_TOKENS = 64
# Split-N programs one SM runs at once: what the CUDA occupancy rules give for
# the sm_90 compile of the bf16 d = 64 partials kernel on the model's layout
# (benchmarks/results/compile-report-sm90-*.txt; a test recompiles it). A
# table, not each GPU's compile: the planner compiles nothing.
RESIDENT_PROGRAMS_PER_SM = 3
# The token-parallel kernels (output, key) loop over several tiles per program
# so the (d, d) stats are read once per program; but keep at least this many
# programs per SM so that every SM has work. Per kernel, by timing (the
# tokens_per_program rows of gpu-h200-2026-11-26/part-a and
# gpu-h200-2026-11-27/part-6's tune-bh*.json in benchmarks/results, with
# 64-token tiles): at B*heads 1, N 65,536 the key kernel ran 1.075x and 1.17x
# slower with the 2 tiles a program that 4 programs per SM give than with its
# fastest (4 and 8 tiles), and 1.00x and 1.05x with the 4 of 2 per SM; the
# output kernel's 2 tiles were its fastest and 1.08x. At B*heads 16 both take
# MAX_TILES_PER_PROGRAM, within 4% of the fastest.
TOKEN_PROGRAMS_PER_SM = dict(output=4, key=2)
MAX_TILES_PER_PROGRAM = 16
# (tokens per tile, warps, software-pipeline stages) per kernel, for heads up
# to 64 channels and wider ones; 'combine' is (rows of KVc per program, warps,
# stages). From sm_90 compiles of the bf16 kernels (``bench_mala.py
# --compile-report``): the largest tiles that keep wgmma products and spill
# nothing at d <= 64; the partials loop keeps 4 tiles in flight (5 stages), as
# at batch 1 it is bound by load latency; wide heads spill less with 16-token
# tiles. Except the narrow query tile, chosen by timing
# (``benchmarks/tune_mala.py``): the fastest of 24 at d = 64 and B*heads 1 and
# 16 on an H200 (gpu-h200-2026-11-27/part-6/tune-bh*.json), though it spills.
KERNEL_TILES = {
    'narrow': dict(output=(64, 4, 1), partials=(16, 8, 5), query=(64, 8, 1), key=(64, 8, 3),
                   combine=(2, 4, 1)),
    'wide': dict(output=(16, 8, 3), partials=(16, 8, 3), query=(16, 8, 1), key=(16, 8, 3),
                 combine=(4, 4, 1)),
}
# fp32 inputs (exact fp32 products, no tensor cores) hold twice the bytes a
# tile: smaller tiles where the half ones would spill at d = 64 on sm_90, with
# each Triton that torch 2.11-2.13 bring (3.6, 3.7, 3.9). Their warps too:
# Triton 3.7 compiles the output kernel's 32-token tile on 4 warps to 32
# registers and 3.6 KB of stack, and 3.6 and 3.7 hold the query kernel on 8
# warps to 128 registers, spilling (compile-report-sm90-*-2026-11-27-*.txt
# in benchmarks/results/, one per Triton). Wide heads keep the half tiles:
# they spill with Triton 3.9 alone, the CPU's interpreter release
# (compile-sweep-sm90-wide-2026-11-27.txt).
FP32_TILES = {'narrow': dict(output=(32, 8, 1), query=(16, 4, 1), key=(32, 8, 3)), 'wide': {}}
KERNEL_NAMES = ('partials', 'combine', 'output', 'query', 'key')
FORWARD_KERNELS = ('partials', 'combine', 'output')
BACKWARD_KERNELS = ('query', 'key')
# The combine kernel sums a block of chunks per step (tl.sum over the block):
# its blocks hold up to this many fp32 values per thread.
COMBINE_VALUES_PER_THREAD = 32
# Fused multiply-adds, as the kernels were validated with; said explicitly
# because Triton 3.9 warns that its default becomes "off" in 3.10.
FP_FUSION = True
PLAN_CACHE_SIZE = 256


@dataclass(frozen=True)
class KernelTile:
    block_n: int        # tokens per tile (>= 16 for tl.dot); rows of KVc for 'combine'
    num_warps: int
    num_stages: int = 3


@dataclass(frozen=True)
class LaunchPlan:
    block_p: int           # channel pairs per tile (padded, >= 16 for tl.dot)
    block_d: int           # channels per tile (padded, >= 16 for tl.dot)
    output: KernelTile     # forward output pass
    partials: KernelTile   # forward split-N reduction
    query: KernelTile      # backward query pass (split-N)
    key: KernelTile        # backward key pass
    combine: KernelTile    # forward merge of the split-N partials
    tokens_per_chunk: int  # tokens one split-N program reduces
    num_chunks: int
    output_tokens_per_program: int  # tokens one output program writes
    key_tokens_per_program: int     # tokens one key program writes
    dot_precision: str


@functools.cache
def sm_count(device: torch.device) -> int:
    if device.type != 'cuda':
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def tile_family(head_dim: int) -> str:
    return 'narrow' if triton.next_power_of_2(head_dim) <= 64 else 'wide'


def fastest_chunking(num_tokens: int, batch_heads: int, slots: int, granule: int = 1) -> int:
    """The tokens per split-N chunk that finish soonest, by a model of the
    time as waves x tokens per chunk (plus each chunk's partial sums):
    ``chunks * batch_heads`` programs run ``slots`` at a time, so counts that
    leave the last wave nearly empty lose, and whole waves win. A chunk holds
    whole reduction tiles of ``granule`` tokens, so a count is judged by the
    chunks its rounded size gives."""
    max_chunks = max(1, min(num_tokens // MIN_TOKENS_PER_CHUNK, slots))

    def tokens(chunks: int) -> int:
        return cdiv(cdiv(num_tokens, chunks), granule) * granule

    def cost(chunks: int) -> int:
        waves = cdiv(cdiv(num_tokens, tokens(chunks)) * batch_heads, slots)
        return waves * (tokens(chunks) + PARTIAL_SUM_TOKENS)

    return tokens(min(range(1, max_chunks + 1), key=lambda c: (cost(c), c)))


def make_launch_plan(num_tokens: int, batch_heads: int, head_dim: int, dtype: torch.dtype,
                     device: torch.device, block_n: int | None = None,
                     tokens_per_chunk: int | None = None,
                     tiles: dict[str, tuple[int, ...]] | None = None,
                     tokens_per_program: int | None = None,
                     resident_per_sm: int = RESIDENT_PROGRAMS_PER_SM) -> LaunchPlan:
    """Tile sizes, the split-N chunking and tokens per program.

    ``block_n`` (every token kernel), ``tokens_per_chunk``, ``tiles`` (per
    kernel name, a ``KernelTile``'s fields) and ``tokens_per_program`` (output
    and key kernels) override the defaults: tests use them to get several
    blocks and chunks out of a few tokens, the tuning benchmark to time
    alternatives.
    """
    unknown = set(tiles or {}) - set(KERNEL_NAMES)
    if unknown:
        raise ValueError(f'unknown kernel names {sorted(unknown)}; choose from {KERNEL_NAMES}')
    family = tile_family(head_dim)
    chosen = {name: KernelTile(*tile) for name, tile in
              {**KERNEL_TILES[family], **(FP32_TILES[family] if dtype == torch.float32 else {}),
               **(tiles or {})}.items()}
    if block_n is not None:
        if block_n < 16 or block_n & (block_n - 1):
            raise ValueError(f'block_n must be a power of two >= 16, got {block_n}')
        chosen = {name: tile if name == 'combine' else dataclasses.replace(tile, block_n=block_n)
                  for name, tile in chosen.items()}
    if tokens_per_chunk is None:
        reduce_block_n = max(chosen['partials'].block_n, chosen['query'].block_n)
        tokens_per_chunk = fastest_chunking(num_tokens, batch_heads,
                                            resident_per_sm * sm_count(device), reduce_block_n)
    if tokens_per_chunk < 1:
        raise ValueError(f'tokens_per_chunk must be positive, got {tokens_per_chunk}')

    def per_program(name: str) -> int:
        tile_n = chosen[name].block_n
        if tokens_per_program is not None:
            return cdiv(tokens_per_program, tile_n) * tile_n
        tiles_per_head = cdiv(num_tokens, tile_n)
        wanted = cdiv(tiles_per_head * batch_heads,
                      TOKEN_PROGRAMS_PER_SM[name] * sm_count(device))
        return tile_n * max(1, min(MAX_TILES_PER_PROGRAM, wanted, tiles_per_head))

    return LaunchPlan(block_p=max(16, triton.next_power_of_2(head_dim // 2)),
                      block_d=max(16, triton.next_power_of_2(head_dim)), **chosen,
                      tokens_per_chunk=tokens_per_chunk,
                      num_chunks=cdiv(num_tokens, tokens_per_chunk),
                      output_tokens_per_program=per_program('output'),
                      key_tokens_per_program=per_program('key'),
                      dot_precision=DOT_PRECISION[dtype])


# Every forward and backward of every MALA layer plans its launches: the plans
# (pure functions of a few ints) are kept, 2 per layer size.
cached_launch_plan = functools.lru_cache(maxsize=PLAN_CACHE_SIZE)(make_launch_plan)


# -- Launches -------------------------------------------------------------------
def whole_pairs(t: torch.Tensor) -> bool:
    """Whether the kernels read (and write) ``t``'s RoPE channel pairs as whole
    tiles (``kernels._load_pairs``): its channels are contiguous."""
    return t.stride(-1) == 1


def combine_chunk_blocks(plan: LaunchPlan) -> tuple[int, int]:
    """Chunks the combine kernel reduces at once: (for the means, for the KV
    rows). As many as fill ``COMBINE_VALUES_PER_THREAD`` fp32 values per thread
    in its widest tile ((chunks, d) and (chunks, rows, d)), powers of two, and
    no more than the plan's chunks (rounded up to a power of two)."""
    budget = COMBINE_VALUES_PER_THREAD * plan.combine.num_warps * 32
    most = 1 << max(plan.num_chunks - 1, 0).bit_length()

    def floor_power_of_2(n: int) -> int:
        return 1 << (max(n, 1).bit_length() - 1)

    return (min(most, floor_power_of_2(budget // plan.block_d)),
            min(most, floor_power_of_2(budget // (plan.combine.block_n * plan.block_d))))


def launch_table(plan: LaunchPlan, whole_q_pairs: bool = True,
                 whole_k_pairs: bool = True) -> dict[str, tuple[object, dict]]:
    """Every kernel of a plan with its compile-time meta-parameters, by name:
    the one table of the launches below and of the compile reports.
    ``whole_q_pairs`` / ``whole_k_pairs``: :func:`whole_pairs` of q (read by
    'output' and 'query', which writes dq in q's layout) and of k ('partials';
    'key', which writes dk in k's)."""
    def tile_meta(tile: KernelTile, whole: bool) -> dict:
        return dict(BLOCK_N=tile.block_n, BLOCK_P=plan.block_p, BLOCK_D=plan.block_d,
                    DOT_PRECISION=plan.dot_precision, WHOLE_PAIRS=whole,
                    num_warps=tile.num_warps, num_stages=tile.num_stages,
                    enable_fp_fusion=FP_FUSION)

    mean_chunks, kv_chunks = combine_chunk_blocks(plan)
    combine = dict(ROWS=plan.combine.block_n, BLOCK_D=plan.block_d, MEAN_CHUNKS=mean_chunks,
                   KV_CHUNKS=kv_chunks, num_warps=plan.combine.num_warps,
                   num_stages=plan.combine.num_stages, enable_fp_fusion=FP_FUSION)
    return dict(partials=(kernels._forward_partials_kernel,
                          tile_meta(plan.partials, whole_k_pairs)),
                combine=(kernels._forward_combine_kernel, combine),
                output=(kernels._forward_output_kernel, tile_meta(plan.output, whole_q_pairs)),
                query=(kernels._backward_query_kernel, tile_meta(plan.query, whole_q_pairs)),
                key=(kernels._backward_key_kernel, tile_meta(plan.key, whole_k_pairs)))


def empty_like_layout(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised dense (B, heads, N, d) tensor whose dimensions lie in
    memory in the order of ``x``'s strides (ties, size-1 dimensions, keep the
    logical order; an expanded dimension, stride 0, goes outermost).

    Results laid out like the backbone's channels_last views make its merge
    of the heads back to (B, C, H, W) a free view. ``torch.empty_like`` keeps
    the strides of dense tensors only, and these views are slices of a wider
    map.
    """
    strides = x.stride()
    order = sorted(range(4), key=lambda dim: (strides[dim] != 0, -strides[dim], dim))
    buffer = x.new_empty([x.shape[dim] for dim in order])
    return buffer.permute([order.index(dim) for dim in range(4)])


def forward_launches(q, k, v, angle, width: int, plan: LaunchPlan):
    """The forward's buffers and its launches: ``(out, stats, steps)``, where
    ``steps`` are ``(kernel name, launch)`` in order; running them all is the
    forward (benchmarks time them one by one)."""
    batch, heads, num_tokens, head_dim = q.shape
    batch_heads, scale = batch * heads, head_dim ** -0.5
    table = launch_table(plan, whole_pairs(q), whole_pairs(k))
    workspace = q.new_empty(batch_heads, plan.num_chunks,
                            head_dim + kernels.FWD_EXTRA_ROWS.value, head_dim,
                            dtype=torch.float32)
    stats = q.new_empty(batch_heads, head_dim + kernels.STATS_EXTRA_ROWS.value, head_dim,
                        dtype=torch.float32)
    out = empty_like_layout(q)
    per_program = plan.output_tokens_per_program
    arguments = dict(
        partials=((plan.num_chunks, batch_heads), (
            k, v, angle, workspace, *k.stride(), *v.stride(),
            heads, num_tokens, width, head_dim, plan.tokens_per_chunk)),
        combine=((cdiv(head_dim, plan.combine.block_n), batch_heads), (
            workspace, stats, plan.num_chunks, num_tokens, plan.tokens_per_chunk, head_dim,
            scale / num_tokens)),
        output=((cdiv(num_tokens, per_program), batch_heads), (
            q, stats, angle, out, *q.stride(), *out.stride(),
            heads, num_tokens, width, head_dim, scale, per_program)))
    return out, stats, [(name, functools.partial(_launch, *table[name], *arguments[name]))
                        for name in FORWARD_KERNELS]


def backward_launches(dout, q, k, v, angle, stats, width: int, plan: LaunchPlan):
    """The backward's buffers and its launches: ``(dq, dk, dv, steps)``: the
    query pass, the sum over chunks of its key-side partials, the key pass."""
    batch, heads, num_tokens, head_dim = q.shape
    batch_heads = batch * heads
    dq, dk, dv = empty_like_layout(q), empty_like_layout(k), empty_like_layout(v)
    # The query and key kernels read q / k and write dq / dk with one pair mode.
    table = launch_table(plan, whole_pairs(q) and whole_pairs(dq),
                         whole_pairs(k) and whole_pairs(dk))
    rows = head_dim + kernels.GRAD_EXTRA_ROWS.value
    workspace = q.new_empty(batch_heads, plan.num_chunks, rows, head_dim, dtype=torch.float32)
    # One chunk: its partials are the sums (the kernel pre-scales them).
    key_grads = (workspace[:, 0] if plan.num_chunks == 1 else
                 q.new_empty(batch_heads, rows, head_dim, dtype=torch.float32))
    per_program = plan.key_tokens_per_program
    query = ((plan.num_chunks, batch_heads), (
        q, dout, stats, angle, dq, workspace, *q.stride(), *dout.stride(), *dq.stride(),
        heads, num_tokens, width, head_dim, plan.tokens_per_chunk, head_dim ** -0.5))
    key = ((cdiv(num_tokens, per_program), batch_heads), (
        k, v, stats, key_grads, angle, dk, dv, *k.stride(), *v.stride(), *dk.stride(),
        *dv.stride(), heads, num_tokens, width, head_dim, per_program))

    def chunk_sum():
        if plan.num_chunks > 1:
            torch.sum(workspace, dim=1, out=key_grads)

    return dq, dk, dv, [('query', functools.partial(_launch, *table['query'], *query)),
                        ('chunk_sum', chunk_sum),
                        ('key', functools.partial(_launch, *table['key'], *key))]


def _launch(kernel, meta: dict, grid: tuple[int, ...], args: tuple) -> None:
    kernel[grid](*args, **meta)


def mala_forward(q, k, v, angle, width: int, plan: LaunchPlan):
    """``out`` and the per-head fp32 stats saved for backward."""
    out, stats, steps = forward_launches(q, k, v, angle, width, plan)
    for _, launch in steps:
        launch()
    return out, stats


def mala_backward(dout, q, k, v, angle, stats, width: int, plan: LaunchPlan):
    dq, dk, dv, steps = backward_launches(dout, q, k, v, angle, stats, width, plan)
    for _, launch in steps:
        launch()
    return dq, dk, dv


# -- Operators ------------------------------------------------------------------
# ``mavit_mm::mala`` (returns ``out`` and the per-head fp32 stats) and
# ``mavit_mm::mala_backward``, with fake implementations and an autograd
# formula, so that torch.compile treats them as opaque nodes. Saved for
# backward: q, k, v (no copies), the fp32 angles and the stats. The plan
# overrides travel as ints, 0 meaning "the default".
def _case_plan(q, block_n: int, tokens_per_chunk: int, tokens_per_program: int) -> LaunchPlan:
    batch, heads, num_tokens, head_dim = q.shape
    return cached_launch_plan(num_tokens, batch * heads, head_dim, q.dtype, q.device,
                              block_n or None, tokens_per_chunk or None, None,
                              tokens_per_program or None)


@torch.library.custom_op('mavit_mm::mala', mutates_args=())
def mala_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
            width: int, block_n: int = 0, tokens_per_chunk: int = 0,
            tokens_per_program: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
    with on_device(q.device):
        return mala_forward(q, k, v, angle, width,
                            _case_plan(q, block_n, tokens_per_chunk, tokens_per_program))


@mala_op.register_fake
def _mala_fake(q, k, v, angle, width, block_n=0, tokens_per_chunk=0, tokens_per_program=0):
    batch, heads, _, head_dim = q.shape
    stats = q.new_empty(batch * heads, head_dim + kernels.STATS_EXTRA_ROWS.value, head_dim,
                        dtype=torch.float32)
    return empty_like_layout(q), stats


@torch.library.custom_op('mavit_mm::mala_backward', mutates_args=())
def mala_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     angle: torch.Tensor, stats: torch.Tensor, width: int, block_n: int = 0,
                     tokens_per_chunk: int = 0, tokens_per_program: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
    with on_device(q.device):
        return mala_backward(dout, q, k, v, angle, stats, width,
                             _case_plan(q, block_n, tokens_per_chunk, tokens_per_program))


@mala_backward_op.register_fake
def _mala_backward_fake(dout, q, k, v, angle, stats, width, block_n=0, tokens_per_chunk=0,
                        tokens_per_program=0):
    return empty_like_layout(q), empty_like_layout(k), empty_like_layout(v)


def _mala_setup_context(ctx, inputs, output):
    q, k, v, angle, width, *overrides = inputs
    ctx.save_for_backward(q, k, v, angle, output[1])
    ctx.width = width
    ctx.overrides = overrides


def _mala_autograd(ctx, dout, _dstats):
    q, k, v, angle, stats = ctx.saved_tensors
    dq, dk, dv = mala_backward_op(dout, q, k, v, angle, stats, ctx.width, *ctx.overrides)
    return dq, dk, dv, None, None, None, None, None


mala_op.register_autograd(_mala_autograd, setup_context=_mala_setup_context)
refuse_second_derivative(mala_backward_op, 'the fused MALA kernels', 'mala_impl')


def fused_mala(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
               width: int, block_n: int | None = None, tokens_per_chunk: int | None = None,
               tokens_per_program: int | None = None) -> torch.Tensor:
    """Fused MALA; the caller has checked the case is supported (``dispatch``).
    The overrides go to :func:`make_launch_plan`; ``None`` keeps its default."""
    out, _ = mala_op(q, k, v, angle, width, block_n or 0, tokens_per_chunk or 0,
                     tokens_per_program or 0)
    return out
