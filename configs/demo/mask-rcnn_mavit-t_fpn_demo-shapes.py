# Demo: Mask R-CNN + MAViT-T trained from scratch on the bundled synthetic
# COCO-format shapes dataset (tools/make_demo_data.py), in minutes on a CPU.
#
# The model is exactly the published MAViT-T Mask R-CNN config; only the data
# (root, classes, annotation files), the image size, the schedule and the
# backbone initialisation (no ImageNet weights here: from scratch) change.
# Train / test:
#   python tools/make_demo_data.py
#   python tools/train.py configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py
#   python tools/test.py configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py \
#       work_dirs/mask-rcnn_mavit-t_fpn_demo-shapes/iter_300.pth
_base_ = [
    '../mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py',
    '../_base_/datasets/demo_shapes_coco.py',
]

# --- data: synthetic shapes in COCO format (demo_shapes_coco.py) -------------
data_root = _base_.demo_data_root
train_pipeline = _base_.demo_train_pipeline
test_pipeline = _base_.demo_test_pipeline
train_dataloader = _base_.demo_train_dataloader
val_dataloader = _base_.demo_val_dataloader
test_dataloader = val_dataloader
val_evaluator = _base_.demo_val_evaluator
test_evaluator = val_evaluator
num_classes = _base_.demo_num_classes

# --- model: the published one; from scratch, 4 classes -----------------------
model = dict(
    backbone=dict(init_cfg=None),
    roi_head=dict(
        bbox_head=dict(num_classes=num_classes),
        mask_head=dict(num_classes=num_classes)),
    # Images of 160 px hold at most 3 objects: fewer proposals, RoIs and
    # detections than for 1333x800 COCO images (the heads are unchanged, only
    # the counts). 20 detections instead of 100 make evaluating an untrained
    # model (every detection a mask to paste) about 4x faster on a CPU.
    train_cfg=dict(
        rpn_proposal=dict(nms_pre=1000, max_per_img=300),
        rcnn=dict(sampler=dict(num=32))),
    test_cfg=dict(rpn=dict(nms_pre=500, max_per_img=100), rcnn=dict(max_per_img=20)))

# --- schedule: iteration based, minutes on a CPU ------------------------------
max_iters = 300
train_cfg = dict(
    _delete_=True, type='IterBasedTrainLoop', max_iters=max_iters,
    val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=50),
    dict(
        type='MultiStepLR',
        by_epoch=False,
        begin=0,
        end=max_iters,
        milestones=[int(max_iters * 0.87)],
        gamma=0.1)
]
# AdamW as published, a higher lr for from-scratch training (2 images per
# iteration). The inherited optimizer wrapper trains in fp32 on a CPU (AMP on a GPU).
optim_wrapper = dict(optimizer=dict(lr=0.0004))
auto_scale_lr = dict(enable=False, base_batch_size=2)
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10, log_metric_by_epoch=False),
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=max_iters))
log_processor = dict(by_epoch=False, window_size=10)
