"""The launches of the fused MALA: what a launch takes (:class:`LaunchPlan`),
each kernel's compile-time meta-parameters (:func:`launch_table`, the one
table of launches), a pass's buffers and kernel launches
(:class:`ForwardLaunches`, :class:`BackwardLaunches`), and the compiled
kernels of a case, launched without Triton's launch path
(:class:`CompiledLaunches`).

What the kernels compute is described in ``kernels.py``; how a plan is chosen
in ``plan.py``.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
from triton.runtime.driver import driver

from . import (
    kernels,
    triton_support,  # noqa: F401  (the supported releases, before the kernels)
)

# Launch the compiled kernels of a case directly after its first launches
# (CompiledLaunches); False keeps Triton's launch path on every call (the
# host-overhead benchmark measures both).
DIRECT_LAUNCH = True
# The combine kernel sums a block of chunks per step (tl.sum over the block):
# its blocks hold up to this many fp32 values per thread (combine_chunk_blocks).
COMBINE_VALUES_PER_THREAD = 32


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


def _cdiv(a: int, b: int) -> int:
    """``triton.cdiv`` for host code on every call: Triton's is a constexpr
    function whose wrapper costs ~2 us a call on the host (Triton 3.9)."""
    return -(-a // b)



def _empty_like_layout(x: torch.Tensor) -> torch.Tensor:
    """An uninitialised dense (B, heads, N, d) tensor whose dimensions lie in
    memory in the order of ``x``'s strides.

    The backbone passes channel-contiguous views of a channels_last map
    ((B, N, heads, d) in memory); results laid out the same way make its merge
    of the heads back to (B, C, H, W) a free view. Token-contiguous views
    ((B, heads, d, N) in memory, an NCHW map) likewise get token-contiguous
    results. (``torch.empty_like`` keeps the strides of dense tensors only, and
    these views are slices of a wider map.)
    """
    shape, strides = tuple(x.shape), x.stride()
    try:   # the same few layouts on every call: their strides worked out once each
        dense = _dense_strides(shape, strides)
    except TypeError:   # symbolic sizes (torch.compile, dynamic shapes) do not hash
        order = _memory_order(strides)
        buffer = x.new_empty([shape[dim] for dim in order])
        return buffer.permute([order.index(dim) for dim in range(4)])
    return x.new_empty_strided(shape, dense)


def _memory_order(strides) -> list:
    """The dimensions, outermost first; ties (size-1 dimensions) keep the
    logical order."""
    return sorted(range(4), key=lambda dim: (-strides[dim], dim))


@functools.lru_cache(maxsize=256)
def _dense_strides(shape: tuple, strides: tuple) -> tuple:
    """The strides of a dense ``shape`` laid out in ``_memory_order(strides)``:
    what permuting a contiguous buffer of the dimensions in that order gives
    (torch counts a size-0 dimension as 1 there)."""
    dense, step = [0] * 4, 1
    for dim in reversed(_memory_order(strides)):
        dense[dim] = step
        step *= max(shape[dim], 1)
    return tuple(dense)


# Fused multiply-adds in the kernels' fp32 arithmetic, as every supported
# Triton compiled them by default when the kernels were validated and tuned.
# Said explicitly: Triton 3.9 warns that its default becomes "off" in 3.10.
FP_FUSION = True


def _tile_meta(plan: LaunchPlan, tile: KernelTile, whole_pairs: bool) -> dict:
    return dict(BLOCK_N=tile.block_n, BLOCK_P=plan.block_p, BLOCK_D=plan.block_d,
                DOT_PRECISION=plan.dot_precision, WHOLE_PAIRS=whole_pairs,
                num_warps=tile.num_warps, num_stages=tile.num_stages,
                enable_fp_fusion=FP_FUSION)


def whole_pairs(t: torch.Tensor) -> bool:
    """Whether the kernels read (and write) ``t``'s RoPE channel pairs as whole
    tiles: its channels are contiguous (``kernels._load_pairs``). The model's
    channels_last heads are; token-contiguous heads (NCHW maps) are not."""
    return t.stride(-1) == 1


def _floor_power_of_2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def combine_chunk_blocks(plan: LaunchPlan) -> tuple[int, int]:
    """Chunks the combine kernel reduces at once: (for the means, for the KV
    rows). As many as fill ``COMBINE_VALUES_PER_THREAD`` fp32 values per thread
    in its widest tile ((chunks, d) and (chunks, rows, d)), powers of two, and
    no more than the plan's chunks (rounded up to a power of two)."""
    tile = plan.combine
    budget = COMBINE_VALUES_PER_THREAD * tile.num_warps * 32
    most = 1 << max(plan.num_chunks - 1, 0).bit_length()   # next power of two
    return (min(most, _floor_power_of_2(budget // plan.block_d)),
            min(most, _floor_power_of_2(budget // (tile.block_n * plan.block_d))))


def _combine_meta(plan: LaunchPlan) -> dict:
    tile = plan.combine
    mean_chunks, kv_chunks = combine_chunk_blocks(plan)
    return dict(ROWS=tile.block_n, BLOCK_D=plan.block_d, MEAN_CHUNKS=mean_chunks,
                KV_CHUNKS=kv_chunks, num_warps=tile.num_warps, num_stages=tile.num_stages,
                enable_fp_fusion=FP_FUSION)


def launch_table(plan: LaunchPlan, whole_q_pairs: bool = True,
                 whole_k_pairs: bool = True) -> dict[str, tuple[object, dict]]:
    """Every kernel of a plan with its compile-time meta-parameters, by name:
    the one table the launches below, the plan's occupancy check and the
    benchmarks' compile reports use. ``whole_q_pairs`` / ``whole_k_pairs``:
    :func:`whole_pairs` of q (read by 'output' and 'query', which also writes
    dq in q's layout) and of k ('partials'; 'key', which writes dk in k's)."""
    return dict(partials=(kernels._forward_partials_kernel,
                          _tile_meta(plan, plan.partials, whole_k_pairs)),
                combine=(kernels._forward_combine_kernel, _combine_meta(plan)),
                output=(kernels._forward_output_kernel,
                        _tile_meta(plan, plan.output, whole_q_pairs)),
                query=(kernels._backward_query_kernel,
                       _tile_meta(plan, plan.query, whole_q_pairs)),
                key=(kernels._backward_key_kernel, _tile_meta(plan, plan.key, whole_k_pairs)))


def _buffer(shape, dtype, device, allocate: bool) -> torch.Tensor:
    return torch.empty(*shape, device=device if allocate else 'meta', dtype=dtype)


def _output_buffer(x: torch.Tensor, allocate: bool) -> torch.Tensor:
    if not allocate:   # the same layout rule, on a meta copy of x's geometry
        x = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device='meta')
    return _empty_like_layout(x)


@contextlib.contextmanager
def direct_launches(enabled: bool):
    """Sets :data:`DIRECT_LAUNCH` for the block (benchmarks compare both)."""
    global DIRECT_LAUNCH
    saved, DIRECT_LAUNCH = DIRECT_LAUNCH, enabled
    try:
        yield
    finally:
        DIRECT_LAUNCH = saved


class CompiledLaunches:
    """The compiled kernels of one case, launched without Triton's launch path.

    ``kernel[grid](*args, **meta)`` (Triton's ``JITFunction.run``) binds and
    specialises every argument, builds its kernel-cache key and looks the
    binary up on every call: on a GPU the largest host cost of a launch. A case
    (one entry of :func:`.plan.planned_case`'s cache: device, shapes, strides,
    dtypes, pointer alignment, overrides) specialises the same way on every
    call, so its first launch of each kernel goes through Triton and keeps the
    ``CompiledKernel`` that Triton returns; later launches call it as
    ``JITFunction.run`` ends, ``compiled[grid](*args, *constexprs)`` (the
    current device's stream, Triton's launch hooks).

    A kernel is launched directly only where Triton's own binder, asked once,
    binds the arguments to exactly those passed here followed by the constexpr
    values: any Triton release that binds otherwise, the CPU interpreter (it
    returns no compiled kernel) and kernels with pre-run hooks keep Triton's
    path. The buffers a pass allocates are new, 16-byte aligned torch
    allocations on every call, so they specialise the same way too.
    """

    def __init__(self):
        self._kernels: dict[str, _DirectKernel | None] = {}   # None: Triton's path

    def launch(self, name: str, kernel, grid: tuple[int, ...], args: tuple, meta: dict) -> None:
        direct = self._kernels.get(name)
        if direct is not None and DIRECT_LAUNCH:
            direct(grid, args)
            return
        compiled = kernel[grid](*args, **meta)
        if name not in self._kernels:
            self._kernels[name] = _DirectKernel.checked(kernel, compiled, args, meta)

    def direct(self, name: str) -> bool:
        """Whether ``name`` is now launched directly."""
        return self._kernels.get(name) is not None


class _DirectKernel:
    """A compiled kernel and the constexpr values that follow the arguments."""

    def __init__(self, compiled, constexprs: tuple):
        self.compiled, self.constexprs = compiled, constexprs
        self._runner = (None, None)   # (grid, compiled[grid]): one tuple, read at once

    @classmethod
    def checked(cls, kernel, compiled, args: tuple, meta: dict) -> _DirectKernel | None:
        """The direct launch of what ``kernel[grid](*args, **meta)`` returned,
        when Triton's binder for the current device binds ``args`` and
        ``meta`` to ``args`` themselves, in order, then the constexpr values;
        else ``None`` (Triton's path)."""
        try:
            if (compiled is None or kernel.pre_run_hooks
                    or not all(hasattr(compiled, name) for name in ('__getitem__', 'launch_metadata'))):
                return None
            binder = kernel.device_caches[driver.active.get_current_device()][-1]
            bound = tuple(binder(*args, **meta)[0].values())
        except (AttributeError, KeyError, IndexError, TypeError):   # internals this release lacks
            return None
        if len(bound) < len(args) or any(a is not b for a, b in zip(bound, args)):
            return None
        return cls(compiled, bound[len(args):])

    def __call__(self, grid: tuple[int, ...], args: tuple) -> None:
        runner_grid, runner = self._runner
        if runner_grid != grid:
            # CompiledKernel's runner reads three grid dimensions (JITFunction.run pads them)
            runner_grid, runner = grid, self.compiled[(*grid, 1, 1)[:3]]
            self._runner = runner_grid, runner
        runner(*args, *self.constexprs)


class _Launches:
    """A pass's buffers and kernel launches. ``allocate=False`` makes the
    buffers meta tensors (shape and strides, no memory), for compiling the very
    kernels a launch would run (:func:`.plan.compiled_resources`). With
    ``compiled`` (the case's :class:`CompiledLaunches`), kernels are launched
    directly once Triton has compiled them."""

    table: dict[str, tuple[object, dict]]
    compiled: CompiledLaunches | None = None

    def arguments(self, name: str) -> tuple[tuple[int, ...], tuple]:  # pragma: no cover
        raise NotImplementedError

    def launch(self, name: str) -> None:
        kernel, meta = self.table[name]
        grid, args = self.arguments(name)
        if self.compiled is None:
            kernel[grid](*args, **meta)
        else:
            self.compiled.launch(name, kernel, grid, args, meta)


class ForwardLaunches(_Launches):
    """The forward's buffers and its three kernel launches, one method each.

    ``run`` is the forward; benchmarks time the methods one by one.
    """
    KERNELS = ('partials', 'combine', 'output')

    def __init__(self, q, k, v, angle, width: int, plan: LaunchPlan, allocate: bool = True,
                 compiled: CompiledLaunches | None = None):
        batch, heads, num_tokens, head_dim = q.shape
        self.q, self.k, self.v, self.angle, self.width, self.plan = q, k, v, angle, width, plan
        self.compiled = compiled
        self.table = launch_table(plan, whole_pairs(q), whole_pairs(k))
        self.heads, self.num_tokens, self.head_dim = heads, num_tokens, head_dim
        self.batch_heads = batch * heads
        self.scale = head_dim ** -0.5
        self.workspace = _buffer((self.batch_heads, plan.num_chunks,
                                  head_dim + kernels.FWD_EXTRA_ROWS.value, head_dim),
                                 torch.float32, q.device, allocate)
        self.stats = _buffer((self.batch_heads, head_dim + kernels.STATS_EXTRA_ROWS.value,
                              head_dim), torch.float32, q.device, allocate)
        self.out = _output_buffer(q, allocate)

    def arguments(self, name: str) -> tuple[tuple[int, ...], tuple]:
        plan, q, k, v, out = self.plan, self.q, self.k, self.v, self.out
        if name == 'partials':
            return (plan.num_chunks, self.batch_heads), (
                k, v, self.angle, self.workspace, *k.stride(), *v.stride(),
                self.heads, self.num_tokens, self.width, self.head_dim, plan.tokens_per_chunk)
        if name == 'combine':
            return (_cdiv(self.head_dim, plan.combine.block_n), self.batch_heads), (
                self.workspace, self.stats, plan.num_chunks, self.num_tokens,
                plan.tokens_per_chunk, self.head_dim, self.scale / self.num_tokens)
        if name == 'output':
            per_program = plan.output_tokens_per_program
            return (_cdiv(self.num_tokens, per_program), self.batch_heads), (
                q, self.stats, self.angle, out, *q.stride(), *out.stride(),
                self.heads, self.num_tokens, self.width, self.head_dim, self.scale, per_program)
        raise KeyError(f'{name!r} is not a forward kernel; choose from {self.KERNELS}')

    def partials(self):
        self.launch('partials')

    def combine(self):
        self.launch('combine')

    def output(self):
        self.launch('output')

    def steps(self):
        return (('partials', self.partials), ('combine', self.combine), ('output', self.output))

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        for _, step in self.steps():
            step()
        return self.out, self.stats


class BackwardLaunches(_Launches):
    """The backward's buffers and its launches (query pass, chunk sum, key pass)."""
    KERNELS = ('query', 'key')

    def __init__(self, dout, q, k, v, angle, stats, width: int, plan: LaunchPlan,
                 allocate: bool = True, compiled: CompiledLaunches | None = None):
        batch, heads, num_tokens, head_dim = q.shape
        self.dout, self.q, self.k, self.v = dout, q, k, v
        self.compiled = compiled
        self.angle, self.stats, self.width, self.plan = angle, stats, width, plan
        self.table = launch_table(plan, whole_pairs(q), whole_pairs(k))
        self.heads, self.num_tokens, self.head_dim = heads, num_tokens, head_dim
        self.batch_heads = batch * heads
        self.scale = head_dim ** -0.5
        self.workspace = _buffer((self.batch_heads, plan.num_chunks,
                                  head_dim + kernels.GRAD_EXTRA_ROWS.value, head_dim),
                                 torch.float32, q.device, allocate)
        self.key_grads = self.workspace[:, 0]
        self.dq, self.dk, self.dv = (_output_buffer(q, allocate), _output_buffer(k, allocate),
                                     _output_buffer(v, allocate))

    def arguments(self, name: str) -> tuple[tuple[int, ...], tuple]:
        plan, q, k, v = self.plan, self.q, self.k, self.v
        if name == 'query':
            dout, dq = self.dout, self.dq
            return (plan.num_chunks, self.batch_heads), (
                q, dout, self.stats, self.angle, dq, self.workspace,
                *q.stride(), *dout.stride(), *dq.stride(),
                self.heads, self.num_tokens, self.width, self.head_dim, plan.tokens_per_chunk,
                self.scale)
        if name == 'key':
            dk, dv = self.dk, self.dv
            per_program = plan.key_tokens_per_program
            return (_cdiv(self.num_tokens, per_program), self.batch_heads), (
                k, v, self.stats, self.key_grads, self.angle, dk, dv,
                *k.stride(), *v.stride(), *dk.stride(), *dv.stride(),
                self.heads, self.num_tokens, self.width, self.head_dim, per_program)
        raise KeyError(f'{name!r} is not a backward kernel; choose from {self.KERNELS}')

    def query(self):
        self.launch('query')

    def chunk_sum(self):
        # Partials are pre-scaled in the kernel; summing the chunks is all that is left.
        if self.plan.num_chunks > 1:
            self.key_grads = self.workspace.sum(dim=1)

    def key(self):
        self.launch('key')

    def steps(self):
        return (('query', self.query), ('chunk_sum', self.chunk_sum), ('key', self.key))

    def run(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        for _, step in self.steps():
            step()
        return self.dq, self.dk, self.dv


