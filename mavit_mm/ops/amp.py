"""Autocast helpers for the paths that pick their own precision."""
from __future__ import annotations

import contextlib

import torch

# Device types that always have autocast. For these the availability check is
# skipped: ``torch.amp.is_autocast_available`` calls a builtin that Dynamo
# cannot trace in some torch releases (2.11), which broke fullgraph compiles.
_AUTOCAST_DEVICE_TYPES = ('cuda', 'cpu')


def _autocast_on(device_type: str) -> bool:
    available = (device_type in _AUTOCAST_DEVICE_TYPES
                 or torch.amp.is_autocast_available(device_type))
    return available and torch.is_autocast_enabled(device_type)


def autocast_disabled(device_type: str) -> contextlib.AbstractContextManager:
    """Autocast off on ``device_type`` where it is on; a no-op elsewhere,
    including device types that have no autocast (``meta``)."""
    if _autocast_on(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast computes in on ``device_type`` where it is on, else
    ``None`` (also for device types that have no autocast, such as ``meta``)."""
    return torch.get_autocast_dtype(device_type) if _autocast_on(device_type) else None
