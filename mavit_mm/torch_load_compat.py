"""Let checkpoints written by mmengine load under ``torch.load(weights_only=True)``.

torch >= 2.6 makes ``weights_only=True`` the default of ``torch.load``, and
mmengine 0.10.x calls ``torch.load`` without the argument. Besides tensors, a
checkpoint of mmengine's ``Runner`` holds, in ``message_hub``,
``mmengine.logging.HistoryBuffer`` objects (numpy array histories, and their
statistics methods pickled as ``getattr(HistoryBuffer, 'min')`` etc.), and
numpy scalars in metrics and hook messages.

The published MALA classification code (DeiT's training script) saves its
command line beside the weights, an ``argparse.Namespace`` of plain values.

Rather than switching ``weights_only`` off (which would let a malicious
checkpoint run code), exactly those types are allow-listed
(:func:`mmengine_checkpoint_safe_globals`). ``getattr`` itself would be a
universal gadget: a stand-in under its name resolves only the HistoryBuffer
statistics methods. Object arrays and any other class still fail to load.

One path of mmengine does switch it off: checkpoints at ``http(s)://``
(``load_from``, ``init_cfg``'s ``Pretrained``) go through
``torch.hub.load_state_dict_from_url``, whose ``weights_only`` defaults to
False. Its loader is replaced, through mmengine's public
``CheckpointLoader.register_scheme``, by the same download read weights-only
(:func:`load_from_http_weights_only`). So are the model-zoo names that
mmengine resolves to such an address and then downloads past that registry
(``open-mmlab://``, ``torchvision://``, ``mmcls://``): they are resolved by
mmengine's own tables and read the same way (:func:`load_from_model_zoo_weights_only`).
"""
from __future__ import annotations

import argparse
import os
import pickle

import numpy as np
import torch

# Numeric/bool numpy dtypes only: an object-dtype array could carry anything.
_SAFE_NUMPY_SCALAR_TYPES = (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, np.float32, np.float64)

_installed = False


def restricted_getattr(owner, name: str):
    """``builtins.getattr`` inside weights-only unpickling, for the statistics
    methods of mmengine's HistoryBuffer (``HistoryBuffer._statistics_methods``) only."""
    from mmengine.logging import HistoryBuffer
    if owner is not HistoryBuffer or name not in ('min', 'max', 'current', 'mean'):
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
    """The globals an mmengine checkpoint (and a published classification
    checkpoint: its ``args``) needs beyond torch's defaults."""
    from mmengine.logging import HistoryBuffer
    dtype_classes = sorted({type(np.dtype(t)) for t in _SAFE_NUMPY_SCALAR_TYPES},
                           key=lambda cls: cls.__name__)
    return [
        argparse.Namespace,     # a plain attribute bag: its values pass the same unpickler
        HistoryBuffer,
        (restricted_getattr, 'builtins.getattr'),
        np.ndarray,
        np.dtype,
        *dtype_classes,
        *_numpy_core_names('_reconstruct'),
        *_numpy_core_names('scalar'),
    ]


def load_from_http_weights_only(filename: str, map_location=None, model_dir=None,
                                progress: bool = os.isatty(0)):
    """mmengine's ``load_from_http`` (downloaded once per machine, by the first
    process, while the others wait), read with ``weights_only=True``; a file
    that is refused is an :class:`~mavit_mm.errors.UnreadableCheckpointError`
    saying why, without torch's advice to switch ``weights_only`` off."""
    from mmengine.dist import get_dist_info

    from .models.checkpoint import unreadable

    def load():
        try:
            return torch.hub.load_state_dict_from_url(
                filename, model_dir=model_dir, map_location=map_location, progress=progress,
                weights_only=True)
        except pickle.UnpicklingError as error:
            raise unreadable(filename, error) from None

    rank, world_size = get_dist_info()
    if rank == 0:
        checkpoint = load()
    if world_size > 1:
        torch.distributed.barrier()
        if rank > 0:
            checkpoint = load()
    return checkpoint


# mmengine's model-zoo schemes: which table names their addresses.
MODEL_ZOO_SCHEMES = {'open-mmlab://': 'get_external_models', 'openmmlab://': 'get_external_models',
                     'torchvision://': 'get_torchvision_models',
                     'modelzoo://': 'get_torchvision_models', 'mmcls://': 'get_mmcls_models'}


def load_from_model_zoo_weights_only(filename: str, map_location=None):
    """A model-zoo name (``MODEL_ZOO_SCHEMES``) resolved to its address by
    mmengine's tables (``mmengine.runner.checkpoint.get_*_models``, deprecated
    open-mmlab names renamed as mmengine renames them), then read by
    :func:`load_from_http_weights_only`; an ``mmcls://`` checkpoint keeps its
    ``backbone.`` weights without the prefix, as mmengine's loader keeps them.
    An open-mmlab name for a file under mmengine's home stays with mmengine's
    loader, which reads local files with ``torch.load``'s default,
    weights-only since torch 2.6."""
    from mmengine.runner import checkpoint as mmengine_checkpoint

    from .errors import UnreadableCheckpointError
    scheme = next(prefix for prefix in MODEL_ZOO_SCHEMES if filename.startswith(prefix))
    name = filename[len(scheme):]
    table = getattr(mmengine_checkpoint, MODEL_ZOO_SCHEMES[scheme])()
    if scheme in ('open-mmlab://', 'openmmlab://'):
        name = mmengine_checkpoint.get_deprecated_model_names().get(name, name)
    if name not in table:
        raise UnreadableCheckpointError(
            f'cannot read {filename}: {scheme} knows no model {name!r} (mmengine.runner.'
            f'checkpoint.{MODEL_ZOO_SCHEMES[scheme]}() lists the {len(table)} names it has)')
    url = table[name]
    if not url.startswith(('http://', 'https://')):
        return mmengine_checkpoint.load_from_openmmlab(filename, map_location=map_location)
    try:
        checkpoint = load_from_http_weights_only(url, map_location=map_location)
    except UnreadableCheckpointError as error:
        raise UnreadableCheckpointError(f'{filename} is {url}: {error}') from None
    if scheme == 'mmcls://':
        weights = checkpoint.get('state_dict', checkpoint)
        checkpoint = dict(state_dict={key[len('backbone.'):]: value for key, value in
                                      weights.items() if key.startswith('backbone.')})
    return checkpoint


def install() -> None:
    """Register the allow-list, and the weights-only loaders of http(s)
    checkpoints and model-zoo names, once per process (idempotent)."""
    global _installed
    if _installed:
        return
    add_safe_globals = getattr(torch.serialization, 'add_safe_globals', None)
    if add_safe_globals is None:  # torch < 2.4 loads with weights_only=False anyway
        return
    add_safe_globals(mmengine_checkpoint_safe_globals())
    from mmengine.runner import CheckpointLoader
    CheckpointLoader.register_scheme(prefixes=('http://', 'https://'),
                                     loader=load_from_http_weights_only, force=True)
    CheckpointLoader.register_scheme(prefixes=tuple(MODEL_ZOO_SCHEMES),
                                     loader=load_from_model_zoo_weights_only, force=True)
    _installed = True


install()   # on import (``mavit_mm/__init__.py`` imports this module)
