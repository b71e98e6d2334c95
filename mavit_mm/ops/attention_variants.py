"""Every attention MAViT can run: the explicit score matrix
(:func:`attention_scores`, the readable reference) next to the path the model
runs (:func:`attention`, linear time in N for the linear variants). The linear
formula itself lives in :mod:`.linear_attention`.

Inputs are per-head ``(B, heads, N, d)`` tensors, q and k *before* the kernel
function; ``rope`` is a stage's :class:`~.rope2d.RotaryTables` (or ``None``).

Notation, per head: ``s = d ** -0.5``; ``phi`` the kernel function; ``R`` the
stage's 2D rotation (RoPE); ``eps = 1e-6``.

Linear variants (``LINEAR_ATTN_TYPES``). As in MALA's published code, z is
computed *before* RoPE and the q . k products *after* it::

    q_i, k_j = phi(q_i), phi(k_j)
    z_i      = s * q_i . mean_m(k_m)                      (before RoPE)
    S_ij     = (s / N) * R(q_i) . R(k_j)                  (after RoPE)
    score_ij = a_i * S_ij + b_i / N
    out_i    = sum_j score_ij v_j
             = a_i * R(q_i) @ KV + b_i * mean_j(v_j),     KV = (s / N) sum_j R(k_j)^T v_j

``(s / N)`` is folded into ``phi(q) . phi(k)`` of the papers, so that
``sum_m phi(q_i) . phi(k_m) = z_i`` without RoPE. The variants differ only in
the per-query coefficients ``a_i`` and ``b_i``::

    attn_type        a_i                 b_i       formula without RoPE (papers' notation)
    'mala'           1 + 1/(z_i + eps)   -z_i      MALA Eq. 8-9: beta phi(q).phi(k_j) - gamma,
                                                   beta = 1 + 1 / sum_m phi(q).phi(k_m),
                                                   gamma = sum_m phi(q).phi(k_m) / N
    'mala_no_beta'   1                   -z_i      MALA with beta := 1 (Table 11, w/o beta)
    'mala_no_gamma'  1 + 1/(z_i + eps)   0         MALA with gamma := 0 (Table 11, w/o gamma)
    'linear'         1 / max(z_i, eps)   0         phi(q).phi(k_j) / sum_m phi(q).phi(k_m)
                                                   (vanilla linear attention, MALA Eq. 2)
    'inline'         1                   1 - z_i   phi(q).phi(k_j) - mean_m phi(q).phi(k_m) + 1/N
                                                   (InLine, injective linear attention)

Without RoPE each query's scores sum to 1 for ``mala`` (up to ``eps``),
``linear`` and ``inline``; to 0 for ``mala_no_beta``; to ``z_i + 1`` for
``mala_no_gamma``. ``linear`` divides by ``max(z, eps)`` rather than
``z + eps`` so that ``phi(a q) = a phi(q)`` leaves its scores exactly unchanged
(the magnitude neglect of MALA's Eq. 7) while ``z = 0`` (relu) stays finite.

Softmax variants (``SOFTMAX_ATTN_TYPES``), on the pre-activation q and k (no
kernel function)::

    'softmax'        score_ij = softmax_j(s * R(q_i) . R(k_j))
    'softmax_qnorm'  the same with q_i := q_i / ||q_i||   (MALA Table 1: Q / ||Q||)

Kernel functions (``KERNEL_FUNCTIONS``, MALA Table 10): ``'elu'`` is
``elu(x) + 1`` (the published one), ``'relu'``, ``'exp'``.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .amp import autocast_disabled
from .linear_attention import (
    KERNEL_FUNCTIONS,
    LINEAR_ATTN_TYPES,
    Rotation,
    kernel_z_rope,
    linear_attention_torch,
    linear_coefficients,
    rotate,
)
from .mala import check_mala_impl, check_shapes, mala_attention
from .rope2d import RotaryTables

SOFTMAX_ATTN_TYPES = ('softmax', 'softmax_qnorm')
ATTN_TYPES = ('mala', 'softmax', 'linear', 'inline', 'mala_no_beta', 'mala_no_gamma',
              'softmax_qnorm')
# The fused Triton kernels implement exactly this case.
FUSED_CASE = ('mala', 'elu')


def check_attn_type(attn_type: str, name: str = 'attn_type') -> str:
    if attn_type not in ATTN_TYPES:
        raise ValueError(f'{name} must be one of {ATTN_TYPES}, got {attn_type!r}')
    return attn_type


def check_kernel_function(kernel_function: str) -> str:
    if kernel_function not in KERNEL_FUNCTIONS:
        raise ValueError(f'kernel_function must be one of {tuple(KERNEL_FUNCTIONS)}, '
                         f'got {kernel_function!r}')
    return kernel_function


# -- the formulas (the linear ones: .linear_attention) ---------------------------
def _softmax_qk(q: torch.Tensor, k: torch.Tensor, rotation: Rotation, attn_type: str):
    if attn_type == 'softmax_qnorm':
        q = F.normalize(q, dim=-1)
    return rotate(q, rotation), rotate(k, rotation)


def attention_scores(q: torch.Tensor, k: torch.Tensor, attn_type: str,
                     rope: RotaryTables | None = None, kernel_function: str = 'elu',
                     queries: Sequence[int] | None = None) -> torch.Tensor:
    """The explicit ``(B, heads, N, N)`` score matrix of ``attn_type``.

    ``score[..., i, j]`` is what query i gives to value j, so that
    ``attention(q, k, v, ...) == attention_scores(q, k, ...) @ v``. Formulas:
    module docstring. O(N^2) memory: the reference for tests and pictures, not
    for the model. ``queries`` (token indices) keeps only those rows:
    ``(B, heads, len(queries), N)``, O(N) memory for one query.
    Half-precision inputs are computed in fp32; the result has q's dtype.
    """
    check_attn_type(attn_type)
    check_kernel_function(kernel_function)
    check_shapes(q, k, rope=rope)
    out_dtype = q.dtype
    if out_dtype in (torch.float16, torch.bfloat16):
        q, k = q.float(), k.float()
    # The explicit tables (apply_rope), not rope.rotate: the reference stays the
    # plain formula, so it also checks the model's complex-multiply rotation.
    tables = None if rope is None else rope.tables(q.dtype, q.device)
    num_tokens = q.shape[-2]
    scale = q.shape[-1] ** -0.5
    if attn_type in SOFTMAX_ATTN_TYPES:
        q, k = _softmax_qk(q, k, tables, attn_type)
        if queries is not None:
            q = q[..., list(queries), :]
        return torch.softmax(scale * (q @ k.transpose(-1, -2)), dim=-1).to(out_dtype)
    q, k, z = kernel_z_rope(q, k, tables, kernel_function)
    if queries is not None:
        q, z = q[..., list(queries), :], z[..., list(queries), :]
    scores = (q @ k.transpose(-1, -2)) * (scale / num_tokens)           # S_ij
    a, b = linear_coefficients(attn_type, z)
    if a is not None:
        scores = scores * a
    if b is not None:
        scores = scores + b / num_tokens
    return scores.to(out_dtype)


# -- the model's path -------------------------------------------------------------
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_type: str,
              rope: RotaryTables | None, kernel_function: str = 'elu',
              impl: str = 'auto') -> torch.Tensor:
    """``attn_type`` over ``(B, heads, N, d)`` q, k, v; returns ``(B, heads, N, d)``.

    Equals ``attention_scores(q, k, attn_type, rope, kernel_function) @ v``.

    * ``'mala'`` with ``'elu'``: :func:`~.mala.mala_attention`, the fused Triton
      kernels or its PyTorch path as ``impl`` (``'auto'|'torch'|'triton'``) says.
    * The other linear variants, and MALA with another kernel function: one
      PyTorch path, linear in N (:func:`linear_attention_torch`).
      ``impl='triton'`` asks for the kernels, which only run MALA with elu:
      for MALA with another kernel that is an error; the variants that are not
      MALA ignore ``impl`` (as softmax does).
    * Softmax variants: :func:`torch.nn.functional.scaled_dot_product_attention`.
    """
    check_attn_type(attn_type)
    check_kernel_function(kernel_function)
    check_mala_impl(impl)
    check_shapes(q, k, v, rope)
    if (attn_type, kernel_function) == FUSED_CASE and rope is not None:
        return mala_attention(q, k, v, rope, impl=impl)
    if attn_type == 'mala' and impl == 'triton':
        reason = (f"kernel_function {kernel_function!r} (they fuse 'elu')"
                  if kernel_function != 'elu' else 'no RoPE (they always rotate)')
        raise ValueError(f"mala_impl='triton': the fused kernels cannot run MALA with {reason}; "
                         "use mala_impl='auto' or 'torch'")
    if attn_type in SOFTMAX_ATTN_TYPES:
        q, k = _softmax_qk(q, k, rope, attn_type)
        return F.scaled_dot_product_attention(q, k, v)
    # Our own precision policy (fp32 for half inputs); autocast would undo it.
    with autocast_disabled(q.device.type):
        return linear_attention_torch(q, k, v, rope, attn_type, kernel_function)


__all__ = ['attention', 'attention_scores', 'linear_attention_torch', 'check_attn_type',
           'check_kernel_function', 'ATTN_TYPES', 'LINEAR_ATTN_TYPES', 'SOFTMAX_ATTN_TYPES',
           'KERNEL_FUNCTIONS']
