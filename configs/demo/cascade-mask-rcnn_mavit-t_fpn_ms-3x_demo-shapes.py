# Demo: Cascade Mask R-CNN + MAViT-T from scratch on the synthetic COCO-format
# shapes (tools/make_demo_data.py). The published MAViT-T "3x+MS" Cascade Mask
# R-CNN with only the data, image sizes (the multi-scale + crop augmentation
# scaled from 800 px to 160 px images), schedule and backbone initialisation
# changed.
_base_ = [
    '../cascade_rcnn/cascade-mask-rcnn_mavit-t_fpn_ms-3x_coco.py',
    '../_base_/datasets/demo_shapes_coco.py',
]

# --- data: synthetic shapes in COCO format (demo_shapes_coco.py), with the
# recipe's multi-scale + crop training augmentation ---------------------------
data_root = _base_.demo_data_root
# The recipe's shorter sides 480..800 (step 32), longer side <= 1333, crop
# branch 400/500/600 then a 384-600 crop, all scaled by 160 / 800.
ms_scales = [(short, 267) for short in range(96, 161, 8)]

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomChoice',
        transforms=[
            [dict(type='RandomChoiceResize', scales=ms_scales, keep_ratio=True)],
            [
                dict(
                    type='RandomChoiceResize',
                    scales=[(80, 267), (100, 267), (120, 267)],
                    keep_ratio=True),
                dict(
                    type='RandomCrop',
                    crop_type='absolute_range',
                    crop_size=(77, 120),
                    allow_negative_crop=True),
                dict(
                    type='RandomChoiceResize',
                    scales=ms_scales,
                    keep_ratio=True)
            ],
        ]),
    dict(type='PackDetInputs')
]
test_pipeline = _base_.demo_test_pipeline
train_dataloader = dict(
    _base_.demo_train_dataloader,
    batch_size=4,
    dataset=dict(_base_.demo_train_dataloader.dataset, pipeline=train_pipeline))
val_dataloader = _base_.demo_val_dataloader
test_dataloader = val_dataloader
val_evaluator = _base_.demo_val_evaluator
test_evaluator = val_evaluator
num_classes = _base_.demo_num_classes

# The three cascade box heads are a list: set num_classes in each, keep the rest.
model = dict(
    backbone=dict(init_cfg=None),
    roi_head=dict(
        bbox_head=[
            dict(head, num_classes=num_classes)
            for head in _base_.model.roi_head.bbox_head
        ],
        mask_head=dict(num_classes=num_classes)),
    # Each cascade stage runs four 3x3 convs per RoI: on a CPU, 1000 proposals
    # of a 160 px image would cost ~350 GMAC per stage. Fewer proposals and
    # RoIs (these images hold at most 3 objects); the heads are unchanged.
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=300),
        rcnn=[
            dict(stage, sampler=dict(stage.sampler, num=128))
            for stage in _base_.model.train_cfg.rcnn
        ]),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100)))

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
