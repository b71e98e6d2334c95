"""How the fused MALA is launched on a case: tile sizes, the split-N chunking,
tokens per program (:func:`make_launch_plan`), from a model of GPU occupancy
(:func:`resident_blocks`) fed with the compiled kernels' own registers and
shared memory (:func:`compiled_resources`); cached per case with the case's
compiled kernels (:func:`planned_case`, :func:`plan_for`), with the verdict
whether a GPU holds the kernels at all (:func:`resource_shortfall`).
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch
import triton

from .launches import (
    BackwardLaunches,
    CompiledLaunches,
    ForwardLaunches,
    KernelTile,
    LaunchPlan,
    _Launches,
)
from .triton_support import OutOfResources, on_device

# fp32 inputs get exact fp32 dots. Half inputs use tf32 tensor cores on fp32
# operands: fp32 range (a half KV would overflow at large activations) and,
# thanks to the centring in the kernels, an error that is not amplified. bf16
# operands would be less accurate in every output and gradient (past the bf16
# test tolerance for dq).
DOT_PRECISION = {torch.float32: 'ieee', torch.float16: 'tf32', torch.bfloat16: 'tf32'}
# A chunk's partial sums cost a (d + 5) x d fp32 write + read, about as much as
# reading d + 5 more tokens; with at least this many tokens per chunk they stay
# a few percent of reading k and v.
MIN_TOKENS_PER_CHUNK = 512
# Split-N programs resident on one SM at once where no compiled kernel can be
# asked (the CPU interpreter; plans made for reports). On a GPU the count comes
# from the compiled kernel itself (registers, shared memory: resident_blocks).
# The value is what resident_blocks gives for the sm_90 compile of the d = 64
# partials kernel on the model's channels_last layout (99 registers x 256
# threads: 2 fit 64K registers); a test
# recompiles it to keep the two in step. Whole waves of 2 per SM are whole
# waves of 1 per SM too (d = 96 and the query kernel: 255 registers, 1 fits).
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
# stages). The narrow table is tuned on an H100 with benchmarks/tune_mala.py
# (bf16, N = 65536, d = 64, B*heads 16 and 1) on token-contiguous (nchw)
# inputs: per kernel, the candidate with the smallest sum of its slowdowns
# against the best of each case; most of the gain is the query kernel's
# 16-token tiles. The model passes channels_last heads, which the kernels read
# in whole channel rows (kernels._load_pairs); for those the 32-token partials
# tile compiles to 141 registers on sm_90 (one program of 8 warps per SM) and
# the 16-token one to 99 (two, as RESIDENT_PROGRAMS_PER_SM assumes), hence 16.
# Retuning on the model's layout needs a GPU (tune_mala.py). The wide table (d = 96 padded to
# 128, 1.78x the dot work) is not timed: it comes from ahead-of-time
# sm_80/sm_90 compiles (registers, spills, shared memory:
# ``bench_mala.py --compile-report``). 'combine' sums a block of chunks per step
# (tl.sum over the block); two rows per program (narrow) beat four at B*heads 1
# and 128 chunks and cost nothing at 16.
KERNEL_TILES = {
    'narrow': dict(output=(64, 4, 1), partials=(16, 8, 3), query=(16, 4, 3), key=(64, 4, 3),
                   combine=(2, 4, 1)),
    'wide': dict(output=(32, 8, 3), partials=(16, 8, 3), query=(16, 8, 3), key=(16, 8, 3),
                 combine=(4, 4, 1)),
}
KERNEL_NAMES = ('partials', 'combine', 'output', 'query', 'key')
# Shared memory is not tabulated here: whether a GPU holds the kernels is
# judged from the kernels compiled for it (resource_shortfall). Heads wider
# than 64 channels need more than the ~99 KiB per block of sm_86 / sm_89 GPUs,
# which run them on the PyTorch path.


@functools.cache
def _sm_count(device: torch.device) -> int:
    if device.type != 'cuda':
        return 1
    return torch.cuda.get_device_properties(device).multi_processor_count


def _default_tokens_per_chunk(num_tokens: int, batch_heads: int, block_n: int,
                              device: torch.device, resident_per_sm: int) -> int:
    """Tokens per split-N chunk: the chunk count that finishes soonest.

    The time is modelled as waves x tokens per chunk (plus each chunk's partial
    sums): ``chunks * batch_heads`` programs run ``resident_per_sm * SMs`` at a
    time, so counts that leave the last wave nearly empty lose, and whole waves
    win.
    """
    chunks = _fastest_chunk_count(num_tokens, batch_heads, resident_per_sm * _sm_count(device))
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


def make_launch_plan(num_tokens: int, batch_heads: int, head_dim: int, dtype: torch.dtype,
                     device: torch.device, block_n: int | None = None,
                     tokens_per_chunk: int | None = None,
                     tiles: dict[str, tuple[int, ...]] | None = None,
                     tokens_per_program: int | None = None,
                     resident_per_sm: int | None = None) -> LaunchPlan:
    """Tile sizes and the split-N chunking.

    ``block_n`` (every token kernel), ``tokens_per_chunk``, ``tiles`` (per kernel
    name, a ``KernelTile``'s fields) and ``tokens_per_program`` (output and key
    kernels) override the defaults: tests use them to get several blocks and
    chunks out of a few tokens, the tuning benchmark to time alternatives.
    ``resident_per_sm``: split-N programs one SM holds at once (default
    ``RESIDENT_PROGRAMS_PER_SM``; on a GPU, :func:`plan_for` asks the compiled
    kernel).
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
        tokens_per_chunk = _default_tokens_per_chunk(
            num_tokens, batch_heads, reduce_block_n, device,
            resident_per_sm or RESIDENT_PROGRAMS_PER_SM)
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


