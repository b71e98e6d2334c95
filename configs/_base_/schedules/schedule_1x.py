# mmdet's "1x" schedule (12 epochs, lr x0.1 after epochs 8 and 11, 500-iteration
# linear warm-up), with the optimizer of MALA's Mask R-CNN 1x recipe: AdamW
# lr 4e-4, weight decay 0.05, mixed precision, and the published no-decay keys
# (RetinaNet's and Cascade's recipes change them). 16 images per iteration
# (8 GPUs x 2), as mmdet's auto_scale_lr says; enable it (--auto-scale-lr) for
# another batch.
_base_ = 'mmdet::_base_/schedules/schedule_1x.py'

max_epochs = 12

# AMP where a GPU is (mmengine's AmpOptimWrapper), fp32 on a CPU:
# AmpWhereAvailableOptimWrapper (mavit_mm/engine/amp.py) picks at build time.
# A dynamic loss scale, as the published Mask R-CNN and Cascade runs (their
# runtime's fp16=dict(loss_scale='dynamic')); RetinaNet's recipe sets its
# static 512.
optim_wrapper = dict(
    _delete_=True,  # replaces mmdet's SGD wrapper
    type='AmpWhereAvailableOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(type='AdamW', lr=0.0004, betas=(0.9, 0.999), weight_decay=0.05),
    # The published keys, matched by parameter name (substring) as mmengine
    # matches them: 'norm' takes every LayerNorm of MAViT and the
    # downsamplings' BatchNorms; the stem's four BatchNorms
    # (`patch_embed.proj.1` ...) do not match and keep the decay, as published.
    # Swin's two keys match nothing in MAViT; they serve the Swin-T baseline
    # (mmdet's Swin recipe has the same three).
    paramwise_cfg=dict(custom_keys={
        'absolute_pos_embed': dict(decay_mult=0.),
        'relative_position_bias_table': dict(decay_mult=0.),
        'norm': dict(decay_mult=0.),
    }))
