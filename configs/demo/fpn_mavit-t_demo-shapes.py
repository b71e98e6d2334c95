# Demo: Semantic FPN + MAViT-T trained from scratch on the bundled synthetic
# ADE20K-format shapes dataset (tools/make_demo_data.py), in minutes on a CPU.
#
# The model is exactly the published MAViT-T Semantic FPN config; only the data
# (root, classes, dataset type), the image / crop size, the schedule and the
# backbone initialisation (no ImageNet weights here: from scratch) change.
#   python tools/make_demo_data.py
#   python tools/train.py configs/demo/fpn_mavit-t_demo-shapes.py
#   python tools/test.py configs/demo/fpn_mavit-t_demo-shapes.py \
#       work_dirs/fpn_mavit-t_demo-shapes/iter_120.pth
_base_ = [
    '../sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py',
    '../_base_/datasets/demo_shapes_ade20k.py',
]

# --- data: synthetic shapes in ADE20K layout (demo_shapes_ade20k.py) ---------
data_root = _base_.demo_data_root
crop_size = _base_.demo_crop_size
train_pipeline = _base_.demo_train_pipeline
test_pipeline = _base_.demo_test_pipeline
train_dataloader = _base_.demo_train_dataloader
val_dataloader = _base_.demo_val_dataloader
test_dataloader = val_dataloader
num_classes = _base_.demo_num_classes

# --- model: the published one; from scratch, 5 classes -----------------------
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=None),
    decode_head=dict(num_classes=num_classes))

# --- schedule: minutes on a CPU -----------------------------------------------
max_iters = 120
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=0.01, by_epoch=False, begin=0, end=30),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=0.9,
        begin=30,
        end=max_iters,
        by_epoch=False)
]
# AdamW as published, a higher lr for from-scratch training (2 images per
# iteration). The inherited optimizer wrapper trains in fp32 on a CPU (AMP on a GPU).
optim_wrapper = dict(optimizer=dict(lr=0.0003))
auto_scale_lr = dict(enable=False, base_batch_size=2)
default_hooks = dict(
    logger=dict(interval=10),
    checkpoint=dict(interval=max_iters))
log_processor = dict(by_epoch=False, window_size=10)
