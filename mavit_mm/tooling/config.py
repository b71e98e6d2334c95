"""Our one home for reading configs and deriving variants of them.

* :func:`load_config`: a config file with command-line overrides, checked to be
  a detection or segmentation config (``default_scope`` mmdet or mmseg); every
  tool and test loads configs through it.
* :func:`set_iterations`: the same config for a shorter iteration-based
  schedule (the main job, the end-to-end tests, the distributed test).
* :func:`iter_dataset_cfgs`: the real datasets under Repeat/Concat wrappers.

:class:`ConfigCheckError` (``mavit_mm.errors``) is what a config that cannot
work raises, here and in the pre-flight checks (``tooling.preflight``).
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mmengine.config import Config

from ..errors import ConfigCheckError

SCOPES = ('mmdet', 'mmseg')


def check_scope(cfg: Config, where: str = 'the config') -> str:
    """The config's ``default_scope``, which must be mmdet or mmseg."""
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ConfigCheckError(f'{where}: default_scope must be one of {SCOPES}, got {scope!r}')
    return scope


def load_config(path, cfg_options: dict | None = None) -> Config:
    """``Config.fromfile(path)`` with ``cfg_options`` (``--cfg-options``) merged in;
    a missing file or a scope other than mmdet / mmseg is a ConfigCheckError."""
    if not Path(path).is_file():
        raise ConfigCheckError(f'config file not found: {path}')
    cfg = Config.fromfile(str(path))
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    check_scope(cfg, str(path))
    return cfg


def iter_dataset_cfgs(dataset_cfg, where: str) -> Iterator[tuple[dict, str]]:
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
