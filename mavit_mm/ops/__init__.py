"""The operators the model is built from, each a plain formula with its fast
paths behind it: the attentions (:mod:`.attention_variants`,
:mod:`.linear_attention`, the fused :mod:`.mala`), the fused depthwise stages
(:mod:`.depthwise`), the 1x1 convolution (:mod:`.pointwise_conv`), 2D RoPE
(:mod:`.rope2d`), the fast-path switches (:mod:`.fast_paths`) and what both
fused ops need of Triton (:mod:`.triton_support`)."""
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
