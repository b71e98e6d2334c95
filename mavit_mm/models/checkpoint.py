"""Reading checkpoints and fitting them to a model, one policy for published
backbone weights (:func:`fit_backbone`, :func:`load_pretrained_backbone`: keys
only one side has are listed) and whole detector / segmentor checkpoints
(:func:`fit_whole_model`, exactly): a tensor whose shape differs from the
model's is an error naming it. Files are read by :func:`read_checkpoint`
(weights only; a file that is no checkpoint is an error saying why).
"""
from __future__ import annotations

import inspect
import os
import re
from collections import OrderedDict
from collections.abc import Mapping

import torch
from torch import nn

from ..errors import UnreadableCheckpointError

# Where published and OpenMMLab checkpoints keep their weights.
_STATE_DICT_KEYS = ('state_dict', 'model', 'module')
# Prefixes a backbone's weights carry inside wrapped or full-detector checkpoints.
_WRAPPER_PREFIXES = ('module.', '_orig_mod.')


# torch >= 2.4 has the allow-list of weights-only loads that mmengine's
# checkpoints need (mavit_mm.torch_load_compat); torch < 2.4 loads them only
# with weights_only=False, its default then, which mmengine relies on: there
# the reader takes torch's default too. torch 2.0 has no mmap.
_WEIGHTS_ONLY = {'weights_only': True} if hasattr(torch.serialization, 'add_safe_globals') else {}
_CAN_MMAP = 'mmap' in inspect.signature(torch.load).parameters


def read_checkpoint(path: str, mmap: bool = True):
    """``torch.load(path, weights_only=True)`` on the CPU, memory-mapped where
    the file's format allows (torch's zip format, since torch 1.6): a check
    that reads keys and shapes touches none of the tensors' bytes. A file that
    does not load is an :class:`~mavit_mm.errors.UnreadableCheckpointError`
    naming it and torch's reason, without torch's advice to switch
    ``weights_only`` off."""
    mmap = mmap and _CAN_MMAP
    try:
        try:
            return torch.load(path, map_location='cpu', **_WEIGHTS_ONLY,
                              **({'mmap': True} if mmap else {}))
        except RuntimeError as error:
            if not mmap or 'mmap' not in str(error):
                raise
            return torch.load(path, map_location='cpu', **_WEIGHTS_ONLY)  # the legacy format
    except Exception as error:  # whatever a file that is no checkpoint raises
        raise unreadable(path, error) from None


def unreadable(path: str, error: BaseException) -> UnreadableCheckpointError:
    reason = _not_a_checkpoint_file(path) or load_failure(error)
    return UnreadableCheckpointError(f'cannot read {path} as a checkpoint ({reason})')


def _not_a_checkpoint_file(path: str) -> str | None:
    """Why a local file is no checkpoint at all, where its first bytes tell:
    neither torch's zip format nor a pickle (torch's own error then says
    nothing of use, e.g. 'pop from empty list' for a config file)."""
    try:
        with open(path, 'rb') as file:
            head = file.read(9)
    except OSError:
        return None
    if not head:
        return 'an empty file'
    if len(head) == 9 and head[8:9] == b'{':     # 8 bytes of header length, then its JSON
        return ('a safetensors file, which this loader does not read: load it with '
                'safetensors.torch.load_file and save that dict with torch.save')
    if head.startswith(b'PK') or head.startswith(b'\x80'):
        return None     # zip or pickle: torch's own reason is the one to give
    return ('not a PyTorch checkpoint: neither torch\'s zip format nor a pickle; a config, '
            'an image or a text file?')


def load_failure(error: BaseException) -> str:
    """Why ``torch.load`` failed, in a line: the weights-only unpickler's own
    reason where it gives one (its message opens with the advice to load with
    ``weights_only=False``, which would let the file run code)."""
    message = str(error)
    marker = 'WeightsUnpickler error:'
    if marker in message:
        reason = message.split(marker, 1)[1].split('Check the documentation', 1)[0]
        reason = ' '.join(reason.split())
        return f'torch.load with weights_only=True refused it: {reason}'
    if message.startswith('Weights only load failed'):
        # The advice is the first paragraph, torch's pointer to its docs the
        # last; the reason (a blocked module's global) lies between.
        paragraphs = [p for p in message.split('\n\n')[1:]
                      if p.strip() and not p.strip().startswith('Check the documentation')]
        reason = ' '.join(' '.join(paragraphs).split())
        return 'torch.load with weights_only=True refused it' + (f': {reason}' if reason else '')
    first_line = message.strip().splitlines()[0] if message.strip() else ''
    return f'{type(error).__name__}: {first_line}' if first_line else type(error).__name__


