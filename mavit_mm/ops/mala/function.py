"""Autograd function and launch logic of the fused Triton MALA.

Imported only when the Triton path is taken (it imports triton). What the
kernels compute is described in ``kernels.py``; what is saved for backward is
q, k, v (the caller's own tensors, no copies) and one fp32 ``(B*heads, d + 3, d)``
stats tensor: the centred KV matrix, mean k, mean rotated k and mean v.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch
import triton

# The Triton releases the kernels are written and tested for (setup.py's
# 'triton' extra says the same). Outside them the import fails with this
# reason, so 'auto' keeps the PyTorch path and 'triton' says why it cannot run.
SUPPORTED_TRITON = ('3.2', '3.10')   # [lowest, first unsupported)


def _release(version: str) -> Tuple[int, int]:
    major, minor = version.split('.')[:2]
    return int(major), int(''.join(ch for ch in minor if ch.isdigit()) or 0)


if not _release(SUPPORTED_TRITON[0]) <= _release(triton.__version__) < _release(
        SUPPORTED_TRITON[1]):
    raise ImportError(f'triton {triton.__version__} is outside the versions the fused MALA '
                      f'kernels support (>={SUPPORTED_TRITON[0]},<{SUPPORTED_TRITON[1]})')

from . import kernels  # noqa: E402

try:  # where Triton raises it when a compiled kernel needs more than the GPU has
    from triton.runtime.errors import OutOfResources
except ImportError:  # pragma: no cover - older layouts
    from triton.runtime.autotuner import OutOfResources

# fp32 inputs get exact fp32 dots. Half inputs use tf32 tensor cores on fp32
# operands: fp32 range (a half KV would overflow at large activations) and,
# thanks to the centring in the kernels, an error that is not amplified.
DOT_PRECISION = {torch.float32: 'ieee', torch.float16: 'tf32', torch.bfloat16: 'tf32'}
# A chunk's partial sums cost a (d + 5) x d fp32 write + read, about as much as
# reading d + 5 more tokens; with at least this many tokens per chunk they stay
# a few percent of reading k and v.
MIN_TOKENS_PER_CHUNK = 512
# Split-N programs resident on one SM at once, from the sm_90 compile report
# (benchmarks/results/compile-report-*): at d = 64 the partials kernel takes
# 124 registers x 256 threads, so 2 fit an SM's 64K registers; at d = 96, and
# for the query kernel, 255 registers: 1 fits. Whole waves of 2 per SM are
# whole waves of 1 per SM too. GPU timing (benchmarks/tune_mala.py) may refine it.
RESIDENT_PROGRAMS_PER_SM = 2
# What a chunk's partial sums cost, in tokens read (see MIN_TOKENS_PER_CHUNK).
PARTIAL_SUM_TOKENS = 64
# The token-parallel kernels (output, key) loop over several tiles per program
# so the (d, d) stats are read once per program; but keep at least this many
# programs per SM so that every SM has work.
TOKEN_PROGRAMS_PER_SM = 4
MAX_TILES_PER_PROGRAM = 16
# (tokens per tile, warps, software-pipeline stages) per kernel, for heads up
# to 64 channels and wider ones; 'combine' is (rows of KVc per program, warps,
# stages). Chosen from ahead-of-time sm_80/sm_90 compiles (registers, spills,
# shared memory: ``bench_mala.py --compile-report``), not from GPU timings.
KERNEL_TILES = {
    'narrow': dict(output=(64, 4, 3), partials=(32, 8, 3), query=(32, 8, 3), key=(32, 4, 3),
                   combine=(16, 4, 1)),
    'wide': dict(output=(32, 8, 3), partials=(16, 8, 3), query=(16, 8, 3), key=(16, 8, 3),
                 combine=(16, 4, 1)),
}
KERNEL_NAMES = ('partials', 'combine', 'output', 'query', 'key')
# Peak shared memory per block (KiB) of the forward / backward kernels with
# those tiles (3 pipeline stages): the largest over fp32/bf16/fp16 and head dims
# 16-128 on sm_80 and sm_90 with Triton 3.9 (``bench_mala.py --compile-report
# 80 90``, benchmarks/results/compile-report-sm80-sm90-triton3.9-2026-11-23.txt).
# GPUs with ~99 KiB per block (sm_86, sm_89) cannot run the wide-head kernels;
# a launch that still runs out is caught (Triton checks the compiled kernel).
# fp32 'tf32x3' dots were tried: fewer spills (d=96 query kernel 4728 -> 576
# bytes) but the wide backward then needs 296 KiB, more than an H100 has.
SHARED_MEMORY_KIB = {'narrow': (65, 57), 'wide': (113, 152)}


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


@functools.lru_cache(maxsize=None)
def _sm_count(device: torch.device) -> int:
    if device.type != 'cuda':
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def _default_tokens_per_chunk(num_tokens: int, batch_heads: int, block_n: int,
                              device: torch.device) -> int:
    """Tokens per split-N chunk: the chunk count that finishes soonest.

    The time is modelled as waves x tokens per chunk (plus each chunk's partial
    sums): ``chunks * batch_heads`` programs run ``RESIDENT_PROGRAMS_PER_SM * SMs``
    at a time, so counts that leave the last wave nearly empty lose, and whole
    waves win.
    """
    chunks = _fastest_chunk_count(num_tokens, batch_heads,
                                  RESIDENT_PROGRAMS_PER_SM * _sm_count(device))
    return triton.cdiv(triton.cdiv(num_tokens, chunks), block_n) * block_n


@functools.lru_cache(maxsize=1024)
def _fastest_chunk_count(num_tokens: int, batch_heads: int, slots: int) -> int:
    # A search over up to `slots` counts: cached, since every forward and
    # backward of every MALA layer plans its launches.
    max_chunks = max(1, min(num_tokens // MIN_TOKENS_PER_CHUNK, slots))

    def cost(chunks: int) -> float:
        waves = triton.cdiv(chunks * batch_heads, slots)
        return waves * (triton.cdiv(num_tokens, chunks) + PARTIAL_SUM_TOKENS)

    return min(range(1, max_chunks + 1), key=lambda c: (cost(c), c))


def _default_tokens_per_program(num_tokens: int, batch_heads: int, block_n: int,
                                device: torch.device) -> int:
    tiles = triton.cdiv(num_tokens, block_n)
    wanted_programs = TOKEN_PROGRAMS_PER_SM * _sm_count(device)
    per_program = triton.cdiv(tiles * batch_heads, wanted_programs)
    return block_n * max(1, min(MAX_TILES_PER_PROGRAM, per_program, tiles))


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
    forward_kib, backward_kib = SHARED_MEMORY_KIB[tile_family(head_dim)]
    needed = max(forward_kib, backward_kib) if backward else forward_kib
    index = device.index if device.index is not None else torch.cuda.current_device()
    available = _max_shared_memory_kib(index)
    if available is None or available >= needed:
        return None
    which = 'backward' if backward else 'forward'
    return (f'head dim {head_dim} needs ~{needed} KiB of shared memory per block in the '
            f'{which} kernels, {torch.cuda.get_device_name(index)} offers {available} KiB')


def make_launch_plan(num_tokens: int, batch_heads: int, head_dim: int, dtype: torch.dtype,
                     device: torch.device, block_n: Optional[int] = None,
                     tokens_per_chunk: Optional[int] = None,
                     tiles: Optional[Dict[str, Tuple[int, ...]]] = None,
                     tokens_per_program: Optional[int] = None) -> LaunchPlan:
    """Tile sizes and the split-N chunking.

    ``block_n`` (every token kernel), ``tokens_per_chunk``, ``tiles`` (per kernel
    name, a ``KernelTile``'s fields) and ``tokens_per_program`` (output and key
    kernels) override the defaults: tests use them to get several blocks and
    chunks out of a few tokens, the tuning benchmark to time alternatives.
    """
    block_d = max(16, triton.next_power_of_2(head_dim))
    block_p = max(16, triton.next_power_of_2(head_dim // 2))
    table = dict(KERNEL_TILES[tile_family(head_dim)])
    unknown = set(tiles or {}) - set(KERNEL_NAMES)
    if unknown:
        raise ValueError(f'unknown kernel names {sorted(unknown)}; choose from {KERNEL_NAMES}')
    table.update(tiles or {})
    chosen = {name: KernelTile(*tile) for name, tile in table.items()}
    if block_n is not None:
        if block_n < 16 or block_n & (block_n - 1):
            raise ValueError(f'block_n must be a power of two >= 16, got {block_n}')
        chosen = {name: tile if name == 'combine' else dataclasses.replace(tile, block_n=block_n)
                  for name, tile in chosen.items()}
    reduce_block_n = max(chosen['partials'].block_n, chosen['query'].block_n)
    if tokens_per_chunk is None:
        tokens_per_chunk = _default_tokens_per_chunk(num_tokens, batch_heads, reduce_block_n,
                                                     device)
    if tokens_per_chunk < 1:
        raise ValueError(f'tokens_per_chunk must be positive, got {tokens_per_chunk}')
    per_program = {}
    for name in ('output', 'key'):
        tile_n = chosen[name].block_n
        if tokens_per_program is None:
            per_program[name] = _default_tokens_per_program(num_tokens, batch_heads, tile_n,
                                                            device)
        else:
            per_program[name] = triton.cdiv(tokens_per_program, tile_n) * tile_n
    return LaunchPlan(block_p=block_p, block_d=block_d, **chosen,
                      tokens_per_chunk=tokens_per_chunk,
                      num_chunks=triton.cdiv(num_tokens, tokens_per_chunk),
                      output_tokens_per_program=per_program['output'],
                      key_tokens_per_program=per_program['key'],
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
                DOT_PRECISION=plan.dot_precision, num_warps=tile.num_warps,
                num_stages=tile.num_stages)


def _combine_meta(plan: LaunchPlan) -> dict:
    tile = plan.combine
    return dict(ROWS=tile.block_n, BLOCK_D=plan.block_d, num_warps=tile.num_warps,
                num_stages=tile.num_stages)


def launch_table(plan: LaunchPlan) -> Dict[str, Tuple[object, dict]]:
    """Every kernel of a plan with its compile-time meta-parameters, by name:
    the one table the launches below and the benchmarks' compile reports use."""
    return dict(partials=(kernels._forward_partials_kernel, _tile_meta(plan, plan.partials)),
                combine=(kernels._forward_combine_kernel, _combine_meta(plan)),
                output=(kernels._forward_output_kernel, _tile_meta(plan, plan.output)),
                query=(kernels._backward_query_kernel, _tile_meta(plan, plan.query)),
                key=(kernels._backward_key_kernel, _tile_meta(plan, plan.key)))


