"""Synchronised batch normalisation that also runs on CPUs.

``torch.nn.SyncBatchNorm`` (the ``SyncBN`` of mmdet/mmseg configs) refuses CPU
tensors in a distributed run ("SyncBatchNorm expected input tensor to be on
GPU ...", and DistributedDataParallel: "SyncBatchNorm layers only work with GPU
modules"). ``CPUSyncBatchNorm`` is a BatchNorm with the same parameters,
buffers and state-dict keys that, in training mode in a multi-process run,
computes the batch statistics over all processes with two all-reduces (sum and
count, then the centred sum of squares) through the process group's backend
(gloo on CPUs). Gradients flow through the all-reduces, so forward, backward
and the running statistics are those of one BatchNorm over the concatenated
batch of all processes, as with SyncBN on GPUs. In eval mode and in a single
process it is a plain BatchNorm.

The tools put it in place of SyncBN when a distributed run has no CUDA
(``mavit_mm.engine.distributed``); a config may also name it: ``CPUSyncBN``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from mmengine.registry import MODELS
from torch.nn.modules.batchnorm import _BatchNorm


class _AllReduceSum(torch.autograd.Function):
    """Sum over the processes of ``group``; the gradient is summed the same way."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        tensor = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        return tensor

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


@MODELS.register_module(name='CPUSyncBN')
class CPUSyncBatchNorm(_BatchNorm):
    """Synchronised BatchNorm over N-d inputs (N >= 2) that runs on CPUs (module doc).

    Not a subclass of ``torch.nn.SyncBatchNorm``: DistributedDataParallel
    refuses those in a CPU model.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group=None, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f'expected at least 2D input (got {input.dim()}D input)')

    def _sync_group(self):
        """The process group to synchronise over, or None when nothing is to sync."""
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return None
        group = self.process_group or dist.group.WORLD
        return group if dist.get_world_size(group) > 1 else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        group = self._sync_group()
        if group is None:
            return super().forward(input)  # plain BatchNorm
        self._check_input_dim(input)

        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)

        channels = input.size(1)
        dims = [0] + list(range(2, input.dim()))
        shape = [1, channels] + [1] * (input.dim() - 2)
        x = input.float()
        count = x.new_full((1, ), x.numel() // channels)
        totals = _AllReduceSum.apply(torch.cat([x.sum(dims), count]), group)
        n = totals[channels].detach()
        if n < 1:
            raise ValueError('CPUSyncBatchNorm: the batch is empty on every process')
        mean = totals[:channels] / n
        centred = x - mean.view(shape)
        var = _AllReduceSum.apply(centred.pow(2).sum(dims), group) / n
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)

        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.detach(), alpha=factor)
        return out.to(input.dtype)
