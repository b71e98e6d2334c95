"""The block's depthwise stages, each fused with its neighbours' work:
position + first norm, LePE + gate, the FFN's middle. Plain formulas in
:mod:`.reference`, Triton kernels in :mod:`.kernels`, the custom ops and their
autograd in :mod:`.function`, the choice of path and the ops' entries in
:mod:`.dispatch`."""
from .dispatch import (
    check_depthwise_impl,
    fused_ffn_middle,
    fused_gated_lepe,
    fused_position_norm,
    kernels_run,
    tap_major,
    tap_view,
)
from .reference import ffn_middle_reference, gated_lepe_reference, position_norm_reference

__all__ = ['check_depthwise_impl', 'kernels_run', 'fused_position_norm', 'fused_gated_lepe',
           'fused_ffn_middle', 'tap_major', 'tap_view', 'position_norm_reference',
           'gated_lepe_reference', 'ffn_middle_reference']
