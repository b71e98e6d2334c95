# mmdet's "1x" schedule (12 epochs, lr x0.1 after epochs 8 and 11, 500-iteration
# linear warm-up), with the optimizer of MALA's Mask R-CNN 1x recipe: AdamW
# lr 4e-4, weight decay 0.05 (RetinaNet's recipe overrides it), no weight decay
# on norm layers, mixed precision. 16 images per iteration (8 GPUs x 2), as
# mmdet's auto_scale_lr says; enable it (--auto-scale-lr) for another batch.
_base_ = 'mmdet::_base_/schedules/schedule_1x.py'

max_epochs = 12

# AMP where a GPU is (mmengine's AmpOptimWrapper), fp32 on a CPU:
# AmpWhereAvailableOptimWrapper (mavit_mm/engine/amp.py) picks at build time.
optim_wrapper = dict(
    _delete_=True,  # replaces mmdet's SGD wrapper
    type='AmpWhereAvailableOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(type='AdamW', lr=0.0004, betas=(0.9, 0.999), weight_decay=0.05),
    paramwise_cfg=dict(norm_decay_mult=0.))
