"""Registration of the backbone into the mmdet and mmseg model registries.

Each downstream library is optional: the model code runs without them, and a
registry whose library is missing (or whose mmcv lacks its ops) is skipped.
"""
from __future__ import annotations

import importlib

from .models import MAViT

DOWNSTREAM_REGISTRIES = ('mmdet.registry', 'mmseg.registry')


def register_all() -> list:
    """Register MAViT wherever possible; returns the registries it is in."""
    registered = []
    for module_name in DOWNSTREAM_REGISTRIES:
        try:
            registry = importlib.import_module(module_name).MODELS
        except ImportError:
            continue
        if registry.get('MAViT') is not MAViT:
            registry.register_module(name='MAViT', module=MAViT, force=True)
        registered.append(module_name)
    return registered
