"""Whole-model checkpoints of mmdet 2.x / mmseg 0.x for our mmdet 3.x / mmseg 1.x configs.

What differs: for this project's pipelines (Mask R-CNN, Cascade Mask R-CNN,
RetinaNet, UperNet, Semantic FPN), only the container. The heads' parameter
names and shapes and the class order are the same in both generations
(docs/checkpoints.md lists them; since mmdet 2.0 the background is the last
``fc_cls`` channel, and the RPN here is sigmoid, untouched by mmdet 2.5's change
of the softmax RPN's class order). The old meta keeps class names in ``CLASSES``
(mmseg also ``PALETTE``), mmengine in ``dataset_meta`` with lower-case keys;
the old checkpoints also hold config text and optimizer state, and maybe a
(Distributed)DataParallel ``module.`` prefix.

Refused, with the reason: mmdet 1.x checkpoints (two-stage heads at the top
level, background as class 0; upgrade them first with mmdet 2.x's
``tools/model_converters/upgrade_model_version.py``), a checkpoint of the other
library, one without backbone or heads (convert those with ``--arch``), and
anything that does not fit the config's model exactly (``fit_whole_model``).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import torch

from ..models.checkpoint import fit_whole_model, normalised_dataset_meta, strip_wrapper_prefixes

# Top-level modules of the models each library builds from our configs.
HEAD_MODULES = {
    'mmdet': ('rpn_head', 'roi_head', 'bbox_head'),
    'mmseg': ('decode_head', 'auxiliary_head'),
}
# The first major version of the layout our configs load: mmdet 2.x, mmseg 0.x
# and later. Older ones named above are refused.
LIBRARY_GENERATIONS = {'mmdet': {2: 'mmdet 2.x', 3: 'mmdet 3.x'},
                       'mmseg': {0: 'mmseg 0.x', 1: 'mmseg 1.x'}}


class LegacyCheckpointError(ValueError):
    """A whole-model checkpoint whose layout cannot be converted; says why."""


class Layout(NamedTuple):
    library: str            # 'mmdet' or 'mmseg'
    generation: str         # e.g. 'mmdet 2.x', or 'mmdet (version not recorded)'
    version: str | None  # meta's mmdet_version / mmseg_version, when recorded


def _major(version: str) -> int | None:
    match = re.match(r'\s*(\d+)', str(version))
    return int(match.group(1)) if match else None


def detect_layout(checkpoint: Mapping, state_dict: Mapping) -> Layout:
    """Which library and version wrote a whole-model checkpoint, from its
    top-level modules and its meta; LegacyCheckpointError for the layouts we
    cannot convert (see the module's docstring)."""
    meta = checkpoint.get('meta') if isinstance(checkpoint, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    top = sorted({key.split('.', 1)[0] for key in strip_wrapper_prefixes(state_dict)})
    if 'backbone' not in top:
        raise LegacyCheckpointError(
            f'unknown layout: no backbone.* weights (top-level names: {", ".join(top[:8])}); '
            'not a whole detector / segmentor checkpoint. A backbone or classification '
            'checkpoint is converted with --arch')
    found = {scope: [m for m in heads if m in top] for scope, heads in HEAD_MODULES.items()}
    if found['mmdet'] and found['mmseg']:
        raise LegacyCheckpointError(
            f'unknown layout: both detector heads ({", ".join(found["mmdet"])}) and '
            f'segmentor heads ({", ".join(found["mmseg"])})')
    if not found['mmdet'] and not found['mmseg']:
        if 'mask_head' in top:
            found['mmdet'] = ['mask_head']
        else:
            raise LegacyCheckpointError(
                f'unknown layout: a backbone but no detector or segmentor heads (top-level '
                f'names: {", ".join(top)}; expected some of '
                f'{", ".join(HEAD_MODULES["mmdet"] + HEAD_MODULES["mmseg"])})')
    library = 'mmdet' if found['mmdet'] else 'mmseg'
    version = meta.get(f'{library}_version')
    version = str(version) if version is not None else None
    major = _major(version) if version else None
    if library == 'mmdet' and (
            (major is not None and major < 2)
            or ('rpn_head' in top and 'bbox_head' in top) or 'mask_head' in top):
        where = (f'mmdet {version}' if major is not None and major < 2
                 else 'R-CNN heads at the top level, not under roi_head')
        raise LegacyCheckpointError(
            f'mmdet 1.x layout ({where}): two-stage heads outside roi_head, the background '
            'as class 0 and background channels in fc_reg / conv_logits. Upgrade it to '
            "mmdet 2.x first (mmdet 2.x's tools/model_converters/upgrade_model_version.py)")
    generations = LIBRARY_GENERATIONS[library]
    if major is not None and major in generations:
        generation = generations[major]
    elif major is not None and major > max(generations):
        generation = f'{library} {version}'
    elif major is not None:
        raise LegacyCheckpointError(f'unknown layout: {library} {version} is older than '
                                    f'{generations[min(generations)]}')
    elif 'dataset_meta' in meta:
        generation = generations[max(generations)]  # mmengine's Runner wrote it
    elif 'CLASSES' in meta:
        generation = generations[min(generations)]
    else:
        generation = f'{library} (version not recorded)'
    return Layout(library, generation, version)


def checkpoint_dataset_meta(meta: Mapping | None) -> dict | None:
    """``dict(classes=..., palette=...)`` from a checkpoint's meta: mmengine's
    ``dataset_meta`` or the old ``CLASSES`` / ``PALETTE``; None if neither."""
    if not isinstance(meta, Mapping):
        return None
    if isinstance(meta.get('dataset_meta'), Mapping):
        source = {str(k).lower(): v for k, v in meta['dataset_meta'].items()}
    elif meta.get('CLASSES') is not None:
        source = dict(classes=meta['CLASSES'], palette=meta.get('PALETTE'))
    else:
        return None
    if source.get('classes') is None:
        return None
    return normalised_dataset_meta(source['classes'], source.get('palette'))


def convert_whole_model(checkpoint: Mapping, state_dict: Mapping, expected: Mapping,
                        scope: str, num_classes: int | None = None,
                        config_meta: dict | None = None, source: str = 'the checkpoint'
                        ) -> tuple[OrderedDict[str, torch.Tensor], dict, dict]:
    """An mmdet 2.x / mmseg 0.x (or 3.x / 1.x) whole-model checkpoint for the
    model whose state dict is ``expected`` (a model of a ``scope`` config with
    ``num_classes`` classes, its test dataset's ``config_meta``).

    Returns ``(state_dict, meta, report)``: the weights in the model's order
    (they load with ``strict=True``), the new meta (``dataset_meta`` with
    lower-case keys, where from) and what was done. Raises
    LegacyCheckpointError / ValueError naming the problem.
    """
    layout = detect_layout(checkpoint, state_dict)
    if layout.library != scope:
        kind = {'mmdet': 'a detector', 'mmseg': 'a segmentor'}
        raise LegacyCheckpointError(
            f'{source} is {kind[layout.library]} checkpoint ({layout.library}); the config '
            f'builds {kind.get(scope, scope)} ({scope})')
    fitted = fit_whole_model(expected, state_dict, source)
    meta_in = checkpoint.get('meta') if isinstance(checkpoint, Mapping) else None
    dataset_meta = checkpoint_dataset_meta(meta_in)
    classes_from = 'checkpoint'
    if dataset_meta is None:
        if config_meta is None:
            classes_from = 'none'
        else:
            dataset_meta, classes_from = dict(config_meta), 'config'
    if dataset_meta is not None:
        classes = dataset_meta['classes']
        if num_classes is not None and len(classes) != num_classes:
            raise ValueError(
                f'{source} names {len(classes)} classes ({", ".join(classes[:4])}, ...) but '
                f"the config's heads have {num_classes}")
        palette = dataset_meta.get('palette')
        if palette is not None and len(palette) != len(classes):
            raise ValueError(f'{source}: {len(palette)} palette colours for '
                             f'{len(classes)} classes')
        if palette is None and config_meta and config_meta.get('palette') \
                and len(config_meta['palette']) == len(classes):
            dataset_meta['palette'] = list(config_meta['palette'])
    meta = dict(converted_from=layout.generation, source=str(source))
    if dataset_meta is not None:
        meta['dataset_meta'] = dataset_meta
    dropped = sorted(k for k in checkpoint if k not in ('state_dict', 'meta')) \
        if isinstance(checkpoint, Mapping) and 'state_dict' in checkpoint else []
    report = dict(layout=layout.generation, version=layout.version, tensors=len(fitted),
                  classes_from=classes_from, dropped=dropped,
                  classes=list(dataset_meta['classes']) if dataset_meta else None)
    return fitted, meta, report


def head_num_classes(model_cfg: Mapping) -> int | None:
    """The number of classes the heads of a model config predict."""
    for path in (('roi_head', 'bbox_head'), ('bbox_head',), ('decode_head',)):
        node = model_cfg
        for name in path:
            node = node.get(name) if isinstance(node, Mapping) else None
        if isinstance(node, (list, tuple)) and node:
            node = node[0]
        if isinstance(node, Mapping) and node.get('num_classes') is not None:
            return int(node['num_classes'])
    return None
