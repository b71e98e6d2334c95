"""``OpLog``: what a call runs, aten op by aten op, without a clock (the
switch tests: each speed feature must change what runs)."""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    """Every aten op a call dispatches, counted by name (custom ops by theirs,
    ``position_norm``), and the complex multiplies apart."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()
        self.complex_muls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        if name == 'mul' and any(isinstance(a, torch.Tensor) and a.is_complex() for a in args):
            self.complex_muls += 1
        return func(*args, **(kwargs or {}))