def extract_state_dict(checkpoint, key: str | None = None) -> OrderedDict[str, torch.Tensor]:
    """The tensor dict of a loaded checkpoint, unwrapped from its container:
    under ``key`` where given (``'model_ema'``, the EMA weights the published
    classification code saves beside ``'model'``), else the first of
    ``'state_dict'``, ``'model'``, ``'module'``, else the top level."""
    state_dict = checkpoint
    if key is not None:
        if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get(key), dict):
            raise ValueError(f'checkpoint has no state dict under {key!r} (it holds '
                             f'{_contents(checkpoint)})')
        state_dict = checkpoint[key]
    else:
        for name in _STATE_DICT_KEYS:
            if isinstance(state_dict, dict) and isinstance(state_dict.get(name), dict):
                state_dict = state_dict[name]
                break
    if not isinstance(state_dict, dict) or not all(torch.is_tensor(v) for v in state_dict.values()):
        raise ValueError('checkpoint holds no state dict of tensors (looked at the top '
                         f'level and under {_STATE_DICT_KEYS}; it holds {_contents(checkpoint)})')
    return OrderedDict(state_dict)


def _contents(checkpoint) -> str:
    """What a loaded checkpoint holds, for an error: its first keys, or its type."""
    if not isinstance(checkpoint, dict):
        return type(checkpoint).__name__
    return str(sorted(map(str, checkpoint))[:12])


def strip_wrapper_prefixes(state_dict: Mapping) -> OrderedDict[str, torch.Tensor]:
    """Keys without the prefixes of (Distributed)DataParallel (``module.``) and
    ``torch.compile`` (``_orig_mod.``)."""
    out = OrderedDict()
    for key, value in state_dict.items():
        for wrapper in _WRAPPER_PREFIXES:
            if key.startswith(wrapper):
                key = key[len(wrapper):]
        out[key] = value
    return out


def backbone_state_dict(state_dict: dict, prefix: str | None = None) -> OrderedDict[str, torch.Tensor]:
    """Strip wrapper prefixes; from a whole detector / segmentor keep ``backbone.*``."""
    out = strip_wrapper_prefixes(state_dict)
    prefix = prefix if prefix is not None else (
        'backbone.' if any(k.startswith('backbone.') for k in out) else None)
    if prefix:
        prefix = prefix if prefix.endswith('.') else prefix + '.'
        out = OrderedDict((k[len(prefix):], v) for k, v in out.items() if k.startswith(prefix))
        if not out:
            raise ValueError(f'checkpoint has no weights under the prefix {prefix!r}')
    return out


def load_pretrained_backbone(model: nn.Module, checkpoint: str, prefix: str | None = None,
                             logger=None) -> dict:
    """Load published weights into ``model``; returns ``dict(loaded=[...],
    missing=[...], unexpected=[...])``. A shape mismatch is an error (module
    docstring); keys the model lacks (a classification head) or the checkpoint
    lacks (``extra_norms``, absent from classification checkpoints) are expected
    and reported.
    """
    if '://' in checkpoint:
        from mmengine.runner.checkpoint import CheckpointLoader
        try:
            loaded = CheckpointLoader.load_checkpoint(checkpoint, map_location='cpu')
        except Exception as error:  # as read_checkpoint
            raise unreadable(checkpoint, error) from None
    else:
        checkpoint = os.path.expanduser(checkpoint)     # as mmengine's own loader
        if os.path.isdir(checkpoint):
            raise IsADirectoryError(f'MAViT pretrained checkpoint is a folder, not a file: '
                                    f'{checkpoint}')
        if not os.path.isfile(checkpoint):
            raise FileNotFoundError(f'MAViT pretrained checkpoint not found: {checkpoint}')
        loaded = read_checkpoint(checkpoint, mmap=False)
    state_dict = backbone_state_dict(extract_state_dict(loaded), prefix)
    usable, unexpected = fit_backbone(model.state_dict(), state_dict, checkpoint)
    result = model.load_state_dict(usable, strict=False)
    report = dict(loaded=list(usable), missing=list(result.missing_keys),
                  unexpected=unexpected)
    if logger is not None:
        logger.info(f'MAViT: loaded {len(usable)} tensors from {checkpoint}')
        for name in ('missing', 'unexpected'):
            if report[name]:
                shown = ', '.join(report[name][:8]) + (' ...' if len(report[name]) > 8 else '')
                logger.warning(f'MAViT pretrained: {len(report[name])} {name} keys: {shown}')
    return report


def _shown(items, limit: int = 6) -> str:
    return ', '.join(items[:limit]) + (f' ... ({len(items)} in all)' if len(items) > limit else '')


