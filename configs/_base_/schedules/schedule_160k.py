# MALA's UperNet recipe: the Semantic FPN optimizer settings (schedule_80k.py)
# with AdamW lr 6e-5, weight decay 0.01, over mmseg's 160k-iteration schedule
# (checkpoint and validation every 16k): 1500-iteration linear warm-up, then
# poly decay (power 1.0) to 0.
_base_ = './schedule_80k.py'

train_cfg = dict(max_iters=160000, val_interval=16000)
default_hooks = dict(checkpoint=dict(interval=16000))
optimizer = dict(lr=0.00006, weight_decay=0.01)
optim_wrapper = dict(optimizer=optimizer)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=160000, by_epoch=False)
]
