from .mavit import ARCH_SETTINGS, MAViT, resolve_arch

__all__ = ['MAViT', 'ARCH_SETTINGS', 'resolve_arch']
