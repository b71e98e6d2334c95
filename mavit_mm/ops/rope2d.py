"""2D rotary position embedding (RoPE) as used by MAViT.

A head of ``head_dim`` channels is rotated on interleaved pairs ``(x0, x1)``;
the first half of the channels encodes the row index, the second half the
column index. The per-stage ``angle`` buffer holds ``head_dim // 2`` angles
(``head_dim // 4`` frequencies, each repeated twice), as in the published model.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn


def rope_angles(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The published angle table: ``head_dim // 2`` values, each frequency twice."""
    if head_dim % 4 != 0:
        raise ValueError(f'2D RoPE needs a head dim divisible by 4, got {head_dim}')
    freqs = 1.0 / base ** torch.linspace(0, 1, head_dim // 4, dtype=torch.float64)
    return freqs.repeat_interleave(2).float()


def angles_repeat_in_pairs(angle: torch.Tensor) -> bool:
    """Whether ``angle`` holds each frequency twice, the layout the fused kernels use.

    Compares values, so on a GPU it syncs: call it when a buffer is built or
    loaded, not per forward.
    """
    return bool(angle.numel() % 2 == 0 and torch.equal(angle[0::2], angle[1::2]))


class RotaryTables:
    """The rotation of one stage at one feature-map size, shared by its blocks.

    Holds what the fused kernel needs (``angle``, ``height``, ``width``) and builds
    the ``(N, head_dim)`` cos / signed-sin tables for the PyTorch paths lazily,
    once per dtype; they broadcast over batch and heads and are never copied.
    """

    def __init__(self, angle: torch.Tensor, height: int, width: int,
                 paired: Optional[bool] = None):
        self.angle = angle
        self.height = height
        self.width = width
        self._paired = paired
        self._tables = {}

    @property
    def paired(self) -> bool:
        """Whether the angles repeat in pairs (known from the owning RoPE2d,
        or checked once here for hand-built tables)."""
        if self._paired is None:
            self._paired = angles_repeat_in_pairs(self.angle)
        return self._paired

    def tables(self, dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
        if dtype not in self._tables:
            self._tables[dtype] = _build_tables(self.angle, self.height, self.width, dtype)
        return self._tables[dtype]


def _build_tables(angle: torch.Tensor, height: int, width: int, dtype: torch.dtype):
    # Angles in at least fp32 even for half models: positions up to ~10^3 times
    # an angle lose all precision in fp16.
    compute_dtype = torch.float64 if angle.dtype == torch.float64 else torch.float32
    angle = angle.to(compute_dtype)
    rows = torch.arange(height, device=angle.device, dtype=compute_dtype)
    cols = torch.arange(width, device=angle.device, dtype=compute_dtype)
    theta_rows = (rows[:, None] * angle[None, :])[:, None, :].expand(height, width, -1)
    theta_cols = (cols[:, None] * angle[None, :])[None, :, :].expand(height, width, -1)
    theta = torch.cat([theta_rows, theta_cols], dim=-1).reshape(height * width, -1)
    cos = theta.cos()
    # rotate((x0, x1)) = (-x1, x0) is a pair swap times (-1, +1): fold the sign into sin.
    sign = torch.tensor([-1.0, 1.0], device=angle.device, dtype=compute_dtype)
    signed_sin = (theta.sin().unflatten(-1, (-1, 2)) * sign).flatten(-2)
    return cos.to(dtype), signed_sin.to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (..., N, head_dim) by the tables of :class:`RotaryTables`."""
    swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    return x * cos + swapped * signed_sin


class RoPE2d(nn.Module):
    """Owns a stage's ``angle`` buffer (state-dict key ``layers.i.RoPE.angle``).

    Whether the buffer has the paired layout is checked when it is built and
    after each ``load_state_dict``, so that no forward has to look at its values.
    """

    def __init__(self, head_dim: int):
        super().__init__()
        self.head_dim = head_dim
        self.register_buffer('angle', rope_angles(head_dim))
        self.angles_paired = True
        self.register_load_state_dict_post_hook(RoPE2d._check_loaded_angles)

    @staticmethod
    def _check_loaded_angles(module: 'RoPE2d', incompatible_keys) -> None:
        module.angles_paired = angles_repeat_in_pairs(module.angle)

    def forward(self, height: int, width: int) -> RotaryTables:
        return RotaryTables(self.angle, height, width, paired=self.angles_paired)
