# Semantic FPN schedule as published: 80k iterations, AdamW lr 1e-4 / weight
# decay 1e-4, poly decay (power 0.9, to 0), no weight decay on norm layers,
# mixed precision. 16 images per iteration (8 GPUs x 2).
optim_wrapper = dict(
    type='AmpWhereAvailableOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(
        type='AdamW', lr=0.0001, betas=(0.9, 0.999), weight_decay=0.0001),
    paramwise_cfg=dict(norm_decay_mult=0.),
    clip_grad=None)
param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=0.9,
        begin=0,
        end=80000,
        by_epoch=False)
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=80000, val_interval=8000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=8000),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))

# The learning rate above is for 16 images per iteration (8 GPUs x 2 images);
# enable auto_scale_lr to scale it to another batch size.
auto_scale_lr = dict(enable=False, base_batch_size=16)
