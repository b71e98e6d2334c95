# MALA's "3x" detection recipe: the 1x schedule and optimizer (schedule_1x.py)
# over 36 epochs, lr x0.1 after epochs 27 and 33.
_base_ = './schedule_1x.py'

max_epochs = 36
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    _base_.param_scheduler[0],  # the 500-iteration warm-up
    dict(_base_.param_scheduler[1], end=max_epochs, milestones=[27, 33]),
]
