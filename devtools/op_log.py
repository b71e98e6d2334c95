"""``OpLog``: what a call runs, aten op by aten op, without a clock: **the**
dispatch-mode op counter. The switch tests read it (each speed feature must
change what runs), and the op census (:mod:`devtools.op_census`) counts its
categories on top of it."""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    """Every aten op a call dispatches, counted by name (custom ops by theirs,
    ``position_norm``), and the complex multiplies apart. ``keep_operands``:
    also ``calls``, each op's name and tensor arguments in order (kept alive:
    for small calls)."""

    def __init__(self, keep_operands: bool = False):
        super().__init__()
        self.ops = Counter()
        self.complex_muls = 0
        self.calls: list[tuple[str, list[torch.Tensor]]] | None = [] if keep_operands else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.log(func, args, kwargs, out)
        return out

    def log(self, func, args, kwargs, out) -> None:
        """Count one dispatched op (``out``: its results); a subclass's hook."""
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if name == 'mul' and any(t.is_complex() for t in tensors):
            self.complex_muls += 1
        if self.calls is not None:
            self.calls.append((name, tensors))


__all__ = ['OpLog']
