"""Deployment: what exporting MAViT models through mmdeploy needs on this stack.

The model configs' ``custom_imports`` import this package, so mmdeploy's own
tools pick it up from the model config alone. It acts only where mmdeploy is
imported (:func:`activate_if_mmdeploy`): training and testing are left as they were.
"""
from .mmdeploy_compat import activate_if_mmdeploy, exact_adaptive_avg_pool2d

activate_if_mmdeploy()

__all__ = ['exact_adaptive_avg_pool2d', 'activate_if_mmdeploy']
