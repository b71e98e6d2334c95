"""What inductor compiles a forward into, counted in its output code: the
compiled-graph census (the sibling of :mod:`devtools.op_census`, the
eager one; the two are the census code's only homes).

The counting rule
-----------------
**Which compile.** The model without gradients: one eager call first (as a
user's first call, and it fills the model's caches), then
``torch.compile(model)`` (inductor, default mode) called on the same inputs.
The recorded case: fp32 on the CPU, one 128x512 image
(:data:`COMPILED_CENSUS_SIZE`), MAViT-T with ``mala_impl='triton'`` and
``depthwise_impl='triton'`` under Triton's interpreter, and Swin-T (:func:`~.op_census.census_backbones`).

**Output code.** The Python wrapper inductor writes for each graph (what
``torch._inductor.utils.run_and_get_code`` returns); ``graphs`` is their
number. In each wrapper's ``call`` function:

* each call of a kernel the code defines (``name = async_compile.<backend>(...)``:
  a C++ kernel on the CPU, Triton on a GPU) is a **fused kernel** launch;
* each call of ``extern_kernels.<op>`` or ``torch.ops.<namespace>.<op>.<overload>``
  is an **extern call**, of a kind (:func:`extern_kind`): ``convolution``,
  ``gemm`` (``mm``, ``addmm``, ``bmm``, ``baddbmm``, linear), ``sdpa``
  (``_scaled_dot_product_*``), a custom operator by its name
  (``mavit_mm::mala``), or ``other``;
* allocations, reinterpretations and checks (``empty_strided_cpu``,
  ``reinterpret_tensor``, ``assert_size_stride``, ...) launch nothing;
  ``launches`` is fused kernels plus extern calls.

**Bytes accessed.** Inductor's own count of what its graphs read and write
(``torch._inductor.metrics.num_bytes_accessed``, from ``GraphLowering.count_bytes``),
which it makes only while its ``inductor_metrics`` log is on
(``TORCH_LOGS=inductor_metrics``): :func:`compiled_census` turns that logger on,
quietly, for its compile, and turns the FX graph cache off (a cached graph
brings neither its code nor its bytes). Only a compile that runs to the end
counts them.

**Code only.** ``run=False`` stops each compile as soon as the output code
is written, before its kernels are compiled (the C++ or Triton compiler: most
of the time) and before it runs: the same code, counted in a fraction of the
time, for the CI contract. It compiles with ``fullgraph=True`` (it can
capture one graph), so a graph break fails it.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from unittest import mock

import torch

COMPILED_CENSUS_SIZE = (128, 512)
"""The input size (H, W) of the recorded compiled census, batch 1."""

_KERNEL_DEFINITION = re.compile(r'^(\w+) = async_compile\.\w+\(', re.MULTILINE)
_CALL = re.compile(r'^\s+(?:[\w, ]+ = )?([\w.]+)\(')
_EXTERN = re.compile(r'^(?:extern_kernels\.(\w+)|torch\.ops\.(\w+)\.(\w+)\.\w+)$')
_GEMMS = ('mm', 'addmm', 'bmm', 'baddbmm', 'addbmm', 'linear', '_mkl_linear',
          '_linear_pointwise', '_int_mm')
_LIBRARY_NAMESPACES = ('aten', 'prims', 'mkldnn', 'mkl', 'onednn', 'quantized', 'inductor')


@dataclass
class CompiledCensus:
    graphs: int = 0
    fused_kernels: Counter = field(default_factory=Counter)   # kernel name -> launches
    extern_calls: Counter = field(default_factory=Counter)    # callee -> calls
    bytes_accessed: int | None = None
    codes: list[str] = field(default_factory=list, repr=False)   # the output code, per graph

    @property
    def fused_launches(self) -> int:
        return sum(self.fused_kernels.values())

    @property
    def externs_by_kind(self) -> Counter:
        kinds = Counter()
        for callee, calls in self.extern_calls.items():
            kinds[extern_kind(callee)] += calls
        return kinds

    @property
    def launches(self) -> int:
        return self.fused_launches + sum(self.extern_calls.values())

    def summary(self) -> dict:
        """The counts (module docstring); extern calls by kind."""
        return dict(graphs=self.graphs, launches=self.launches,
                    fused_kernels=self.fused_launches,
                    distinct_fused_kernels=len(self.fused_kernels),
                    extern_calls=dict(self.externs_by_kind.most_common()),
                    bytes_accessed=self.bytes_accessed)

    def details(self) -> dict:
        """Each extern callee and each fused kernel, with its calls."""
        return dict(extern_callees=dict(self.extern_calls.most_common()),
                    fused_kernel_launches=dict(self.fused_kernels.most_common()))


def extern_kind(callee: str) -> str:
    """The kind of an extern call (module docstring), from its callee as the
    output code spells it (``extern_kernels.convolution``,
    ``torch.ops.mavit_mm.mala.default``)."""
    match = _EXTERN.match(callee)
    if match is None:
        return 'other'
    namespace, op = ('aten', match[1]) if match[1] else (match[2], match[3])
    if 'convolution' in op:
        return 'convolution'
    if op in _GEMMS:
        return 'gemm'
    if op.startswith('_scaled_dot_product') or op == 'scaled_dot_product_attention':
        return 'sdpa'
    if namespace not in _LIBRARY_NAMESPACES:
        return f'{namespace}::{op}'
    return 'other'


def _call_body(code: str) -> list[str]:
    """The lines of the wrapper's ``call`` function (a method of ``Runner``
    in recent releases, a module function in older ones)."""
    lines = code.splitlines()
    for start, line in enumerate(lines):
        if re.match(r'^\s*def call\(', line):
            indent = len(line) - len(line.lstrip())
            body = []
            for line in lines[start + 1:]:
                if line.strip() and len(line) - len(line.lstrip()) <= indent:
                    break
                body.append(line)
            return body
    raise ValueError('no call function in the output code')


def census_of_code(codes: list[str]) -> CompiledCensus:
    """The census of inductor's output code, one string per graph."""
    census = CompiledCensus(graphs=len(codes), codes=list(codes))
    for code in codes:
        kernels = set(_KERNEL_DEFINITION.findall(code))
        for line in _call_body(code):
            match = _CALL.match(line)
            if match is None:
                continue
            callee = match[1]
            if callee in kernels:
                census.fused_kernels[callee] += 1
            elif _EXTERN.match(callee):
                census.extern_calls[callee] += 1
    return census


