"""Data-parallel training on CPUs: the model wrapper.

mmengine wraps a distributed model in MMDistributedDataParallel with
``device_ids=[LOCAL_RANK]``, which a CPU module rejects, and torch's SyncBN
needs CUDA. :class:`CPUDistributedDataParallel` (registered in MODEL_WRAPPERS)
passes no device ids and turns every SyncBN layer of the built model (the
backbone's and the heads') into :class:`mavit_mm.models.CPUSyncBatchNorm`,
which synchronises the batch statistics of CPU tensors over gloo.

The tools name it in the config of a distributed run without CUDA
(:mod:`mavit_mm.tooling.cpu_distributed`). With CUDA nothing here is used.
"""
from __future__ import annotations

import inspect
import logging
from typing import Optional, Tuple

from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..models.cpu_sync_bn import CPUSyncBatchNorm

WRAPPER = 'CPUDistributedDataParallel'


def _sync_bn_types() -> tuple:
    types = [nn.SyncBatchNorm]
    try:
        from mmcv.ops import SyncBatchNorm as MMSyncBatchNorm
        types.append(MMSyncBatchNorm)
    except ImportError:
        pass
    return tuple(types)


def to_cpu_sync_bn(module: nn.Module, sync_types: Optional[tuple] = None
                   ) -> Tuple[nn.Module, int]:
    """``module`` with every SyncBN (torch's SyncBatchNorm, mmcv's) replaced by
    :class:`CPUSyncBatchNorm` sharing its parameters and buffers; and how many."""
    sync_types = sync_types or _sync_bn_types()
    if isinstance(module, sync_types) and not isinstance(module, CPUSyncBatchNorm):
        converted = CPUSyncBatchNorm(module.num_features, module.eps, module.momentum,
                                     module.affine, module.track_running_stats,
                                     process_group=getattr(module, 'process_group', None))
        if module.affine:
            converted.weight, converted.bias = module.weight, module.bias
        converted.running_mean = module.running_mean
        converted.running_var = module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.training = module.training
        return converted, 1
    count = 0
    for name, child in module.named_children():
        converted, n = to_cpu_sync_bn(child, sync_types)
        if converted is not child:
            setattr(module, name, converted)
        count += n
    return module, count


_DDP_HAS_FORWARD_SYNC_BUFFERS = 'forward_sync_buffers' in inspect.signature(
    DistributedDataParallel.__init__).parameters


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """mmengine's MMDistributedDataParallel for a model on CPUs: no device ids,
    and SyncBN layers that synchronise CPU tensors (one log line says how many)."""

    def __init__(self, module: nn.Module, **kwargs):
        kwargs['device_ids'] = None
        kwargs['output_device'] = None
        if 'broadcast_buffers' in kwargs and _DDP_HAS_FORWARD_SYNC_BUFFERS:
            # torch >= 2.13 deprecates broadcast_buffers (a FutureWarning per
            # process); the same per-forward behaviour under its new name.
            kwargs.setdefault('forward_sync_buffers', kwargs.pop('broadcast_buffers'))
        module, count = to_cpu_sync_bn(module)
        if count:
            print_log(f'No CUDA device: {count} SyncBN layers (torch.nn.SyncBatchNorm needs '
                      'a GPU) replaced by CPUSyncBatchNorm, which synchronises the batch '
                      'statistics of all processes over gloo.', logger='current',
                      level=logging.WARNING)
        super().__init__(module=module, **kwargs)


