"""The fused MALA operator's formula for mmengine's FLOP counter.

mmengine's FLOP counter (``mmengine.analysis``, which mmdet's and mmseg's
``tools/analysis_tools/get_flops.py`` use) traces the model and counts
operators. On the PyTorch path MALA is plain matmuls, which it counts; the
fused Triton MALA (a GPU's default) is one operator, ``mavit_mm::mala``, which
it would skip as unsupported. :func:`register_flop_formulas` (run by ``import
mavit_mm``) gives it that operator's formula, the same products, so that its
figure does not depend on where MALA ran. No triton import: it is registered
on every import of the package.
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
    ``FlopAnalyzer`` starts from (its default table; handles for other
    operators are left as they are). False where this mmengine has no such
    table.

    The table is private to mmengine, but it is the only way in: the
    get_flops.py tools call ``get_model_complexity_info``, which builds its
    own ``FlopAnalyzer`` and takes no handles (``FlopAnalyzer.set_op_handle``
    is public but unreachable from there). A test checks the count, so a
    change in mmengine shows up."""
    from mmengine.analysis import complexity_analysis
    table = getattr(complexity_analysis, '_DEFAULT_SUPPORTED_FLOP_OPS', None)
    if not isinstance(table, dict):
        return False
    table.setdefault(FUSED_MALA_OP, fused_mala_flop_jit)
    return True