class _CodeWritten(Exception):
    """Raised to stop a compile once its output code is written (``run=False``)."""


@contextmanager
def _inductor_metrics_log():
    """Inductor's ``inductor_metrics`` log on, as ``TORCH_LOGS=inductor_metrics``
    turns it on (so that it counts bytes), its messages dropped."""
    from torch._inductor import compile_fx
    logger = compile_fx.inductor_metrics_log
    level, handler = logger.level, logging.NullHandler()
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def output_code(fn, *args, run: bool = True) -> list[str]:
    """Inductor's output code of ``fn(*args)`` (a compiled callable), one
    string per graph; ``run=False``: the first graph's, its compile stopped
    there (module docstring)."""
    from torch._inductor.graph import GraphLowering
    from torch._inductor.utils import run_and_get_code
    if run:
        return run_and_get_code(fn, *args)[1]
    codes = []

    def save_and_stop(code: str) -> None:
        codes.append(code)
        raise _CodeWritten

    torch._dynamo.reset()
    try:
        with mock.patch.object(GraphLowering, 'save_output_code', save_and_stop):
            fn(*args)
    except Exception:
        if not codes:
            raise
    return codes


def compiled_census(model: torch.nn.Module, inputs: torch.Tensor,
                    run: bool = True) -> CompiledCensus:
    """The compiled-graph census of ``model(inputs)`` by the module's rule
    (an eager call, then the compiled one, without gradients)."""
    from torch._inductor import config as inductor_config
    from torch._inductor import metrics
    with torch.no_grad():
        model(inputs)
        compiled = torch.compile(model, fullgraph=not run)
        with inductor_config.patch(fx_graph_cache=False), _inductor_metrics_log():
            metrics.reset()
            codes = output_code(compiled, inputs, run=run)
            bytes_accessed = metrics.num_bytes_accessed if run else None
    torch._dynamo.reset()
    census = census_of_code(codes)
    census.bytes_accessed = bytes_accessed
    return census


__all__ = ['COMPILED_CENSUS_SIZE', 'CompiledCensus', 'census_of_code', 'compiled_census',
           'extern_kind', 'output_code']
