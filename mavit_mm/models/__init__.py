from .arch import ARCH_SETTINGS, resolve_arch
from .mavit import MAViT

__all__ = ['MAViT', 'ARCH_SETTINGS', 'resolve_arch']