class ForwardLaunches:
    """The forward's buffers and its three kernel launches, one method each.

    ``run`` is the forward; benchmarks time the methods one by one.
    """

    def __init__(self, q, k, v, angle, width: int, plan: LaunchPlan):
        batch, heads, num_tokens, head_dim = q.shape
        self.q, self.k, self.v, self.angle, self.width, self.plan = q, k, v, angle, width, plan
        self.table = launch_table(plan)
        self.heads, self.num_tokens, self.head_dim = heads, num_tokens, head_dim
        self.batch_heads = batch * heads
        self.scale = head_dim ** -0.5
        self.workspace = torch.empty(self.batch_heads, plan.num_chunks,
                                     head_dim + kernels.FWD_EXTRA_ROWS.value, head_dim,
                                     device=q.device, dtype=torch.float32)
        self.stats = torch.empty(self.batch_heads, head_dim + kernels.STATS_EXTRA_ROWS.value,
                                 head_dim, device=q.device, dtype=torch.float32)
        self.out = _empty_like_layout(q)

    def partials(self):
        plan, k, v = self.plan, self.k, self.v
        kernel, meta = self.table['partials']
        kernel[(plan.num_chunks, self.batch_heads)](
            k, v, self.angle, self.workspace, *k.stride(), *v.stride(),
            self.heads, self.num_tokens, self.width, self.head_dim, plan.tokens_per_chunk, **meta)

    def combine(self):
        plan = self.plan
        kernel, meta = self.table['combine']
        kernel[(triton.cdiv(self.head_dim, meta['ROWS']), self.batch_heads)](
            self.workspace, self.stats, plan.num_chunks, self.num_tokens,
            plan.tokens_per_chunk, self.head_dim, self.scale / self.num_tokens, **meta)

    def output(self):
        plan, q, out = self.plan, self.q, self.out
        per_program = plan.output_tokens_per_program
        kernel, meta = self.table['output']
        kernel[(triton.cdiv(self.num_tokens, per_program), self.batch_heads)](
            q, self.stats, self.angle, out, *q.stride(), *out.stride(),
            self.heads, self.num_tokens, self.width, self.head_dim, self.scale, per_program,
            **meta)

    def steps(self):
        return (('partials', self.partials), ('combine', self.combine), ('output', self.output))

    def run(self) -> Tuple[torch.Tensor, torch.Tensor]:
        for _, step in self.steps():
            step()
        return self.out, self.stats


