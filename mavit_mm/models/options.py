"""The settings every block of MAViT reads, in one frozen object."""
from __future__ import annotations

import dataclasses

import torch

from ..ops.attention_variants import LINEAR_ATTN_TYPES, check_kernel_function
from ..ops.depthwise import check_depthwise_impl, kernels_run
from ..ops.fast_paths import DEFAULTS, FastPaths, on_in
from ..ops.mala import check_mala_impl


@dataclasses.dataclass(frozen=True)
class MAViTOptions:
    """How MAViT's blocks compute: built by :class:`~mavit_mm.models.MAViT`
    from its keyword arguments of the same names, and passed, by keyword, to
    every stage, block and layer.

    Two choose the model:

    - ``kernel_function``: phi of every linear attention variant, ``'elu'``
      (elu + 1, as published), ``'relu'`` or ``'exp'`` (the paper's Table 10);
    - ``inline_residual``: InLine's local 3x3 residual in the ``'inline'``
      attentions (adds ``attn.residual.*`` parameters); off by default.

    Three choose how the same model runs:

    - ``mala_impl``: ``'auto'|'torch'|'triton'``, the MALA implementation
      (:mod:`mavit_mm.ops.mala`);
    - ``depthwise_impl``: ``'auto'|'torch'|'triton'``, whether the fused
      depthwise kernels (:mod:`mavit_mm.ops.depthwise`) may run: never under
      ``'torch'``, on CUDA under ``'auto'``, always under ``'triton'`` (or an
      error saying why not);
    - ``fast_paths``: the speed features, a dict of switches such as
      ``dict(cached_weights=False)`` or a ``FastPaths`` (:mod:`mavit_mm.ops.fast_paths`).

    A fused depthwise stage (``position_norm``, ``lepe_gate``, ``ffn_middle``)
    runs where its switch ``fused_<stage>`` is on (``'inference'``: where no
    gradient flows to the stage's tensors) **and** ``depthwise_impl`` lets the
    kernels run on the tensors at hand (:meth:`fuses`).
    """

    kernel_function: str = 'elu'
    inline_residual: bool = False
    mala_impl: str = 'auto'
    depthwise_impl: str = 'auto'
    fast_paths: FastPaths = DEFAULTS

    def __post_init__(self):
        check_kernel_function(self.kernel_function)
        check_mala_impl(self.mala_impl)
        check_depthwise_impl(self.depthwise_impl)
        # Frozen: the resolved switches replace the dict they were given as.
        object.__setattr__(self, 'inline_residual', bool(self.inline_residual))
        object.__setattr__(self, 'fast_paths', FastPaths.resolve(self.fast_paths))

    def check_stages(self, attn_types: list[str]) -> None:
        """That these options fit a model of these attentions, one a stage."""
        kernel_function = self.kernel_function
        if kernel_function != 'elu' and not any(t in LINEAR_ATTN_TYPES for t in attn_types):
            raise ValueError(f'kernel_function={kernel_function!r} is phi of the linear '
                             f'attentions {LINEAR_ATTN_TYPES}, but no stage uses one '
                             f'(attn_types {attn_types})')
        if self.inline_residual and 'inline' not in attn_types:
            raise ValueError("inline_residual=True needs an 'inline' stage, got attn_types "
                             f'{attn_types}')
        if self.mala_impl == 'triton' and kernel_function != 'elu' and 'mala' in attn_types:
            raise ValueError(f"mala_impl='triton': the fused kernels run MALA with the 'elu' "
                             f'kernel only, not {kernel_function!r}; use '
                             "mala_impl='auto' or 'torch'")

    def fuses(self, stage: str, x: torch.Tensor, *others: torch.Tensor, weight: torch.Tensor,
              norm_channels: int | None = None, parameters=tuple) -> bool:
        """Whether the fused depthwise ``stage`` runs on these tensors (class
        docstring); ``parameters()``: the stage's other parameters (biases,
        norm weights), which decide with ``x``, ``others`` and ``weight``
        whether gradients flow (called only where that is still open)."""
        setting = getattr(self.fast_paths, f'fused_{stage}')
        if setting is False:
            return False
        if setting is not True and not on_in(
                setting, _gradients_flow((x, *others, weight), parameters), x.device.type):
            return False   # the modules; kernels_run's checks only where the stage is on
        return kernels_run(self.depthwise_impl, x, *others, weight=weight,
                           norm_channels=norm_channels)


def _gradients_flow(tensors, parameters) -> bool:
    """Whether a gradient flows to any of ``tensors`` or ``parameters()`` (a
    training step). Cheap where it is clear: no grad mode, or an input that
    needs a gradient. (``derived_weights.takes_no_gradient`` asks the same of
    its tensors but also stands aside under compile, where a stage set to
    ``'inference'`` still fuses.)"""
    if not torch.is_grad_enabled():
        return False
    for tensor in tensors:
        if tensor.requires_grad:
            return True
    return any(tensor is not None and tensor.requires_grad for tensor in parameters())


DEFAULT_OPTIONS = MAViTOptions()   # frozen, so one instance serves every module

__all__ = ['MAViTOptions', 'DEFAULT_OPTIONS']
