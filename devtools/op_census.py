"""What an eager forward runs, op by op, counted without a clock: the op census.

This module is the one home of the eager census (the CPU proxy of GPU glue
work); its sibling :mod:`devtools.compiled_census` counts what inductor
compiles a forward into. :class:`OpCensus` is the op log
(:class:`devtools.op_log.OpLog`, a ``TorchDispatchMode``) extended: it sees
every aten op a call dispatches below autocast, so autocast's own casts are
counted as the ``_to_copy`` ops they are, and a custom operator (the fused
MALA, ``mavit_mm::mala``) is one op, as one launch is on CUDA. What a
backend does inside one op is not seen: on the CPU, oneDNN adds a
convolution's bias, and copies a strided input, inside the convolution, where
cuDNN's path runs separate kernels for them (MAViT-T's 91 bias adds on an
H200, ``benchmarks/results/gpu-h200-2026-11-26/``); this census counts neither.

The counting rule
-----------------
**Which forward.** :func:`first_and_steady`: the *second* forward of
``model(inputs)`` without gradients, in a fresh ``torch.autocast`` context
(bf16 on the inputs' device type) of its own. The first forward also fills
the model's caches (RoPE tables, folded kernels); a fresh context matters
because autocast reuses its casts of parameters within one context, while a
user's every call opens its own. The contract's case: MAViT-T with
``mala_impl='triton'`` under Triton's interpreter (``TRITON_INTERPRET=1``),
one 128x256 image.

**Non-view ops.** Every aten op dispatched, except the views (ops that alias
an input, ``func.is_view``), ``lift_fresh`` and ``contiguous``: they move no
data.

**Operands.** What an op reads: its tensor arguments, less what it only
writes (an ``out=`` tensor, the destination of ``copy_``); an in-place op
reads its ``self``. Its results are not operands: TensorIterator lays a
result out after the inputs, and a copy into another layout
(``.contiguous()``, ``.to(memory_format=...)``) is a conversion, not a mix.
An operand's *elements* are the ones it holds in memory: a broadcast
(stride 0) dimension counts once.

**Casts.** A ``_to_copy`` that changes the dtype, or a ``copy_`` from another
dtype. Each cast is one of:

* a **weight cast**: its source is not computed from the call's inputs: a
  parameter, a buffer, a tensor cached by an earlier call, or what is
  computed from those alone. It gives the same values at every call, so it
  could be cached. The census names the parameter or buffer it comes from
  where there is one (``source``);
* an **activation cast**: its source is computed from the inputs (a feature
  map). Provenance is followed op by op: the results of an op that reads an
  input, or anything computed from one, are computed from the inputs.

**Elementwise ops.** Ops tagged ``torch.Tag.pointwise`` (unary ones
included: ``gelu``, ``clone``) and the element-moving ops that are not
tagged: ``flip``, ``roll``, ``_to_copy``, ``copy_``.

**Mixed-layout elementwise ops.** An elementwise op whose operands of more
than 4,096 (:data:`LARGE_OPERAND`) elements are not all dense or do not all
have one layout:

* *dense*: the operand's dimensions of size > 1 and stride != 0, sorted by
  stride, tile one block of memory (strides 1, size0, size0 * size1, ...):
  no gaps, no overlap. A channel slice of a channels_last map is not dense;
  a permuted or channels_last tensor is;
* *layout*: the order of the operand's dimensions from largest stride to
  smallest, over its dimensions of size > 1 and stride != 0 (size-1 and
  broadcast dimensions say nothing about memory order), each dimension
  named by its place in the broadcast shape (dimensions align from the
  right, as broadcasting aligns them). Two operands *differ in layout* when,
  over the dimensions that both have in that sense, their orders differ. So
  an ``(N, d)`` table meets a ``(B, heads, N, d)`` map in one layout when the
  map's N stride is larger than its d stride, whatever the map's heads do.

A copy that reads a view that is not dense (``.contiguous()`` of a channel
slice: ``clone``) counts: it is the strided copy a dense layout would not
need.

**Mixed-dtype elementwise ops.** An elementwise op whose floating operands,
of any size, have more than one dtype. A 0-dim tensor is a scalar to type
promotion (it never decides the computation's dtype against a tensor of the
same kind) and is left out, like a Python number. In-place ops included: an
fp32 layer scale in a bf16 ``addcmul_`` is mixed.

**Bytes moved.** Per non-view op, the bytes of its operands (read) and of
its tensor results (written): elements times element size. An in-place op
both reads and writes its ``self``; an allocation that writes nothing
(``empty``, ``empty_strided``, ``empty_like``, ``new_empty``) moves nothing.
``weight_cast_bytes``: the part the weight casts move.

Who reads these numbers: the CI contracts of the lean bf16 forward
(``tests/test_models/test_op_census.py``) and ``benchmarks/op_census.py``,
which records them for MAViT-T and Swin-T (:func:`census_backbones`).
:func:`fused_launches_skipped` lets a census skip the fused op's kernels.
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import combinations
from unittest import mock

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from devtools import baseline
from devtools.op_log import OpLog

LARGE_OPERAND = 4096
"""Operands of more elements than this are judged for layout (the rule above)."""

CENSUS_SIZE = (128, 256)
"""The input size (H, W) of the contract's census, batch 1."""

