# Demo: RetinaNet + MAViT-T from scratch on the synthetic COCO-format shapes
# (tools/make_demo_data.py). The published MAViT-T RetinaNet with only the
# data, image size, schedule and backbone initialisation changed.
_base_ = [
    '../retinanet/retinanet_mavit-t_fpn_1x_coco.py',
    '../_base_/demos/detection.py',
]

# --- data: synthetic shapes in COCO format (demo_shapes_coco.py) -------------
data_root = _base_.demo_data_root
train_pipeline = _base_.demo_train_pipeline
test_pipeline = _base_.demo_test_pipeline
train_dataloader = dict(_base_.demo_train_dataloader, batch_size=4)
val_dataloader = test_dataloader = _base_.demo_val_dataloader
val_evaluator = test_evaluator = _base_.demo_val_evaluator
num_classes = _base_.demo_num_classes

model = dict(backbone=dict(init_cfg=None), bbox_head=dict(num_classes=num_classes))

# --- schedule: the demo one (demos/detection.py), 4 images per iteration -----
max_iters = _base_.demo_max_iters
train_cfg = dict(_base_.demo_train_cfg, _delete_=True)  # not epoch based
param_scheduler = _base_.demo_param_scheduler
optim_wrapper = _base_.demo_optim_wrapper
auto_scale_lr = dict(enable=False, base_batch_size=4)
default_hooks = _base_.demo_default_hooks
log_processor = _base_.demo_log_processor
randomness = _base_.demo_randomness
