"""The fused depthwise stages called as the model calls them (``models/mavit.py``):
``kernels_run`` decides, then the stage's ``fused_*`` op runs with the kernel
tap-major, or else the stage's plain formula (the model's is its own modules;
here the reference)."""
from mavit_mm.ops.depthwise import (
    fused_ffn_middle,
    fused_gated_lepe,
    fused_position_norm,
    kernels_run,
    tap_major,
)
from mavit_mm.ops.depthwise.reference import (
    ffn_middle_reference,
    gated_lepe_reference,
    position_norm_reference,
)


def position_norm(x, weight, bias, norm_weight, norm_bias, eps: float, impl: str = 'auto'):
    if kernels_run(impl, x, weight=weight, norm_channels=x.shape[1]):
        return fused_position_norm(x, tap_major(weight), bias, norm_weight, norm_bias, eps)
    return position_norm_reference(x, weight, bias, norm_weight, norm_bias, eps)


def gated_lepe(v, weight, bias, attention, gate, impl: str = 'auto'):
    if kernels_run(impl, v, attention, gate, weight=weight):
        return fused_gated_lepe(v, tap_major(weight), bias, attention, gate)
    return gated_lepe_reference(v, weight, bias, attention, gate)


def ffn_middle(h, weight, bias, impl: str = 'auto'):
    if kernels_run(impl, h, weight=weight):
        return fused_ffn_middle(h, tap_major(weight), bias)
    return ffn_middle_reference(h, weight, bias)
