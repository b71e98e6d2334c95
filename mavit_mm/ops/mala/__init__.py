"""Magnitude-Aware Linear Attention (MALA): the formula (:mod:`.naive`), the
fused Triton kernels (:mod:`.kernels`) and their host side (:mod:`.function`),
and which one a call takes (:mod:`.dispatch`)."""
from ..triton_support import triton_interpreter_enabled
from .dispatch import check_mala_impl, check_shapes, mala_attention, triton_unsupported
from .naive import MALA_EPS, mala_naive

__all__ = ['mala_attention', 'mala_naive', 'check_mala_impl', 'check_shapes', 'triton_unsupported',
           'triton_interpreter_enabled', 'MALA_EPS']
