"""Registration into mmengine's root registries: the backbone in MODELS (and,
by importing ``engine.cpu_distributed``, ``CPUSyncBN`` in MODELS and
``CPUDistributedDataParallel`` in MODEL_WRAPPERS), the optimizer wrapper of
the recipes (``AmpWhereAvailableOptimWrapper``, ``engine.amp``) in
OPTIM_WRAPPERS; and the fused MALA operator's formula in
mmengine's FLOP counter (``ops.mala.flops.register_flop_formulas``), which
mmdet's and mmseg's get_flops.py use.

mmdet's and mmseg's registries are children of mmengine's root ones, and
a registry that does not hold a name looks it up in its parents: one
registration serves both (and any other OpenMMLab library), with no import of
mmdet or mmseg, which stay optional.
"""
from __future__ import annotations

from mmengine.registry import MODELS

from .engine import amp, cpu_distributed  # noqa: F401  (registers CPUSyncBN and its wrapper)
from .models import MAViT
from .ops.mala.flops import register_flop_formulas


def register_all() -> list:
    """Register MAViT (root MODELS), AmpWhereAvailableOptimWrapper (root
    OPTIM_WRAPPERS) and the fused MALA's FLOP formula; returns where the
    first two are."""
    if MODELS.get('MAViT') is not MAViT:
        MODELS.register_module(name='MAViT', module=MAViT, force=True)
    amp.register()
    register_flop_formulas()
    return ['mmengine.registry']