# -- What the compiled kernels take from an SM -----------------------------------
@dataclass(frozen=True)
class KernelResources:
    """One compiled kernel's demands, from its own compiled metadata."""
    registers: int      # per thread
    shared_bytes: int   # per block
    num_warps: int


@dataclass(frozen=True)
class SMLimits:
    """What one SM offers (defaults: A100 / H100; a GPU reports its own)."""
    registers: int = 64 * 1024
    shared_bytes: int = 228 * 1024
    threads: int = 2048
    blocks: int = 16   # 32 on sm_80 / sm_90, 16 on sm_86; binding only for tiny blocks


# The CUDA occupancy rules: registers are allocated per warp in units of 256
# (8 per thread), and the runtime reserves 1 KiB of shared memory per block.
REGISTER_ALLOCATION_UNIT = 8
SHARED_BYTES_RESERVED_PER_BLOCK = 1024
WARP_SIZE = 32


def resident_blocks(resources: KernelResources, limits: SMLimits = SMLimits()) -> int:
    """Blocks of a kernel one SM runs at once: the tightest of its register,
    shared-memory, thread and block limits (at least 1)."""
    threads = resources.num_warps * WARP_SIZE
    registers = triton.cdiv(max(resources.registers, 1),
                            REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    shared = resources.shared_bytes + SHARED_BYTES_RESERVED_PER_BLOCK
    return max(1, min(limits.registers // (registers * threads), limits.shared_bytes // shared,
                      limits.threads // threads, limits.blocks))


@functools.cache
def sm_limits(device_index: int) -> SMLimits:
    properties = torch.cuda.get_device_properties(device_index)
    default = SMLimits()
    # regs_per_multiprocessor is missing from some torch releases: 64K on every
    # NVIDIA GPU since Kepler.
    return SMLimits(
        registers=getattr(properties, 'regs_per_multiprocessor', default.registers),
        shared_bytes=getattr(properties, 'shared_memory_per_multiprocessor',
                             default.shared_bytes),
        threads=getattr(properties, 'max_threads_per_multi_processor', default.threads))


_compiled_resources: dict[tuple, KernelResources | None] = {}


class _StandIn:
    """A meta tensor as Triton's compiler sees a pointer argument: its dtype and
    a 16-byte-aligned address (Triton specialises a pointer on ``dtype`` and
    ``data_ptr() % 16``, as for its own ``MockTensor``); no memory behind it."""

    def __init__(self, meta: torch.Tensor):
        self.dtype = meta.dtype

    @staticmethod
    def data_ptr() -> int:
        return 0   # 16-byte aligned, as torch's allocations are

    @staticmethod
    def ptr_range() -> int:
        return 0


def _for_compiling(arg):
    """A launch argument as a compile-only warmup takes it: meta tensors (the
    buffers of ``allocate=False`` launches) become stand-ins."""
    return _StandIn(arg) if isinstance(arg, torch.Tensor) and arg.is_meta else arg


def _specialisation(arg):
    """What Triton specialises a launch argument on (our kernels: no int64s)."""
    if hasattr(arg, 'data_ptr'):
        return arg.dtype, arg.data_ptr() % 16 == 0
    if isinstance(arg, float):
        return float
    return arg


class CompileFailure(RuntimeError):
    """Triton could not compile a kernel for this GPU (the case falls back under
    ``'auto'``; ``'triton'`` says why)."""


def compiled_resources(launches: _Launches, name: str) -> KernelResources | None:
    """Registers and shared memory of the kernel that ``launches`` runs as
    ``name``, compiled for the current GPU (or taken from Triton's caches: the
    launch then reuses the very binary) and loaded, as a launch would load it,
    without running it.

    Raises Triton's ``OutOfResources`` when this GPU cannot hold the kernel,
    :class:`CompileFailure` when the compiler fails on it; ``None`` where this
    Triton release lacks the loading internals used here (the plan then keeps
    its default, and the launch does Triton's checks).
    """
    kernel, meta = launches.table[name]
    grid, args = launches.arguments(name)
    args = tuple(map(_for_compiling, args))
    key = (name, tuple(sorted(meta.items())), torch.cuda.current_device(),
           tuple(map(_specialisation, args)))
    if key not in _compiled_resources:
        # Loading fills in the register count and runs Triton's own checks of
        # shared memory and threads (the occupancy recipe of Triton's fused-softmax
        # tutorial; n_regs is known only once the binary is loaded).
        try:
            compiled = kernel.warmup(*args, grid=grid, **meta)
            compiled._init_handles()
            resources = KernelResources(compiled.n_regs, compiled.metadata.shared,
                                        compiled.metadata.num_warps)
        except OutOfResources:
            raise
        except (AttributeError, TypeError):   # internals this Triton release lacks
            resources = None
        except Exception as exc:   # the compiler itself failed (ptxas, a lowering error)
            raise CompileFailure(f'the {name} kernel failed to compile: '
                                 f'{type(exc).__name__}: {str(exc)[:500]}') from exc
        _compiled_resources[key] = resources
    return _compiled_resources[key]


# -- Per-call host work, done once per case ---------------------------------------
_MISSING = object()


class _LRUCache:
    """A map of at most ``maxsize`` entries that drops the least recently used
    one when full. Locked: DataParallel replicas call the op from threads."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, default=None):
        with self._lock:
            value = self._entries.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._entries.move_to_end(key)
            return value

    def __setitem__(self, key, value) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            if len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def __contains__(self, key) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# A layer calls the op with the same shapes, strides and dtype on every step,
# so its plans (on a GPU: meta-tensor launches, the compiled kernel's
# specialisation key and occupancy) are made once: 2 per layer size (forward,
# backward), 8 per input size for MAViT's 4 stages. Each keeps its compiled
# kernels for direct launches. Evicting only costs a replan.
# The module's constants (KERNEL_TILES, RESIDENT_PROGRAMS_PER_SM, ...) are not
# part of the key: code that changes them at run time calls ``_plans.clear()``.
PLAN_CACHE_SIZE = 256
_plans = _LRUCache(PLAN_CACHE_SIZE)


@dataclass(frozen=True)
class PlannedCase:
    """A case's launch plan and its compiled kernels, launched directly once
    Triton has compiled them (:class:`.launches.CompiledLaunches`)."""
    plan: LaunchPlan
    compiled: CompiledLaunches


def _argument_key(t: torch.Tensor | None):
    """What a plan can depend on of a tensor argument besides the shape: its
    dtype, strides and whether Triton sees its address as 16-byte aligned (the
    specialisation :func:`compiled_resources` compiles for, and the direct
    launches rely on). Never the address."""
    if t is None:
        return None
    return t.dtype, t.stride(), t.data_ptr() % 16 == 0


def planned_case(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle, width: int,
                 block_n: int = 0, tokens_per_chunk: int = 0, tokens_per_program: int = 0,
                 dout: torch.Tensor | None = None, stats=None) -> PlannedCase:
    """The launch plan of one forward (or, given ``dout`` and ``stats``, one
    backward) pass, with the case's compiled kernels; overrides are ints, 0
    meaning "the default".

    On a GPU, the split-N chunking fills whole waves by the split kernel's own
    occupancy on that GPU: the kernel is compiled for these very arguments and
    asked for its registers and shared memory. Call it on the tensors' device.

    Cached (``_plans``, least recently used out) per device, shape, SM count,
    width, overrides and each tensor's dtype, strides and alignment: everything
    the plan depends on, and everything Triton specialises the kernels on (the
    integer arguments are sizes, strides and plan values). A failure (a kernel
    this GPU cannot hold) is not cached.
    """
    key = (q.device, q.shape, _sm_count(q.device), width, block_n, tokens_per_chunk,
           tokens_per_program, _argument_key(q), _argument_key(k), _argument_key(v),
           _argument_key(angle), _argument_key(dout), _argument_key(stats))
    case = _plans.get(key)
    if case is None:
        plan = _plan_for(q, k, v, angle, width, block_n, tokens_per_chunk, tokens_per_program,
                         dout, stats)
        case = _plans[key] = PlannedCase(plan, CompiledLaunches())
    return case


def plan_for(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle, width: int,
             block_n: int = 0, tokens_per_chunk: int = 0, tokens_per_program: int = 0,
             dout: torch.Tensor | None = None, stats=None) -> LaunchPlan:
    """The launch plan of :func:`planned_case`."""
    return planned_case(q, k, v, angle, width, block_n, tokens_per_chunk, tokens_per_program,
                        dout, stats).plan


def _plan_for(q, k, v, angle, width: int, block_n: int = 0, tokens_per_chunk: int = 0,
              tokens_per_program: int = 0, dout=None, stats=None) -> LaunchPlan:
    """:func:`plan_for` past its cache."""
    batch, heads, num_tokens, head_dim = q.shape

    def plan(resident_per_sm=None) -> LaunchPlan:
        return make_launch_plan(num_tokens, batch * heads, head_dim, q.dtype, q.device,
                                block_n=block_n or None,
                                tokens_per_chunk=tokens_per_chunk or None,
                                tokens_per_program=tokens_per_program or None,
                                resident_per_sm=resident_per_sm)

    first = plan()
    if q.device.type != 'cuda' or tokens_per_chunk:
        return first
    if dout is None:
        launches, name = ForwardLaunches(q, k, v, angle, width, first, allocate=False), 'partials'
    else:
        launches, name = BackwardLaunches(dout, q, k, v, angle, stats, width, first,
                                          allocate=False), 'query'
    resources = compiled_resources(launches, name)
    if resources is None:
        return first
    resident = resident_blocks(resources, sm_limits(torch.cuda.current_device()))
    return first if resident == RESIDENT_PROGRAMS_PER_SM else plan(resident)


_shortfalls = _LRUCache(PLAN_CACHE_SIZE)   # verdicts per shape and layout


def resource_shortfall(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, width: int,
                       backward: bool) -> str | None:
    """Why this GPU cannot hold the kernels this case compiles to, or ``None``.

    Every kernel of the forward (and, with ``backward``, of the backward, for an
    incoming gradient laid out like ``q``) is compiled for the tensors' GPU and
    loaded; Triton's out-of-resources error names what is short. Off CUDA
    (the interpreter) there is nothing to check. Cached per shape and layout.
    """
    if q.device.type != 'cuda':
        return None
    return _compiled_shortfall(q, k, v, width, backward)


def _compiled_shortfall(q, k, v, width: int, backward: bool) -> str | None:
    """:func:`resource_shortfall` past its device check."""
    key = (q.device, q.dtype, q.shape, q.stride(), k.stride(), v.stride(), width, backward)
    cached = _shortfalls.get(key, _MISSING)
    if cached is not _MISSING:
        return cached
    angle = torch.empty(1, device='meta')
    name = 'partials'
    try:
        # Planned past the plan cache: these plans launch nothing (the
        # backward's incoming gradient is a stand-in laid out like q), so they
        # must not become cases with compiled kernels of their own.
        with on_device(q.device):
            forward = ForwardLaunches(q, k, v, angle, width,
                                      _plan_for(q, k, v, angle, width),
                                      allocate=False)
            passes = [forward]
            if backward:
                name = 'query'
                passes.append(BackwardLaunches(
                    q, q, k, v, angle, forward.stats, width,
                    _plan_for(q, k, v, angle, width, dout=q, stats=forward.stats),
                    allocate=False))
            for launches in passes:
                for name in launches.KERNELS:
                    compiled_resources(launches, name)
        reason = None
    except OutOfResources as exc:
        reason = (f'the {name} kernel for head dim {q.shape[-1]} does not fit '
                  f'{_device_name(q.device)}: {exc}')
    except CompileFailure as exc:
        reason = f'{exc} (head dim {q.shape[-1]}, {q.dtype}, {_device_name(q.device)})'
    _shortfalls[key] = reason
    return reason




def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == 'cuda' else str(device)
