"""``x.split(sizes, dim=1)`` with one gradient write (switch ``channel_split``).

Autograd's own split backward concatenates the parts' gradients into a
contiguous NCHW tensor, which the channels_last convolution before it then
copies again: two passes over the whole ``(B, 4C, H, W)`` gradient of the
qkvo convolution where one will do.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


class _ChannelSplit(torch.autograd.Function):
    """The backward writes the parts' gradients into one buffer in ``x``'s memory format."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, sizes: tuple[int, ...]):
        ctx.sizes = sizes
        ctx.shape = x.shape
        ctx.memory_format = (torch.channels_last
                             if x.is_contiguous(memory_format=torch.channels_last)
                             else torch.contiguous_format)
        return x.split(sizes, dim=1)

    @staticmethod
    def backward(ctx, *grads):
        like = next(g for g in grads if g is not None)
        grad = torch.empty(ctx.shape, dtype=like.dtype, device=like.device,
                           memory_format=ctx.memory_format)
        for part, part_grad in zip(grad.split(ctx.sizes, dim=1), grads):
            if part_grad is None:
                part.zero_()
            else:
                part.copy_(part_grad)
        return grad, None


def channel_split(x: torch.Tensor, sizes: Sequence[int], one_gradient_write: bool = True):
    """``x.split(sizes, dim=1)`` (the plain formula); under autograd, with
    ``one_gradient_write``, its backward writes one buffer (:class:`_ChannelSplit`)."""
    if one_gradient_write and torch.is_grad_enabled() and x.requires_grad:
        return _ChannelSplit.apply(x, tuple(sizes))
    return x.split(tuple(sizes), dim=1)


__all__ = ['channel_split']
