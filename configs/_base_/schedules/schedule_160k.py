# MALA's UperNet recipe over mmseg's 160k-iteration schedule (checkpoint and
# validation every 16k): AdamW lr 6e-5, betas (0.9, 0.999), weight decay 0.01
# but for the published no-decay keys, 1500-iteration linear warm-up, then
# poly decay (power 1.0) to 0, mixed precision with a static loss scale of 512
# (the published Fp16OptimizerHook's). 16 images per iteration (auto_scale_lr,
# from schedule_80k.py).
_base_ = './schedule_80k.py'

train_cfg = dict(max_iters=160000, val_interval=16000)
default_hooks = dict(checkpoint=dict(interval=16000))
optimizer = dict(lr=0.00006, weight_decay=0.01)
# AMP where a GPU is, fp32 on a CPU (AmpWhereAvailableOptimWrapper,
# mavit_mm/engine/amp.py).
optim_wrapper = dict(
    type='AmpWhereAvailableOptimWrapper',
    loss_scale=512.,
    optimizer=optimizer,
    # The published keys, by parameter name: 'norm' takes MAViT's LayerNorms
    # and downsampling BatchNorms; the stem's BatchNorms and the heads' (`bn`)
    # keep the decay, as published. Swin's two keys serve the Swin-T baseline
    # (mmseg's Swin recipe has the same three).
    paramwise_cfg=dict(custom_keys={
        'absolute_pos_embed': dict(decay_mult=0.),
        'relative_position_bias_table': dict(decay_mult=0.),
        'norm': dict(decay_mult=0.),
    }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False)
]
