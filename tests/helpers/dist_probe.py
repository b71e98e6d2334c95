"""A hook for the distributed tests (tests/test_tools/test_distributed_launch.py): each
process of a training run writes what it did to ``<out_dir>/rank<R>.pt``:
its rank and the world size, the images of every batch it trained on, the
learning rate its schedule starts from, a fingerprint of the weights before
training, and its final state dict.

Loaded into a training run through the config:
``custom_imports = dict(imports=['helpers.dist_probe'])`` with ``tests/`` on
PYTHONPATH, and ``custom_hooks = [dict(type='RankProbeHook', out_dir=...)]``.
"""
from __future__ import annotations

import os

import torch
from mmengine.dist import get_dist_info
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS


def _model(runner):
    return runner.model.module if is_model_wrapper(runner.model) else runner.model


def _image_paths(data_batch) -> list:
    samples = (data_batch or {}).get('data_samples') or []
    return [os.path.basename(sample.metainfo.get('img_path', '?')) for sample in samples]


@HOOKS.register_module()
class RankProbeHook(Hook):
    priority = 'LOWEST'

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.batches = []
        self.initial = {}
        self.wrapper = None
        self.base_lrs = []

    def before_train(self, runner) -> None:
        self.wrapper = type(runner.model).__name__
        # The learning rate the schedules start from (after --auto-scale-lr), of
        # the optimizer's groups (OptimWrapper.param_groups adds one that keeps
        # the config's lr, logged as base_lr).
        self.base_lrs = [group.get('initial_lr', group['lr'])
                         for group in runner.optim_wrapper.optimizer.param_groups]
        self.initial = {name: float(param.detach().double().sum())
                        for name, param in _model(runner).named_parameters()}

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self.batches.append(_image_paths(data_batch))

    def after_train(self, runner) -> None:
        rank, world_size = get_dist_info()
        os.makedirs(self.out_dir, exist_ok=True)
        state = {name: tensor.detach().cpu().clone()
                 for name, tensor in _model(runner).state_dict().items()}
        norm_types = sorted({type(module).__name__ for module in _model(runner).modules()
                             if 'BatchNorm' in type(module).__name__})
        torch.save(dict(rank=rank, world_size=world_size, iters=runner.iter,
                        batches=self.batches, initial_sums=self.initial, state_dict=state,
                        wrapper=self.wrapper, norm_types=norm_types,
                        base_lrs=self.base_lrs),
                   os.path.join(self.out_dir, f'rank{rank}.pt'))
