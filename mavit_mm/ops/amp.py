"""Autocast helpers for the paths that pick their own precision."""
from __future__ import annotations

import contextlib

import torch


def autocast_disabled(device_type: str) -> contextlib.AbstractContextManager:
    """Autocast off on ``device_type`` where it is on; a no-op elsewhere,
    including device types that have no autocast (``meta``)."""
    if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()
