# mmseg's 80k-iteration schedule (checkpoint and validation every 8k) with
# MALA's Semantic FPN recipe: AdamW lr 1e-4, weight decay 1e-4 on every
# parameter (the published config sets no paramwise_cfg), poly decay (power
# 0.9) to 1e-6 (the published schedule's min_lr; mmseg's is 1e-4), fp32 (the
# published config sets no fp16; `tools/train.py --amp` turns it on).
_base_ = 'mmseg::_base_/schedules/schedule_80k.py'

# mmseg's schedules name the optimizer once more at the top level.
optimizer = dict(
    _delete_=True,  # replaces mmseg's SGD
    type='AdamW', lr=0.0001, betas=(0.9, 0.999), weight_decay=0.0001)
optim_wrapper = dict(type='OptimWrapper', optimizer=optimizer)
param_scheduler = [
    dict(type='PolyLR', eta_min=1e-6, power=0.9, begin=0, end=80000, by_epoch=False)
]
# The lr is for 16 images per iteration (8 GPUs x 2 images); enable
# auto_scale_lr to scale it to another batch size.
auto_scale_lr = dict(enable=False, base_batch_size=16)
