"""PyTorch MALA: the published model's formula, and the reference the fused
kernels are tested against.

Per head, with N tokens, head dim d and ``scale = d ** -0.5``::

    q, k = elu(q) + 1, elu(k) + 1
    z    = scale * q . mean_j(k_j)                 # before RoPE
    q, k = rope(q), rope(k)
    kv   = (scale / N) * sum_j k_j^T v_j
    out  = (q @ kv) * (1 + 1 / (z + 1e-6)) - z * mean_j(v_j)

The formula itself is written once, with MALA's relatives (other kernel
functions, linear attention, InLine, the Table 11 ablations), in
:mod:`mavit_mm.ops.attention_variants`; this module keeps the kernels' reference
signature and ``MALA_EPS``, which the kernels share.
"""
from __future__ import annotations

import torch

MALA_EPS = 1e-6


def mala_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """MALA on ``(B, heads, N, d)`` tensors with ``(N, d)`` rotary tables.

    Half-precision inputs are computed in fp32 (the reductions over N overflow
    fp16 at high resolution) and the result is cast back.
    """
    # Imported here: mavit_mm.ops.attention_variants imports this package.
    from ..attention_variants import linear_attention_torch
    return linear_attention_torch(q, k, v, (cos, signed_sin), 'mala', 'elu')
