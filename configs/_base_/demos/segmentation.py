# What the segmentation demos share: the synthetic ADE20K-format shapes
# (../datasets/demo_shapes_ade20k.py) and a 120-iteration schedule that trains
# a segmentor from scratch in minutes on a CPU. A demo lists this next to a
# published config and reads every value as `_base_.demo_...` (mmengine
# refuses a key defined by two bases).
_base_ = '../datasets/demo_shapes_ade20k.py'

demo_max_iters = 120
demo_train_cfg = dict(max_iters=demo_max_iters, val_interval=demo_max_iters)
demo_param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=30),
    dict(type='PolyLR', eta_min=0.0, power=0.9, begin=30, end=demo_max_iters,
         by_epoch=False)
]
# AdamW as published, a higher lr for from-scratch training (2 images per
# iteration), in the published config's optimizer wrapper (fp32 on a CPU).
demo_optimizer = dict(lr=0.0003)
demo_default_hooks = dict(logger=dict(interval=10), checkpoint=dict(interval=demo_max_iters))
demo_log_processor = dict(by_epoch=False, window_size=10)
# A fixed seed: `make demo` trains the same model from run to run on one
# machine and stack (unseeded, the main job's UperNet ended tens of mIoU
# points apart from one run to the next); `--cfg-options randomness.seed=N`
# picks another.
demo_randomness = dict(seed=0)
