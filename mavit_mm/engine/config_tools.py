"""Deriving small variants of a config: another data root, smaller images, a
shorter schedule. Used by the main job and the end-to-end tests to run the
demo configs (which inherit the published ones) on tiny generated data.
"""
from __future__ import annotations

import os.path as osp
from typing import Iterator

from .preflight import iter_dataset_cfgs

# Pipeline transform keys holding image sizes, (w, h) pairs or lists of them.
_SIZE_KEYS = ('scale', 'scales', 'crop_size', 'img_scale')
DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
EVALUATORS = ('val_evaluator', 'test_evaluator')


def _iter_dataset_cfgs(cfg) -> Iterator[dict]:
    for name in DATALOADERS:
        loader = cfg.get(name)
        if loader is not None:
            for dataset_cfg, _ in iter_dataset_cfgs(loader.get('dataset'), name):
                yield dataset_cfg


def retarget_data_root(cfg, new_root: str) -> None:
    """Point every dataset (and the COCO evaluators' ann_file) at ``new_root``."""
    new_root = new_root.rstrip('/') + '/'
    old_roots = set()
    for dataset_cfg in _iter_dataset_cfgs(cfg):
        old_roots.add(dataset_cfg.get('data_root') or '')
        dataset_cfg['data_root'] = new_root
    # The evaluators name the annotation file with the data root in front.
    old_root = old_roots.pop() if len(old_roots) == 1 else ''

    for name in EVALUATORS:
        evaluators = cfg.get(name)
        for evaluator in evaluators if isinstance(evaluators, list) else [evaluators]:
            if isinstance(evaluator, dict) and evaluator.get('ann_file'):
                ann_file = evaluator['ann_file']
                if old_root and ann_file.startswith(old_root):
                    evaluator['ann_file'] = osp.join(new_root, ann_file[len(old_root):].lstrip('/'))


def _scaled(value, factor: float):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(1, int(round(value * factor)))
    if isinstance(value, (list, tuple)):
        return type(value)(_scaled(v, factor) for v in value)
    return value


def _iter_transforms(pipeline) -> Iterator[dict]:
    for transform in pipeline or []:
        if isinstance(transform, dict):
            yield transform
            for key in ('transforms',):  # RandomChoice / TestTimeAug nest lists
                nested = transform.get(key)
                if isinstance(nested, (list, tuple)):
                    for item in nested:
                        yield from _iter_transforms(item if isinstance(item, (list, tuple))
                                                    else [item])
        elif isinstance(transform, (list, tuple)):
            yield from _iter_transforms(transform)


def rescale_image_sizes(cfg, factor: float) -> None:
    """Multiply every image size in the pipelines (and the seg preprocessor's
    padding size) by ``factor``: the same augmentation on smaller images."""
    for dataset_cfg in _iter_dataset_cfgs(cfg):
        for transform in _iter_transforms(dataset_cfg.get('pipeline')):
            for key in _SIZE_KEYS:
                if key in transform:
                    transform[key] = _scaled(transform[key], factor)
    preprocessor = cfg.model.get('data_preprocessor') or {}
    if preprocessor.get('size'):
        preprocessor['size'] = _scaled(preprocessor['size'], factor)


def set_iterations(cfg, max_iters: int, checkpoint_interval: int = None) -> None:
    """Iteration-based training of ``max_iters``, the lr schedule scaled to it,
    validation at the end, checkpoints every ``checkpoint_interval``."""
    old = cfg.train_cfg.get('max_iters')
    if old is None:
        raise ValueError('set_iterations needs an iteration-based train_cfg (max_iters)')
    factor = max_iters / old
    cfg.train_cfg.max_iters = max_iters
    cfg.train_cfg.val_interval = max_iters
    for scheduler in cfg.get('param_scheduler') or []:
        if scheduler.get('by_epoch', True):
            continue
        for key in ('begin', 'end'):
            if key in scheduler:
                scheduler[key] = max(0, int(round(scheduler[key] * factor)))
        if scheduler.get('end', 1) <= scheduler.get('begin', 0):
            scheduler['end'] = scheduler.get('begin', 0) + 1
        if 'milestones' in scheduler:
            scheduler['milestones'] = [max(1, int(round(m * factor)))
                                       for m in scheduler['milestones']]
    hooks = cfg.default_hooks
    hooks.checkpoint.interval = checkpoint_interval or max_iters
    hooks.logger.interval = min(hooks.logger.get('interval', 50), max_iters)
    if cfg.get('log_processor'):
        cfg.log_processor['window_size'] = min(cfg.log_processor.get('window_size', 10),
                                               max_iters)
