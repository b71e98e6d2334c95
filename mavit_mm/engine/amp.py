"""``AmpWhereAvailableOptimWrapper``: mixed precision where mmengine can do it,
fp32 elsewhere, with nothing to set.

``AmpOptimWrapper`` refuses to be built without a CUDA, NPU, MLU or MUSA
device, and a plain ``OptimWrapper`` refuses its AMP-only arguments, so a
config naming either one cannot serve both a GPU and a CPU through tools that
know nothing about MAViT (mmdet's and mmseg's own ``tools/train.py``). The
published recipes name this builder instead (in mmengine's root
OPTIM_WRAPPERS registry, which mmdet's and mmseg's look names up in): an
``AmpOptimWrapper`` from the same arguments where one can run, else a plain
fp32 ``OptimWrapper`` without the AMP-only ones (CPU autocast is slow and not
what the recipes mean). One log line (first process only) says which.
"""
from __future__ import annotations

import logging

from mmengine.logging import print_log

NAME = 'AmpWhereAvailableOptimWrapper'
# Arguments only AmpOptimWrapper accepts; dropped for the fp32 OptimWrapper.
AMP_ONLY_KEYS = ('loss_scale', 'dtype', 'use_fsdp')

_announced = False


def amp_available() -> bool:
    """Whether mmengine's AmpOptimWrapper can be built here (the devices its
    own check accepts)."""
    from mmengine import device
    return (device.is_cuda_available() or device.is_npu_available()
            or device.is_mlu_available() or device.is_musa_available())


def _announce(message: str, level: int) -> None:
    global _announced
    if _announced:
        return
    _announced = True
    from mmengine.dist import get_rank
    if get_rank() == 0:
        print_log(message, logger='current', level=level)


def AmpWhereAvailableOptimWrapper(**kwargs):  # noqa: N802 (a registered type name)
    """Build an ``AmpOptimWrapper`` where one can run, else an fp32 ``OptimWrapper``
    (``AmpOptimWrapper``'s arguments: ``OptimWrapper``'s plus :data:`AMP_ONLY_KEYS`)."""
    from mmengine.optim import AmpOptimWrapper, OptimWrapper
    if amp_available():
        _announce(f'{NAME}: mixed-precision training (AmpOptimWrapper, loss_scale='
                  f"{kwargs.get('loss_scale', 'dynamic')!r}).", logging.INFO)
        return AmpOptimWrapper(**kwargs)
    dropped = [key for key in AMP_ONLY_KEYS if key in kwargs]
    for key in dropped:
        kwargs.pop(key)
    _announce(f'{NAME}: no CUDA (or NPU/MLU/MUSA) device, so fp32 training with a plain '
              'OptimWrapper; mixed precision is used where a GPU is'
              + (f" (ignored: {', '.join(dropped)})." if dropped else '.'),
              logging.WARNING)
    return OptimWrapper(**kwargs)


def register() -> None:
    """Register the builder in mmengine's root OPTIM_WRAPPERS registry."""
    from mmengine.registry import OPTIM_WRAPPERS
    if OPTIM_WRAPPERS.get(NAME) is not AmpWhereAvailableOptimWrapper:
        OPTIM_WRAPPERS.register_module(name=NAME, module=AmpWhereAvailableOptimWrapper,
                                       force=True)
