"""The fused MALA operator's formula for mmengine's FLOP counter.

mmengine's FLOP counter (``mmengine.analysis``, used by mmdet's and mmseg's
``get_flops.py``) counts the PyTorch path's matmuls but would skip the fused
operator ``mavit_mm::mala`` as unsupported. :func:`register_flop_formulas`
(run by ``import mavit_mm``; no triton import) gives it the same products, so
that the figure does not depend on where MALA ran.
"""
from __future__ import annotations

# The fused MALA's operator (function.py) as PyTorch's tracer names it.
FUSED_MALA_OP = 'mavit_mm::mala'


def linear_attention_macs_per_head(tokens: int, head_dim: int) -> int:
    """k^T v and q kv (d x d each per token), plus z = q . mean(k)."""
    return 2 * tokens * head_dim * head_dim + tokens * head_dim


def fused_mala_flop_jit(inputs, outputs) -> int:
    """mmengine FLOP handle of ``mavit_mm::mala``: its first input is q,
    ``(B, heads, N, d)``."""
    from mmengine.analysis.jit_handles import get_shape
    batch, heads, tokens, head_dim = get_shape(inputs[0])
    return batch * heads * linear_attention_macs_per_head(tokens, head_dim)


def register_flop_formulas() -> bool:
    """Add the fused MALA's formula to the handles every new mmengine
    ``FlopAnalyzer`` starts from (its default table); False where this
    mmengine has no such table.

    The table is private, but it is the only way in: ``get_flops.py`` calls
    ``get_model_complexity_info``, which builds its own ``FlopAnalyzer`` and
    takes no handles. A test checks the count, so a change in mmengine shows
    up."""
    from mmengine.analysis import complexity_analysis
    table = getattr(complexity_analysis, '_DEFAULT_SUPPORTED_FLOP_OPS', None)
    if not isinstance(table, dict):
        return False
    table.setdefault(FUSED_MALA_OP, fused_mala_flop_jit)
    return True