class BackwardLaunches:
    """The backward's buffers and its launches (query pass, chunk sum, key pass)."""

    def __init__(self, dout, q, k, v, angle, stats, width: int, plan: LaunchPlan):
        batch, heads, num_tokens, head_dim = q.shape
        self.dout, self.q, self.k, self.v = dout, q, k, v
        self.angle, self.stats, self.width, self.plan = angle, stats, width, plan
        self.table = launch_table(plan)
        self.heads, self.num_tokens, self.head_dim = heads, num_tokens, head_dim
        self.batch_heads = batch * heads
        self.scale = head_dim ** -0.5
        self.workspace = torch.empty(self.batch_heads, plan.num_chunks,
                                     head_dim + kernels.GRAD_EXTRA_ROWS.value, head_dim,
                                     device=q.device, dtype=torch.float32)
        self.key_grads = self.workspace[:, 0]
        self.dq, self.dk, self.dv = (_empty_like_layout(q), _empty_like_layout(k),
                                     _empty_like_layout(v))

    def query(self):
        plan, q, dout, dq = self.plan, self.q, self.dout, self.dq
        kernel, meta = self.table['query']
        kernel[(plan.num_chunks, self.batch_heads)](
            q, dout, self.stats, self.angle, dq, self.workspace,
            *q.stride(), *dout.stride(), *dq.stride(),
            self.heads, self.num_tokens, self.width, self.head_dim, plan.tokens_per_chunk,
            self.scale, **meta)

    def chunk_sum(self):
        # Partials are pre-scaled in the kernel; summing the chunks is all that is left.
        if self.plan.num_chunks > 1:
            self.key_grads = self.workspace.sum(dim=1)

    def key(self):
        plan, k, v, dk, dv = self.plan, self.k, self.v, self.dk, self.dv
        per_program = plan.key_tokens_per_program
        kernel, meta = self.table['key']
        kernel[(triton.cdiv(self.num_tokens, per_program), self.batch_heads)](
            k, v, self.stats, self.key_grads, self.angle, dk, dv,
            *k.stride(), *v.stride(), *dk.stride(), *dv.stride(),
            self.heads, self.num_tokens, self.width, self.head_dim, per_program, **meta)

    def steps(self):
        return (('query', self.query), ('chunk_sum', self.chunk_sum), ('key', self.key))

    def run(self) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        for _, step in self.steps():
            step()
        return self.dq, self.dk, self.dv


