"""Let checkpoints written by mmengine load under ``torch.load(weights_only=True)``.

torch >= 2.6 makes ``weights_only=True`` the default of ``torch.load``, and
mmengine 0.10.x calls ``torch.load`` without the argument. A checkpoint saved by
mmengine's ``Runner`` holds, besides tensors, a few plain Python/numpy objects
(found by saving real checkpoints and loading them with ``weights_only=True``):

* ``message_hub``: ``mmengine.logging.HistoryBuffer`` objects whose histories
  are numpy arrays (``numpy.core.multiarray._reconstruct``, ``numpy.ndarray``,
  ``numpy.dtype`` and the concrete dtype class such as ``Float64DType``), numpy
  scalars (``numpy.core.multiarray.scalar``) and a dict of the buffer's
  statistics methods, pickled as ``getattr(HistoryBuffer, 'min')`` etc.;
* metrics and hook messages that may be numpy scalars.

Rather than switching ``weights_only`` off (which would let a malicious
checkpoint run code), this module allow-lists exactly those types with
``torch.serialization.add_safe_globals``. ``getattr`` is not allow-listed as is
(it would be a universal gadget); a restricted stand-in is registered under
its name that only resolves the HistoryBuffer statistics methods. Object arrays
and any other class still fail to load.
"""
from __future__ import annotations

import pickle

import numpy as np
import torch

# Numeric/bool numpy dtypes only: an object-dtype array could carry anything.
_SAFE_NUMPY_SCALAR_TYPES = (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, np.float32, np.float64)

_installed = False


def _history_buffer_methods() -> dict:
    """``{HistoryBuffer: {'min', 'max', 'current', 'mean'}}``: what getattr may return."""
    from mmengine.logging import HistoryBuffer
    return {HistoryBuffer: frozenset(('min', 'max', 'current', 'mean'))}


def restricted_getattr(owner, name: str):
    """Stand-in for ``builtins.getattr`` inside weights-only unpickling.

    Only resolves the statistics methods of mmengine's HistoryBuffer, which is
    how pickle stores the functions in ``HistoryBuffer._statistics_methods``.
    """
    allowed = _history_buffer_methods().get(owner) if isinstance(owner, type) else None
    if allowed is None or name not in allowed:
        raise pickle.UnpicklingError(f'weights-only load refused getattr({owner!r}, {name!r}): only '
                                     'the statistics methods of mmengine HistoryBuffer are allowed')
    return getattr(owner, name)


def _numpy_core_names(attr: str) -> list:
    """``numpy.core.multiarray.<attr>`` under the module paths numpy 1.x and 2.x pickle to."""
    try:
        from numpy.core import multiarray  # numpy 1.x (a shim in numpy 2)
    except ImportError:  # pragma: no cover - future numpy without the shim
        from numpy._core import multiarray
    obj = getattr(multiarray, attr)
    return [(obj, f'numpy.core.multiarray.{attr}'), (obj, f'numpy._core.multiarray.{attr}')]


def mmengine_checkpoint_safe_globals() -> list:
    """The globals an mmengine checkpoint needs beyond torch's defaults."""
    from mmengine.logging import HistoryBuffer
    dtype_classes = sorted({type(np.dtype(t)) for t in _SAFE_NUMPY_SCALAR_TYPES},
                           key=lambda cls: cls.__name__)
    return [
        HistoryBuffer,
        (restricted_getattr, 'builtins.getattr'),
        np.ndarray,
        np.dtype,
        *dtype_classes,
        *_numpy_core_names('_reconstruct'),
        *_numpy_core_names('scalar'),
    ]


def install() -> None:
    """Register the allow-list once per process (idempotent)."""
    global _installed
    if _installed:
        return
    add_safe_globals = getattr(torch.serialization, 'add_safe_globals', None)
    if add_safe_globals is None:  # torch < 2.4 loads with weights_only=False anyway
        return
    add_safe_globals(mmengine_checkpoint_safe_globals())
    _installed = True


# Importing the module is enough (``mavit_mm/__init__.py`` does): every later
# torch.load of an mmengine checkpoint in this process then just works.
install()
