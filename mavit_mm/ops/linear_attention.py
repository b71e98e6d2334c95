"""Linear attention in O(N d^2), the family MALA belongs to: MALA, vanilla
linear attention, InLine and the Table 11 ablations. They differ only in the
per-query coefficients ``a`` and ``b`` of ``out = a * (q @ kv) + b * mean_j(v_j)``
(:func:`linear_coefficients`); the table, with the papers' notation, is in
:mod:`mavit_mm.ops.attention_variants`.

A leaf (it imports torch and :mod:`.rope2d` only), so that MALA's reference
(:mod:`.mala.naive`) and dispatch and :mod:`.attention_variants` build on it.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .rope2d import RotaryTables, apply_rope

# MALA's published epsilon (z + 1e-6), which the variants' coefficients share;
# the fused kernels take it from mala.naive.
MALA_EPS = 1e-6


def _elu_plus_one(x: torch.Tensor) -> torch.Tensor:
    # In place on elu's result: its backward reads the input, not the output.
    return F.elu(x).add_(1.0)


KERNEL_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'elu': _elu_plus_one,
    'relu': F.relu,
    'exp': torch.exp,
}
LINEAR_ATTN_TYPES = ('mala', 'linear', 'inline', 'mala_no_beta', 'mala_no_gamma')

# A stage's rotation: its RotaryTables, explicit (cos, signed_sin) tables, or None.
Rotation = RotaryTables | tuple[torch.Tensor, torch.Tensor] | None


def linear_coefficients(attn_type: str, z: torch.Tensor
                        ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(a, b)`` of ``score_ij = a_i * S_ij + b_i / N`` (the table of
    :mod:`mavit_mm.ops.attention_variants`); ``None`` stands for a = 1 / b = 0,
    so no work is spent on it."""
    if attn_type == 'mala':
        return 1.0 + 1.0 / (z + MALA_EPS), -z
    if attn_type == 'mala_no_beta':
        return None, -z
    if attn_type == 'mala_no_gamma':
        return 1.0 + 1.0 / (z + MALA_EPS), None
    if attn_type == 'linear':
        return 1.0 / z.clamp_min(MALA_EPS), None
    if attn_type == 'inline':
        return None, 1.0 - z
    raise ValueError(f'{attn_type!r} is not a linear attention; '
                     f'those are {LINEAR_ATTN_TYPES}')


def rotate(x: torch.Tensor, rotation: Rotation) -> torch.Tensor:
    if rotation is None:
        return x
    if isinstance(rotation, RotaryTables):
        return rotation.rotate(x)
    return apply_rope(x, *rotation)


def kernel_z_rope(q: torch.Tensor, k: torch.Tensor, rotation: Rotation, kernel_function: str):
    """phi(q), phi(k) rotated, and z = s * phi(q) . mean(phi(k)) taken before RoPE."""
    phi = KERNEL_FUNCTIONS[kernel_function]
    scale = q.shape[-1] ** -0.5
    q, k = phi(q), phi(k)
    z = scale * (q @ k.mean(dim=-2, keepdim=True).transpose(-1, -2))     # (B, h, N, 1)
    return rotate(q, rotation), rotate(k, rotation), z


def linear_attention_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           rotation: Rotation, attn_type: str = 'mala',
                           kernel_function: str = 'elu') -> torch.Tensor:
    """A linear variant in O(N d^2): ``a * (R(q) @ KV) + b * mean(v)``.

    ``rotation``: see :data:`Rotation`. Half-precision inputs are computed in
    fp32 (the reductions over N overflow fp16 at high resolution; the rotation
    too) and the result is cast back; call it outside autocast (the callers do).
    """
    out_dtype = q.dtype
    if out_dtype in (torch.float16, torch.bfloat16):
        q, k, v = q.float(), k.float(), v.float()
        if rotation is not None and not isinstance(rotation, RotaryTables):
            rotation = tuple(t.float() for t in rotation)
    num_tokens = q.shape[-2]
    scale = q.shape[-1] ** -0.5
    q, k, z = kernel_z_rope(q, k, rotation, kernel_function)
    a, b = linear_coefficients(attn_type, z)
    kv = (k.transpose(-1, -2) @ v) * (scale / num_tokens)              # (B, h, d, d)
    out = q @ kv
    if a is not None:
        out = out * a
    if b is not None:
        # In place: neither q @ kv nor the product with a keeps its result for backward.
        out = out.addcmul_(b, v.mean(dim=-2, keepdim=True))
    return out.to(out_dtype)


__all__ = ['KERNEL_FUNCTIONS', 'LINEAR_ATTN_TYPES', 'MALA_EPS', 'Rotation', 'kernel_z_rope',
           'linear_attention_torch', 'linear_coefficients', 'rotate']
