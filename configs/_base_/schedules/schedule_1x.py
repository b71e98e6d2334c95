# "1x" detection schedule as published: 12 epochs, lr x0.1 after epochs 8 and
# 11, 500-iteration linear warm-up; AdamW lr 4e-4 / weight decay 0.05 (the Mask
# R-CNN values; RetinaNet overrides the weight decay), no weight decay on norm
# layers, mixed precision. 16 images per iteration (8 GPUs x 2).
max_epochs = 12
train_cfg = dict(
    type='EpochBasedTrainLoop', max_epochs=max_epochs, val_interval=1)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')

param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=500),
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[8, 11],
        gamma=0.1)
]

# Mixed precision where a GPU is (mmengine's AmpOptimWrapper), fp32 on a CPU:
# AmpWhereAvailableOptimWrapper (mavit_mm/engine/amp.py) picks at build time.
optim_wrapper = dict(
    type='AmpWhereAvailableOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(
        type='AdamW', lr=0.0004, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))

# The learning rate above is for 16 images per iteration (8 GPUs x 2 images);
# enable auto_scale_lr (--auto-scale-lr) to scale it to another batch size.
auto_scale_lr = dict(enable=False, base_batch_size=16)
