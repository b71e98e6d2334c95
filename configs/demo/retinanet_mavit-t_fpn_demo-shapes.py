# Demo: RetinaNet + MAViT-T from scratch on the synthetic COCO-format shapes
# (tools/make_demo_data.py). The published MAViT-T RetinaNet with only the
# data, image size, schedule and backbone initialisation changed.
_base_ = ['../retinanet/retinanet_mavit-t_fpn_1x_coco.py']

data_root = 'data/demo/coco/'
metainfo = dict(
    classes=('circle', 'square', 'triangle', 'star'),
    palette=[(220, 40, 40), (40, 200, 40), (40, 60, 220), (230, 210, 30)])
num_classes = 4
image_scale = (160, 160)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
train_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=data_root,
        metainfo=metainfo,
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file=data_root + 'annotations/instances_val.json')
test_evaluator = val_evaluator

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
