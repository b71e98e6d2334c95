"""mavit-mm: the MAViT backbone (MALA attention) for mmdet and mmseg.
``import mavit_mm`` registers it (:mod:`.registry`).
"""
from . import torch_load_compat  # noqa: F401  (mmengine checkpoints load with weights_only=True)
from .models import MAViT
from .registry import register_all

__version__ = '0.1.0'

REGISTERED_IN = register_all()

__all__ = ['MAViT', '__version__', 'REGISTERED_IN']
