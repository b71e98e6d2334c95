"""MALA in PyTorch: the formula the model runs off the fused kernels, and the
reference the kernels are tested against.

Per head, with N tokens, head dim d and ``scale = d ** -0.5``, MALA is::

    q, k = elu(q) + 1, elu(k) + 1
    z    = scale * q . mean_j(k_j)                 # before RoPE
    q, k = rope(q), rope(k)
    kv   = (scale / N) * sum_j k_j^T v_j
    out  = (q @ kv) * (1 + 1 / (z + 1e-6)) - z * mean_j(v_j)

the ``'mala'`` member of the linear-attention family
(:mod:`mavit_mm.ops.linear_attention`), whose formula it runs. ``MALA_EPS`` is
shared with the kernels.
"""
from __future__ import annotations

import torch

from ..linear_attention import MALA_EPS, linear_attention_torch


def mala_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """MALA on ``(B, heads, N, d)`` tensors with ``(N, d)`` rotary tables: the
    kernels' reference signature (half inputs computed in fp32, as
    :func:`~mavit_mm.ops.linear_attention.linear_attention_torch` says why)."""
    return linear_attention_torch(q, k, v, (cos, signed_sin), 'mala', 'elu')


__all__ = ['MALA_EPS', 'mala_naive']
