"""Complexity counting in both conventions the literature uses.

``layer_macs`` counts convolutions (transposed ones too: Mask R-CNN's mask
head upsamples with one) and linear layers only (what the paper's FLOPs
columns match), InLine's dynamic 3x3 residual included (a depthwise
convolution); ``attention_macs`` counts the attention products those counters
miss (softmax variants: ``q k^T`` and ``a v``, plus ``||q||`` for
``softmax_qnorm``; linear variants, MALA's relatives alike: ``k^T v``, ``q kv``
and ``z = q . mean(k)``; element-wise scaling is not counted). Figures are
multiply-accumulates (MACs), as in mmdet/mmseg tables.

mmengine's FLOP counter (``mmengine.analysis``, which mmdet's and mmseg's
``tools/analysis_tools/get_flops.py`` use) traces the model and counts
operators. On the PyTorch path MALA is plain matmuls, which it counts; the
fused Triton MALA (a GPU's default) is one operator, ``mavit_mm::mala``, which
it would skip as unsupported. :func:`register_flop_formulas` (run by ``import
mavit_mm``) gives it that operator's formula, the same products as here, so
that its figure does not depend on where MALA ran.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict

import torch
from torch import nn

from .models.mavit import GatedAttention
from .ops.attention_variants import LINEAR_ATTN_TYPES, SOFTMAX_ATTN_TYPES


@dataclass
class Complexity:
    params: int = 0
    layer_macs: int = 0
    attention_macs: int = 0
    per_module_type: Dict[str, int] = field(default_factory=dict)

    @property
    def total_macs(self) -> int:
        return self.layer_macs + self.attention_macs

    def as_dict(self) -> dict:
        return dict(params=self.params, layer_macs=self.layer_macs,
                    attention_macs=self.attention_macs, total_macs=self.total_macs,
                    per_module_type=dict(self.per_module_type))


def conv_macs(module: nn.Conv2d, output: torch.Tensor) -> int:
    kernel = module.kernel_size[0] * module.kernel_size[1]
    return output.numel() * (module.in_channels // module.groups) * kernel


def conv_transpose_macs(module: nn.ConvTranspose2d, inputs) -> int:
    """Every input pixel scatters a ``k x k x out/groups`` kernel (mmengine's
    counter, which mmdet's get_flops.py uses, counts the same)."""
    kernel = module.kernel_size[0] * module.kernel_size[1]
    return inputs[0].numel() * (module.out_channels // module.groups) * kernel


def linear_macs(module: nn.Linear, output: torch.Tensor) -> int:
    return output.numel() * module.in_features


def linear_attention_macs_per_head(tokens: int, head_dim: int) -> int:
    """k^T v and q kv (d x d each per token), plus z = q . mean(k)."""
    return 2 * tokens * head_dim * head_dim + tokens * head_dim


def gated_attention_macs(module: GatedAttention, inputs) -> int:
    """The products inside the attention, per image batch (convs excluded)."""
    x = inputs[0]
    batch, _, height, width = x.shape
    tokens, head_dim, heads = height * width, module.head_dim, module.num_heads
    if module.attn_type in SOFTMAX_ATTN_TYPES:
        per_head = 2 * tokens * tokens * head_dim           # q k^T and a v
        if module.attn_type == 'softmax_qnorm':
            per_head += tokens * head_dim                   # ||q||
    elif module.attn_type in LINEAR_ATTN_TYPES:
        per_head = linear_attention_macs_per_head(tokens, head_dim)
    else:
        raise ValueError(f'no MAC count for attn_type {module.attn_type!r}')
    return batch * heads * per_head


def local_residual_macs(module: GatedAttention, inputs) -> int:
    """InLine's residual: a 3x3 depthwise conv of v with per-image weights (its
    MLP's 1x1 convs are modules, counted by their own hooks)."""
    if module.residual is None:
        return 0
    return 9 * inputs[0].numel()


def count_complexity(model: nn.Module, run: Callable[[], object]) -> Complexity:
    """Count MACs of everything ``run()`` executes in ``model``, with hooks."""
    result = Complexity(params=sum(p.numel() for p in model.parameters()))

    def add(kind: str, macs: int, attention: bool = False) -> None:
        if attention:
            result.attention_macs += macs
        else:
            result.layer_macs += macs
        result.per_module_type[kind] = result.per_module_type.get(kind, 0) + macs

    def on_conv(module, inputs, output):
        add('conv', conv_macs(module, output))

    def on_conv_transpose(module, inputs, output):
        add('conv_transpose', conv_transpose_macs(module, inputs))

    def on_linear(module, inputs, output):
        add('linear', linear_macs(module, output))

    def on_attention(module, inputs, output):
        add(f'{module.attn_type}_attention', gated_attention_macs(module, inputs), True)
        if module.residual is not None:
            add('inline_residual', local_residual_macs(module, inputs))

    handles = []
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            handles.append(module.register_forward_hook(on_conv))
        elif isinstance(module, nn.ConvTranspose2d):
            handles.append(module.register_forward_hook(on_conv_transpose))
        elif isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(on_linear))
        elif isinstance(module, GatedAttention):
            handles.append(module.register_forward_hook(on_attention))
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return result


# The fused MALA's operator (ops/mala/function.py) as PyTorch's tracer names it.
FUSED_MALA_OP = 'mavit_mm::mala'


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
