"""A 1x1 convolution as a matrix product over the pixels of a channels_last map.

``conv1x1(x) + b`` is ``x @ W^T + b`` on the ``(B*H*W, C)`` view of an NHWC
buffer: one ``addmm``, whose bias is added in the GEMM's epilogue (cuBLAS),
where a convolution adds it as a pass of its own after cuDNN's kernel
(switch ``matmul_1x1``). The result is an NHWC buffer seen as ``(B, O, H,
W)``, the layout the convolution returns for a channels_last input.

Where: on CUDA, and wherever inductor compiles the model (it lowers the
product to a GEMM whose epilogue it may fuse). Not in the CPU's eager mode:
there oneDNN's convolution adds the bias inside already, and the product
measured slower (``benchmarks/results/speed-ab-cpu-2026-11-26/matmul-1x1-*.json``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def runs_as_matmul(x: torch.Tensor) -> bool:
    """Whether :func:`pointwise_conv` computes ``x``'s product as a matrix
    product (module docstring)."""
    return ((x.device.type != 'cpu' or torch.compiler.is_compiling())
            and x.is_contiguous(memory_format=torch.channels_last) and x.numel() > 0)


def pointwise_conv(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.conv2d(x, weight, bias)`` for a ``(O, C, 1, 1)`` weight (plain
    formula), as a matrix product where :func:`runs_as_matmul`; the
    convolution itself elsewhere."""
    if not runs_as_matmul(x):
        return F.conv2d(x, weight, bias)
    batch, channels, height, width = x.shape
    rows = x.permute(0, 2, 3, 1).reshape(-1, channels)          # a view
    matrix = weight.reshape(weight.shape[0], channels).t()
    out = torch.mm(rows, matrix) if bias is None else torch.addmm(bias, rows, matrix)
    return out.view(batch, height, width, -1).permute(0, 3, 1, 2)


__all__ = ['pointwise_conv', 'runs_as_matmul']
