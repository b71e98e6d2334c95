"""The block's depthwise stages as plain PyTorch formulas: the reference the
fused kernels are tested against, and the path wherever they do not run.

Maps are ``(B, C, H, W)``; a depthwise ``weight`` is ``(C, 1, k, k)`` ('same'
padding), its ``bias`` ``(C,)``.

* position + first norm:  ``x = x + dwconv3x3(x) + b``;  ``LN(x)`` over channels
* LePE + gate:            ``o * (attention + dwconv5x5(v) + b)``
* the FFN's middle:       ``h = GELU(h)``;  ``h + dwconv3x3(h) + b``
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def depthwise_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``dwconv(x) + b``, 'same' padding."""
    return F.conv2d(x, weight.to(x.dtype), bias.to(x.dtype), padding=weight.shape[-1] // 2,
                    groups=x.shape[1])


def channel_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       eps: float) -> torch.Tensor:
    """LayerNorm over the channels of a ``(B, C, H, W)`` map, computed in fp32
    and returned in ``x``'s dtype."""
    nhwc = x.permute(0, 2, 3, 1).float()
    out = F.layer_norm(nhwc, (x.shape[1],), weight.float(), bias.float(), eps)
    return out.to(x.dtype).permute(0, 3, 1, 2)


def position_norm_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                            norm_weight: torch.Tensor, norm_bias: torch.Tensor,
                            eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + dwconv(x) + b, LN(x + dwconv(x) + b))``."""
    x = x + depthwise_conv(x, weight, bias)
    return x, channel_layer_norm(x, norm_weight, norm_bias, eps)


def gated_lepe_reference(v: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                         attention: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``gate * (attention + dwconv(v) + b)``."""
    return gate * (attention + depthwise_conv(v, weight, bias))


def ffn_middle_reference(h: torch.Tensor, weight: torch.Tensor,
                         bias: torch.Tensor) -> torch.Tensor:
    """``GELU(h) + dwconv(GELU(h)) + b`` (exact, erf GELU)."""
    h = F.gelu(h)
    return h + depthwise_conv(h, weight, bias)


__all__ = ['depthwise_conv', 'channel_layer_norm', 'position_norm_reference',
           'gated_lepe_reference', 'ffn_middle_reference']