def mala_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
                 width: int, plan: LaunchPlan) -> Tuple[torch.Tensor, torch.Tensor]:
    """Returns ``out`` and the per-head fp32 stats saved for backward."""
    return ForwardLaunches(q, k, v, angle, width, plan).run()


def mala_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  angle: torch.Tensor, stats: torch.Tensor, width: int,
                  plan: LaunchPlan) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return BackwardLaunches(dout, q, k, v, angle, stats, width, plan).run()


def _on_device(device: torch.device):
    """Triton launches on the current CUDA device: make it the tensors' one."""
    return torch.cuda.device(device) if device.type == 'cuda' else contextlib.nullcontext()


# The fused MALA as PyTorch operators: ``mavit_mm::mala`` (forward, returns
# ``out`` and the fp32 stats saved for backward) and ``mavit_mm::mala_backward``,
# with fake implementations and an autograd formula, so that torch.compile
# treats them as opaque nodes and nothing in them syncs with the host. The
# plan overrides travel as ints, 0 meaning "the default".
@torch.library.custom_op('mavit_mm::mala', mutates_args=())
def mala_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
            width: int, block_n: int = 0, tokens_per_chunk: int = 0,
            tokens_per_program: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    plan = _plan_for(q, block_n, tokens_per_chunk, tokens_per_program)
    angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
    with _on_device(q.device):
        return mala_forward(q, k, v, angle, width, plan)


@mala_op.register_fake
def _mala_fake(q, k, v, angle, width, block_n=0, tokens_per_chunk=0, tokens_per_program=0):
    batch, heads, _, head_dim = q.shape
    stats = q.new_empty(batch * heads, head_dim + kernels.STATS_EXTRA_ROWS.value, head_dim,
                        dtype=torch.float32)
    return _empty_like_layout(q), stats


@torch.library.custom_op('mavit_mm::mala_backward', mutates_args=())
def mala_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     angle: torch.Tensor, stats: torch.Tensor, width: int, block_n: int = 0,
                     tokens_per_chunk: int = 0, tokens_per_program: int = 0
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    plan = _plan_for(q, block_n, tokens_per_chunk, tokens_per_program)
    angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
    with _on_device(q.device):
        return mala_backward(dout, q, k, v, angle, stats, width, plan)


@mala_backward_op.register_fake
def _mala_backward_fake(dout, q, k, v, angle, stats, width, block_n=0, tokens_per_chunk=0,
                        tokens_per_program=0):
    return _empty_like_layout(q), _empty_like_layout(k), _empty_like_layout(v)


def _plan_for(q: torch.Tensor, block_n: int, tokens_per_chunk: int,
              tokens_per_program: int) -> LaunchPlan:
    batch, heads, num_tokens, head_dim = q.shape
    return make_launch_plan(num_tokens, batch * heads, head_dim, q.dtype, q.device,
                            block_n=block_n or None, tokens_per_chunk=tokens_per_chunk or None,
                            tokens_per_program=tokens_per_program or None)


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


def fused_mala(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
               width: int, block_n: Optional[int] = None, tokens_per_chunk: Optional[int] = None,
               tokens_per_program: Optional[int] = None) -> torch.Tensor:
    """Fused MALA; the caller has checked the case is supported (see ``__init__``).

    The overrides go to :func:`make_launch_plan`; ``None`` keeps its default.
    """
    out, _ = mala_op(q, k, v, angle, width, block_n or 0, tokens_per_chunk or 0,
                     tokens_per_program or 0)
    return out