def fit_backbone(expected: Mapping, state_dict: Mapping, source: str = 'the checkpoint'
                 ) -> tuple[OrderedDict[str, torch.Tensor], list[str]]:
    """A backbone checkpoint's tensors (``backbone_state_dict``) against the
    backbone's ``expected`` state dict: ``(usable, unexpected)``, the tensors
    that fit and the keys the backbone lacks (a classification head). A shape
    that differs, or no tensor that fits, is a ValueError naming it."""
    usable = OrderedDict()
    mismatched, unexpected = [], []
    for key, value in state_dict.items():
        if key not in expected:
            unexpected.append(key)
        elif tuple(expected[key].shape) != tuple(value.shape):
            mismatched.append(f'{key}: checkpoint {tuple(value.shape)} vs model '
                              f'{tuple(expected[key].shape)}')
        else:
            usable[key] = value
    if mismatched:
        shown = '; '.join(mismatched[:6]) + (' ...' if len(mismatched) > 6 else '')
        raise ValueError(f'{source} does not fit this MAViT ({len(mismatched)} tensors '
                         f'differ in shape: {shown}); {_likely_cause(expected, state_dict)}')
    if not usable:
        raise ValueError(f'no tensor of {source} matches the MAViT backbone: is it a '
                         'MAViT checkpoint?')
    return usable, unexpected


def _likely_cause(expected: Mapping, state_dict: Mapping) -> str:
    """Why shapes differ: the stem's input channels when only they differ,
    else another size."""
    stem = 'patch_embed.proj.0.weight'
    differ = [key for key, value in state_dict.items() if key in expected
              and tuple(expected[key].shape) != tuple(value.shape)]
    if differ == [stem] and expected[stem].shape[0] == state_dict[stem].shape[0]:
        return (f'its stem takes {state_dict[stem].shape[1]}-channel images, this MAViT '
                f'{expected[stem].shape[1]} (in_channels)')
    return 'is it a checkpoint of another size? Set the arch that matches it.'


def mmengine_load_from_tensors(checkpoint) -> OrderedDict:
    """What mmengine's ``load_checkpoint`` (a config's ``load_from``) takes
    from a loaded checkpoint: its ``'state_dict'``, else the whole dict, with
    each key's leading ``module.`` dropped (its ``revise_keys`` default); any
    other container or prefix it loads nothing from."""
    if not isinstance(checkpoint, Mapping):
        raise ValueError(f'checkpoint is a {type(checkpoint).__name__}, not a dict of tensors')
    state_dict = checkpoint.get('state_dict', checkpoint)
    return OrderedDict((re.sub(r'^module\.', '', key), value) for key, value in state_dict.items()
                       if torch.is_tensor(value))


def count_shared(expected: Mapping, state_dict: Mapping, prefix: str = '') -> int:
    """How many tensors of ``state_dict`` (each key after ``prefix``) are tensors
    of the model whose state dict is ``expected``: the same name and shape."""
    return sum(1 for key, value in state_dict.items() if prefix + key in expected
               and tuple(expected[prefix + key].shape) == tuple(value.shape))


def fit_whole_model(expected: Mapping, state_dict: Mapping, source: str = 'the checkpoint',
                    strip_wrappers: bool = True) -> OrderedDict[str, torch.Tensor]:
    """``state_dict`` (wrapper prefixes stripped, unless ``strip_wrappers`` is
    off: the keys as a loader that strips none will see them) checked against
    a whole model's ``expected`` state dict: the same keys and the same
    shapes, or a ValueError naming what does not fit (keys missing, keys the
    model does not have, shapes). Returns the tensors in the model's order,
    ready for ``load_state_dict(..., strict=True)``."""
    if strip_wrappers:
        state_dict = strip_wrapper_prefixes(state_dict)
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    wrong_shape = [f'{k}: checkpoint {tuple(state_dict[k].shape)} vs model '
                   f'{tuple(expected[k].shape)}'
                   for k in expected if k in state_dict
                   and tuple(state_dict[k].shape) != tuple(expected[k].shape)]
    problems = [f'{what} ({len(keys)}): {_shown(keys)}' for what, keys in (
        ('shapes differ', wrong_shape), ('keys of the model missing from it', missing),
        ('keys the model does not have', unexpected)) if keys]
    if problems:
        raise ValueError(f'{source} does not fit the model: ' + '; '.join(problems))
    return OrderedDict((k, state_dict[k]) for k in expected)


def normalised_dataset_meta(classes, palette=None) -> dict:
    """``dict(classes=(name, ...), palette=[(r, g, b), ...])``, the palette only
    when there is one: class names and colours as plain strings and ints,
    however a dataset or an old checkpoint kept them."""
    meta = dict(classes=tuple(str(name) for name in classes))
    if palette is not None:
        meta['palette'] = [tuple(int(c) for c in colour) for colour in palette]
    return meta
