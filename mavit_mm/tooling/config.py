"""Our one home for reading configs and deriving variants of them.

* :func:`load_config`: a config file with command-line overrides, checked to be
  a detection or segmentation config (``default_scope`` mmdet or mmseg); every
  tool and test loads configs through it.
* :func:`retarget_data_root`, :func:`set_iterations`: the same config on
  another data root, or for a shorter iteration-based schedule (the main job,
  the end-to-end tests, the distributed test).
* :func:`iter_dataset_cfgs`: the real datasets under Repeat/Concat wrappers.

:class:`ConfigCheckError` is what a config that cannot work raises, here and
in the pre-flight checks (``tooling.preflight``).
"""
from __future__ import annotations

import os.path as osp
from pathlib import Path
from typing import Iterator, Optional, Tuple

from mmengine.config import Config

SCOPES = ('mmdet', 'mmseg')


class ConfigCheckError(ValueError):
    """A config names a path or value that cannot work; raised before training."""


def check_scope(cfg: Config, where: str = 'the config') -> str:
    """The config's ``default_scope``, which must be mmdet or mmseg."""
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ConfigCheckError(f'{where}: default_scope must be one of {SCOPES}, got {scope!r}')
    return scope


def load_config(path, cfg_options: Optional[dict] = None) -> Config:
    """``Config.fromfile(path)`` with ``cfg_options`` (``--cfg-options``) merged in;
    a missing file or a scope other than mmdet / mmseg is a ConfigCheckError."""
    if not Path(path).is_file():
        raise ConfigCheckError(f'config file not found: {path}')
    cfg = Config.fromfile(str(path))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_scope(cfg, str(path))
    return cfg


def iter_dataset_cfgs(dataset_cfg, where: str) -> Iterator[Tuple[dict, str]]:
    """Leaf dataset configs of ``dataset_cfg`` (unwrapping Repeat/Concat/... wrappers),
    each with where it sits in the config."""
    if dataset_cfg is None:
        return
    if isinstance(dataset_cfg, (list, tuple)):
        for i, item in enumerate(dataset_cfg):
            yield from iter_dataset_cfgs(item, f'{where}[{i}]')
        return
    if not isinstance(dataset_cfg, dict):
        return
    if 'datasets' in dataset_cfg:
        yield from iter_dataset_cfgs(dataset_cfg['datasets'], f'{where}.datasets')
    elif 'dataset' in dataset_cfg:
        yield from iter_dataset_cfgs(dataset_cfg['dataset'], f'{where}.dataset')
    else:
        yield dataset_cfg, where


DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
EVALUATORS = ('val_evaluator', 'test_evaluator')


def dataset_cfgs_of(cfg) -> Iterator[dict]:
    """The leaf dataset configs of every dataloader of ``cfg``."""
    for name in DATALOADERS:
        loader = cfg.get(name)
        if loader is not None:
            for dataset_cfg, _ in iter_dataset_cfgs(loader.get('dataset'), name):
                yield dataset_cfg


def retarget_data_root(cfg, new_root: str) -> None:
    """Point every dataset (and the COCO evaluators' ann_file) at ``new_root``."""
    new_root = new_root.rstrip('/') + '/'
    old_roots = set()
    for dataset_cfg in dataset_cfgs_of(cfg):
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
