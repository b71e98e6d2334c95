"""Registration into mmengine's root registries, which mmdet's and mmseg's
registries search as their parents: one registration serves both, with no
import of mmdet or mmseg (optional). The backbone goes in MODELS (and, by
importing ``engine.cpu_distributed``, ``CPUSyncBN`` in MODELS and
``CPUDistributedDataParallel`` in MODEL_WRAPPERS), ``AmpWhereAvailableOptimWrapper``
(``engine.amp``) in OPTIM_WRAPPERS, the fused MALA's formula in mmengine's FLOP
counter (``ops.mala.flops``, for mmdet's and mmseg's get_flops.py).
"""
from __future__ import annotations

from mmengine.registry import MODELS

from .engine import amp, cpu_distributed  # noqa: F401  (registers CPUSyncBN and its wrapper)
from .models import MAViT
from .ops.mala.flops import register_flop_formulas


def register_all() -> list:
    """Register what the module docstring lists; returns where the registries are."""
    if MODELS.get('MAViT') is not MAViT:
        MODELS.register_module(name='MAViT', module=MAViT, force=True)
    amp.register()
    register_flop_formulas()
    return ['mmengine.registry']