_UNCOUNTED = ('aten::lift_fresh', 'aten::contiguous')
_ELEMENT_MOVING = ('flip', 'roll', '_to_copy', 'copy_')
_ALLOCATIONS = ('empty', 'empty_strided', 'empty_like', 'new_empty', 'new_empty_strided')
_FROM_INPUT = object()   # provenance mark of what is computed from the inputs


@dataclass(frozen=True)
class Operand:
    """What the census records of a tensor an op reads."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    dense: bool

    @classmethod
    def of(cls, t: torch.Tensor) -> Operand:
        return cls(tuple(t.shape), tuple(t.stride()), str(t.dtype).removeprefix('torch.'),
                   is_dense(t))

    def __str__(self) -> str:
        dense = '' if self.dense else ', not dense'
        return f'{self.dtype}{list(self.shape)} strides {list(self.stride)}{dense}'


@dataclass(frozen=True)
class OpRecord:
    """One counted op of a category: its name, what it read, why it counts
    (``note``: a mixed-layout op's reason, a cast's dtypes) and, for a weight
    cast, the parameter or buffer it comes from (``source``)."""

    op: str
    operands: tuple[Operand, ...]
    note: str = ''
    source: str | None = None

    def as_dict(self) -> dict:
        return dict(op=self.op, operands=[str(o) for o in self.operands], note=self.note)


def grouped(records: list[OpRecord]) -> list[dict]:
    """``records`` as JSON rows, those alike but for their ``source`` merged
    (``count``, and their ``sources`` where they have any), most frequent
    first: what a developer reads to see which ops are counted."""
    rows: dict[tuple, dict] = {}
    for record in records:
        key = (record.op, record.operands, record.note)
        row = rows.setdefault(key, dict(record.as_dict(), count=0))
        row['count'] += 1
        if record.source is not None:
            row.setdefault('sources', []).append(record.source)
    return sorted(rows.values(), key=lambda row: -row['count'])


def listing(records: list[OpRecord]) -> str:
    """``records`` as text, one line per :func:`grouped` row: what an assertion
    message shows."""
    lines = []
    for row in grouped(records):
        sources = f" (from {', '.join(row['sources'])})" if 'sources' in row else ''
        note = f" {row['note']}" if row['note'] else ''
        lines.append(f"{row['count']} x {row['op']}({'; '.join(row['operands'])}){note}{sources}")
    return '\n'.join(lines)


@dataclass
class CensusReport:
    ops: Counter = field(default_factory=Counter)          # op name -> calls
    weight_casts: list[OpRecord] = field(default_factory=list)
    activation_casts: list[OpRecord] = field(default_factory=list)
    mixed_layout: list[OpRecord] = field(default_factory=list)
    mixed_dtype: list[OpRecord] = field(default_factory=list)
    bytes_read: int = 0
    bytes_written: int = 0
    weight_cast_bytes: int = 0     # of those, moved by the weight casts

    @property
    def total(self) -> int:
        """Non-view ops."""
        return sum(self.ops.values())

    @property
    def casts(self) -> int:
        return len(self.weight_casts) + len(self.activation_casts)

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written

    def summary(self) -> dict:
        """The counts of every category (module docstring)."""
        return dict(non_view_ops=self.total, casts=self.casts,
                    weight_casts=len(self.weight_casts),
                    activation_casts=len(self.activation_casts),
                    mixed_layout_elementwise=len(self.mixed_layout),
                    mixed_dtype_elementwise=len(self.mixed_dtype),
                    bytes_read=self.bytes_read, bytes_written=self.bytes_written,
                    bytes_moved=self.bytes_moved, weight_cast_bytes=self.weight_cast_bytes)

    def details(self) -> dict:
        """Which ops and operands each category counts, and the ops by name."""
        return dict(ops=dict(self.ops.most_common()),
                    weight_casts=grouped(self.weight_casts),
                    activation_casts=grouped(self.activation_casts),
                    mixed_layout_elementwise=grouped(self.mixed_layout),
                    mixed_dtype_elementwise=grouped(self.mixed_dtype))


def memory_dims(t: torch.Tensor) -> list[tuple[int, int]]:
    """``(dim, stride)`` of ``t``'s dimensions that order its memory (size > 1,
    stride != 0), largest stride first (ties: the earlier dimension first)."""
    dims = [(dim, stride) for dim, (size, stride) in enumerate(zip(t.shape, t.stride()))
            if size > 1 and stride != 0]
    return sorted(dims, key=lambda item: (-item[1], item[0]))


def is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements tile one block of memory, in some order of its
    dimensions (broadcast and size-1 dimensions aside)."""
    expected = 1
    for dim, stride in reversed(memory_dims(t)):
        if stride != expected:
            return False
        expected *= t.shape[dim]
    return True


