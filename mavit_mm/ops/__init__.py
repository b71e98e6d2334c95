"""Attention operators. :mod:`.attention_variants` holds every attention MAViT
can run: :func:`attention` (the model's path) and :func:`attention_scores`
(the explicit score matrix, the reference)."""
from .attention_variants import (
    ATTN_TYPES,
    KERNEL_FUNCTIONS,
    LINEAR_ATTN_TYPES,
    SOFTMAX_ATTN_TYPES,
    attention,
    attention_scores,
)

__all__ = ['attention', 'attention_scores', 'ATTN_TYPES', 'KERNEL_FUNCTIONS',
           'LINEAR_ATTN_TYPES', 'SOFTMAX_ATTN_TYPES']
