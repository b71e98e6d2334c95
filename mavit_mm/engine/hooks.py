"""Hooks for the demo and the main job, in mmengine's root HOOKS registry: configs
of any scope find them once this module is imported, e.g. with
``custom_imports = dict(imports=['mavit_mm', 'mavit_mm.engine.hooks'])``.
"""
from __future__ import annotations

import datetime
import time

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class EvaluateBeforeTrainingHook(Hook):
    """Run the validation loop once on the model training starts from (``Runner.train``
    initialises the weights and loads ``load_from`` before the ``before_train``
    hooks): the baseline for the trained metrics, logged like any validation at
    step 0."""

    priority = 'LOWEST'  # after the other before_train hooks have set things up

    def before_train(self, runner) -> None:
        if runner.val_loop is None:
            runner.logger.warning('EvaluateBeforeTrainingHook: the config has no validation '
                                  'loop (val_dataloader/val_cfg/val_evaluator); skipped')
            return
        if runner.iter > 0:  # resumed run: the start is not an untrained model
            return
        runner.logger.info('Evaluating the model before training (baseline) ...')
        runner.val_loop.run()


@HOOKS.register_module()
class EvaluationProgressHook(Hook):
    """Progress and time left of every validation / test run, batch by batch.

    mmengine's LoggerHook logs the evaluation loops only every ``interval``
    batches (the training log interval), which a short evaluation never
    reaches. This logs ``Evaluating (val): 3/16 batches, 4s elapsed, eta 0:00:11``
    at most every ``min_interval_s`` seconds, and always after the last batch.
    """

    priority = 'LOW'

    def __init__(self, min_interval_s: float = 5.0) -> None:
        self.min_interval_s = float(min_interval_s)
        self._start = self._last = 0.0

    def _start_loop(self, runner, mode: str) -> None:
        self._start = self._last = time.time()
        loader = runner.val_dataloader if mode == 'val' else runner.test_dataloader
        images = len(loader.dataset) if hasattr(loader, 'dataset') else '?'
        runner.logger.info(f'Evaluating ({mode}): {images} images in {len(loader)} batches')

    def _report(self, runner, batch_idx: int, mode: str) -> None:
        now = time.time()
        loader = runner.val_dataloader if mode == 'val' else runner.test_dataloader
        total, done = len(loader), batch_idx + 1
        if done < total and now - self._last < self.min_interval_s:
            return
        self._last = now
        elapsed = now - self._start
        eta = datetime.timedelta(seconds=int(round(elapsed / done * (total - done))))
        runner.logger.info(f'Evaluating ({mode}): {done}/{total} batches, '
                           f'{elapsed:.0f}s elapsed, eta {eta}'
                           + (', computing the metrics' if done == total else ''))

    def before_val_epoch(self, runner) -> None:
        self._start_loop(runner, 'val')

    def before_test_epoch(self, runner) -> None:
        self._start_loop(runner, 'test')

    def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self._report(runner, batch_idx, 'val')

    def after_test_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self._report(runner, batch_idx, 'test')
