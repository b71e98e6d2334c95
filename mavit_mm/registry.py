"""Registration of the backbone into mmengine's root MODELS registry.

mmdet's and mmseg's MODELS registries are children of mmengine's root one, and
a registry that does not hold a name looks it up in its parents: one
registration serves both (and any other OpenMMLab library), with no import of
mmdet or mmseg, which stay optional.
"""
from __future__ import annotations

from mmengine.registry import MODELS

from .models import MAViT


def register_all() -> list:
    """Register MAViT in mmengine's root MODELS; returns where it is."""
    if MODELS.get('MAViT') is not MAViT:
        MODELS.register_module(name='MAViT', module=MAViT, force=True)
    return ['mmengine.registry']
