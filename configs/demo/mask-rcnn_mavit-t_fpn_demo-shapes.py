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
    '../_base_/demos/detection.py',
]

# --- data: synthetic shapes in COCO format (demo_shapes_coco.py) -------------
data_root = _base_.demo_data_root
train_pipeline = _base_.demo_train_pipeline
test_pipeline = _base_.demo_test_pipeline
train_dataloader = _base_.demo_train_dataloader
val_dataloader = test_dataloader = _base_.demo_val_dataloader
val_evaluator = test_evaluator = _base_.demo_val_evaluator
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

# --- schedule: the demo one (demos/detection.py), 2 images per iteration -----
max_iters = _base_.demo_max_iters
train_cfg = dict(_base_.demo_train_cfg, _delete_=True)  # not epoch based
# A longer warm-up and a later step than the other detection demos.
param_scheduler = [
    dict(_base_.demo_param_scheduler[0], end=50),
    dict(_base_.demo_param_scheduler[1], milestones=[int(max_iters * 0.87)]),
]
optim_wrapper = _base_.demo_optim_wrapper
auto_scale_lr = dict(enable=False, base_batch_size=2)
default_hooks = _base_.demo_default_hooks
log_processor = _base_.demo_log_processor
randomness = _base_.demo_randomness
