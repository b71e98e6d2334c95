"""Hooks for the demo and the main job, and the one the tools add beside an
EMAHook, in mmengine's root HOOKS registry: configs of any scope find them
once this module is imported, e.g. with
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
        _start_ema_copies_from_the_model(runner)
        runner.logger.info('Evaluating the model before training (baseline) ...')
        runner.val_loop.run()


def _start_ema_copies_from_the_model(runner) -> None:
    """mmengine's EMAHook copies the model in ``before_run``, before its weights
    are initialised or loaded, and syncs the copy only at the first training
    iteration; a validation now would evaluate that stale copy (EMAHook swaps
    it in). Until EMA starts its copy is the model, so it is made so here."""
    from mmengine.hooks import EMAHook
    for hook in runner.hooks:
        if isinstance(hook, EMAHook) and getattr(hook, 'ema_model', None) is not None:
            hook.ema_model.module.load_state_dict(hook.src_model.state_dict())


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


@HOOKS.register_module()
class FreshDerivedWeightsAfterEMAHook(Hook):
    """After a validation or test, MAViT's caches of derived weights start
    afresh: mmengine's EMAHook swaps the training weights back in through
    ``param.data`` (:meth:`~mavit_mm.models.MAViT.clear_derived_weights`), and
    the model stays in eval mode after the last validation of a run.
    ``tools/train.py`` and ``tools/test.py`` add it to a config with an EMAHook."""

    priority = 'LOWEST'   # after EMAHook's swap

    def after_val_epoch(self, runner, metrics=None) -> None:
        _clear_derived_weights(runner.model)

    def after_test_epoch(self, runner, metrics=None) -> None:
        _clear_derived_weights(runner.model)


def _clear_derived_weights(model) -> None:
    from ..models import MAViT
    for module in model.modules():
        if isinstance(module, MAViT):
            module.clear_derived_weights()
