"""MALA inputs by layout name: the one factory of q, k, v for the op's tests,
benchmarks, tuning, profiling and the GPU check.

``(B, heads, N, d)`` tensors in one of three memory layouts:

``channels_last`` (the default: what the model passes)
    q, k, v are head views of the first three channel blocks of a
    channels_last ``(B, 4C, H, W)`` qkvo map, cut by the model's own
    ``models.mavit.split_heads``: ``(B, N, heads, d)`` memory, channel stride 1,
    token stride 4C.
``nchw``
    the same views of an NCHW map: ``(B, heads, d, N)`` memory, tokens
    contiguous (token stride 1, channel stride N).
``contiguous``
    three dense ``(B, heads, N, d)`` tensors.

:func:`layout_of` names the layout of a tensor the op is given, for results
files and assertions.
"""
from __future__ import annotations

import torch

from mavit_mm.models.layers import split_heads

MALA_LAYOUTS = ('channels_last', 'nchw', 'contiguous')
DEFAULT_LAYOUT = 'channels_last'
# Channel blocks of the model's 1x1 conv output: q, k, v and the gate o.
_QKVO_BLOCKS = 4


def check_layout(layout: str) -> str:
    if layout not in MALA_LAYOUTS:
        raise ValueError(f'unknown MALA input layout {layout!r}; choose one of {MALA_LAYOUTS}')
    return layout


def mala_inputs(batch: int, heads: int, height: int, width: int, head_dim: int, *,
                layout: str = DEFAULT_LAYOUT, dtype: torch.dtype = torch.float32,
                device: torch.device | str = 'cpu', requires_grad: bool = False,
                seed: int | None = None, qk_scale: float = 1.0, v_scale: float = 1.0,
                storage_offset: int = 0) -> list[torch.Tensor]:
    """q, k, v of ``heads`` heads of ``head_dim`` channels over an
    ``height x width`` map, in ``layout`` (module docstring).

    ``seed``: values drawn in float64 on the CPU from that seed, then moved, so
    every device and dtype sees the same numbers (tests); ``None`` draws on
    ``device`` directly in ``dtype`` (benchmarks at full resolution).
    ``qk_scale`` / ``v_scale`` scale q and k / v. ``requires_grad``: the
    gradient flows to the one map (or, ``contiguous``, to the three leaves);
    ask ``torch.autograd.grad`` for the views themselves. ``storage_offset``
    (elements) starts the map's storage that far into a larger buffer: a
    misaligned address when the offset times the element size is not a
    multiple of 16 bytes.
    """
    check_layout(layout)
    channels = heads * head_dim
    # Drawn in logical (B, 4C, H, W) order, so every layout holds the same values.
    shape = (batch, _QKVO_BLOCKS * channels, height, width)
    if seed is None:
        qkvo = torch.randn(shape, dtype=dtype, device=device)
    else:
        generator = torch.Generator().manual_seed(seed)
        qkvo = torch.randn(shape, generator=generator, dtype=torch.float64).to(device, dtype)
    qkvo[:, :2 * channels] *= qk_scale
    qkvo[:, 2 * channels:3 * channels] *= v_scale
    if layout == 'contiguous':
        return [view.contiguous().requires_grad_(requires_grad)
                for view in _head_views(qkvo, head_dim)]
    memory_format = torch.channels_last if layout == 'channels_last' else torch.contiguous_format
    strides = torch.empty((1,) * 4, device='meta').expand(shape).contiguous(
        memory_format=memory_format).stride()
    storage = torch.empty(qkvo.numel() + storage_offset, dtype=dtype, device=device)
    placed = storage.as_strided(shape, strides, storage_offset)
    placed.copy_(qkvo)
    return _head_views(placed.requires_grad_(requires_grad), head_dim)


def _head_views(qkvo: torch.Tensor, head_dim: int) -> list[torch.Tensor]:
    """q, k, v cut out of the map as the model cuts them (``split_heads``)."""
    return [split_heads(t, head_dim) for t in qkvo.chunk(_QKVO_BLOCKS, dim=1)[:3]]


def layout_of(t: torch.Tensor) -> str:
    """The layout name of a ``(B, heads, N, d)`` tensor: ``contiguous`` when
    dense in that order; ``channels_last`` when channel stride 1 with the heads
    inside a token ((B, N, heads, d) memory, dense or a slice of a wider map);
    ``nchw`` when token stride 1; else ``'other'``. (One dense head is both
    ``contiguous`` and ``channels_last``: the first name wins.)"""
    _, head_stride, token_stride, channel_stride = t.stride()
    _, heads, _, head_dim = t.shape
    if t.is_contiguous():
        return 'contiguous'
    if channel_stride == 1 and (heads == 1 or head_stride == head_dim) \
            and token_stride >= heads * head_dim:
        return 'channels_last'
    if token_stride == 1:
        return 'nchw'
    return 'other'


__all__ = ['MALA_LAYOUTS', 'DEFAULT_LAYOUT', 'check_layout', 'mala_inputs', 'layout_of']