def held_elements(t: torch.Tensor) -> int:
    """Elements ``t`` holds in memory: a broadcast (stride 0) dimension counts once."""
    count = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            count *= size
    return count


def layout_order(t: torch.Tensor, ndim: int) -> tuple[int, ...]:
    """``t``'s layout (module docstring): its memory-ordering dimensions, largest
    stride first, numbered in an ``ndim``-dimensional broadcast shape."""
    offset = ndim - t.dim()
    return tuple(dim + offset for dim, _ in memory_dims(t))


def layouts_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` order the dimensions they both have differently."""
    ndim = max(a.dim(), b.dim())
    order_a, order_b = layout_order(a, ndim), layout_order(b, ndim)
    shared = set(order_a) & set(order_b)
    return [d for d in order_a if d in shared] != [d for d in order_b if d in shared]


def is_elementwise(func) -> bool:
    """The rule's elementwise ops: tagged pointwise, or element-moving."""
    return (torch.Tag.pointwise in func.tags
            or func.overloadpacket.__name__ in _ELEMENT_MOVING)


def operands(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors ``func`` reads (module docstring)."""
    written = {id(t) for t in tree_leaves(kwargs.get('out')) if isinstance(t, torch.Tensor)}
    leaves = tree_leaves((args, {k: v for k, v in kwargs.items() if k != 'out'}))
    tensors = [t for t in leaves if isinstance(t, torch.Tensor) and id(t) not in written]
    if func.overloadpacket.__name__ == 'copy_':
        tensors = tensors[1:]      # copy_(self, src): self is only written
    return tensors


def mixed_layout_reason(tensors: list[torch.Tensor]) -> str | None:
    """Why an elementwise op over ``tensors`` is mixed-layout, or ``None``."""
    large = [t for t in tensors if held_elements(t) > LARGE_OPERAND]
    if any(not is_dense(t) for t in large):
        return 'not dense'
    if any(layouts_differ(a, b) for a, b in combinations(large, 2)):
        return 'layouts differ'
    return None


def is_mixed_dtype(tensors: list[torch.Tensor]) -> bool:
    """Whether ``tensors``' floating operands of one or more dims have more than one dtype."""
    return len({t.dtype for t in tensors if t.dim() > 0 and t.dtype.is_floating_point}) > 1


def _nbytes(t: torch.Tensor) -> int:
    return held_elements(t) * t.element_size()


class OpCensus(OpLog):
    """Counts what is dispatched inside the block, by the module's rule: the
    op log's counter (``ops``, shared with ``report.ops``) over the non-view
    ops, and the rule's categories.

    ``inputs``: the tensors the model is called with (provenance of
    activations). ``model``: where weight casts get the names of their
    parameters and buffers (optional).
    """

    def __init__(self, inputs=(), model: torch.nn.Module | None = None):
        super().__init__()
        self.report = CensusReport(ops=self.ops)
        self._origin = WeakIdKeyDictionary()   # tensor -> _FROM_INPUT or a weight's name
        if model is not None:
            named = [*model.named_parameters(remove_duplicate=False),
                     *model.named_buffers(remove_duplicate=False)]
            for name, t in named:
                self._origin.setdefault(t, name)
        for t in inputs:
            self._origin[t] = _FROM_INPUT

    def log(self, func, args, kwargs, out) -> None:
        arg_tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        origins = [self._origin.get(t) for t in arg_tensors]
        origin = (_FROM_INPUT if _FROM_INPUT in origins
                  else next((o for o in origins if o is not None), None))
        results = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if origin is not None:
            for t in results:
                if self._origin.get(t) is not _FROM_INPUT:
                    self._origin[t] = origin
        if func.is_view or func._schema.name in _UNCOUNTED:
            return
        super().log(func, args, kwargs, out)
        name = str(func.overloadpacket.__name__)
        report = self.report
        read = operands(func, args, kwargs)
        moved = (sum(_nbytes(t) for t in read),
                 0 if name in _ALLOCATIONS else sum(_nbytes(t) for t in results))
        report.bytes_read += moved[0]
        report.bytes_written += moved[1]
        cast = self._cast(func, args, kwargs)
        if cast is not None:
            source, dtype = cast
            source_origin = self._origin.get(source)
            note = f'{str(source.dtype).removeprefix("torch.")} -> ' \
                   f'{str(dtype).removeprefix("torch.")}'
            if source_origin is _FROM_INPUT:
                report.activation_casts.append(OpRecord(name, (Operand.of(source),), note))
            else:
                report.weight_casts.append(OpRecord(name, (Operand.of(source),), note,
                                                    source_origin))
                report.weight_cast_bytes += sum(moved)
        if is_elementwise(func):
            reason = mixed_layout_reason(read)
            if reason is not None:
                report.mixed_layout.append(OpRecord(name, tuple(map(Operand.of, read)), reason))
            if is_mixed_dtype(read):
                report.mixed_dtype.append(OpRecord(name, tuple(map(Operand.of, read))))

    @staticmethod
    def _cast(func, args, kwargs) -> tuple[torch.Tensor, torch.dtype] | None:
        """``(source, new dtype)`` when the op is a cast (module docstring)."""
        if func is torch.ops.aten._to_copy.default:
            dtype = kwargs.get('dtype')
            if dtype is not None and dtype != args[0].dtype:
                return args[0], dtype
        elif func is torch.ops.aten.copy_.default and args[0].dtype != args[1].dtype:
            return args[1], args[0].dtype
        return None


def forward_census(model: torch.nn.Module, inputs: torch.Tensor,
                   autocast_dtype: torch.dtype | None = torch.bfloat16) -> CensusReport:
    """The census of one ``model(inputs)`` without gradients, in a fresh
    autocast context to ``autocast_dtype`` on the inputs' device type
    (``None``: no autocast)."""
    device_type = inputs.device.type
    with torch.no_grad(), torch.autocast(device_type, dtype=autocast_dtype or torch.float32,
                                         enabled=autocast_dtype is not None):
        with OpCensus(inputs=(inputs,), model=model) as census:
            model(inputs)
    return census.report


def first_and_steady(model: torch.nn.Module, inputs: torch.Tensor,
                     autocast_dtype: torch.dtype | None = torch.bfloat16
                     ) -> tuple[CensusReport, CensusReport]:
    """``(first, steady)``: the censuses of two forwards, each in its own
    autocast context. The second, ``steady``, is the rule's census; the
    first also fills the model's caches."""
    first = forward_census(model, inputs, autocast_dtype)
    return first, forward_census(model, inputs, autocast_dtype)


def mavit_t(fast_paths=None) -> torch.nn.Module:
    """The censuses' MAViT-T, in eval mode, seeded: the fused MALA op and the
    fused depthwise stages (``mala_impl='triton'``, ``depthwise_impl='triton'``;
    in Triton's interpreter on a CPU), as CUDA runs them with ``'auto'``;
    ``fast_paths`` as ``MAViT`` takes it (default: the defaults)."""
    from mavit_mm.models import MAViT
    torch.manual_seed(0)
    return MAViT('tiny', mala_impl='triton', depthwise_impl='triton',
                 fast_paths=fast_paths).eval()


def swin_t() -> torch.nn.Module:
    """The censuses' Swin-T, in eval mode, seeded: the UperNet baseline's
    backbone (:func:`devtools.baseline.swin_t`) that the GPU numbers compare
    against. Needs mmseg."""
    torch.manual_seed(0)
    swin = baseline.swin_t()
    swin.eval()   # (OpenMMLab's Swin.train returns None: no chaining)
    return swin


# What each census's backbones are, for the results files.
CENSUS_BACKBONES = dict(
    mavit="MAViT('tiny', mala_impl='triton', depthwise_impl='triton'), Triton interpreter, "
          "the fused ops' kernels not launched",
    swin='mmseg SwinTransformer, Swin-T settings, window 7')


def census_backbones() -> dict[str, torch.nn.Module]:
    """The backbones every census compares: ``{'MAViT-T': mavit_t(), 'Swin-T': swin_t()}``."""
    return {'MAViT-T': mavit_t(), 'Swin-T': swin_t()}


@contextmanager
def fused_launches_skipped():
    """Inside the block the fused ops' forwards (MALA's and the depthwise
    stages') launch no kernel: each returns its output buffers, laid out as
    the kernels write them, zeroed. The ops are dispatched, and counted, all
    the same; a census reads no values, and Triton's CPU interpreter would
    spend seconds a call on them. (Imports triton.)"""
    from mavit_mm.ops.depthwise import function as depthwise_function
    from mavit_mm.ops.mala import function

    def launchless_forward(q, k, v, angle, width, plan):
        out, stats, _ = function.forward_launches(q, k, v, angle, width, plan)   # not run
        return out.zero_(), stats.zero_()

    def launchless_depthwise(x, weight, bias, out, *, second=None, norm=None, **_):
        for written in (out, second, *(norm[2:4] if norm is not None else ())):
            if written is not None:
                written.zero_()

    with mock.patch.object(function, 'mala_forward', launchless_forward), \
            mock.patch.object(depthwise_function, '_forward', launchless_depthwise):
        yield


__all__ = ['CENSUS_BACKBONES', 'CENSUS_SIZE', 'LARGE_OPERAND', 'CensusReport', 'OpCensus', 'OpRecord', 'Operand',
           'census_backbones', 'first_and_steady', 'forward_census', 'fused_launches_skipped',
           'grouped', 'is_dense', 'layouts_differ', 'listing', 'mavit_t', 'swin_t']
