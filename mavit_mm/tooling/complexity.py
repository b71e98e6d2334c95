"""MAC counting for ``tools/analysis_tools/get_flops.py``, in both conventions
the literature uses; figures are multiply-accumulates, as in mmdet/mmseg tables.

``layer_macs`` counts convolutions (transposed ones too) and linear layers only
(what the paper's FLOPs columns match), InLine's dynamic 3x3 residual included
(a depthwise convolution); ``attention_macs`` counts the attention products
those counters miss (element-wise scaling is not counted): MAViT's blocks, and
the windows of mmdet's and mmseg's Swin (``WindowMSA``), so that the baselines
are counted alike. mmengine's own counter gets the fused MALA operator's
formula from :mod:`mavit_mm.ops.mala.flops`.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..models.mavit import GatedAttention
from ..ops.attention_variants import LINEAR_ATTN_TYPES, SOFTMAX_ATTN_TYPES
from ..ops.mala.flops import linear_attention_macs_per_head


@dataclass
class Complexity:
    params: int = 0
    layer_macs: int = 0
    attention_macs: int = 0
    per_module_type: dict[str, int] = field(default_factory=dict)

    @property
    def total_macs(self) -> int:
        return self.layer_macs + self.attention_macs

    def as_dict(self) -> dict:
        return dict(params=self.params, layer_macs=self.layer_macs,
                    attention_macs=self.attention_macs, total_macs=self.total_macs,
                    per_module_type=dict(self.per_module_type))


def gated_attention_macs(module: GatedAttention, inputs) -> int:
    """The products inside the attention, per image batch (convs excluded)."""
    batch, _, height, width = inputs[0].shape
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


def window_attention_macs(inputs) -> int:
    """Swin's window attention, q k^T and a v over each window's tokens: its
    input is (windows x batch, tokens a window, channels)."""
    windows, tokens, channels = inputs[0].shape
    return 2 * windows * tokens * tokens * channels


def swin_window_attention_types() -> tuple[type, ...]:
    """mmdet's and mmseg's ``WindowMSA``, where imported: a model that holds
    one has imported its module (and importing mmseg only to look could fail
    on another mmcv than it asks for)."""
    modules = (sys.modules.get(name) for name in ('mmdet.models.backbones.swin',
                                                  'mmseg.models.backbones.swin'))
    return tuple(module.WindowMSA for module in modules if hasattr(module, 'WindowMSA'))


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
        kernel = module.kernel_size[0] * module.kernel_size[1]
        add('conv', output.numel() * (module.in_channels // module.groups) * kernel)

    def on_conv_transpose(module, inputs, output):
        # Every input pixel scatters a k x k x out/groups kernel (mmengine's
        # counter, which mmdet's get_flops.py uses, counts the same).
        kernel = module.kernel_size[0] * module.kernel_size[1]
        add('conv_transpose', inputs[0].numel() * (module.out_channels // module.groups) * kernel)

    def on_linear(module, inputs, output):
        add('linear', output.numel() * module.in_features)

    def on_attention(module, inputs, output):
        add(f'{module.attn_type}_attention', gated_attention_macs(module, inputs), True)
        if module.residual is not None:
            # InLine's residual: a 3x3 depthwise conv of v with per-image weights
            # (its MLP's 1x1 convs are modules, counted by their own hooks).
            add('inline_residual', 9 * inputs[0].numel())

    def on_window_attention(module, inputs, output):
        add('swin_window_attention', window_attention_macs(inputs), True)

    # One hook a module: the first type it is in this order.
    hooks = ((nn.Conv2d, on_conv), (nn.ConvTranspose2d, on_conv_transpose),
             (nn.Linear, on_linear), (GatedAttention, on_attention),
             *((kind, on_window_attention) for kind in swin_window_attention_types()))
    handles = []
    for module in model.modules():
        hook = next((hook for module_type, hook in hooks if isinstance(module, module_type)), None)
        if hook is not None:
            handles.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return result
