"""PyTorch MALA: the formula of the published model, and the reference the
fused kernels are tested against.

Per head, with N tokens, head dim d and ``scale = d ** -0.5``::

    q, k = elu(q) + 1, elu(k) + 1
    z    = scale * q . mean_j(k_j)                 # before RoPE
    q, k = rope(q), rope(k)
    kv   = (scale / N) * sum_j k_j^T v_j
    out  = (q @ kv) * (1 + 1 / (z + 1e-6)) - z * mean_j(v_j)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..rope2d import apply_rope

MALA_EPS = 1e-6


def mala_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """MALA on ``(B, heads, N, d)`` tensors with ``(N, d)`` rotary tables.

    Half-precision inputs are computed in fp32 (the reductions over N overflow
    fp16 at high resolution) and the result is cast back.
    """
    out_dtype = q.dtype
    if out_dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
        cos, signed_sin = cos.float(), signed_sin.float()
    num_tokens, head_dim = q.shape[-2], q.shape[-1]
    scale = head_dim ** -0.5
    q = F.elu(q) + 1.0
    k = F.elu(k) + 1.0
    k_mean = k.mean(dim=-2, keepdim=True)                       # (B, h, 1, d)
    z = scale * (q @ k_mean.transpose(-1, -2))                  # (B, h, N, 1)
    q = apply_rope(q, cos, signed_sin)
    k = apply_rope(k, cos, signed_sin)
    kv = (k.transpose(-1, -2) @ v) * (scale / num_tokens)       # (B, h, d, d)
    v_mean = v.mean(dim=-2, keepdim=True)                       # (B, h, 1, d)
    out = (q @ kv) * (1.0 + 1.0 / (z + MALA_EPS)) - z * v_mean
    return out.to(out_dtype)
