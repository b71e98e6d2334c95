"""Hooks for the demo and the main job.

Registered in mmengine's root HOOKS registry, so configs of any scope (mmdet,
mmseg) find them by name once this module is imported, e.g. with
``custom_imports = dict(imports=['mavit_mm', 'mavit_mm.engine.hooks'])``.
"""
from __future__ import annotations

from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class EvaluateBeforeTrainingHook(Hook):
    """Run the validation loop once on the freshly initialised model.

    ``Runner.train`` initialises the weights (and loads ``load_from``) before
    the ``before_train`` hooks run, so this measures exactly the model training
    starts from: the baseline the trained metrics are compared with. The
    metrics are logged like any validation (step = iteration 0).
    """

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
