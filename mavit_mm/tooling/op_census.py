"""What a forward runs, op by op, counted without a clock.

:class:`OpCensus` is a ``TorchDispatchMode`` that counts the aten ops a call
dispatches below autocast, so autocast's own casts are counted as the
``_to_copy`` ops they are. Views (ops that alias their input), ``lift_fresh``
and ``contiguous`` are not counted: they move no data. A custom operator (the
fused MALA, ``mavit_mm::mala``) counts once, as one launch would on CUDA.

* a **cast** is a ``_to_copy`` that changes the dtype;
* an **activation cast** is a cast of a tensor computed from the model's input
  (a feature map), not of a weight, a buffer or what is computed from those
  alone (autocast casts every weight once a forward; those stay).

The CI contract of the lean bf16 forward (``tests/test_models/test_op_census.py``)
and the GPU check's kernel counts read these numbers.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

_UNCOUNTED = ('aten::lift_fresh', 'aten::contiguous')


@dataclass
class CensusReport:
    ops: Counter = field(default_factory=Counter)          # op name -> calls
    casts: int = 0
    activation_casts: list = field(default_factory=list)  # (op before, shape, from, to)

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    def summary(self) -> dict:
        return dict(non_view_ops=self.total, casts=self.casts,
                    activation_casts=len(self.activation_casts),
                    top_ops=dict(self.ops.most_common(12)))


class OpCensus(TorchDispatchMode):
    """Counts the non-view aten ops (and casts) dispatched inside the block.

    ``inputs``: the tensors the model is called with. Whatever an op computes
    from one of them (or from what was computed from them) is an activation;
    weights, buffers and tables built from them alone are not.
    """

    def __init__(self, inputs=()):
        super().__init__()
        self.report = CensusReport()
        self._activations = WeakIdKeyDictionary()
        for t in inputs:
            self._activations[t] = True
        self._previous = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        from_input = any(isinstance(t, torch.Tensor) and t in self._activations
                         for t in tree_leaves((args, kwargs)))
        if from_input:
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self._activations[t] = True
        name = func._schema.name
        if func.is_view or name in _UNCOUNTED:
            return out
        op = str(func.overloadpacket.__name__)
        self.report.ops[op] += 1
        if func is torch.ops.aten._to_copy.default:
            source, dtype = args[0], kwargs.get('dtype')
            if dtype is not None and dtype != source.dtype:
                self.report.casts += 1
                if from_input:
                    self.report.activation_casts.append(
                        (self._previous, tuple(source.shape), str(source.dtype), str(dtype)))
        elif from_input:
            self._previous = op
        return out


def forward_census(model: torch.nn.Module, inputs: torch.Tensor,
                   autocast_dtype: torch.dtype | None = torch.bfloat16) -> CensusReport:
    """The census of one ``model(inputs)`` (no grad), under autocast to
    ``autocast_dtype`` on the inputs' device type (``None``: no autocast)."""
    device_type = inputs.device.type
    with torch.no_grad(), torch.autocast(device_type, dtype=autocast_dtype or torch.float32,
                                         enabled=autocast_dtype is not None):
        with OpCensus(inputs=(inputs,)) as census:
            model(inputs)
    return census.report


__all__ = ['OpCensus', 'CensusReport', 'forward_census']
