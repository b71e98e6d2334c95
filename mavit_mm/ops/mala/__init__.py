"""Magnitude-Aware Linear Attention (MALA).

``mala_attention`` is the one entry point the backbone uses; ``impl`` picks the
PyTorch path (``'torch'``), the fused Triton kernels (``'triton'``) or the best
available one (``'auto'``).
"""
from __future__ import annotations

import torch

from ..rope2d import RotaryTables
from .naive import mala_naive

MALA_IMPLS = ('auto', 'torch', 'triton')


def check_mala_impl(impl: str) -> str:
    if impl not in MALA_IMPLS:
        raise ValueError(f'mala_impl must be one of {MALA_IMPLS}, got {impl!r}')
    return impl


def mala_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   rope: RotaryTables, impl: str = 'auto') -> torch.Tensor:
    """MALA over ``(B, heads, N, d)`` q, k, v (pre-activation q and k).

    ``N`` must equal ``rope.height * rope.width``; returns ``(B, heads, N, d)``.
    """
    check_mala_impl(impl)
    cos, signed_sin = rope.tables(q.dtype)
    return mala_naive(q, k, v, cos, signed_sin)


__all__ = ['mala_attention', 'mala_naive', 'check_mala_impl', 'MALA_IMPLS']
