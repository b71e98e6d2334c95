# Demo: RetinaNet + MAViT-T from scratch on the synthetic COCO-format shapes
# (tools/make_demo_data.py). The published MAViT-T RetinaNet with only the
# data, image size, schedule and backbone initialisation changed.
_base_ = [
    '../retinanet/retinanet_mavit-t_fpn_1x_coco.py',
    '../_base_/datasets/demo_shapes_coco.py',
]

# --- data: synthetic shapes in COCO format (demo_shapes_coco.py) -------------
data_root = _base_.demo_data_root
train_pipeline = _base_.demo_train_pipeline
test_pipeline = _base_.demo_test_pipeline
train_dataloader = dict(_base_.demo_train_dataloader, batch_size=4)
val_dataloader = _base_.demo_val_dataloader
test_dataloader = val_dataloader
val_evaluator = _base_.demo_val_evaluator
test_evaluator = val_evaluator
num_classes = _base_.demo_num_classes

model = dict(
    backbone=dict(init_cfg=None),
    bbox_head=dict(num_classes=num_classes))

max_iters = 300
train_cfg = dict(
    _delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
    val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=30),
    dict(
        type='MultiStepLR',
        by_epoch=False,
        begin=0,
        end=max_iters,
        milestones=[int(max_iters * 0.8)],
        gamma=0.1)
]
optim_wrapper = dict(optimizer=dict(lr=0.0004))
auto_scale_lr = dict(enable=False, base_batch_size=4)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=max_iters))
log_processor = dict(by_epoch=False, window_size=10)
