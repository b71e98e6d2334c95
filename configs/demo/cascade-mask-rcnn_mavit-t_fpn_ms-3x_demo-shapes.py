# Demo: Cascade Mask R-CNN + MAViT-T from scratch on the synthetic COCO-format
# shapes (tools/make_demo_data.py). The published MAViT-T "3x+MS" Cascade Mask
# R-CNN with only the data, image sizes (the multi-scale + crop augmentation
# scaled from 800 px to 160 px images), schedule and backbone initialisation
# changed.
_base_ = [
    '../cascade_rcnn/cascade-mask-rcnn_mavit-t_fpn_ms-3x_coco.py',
    '../_base_/demos/detection.py',
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
                dict(type='RandomChoiceResize', scales=ms_scales, keep_ratio=True)
            ],
        ]),
    dict(type='PackDetInputs')
]
test_pipeline = _base_.demo_test_pipeline
train_dataloader = dict(
    _base_.demo_train_dataloader,
    batch_size=4,
    dataset=dict(_base_.demo_train_dataloader.dataset, pipeline=train_pipeline))
val_dataloader = test_dataloader = _base_.demo_val_dataloader
val_evaluator = test_evaluator = _base_.demo_val_evaluator
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
    # of a 160 px image would cost ~350 GMAC per stage. Fewer proposals, RoIs
    # and detections (these images hold at most 3 objects; 20 detections, as
    # the demo Mask R-CNN keeps, instead of 100: every detection of an
    # untrained model is a mask to compute and paste); the heads are unchanged.
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=300),
        rcnn=[
            dict(stage, sampler=dict(stage.sampler, num=128))
            for stage in _base_.model.train_cfg.rcnn
        ]),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100), rcnn=dict(max_per_img=20)))

# --- schedule: the demo one (demos/detection.py), 4 images per iteration -----
max_iters = _base_.demo_max_iters
train_cfg = dict(_base_.demo_train_cfg, _delete_=True)  # not epoch based
param_scheduler = _base_.demo_param_scheduler
optim_wrapper = _base_.demo_optim_wrapper
auto_scale_lr = dict(enable=False, base_batch_size=4)
default_hooks = _base_.demo_default_hooks
log_processor = _base_.demo_log_processor
randomness = _base_.demo_randomness
