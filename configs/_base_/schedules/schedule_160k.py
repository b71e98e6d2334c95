# UperNet schedule as published: 160k iterations, AdamW lr 6e-5, betas
# (0.9, 0.999), weight decay 0.01, 1500-iteration linear warm-up then poly
# decay (power 1.0, to 0), no weight decay on norm layers, mixed precision.
# 16 images per iteration (8 GPUs x 2).
optim_wrapper = dict(
    type='AmpWhereAvailableOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(
        type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(norm_decay_mult=0.),
    clip_grad=None)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0,
        end=1500),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=1500,
        end=160000,
        by_epoch=False)
]
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=160000, val_interval=16000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=16000),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))

# The learning rate above is for 16 images per iteration (8 GPUs x 2 images);
# enable auto_scale_lr to scale it to another batch size.
auto_scale_lr = dict(enable=False, base_batch_size=16)
