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
    '../_base_/demos/segmentation.py',
]

# --- data: synthetic shapes in ADE20K layout (demo_shapes_ade20k.py) ---------
data_root = _base_.demo_data_root
crop_size = _base_.demo_crop_size
train_pipeline = _base_.demo_train_pipeline
test_pipeline = _base_.demo_test_pipeline
train_dataloader = _base_.demo_train_dataloader
val_dataloader = test_dataloader = _base_.demo_val_dataloader
num_classes = _base_.demo_num_classes

# --- model: the published one; from scratch, 5 classes -----------------------
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(init_cfg=None),
    decode_head=dict(num_classes=num_classes))

# --- schedule: the demo one (demos/segmentation.py) ---------------------------
max_iters = _base_.demo_max_iters
train_cfg = _base_.demo_train_cfg
param_scheduler = _base_.demo_param_scheduler
optimizer = _base_.demo_optimizer
optim_wrapper = dict(optimizer=optimizer)
auto_scale_lr = dict(enable=False, base_batch_size=2)
default_hooks = _base_.demo_default_hooks
log_processor = _base_.demo_log_processor
randomness = _base_.demo_randomness
