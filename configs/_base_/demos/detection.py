# What the detection demos share: the synthetic COCO-format shapes
# (../datasets/demo_shapes_coco.py) and a 300-iteration schedule that trains a
# detector from scratch in minutes on a CPU. A demo lists this next to a
# published config and reads every value as `_base_.demo_...` (mmengine
# refuses a key defined by two bases).
_base_ = '../datasets/demo_shapes_coco.py'

demo_max_iters = 300
demo_train_cfg = dict(type='IterBasedTrainLoop', max_iters=demo_max_iters,
                      val_interval=demo_max_iters)
demo_param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=30),
    dict(type='MultiStepLR', by_epoch=False, begin=0, end=demo_max_iters,
         milestones=[int(demo_max_iters * 0.8)], gamma=0.1)
]
# AdamW as published, a higher lr for from-scratch training. The published
# optimizer wrapper trains in fp32 on a CPU (AMP on a GPU).
demo_optim_wrapper = dict(optimizer=dict(lr=0.0004))
demo_default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=demo_max_iters))
demo_log_processor = dict(by_epoch=False, window_size=10)
# A fixed seed: `make demo` trains the same model from run to run on one
# machine and stack (unseeded, the main job's UperNet ended tens of mIoU
# points apart from one run to the next); `--cfg-options randomness.seed=N`
# picks another.
demo_randomness = dict(seed=0)
