"""mavit-mm: the MAViT backbone (MALA attention) for mmdet and mmseg.
``import mavit_mm`` registers it (:mod:`.registry`).
"""
import warnings

# mmengine 0.10.7 and the mmdet:: / mmseg:: config bases import pkg_resources,
# which the setuptools this stack pins for them (77-81, scripts/setup.sh) flags
# at every import: five warnings nobody can act on, above every tool's output
# and error message. Only that message is silenced.
warnings.filterwarnings('ignore', message='pkg_resources is deprecated as an API',
                        category=UserWarning)

from . import torch_load_compat  # noqa: E402,F401  (after the filter; mmengine checkpoints load with weights_only=True)
from .models import MAViT  # noqa: E402
from .registry import register_all  # noqa: E402

__version__ = '0.1.0'

REGISTERED_IN = register_all()

__all__ = ['MAViT', '__version__', 'REGISTERED_IN']
