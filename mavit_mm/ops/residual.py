"""The residual add of a layer-scaled branch, in one pass over the map."""
from __future__ import annotations

import torch


def scaled_residual(x: torch.Tensor, branch: torch.Tensor, scale: torch.Tensor | None = None,
                    in_place: bool = False) -> torch.Tensor:
    """``x + scale * branch`` (plain formula), ``scale`` a small ``(B or 1, C,
    1, 1)`` factor (layer scale times drop path's keep mask) or ``None``.

    One ``addcmul`` (or ``add``): the scaled branch is never a map of its own.
    ``scale`` must have ``x``'s dtype, so that a half residual stream meets no
    fp32 operand (a casting kernel on CUDA) and stays half. ``in_place``
    writes the sum into ``x`` (switch ``in_place_residual``); the caller
    decides that ``x`` is a map nobody else reads and that no gradient flows.
    """
    if scale is not None and scale.dtype != x.dtype:
        raise TypeError(f'the residual scale ({scale.dtype}) must have the map\'s dtype '
                        f'({x.dtype})')
    if scale is None:
        return x.add_(branch) if in_place else x + branch
    return x.addcmul_(branch, scale) if in_place else torch.addcmul(x, branch, scale)


__all__ = ['scaled_residual']
