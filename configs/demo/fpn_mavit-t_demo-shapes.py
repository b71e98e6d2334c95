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
_base_ = ['../sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py']

# --- data: synthetic shapes in ADE20K layout ---------------------------------
# Label PNGs: 0 unlabelled (object borders; ignored via reduce_zero_label as in
# ADE20K), 1 ground, 2.. shapes. ADE20KDataset fixes its 150 class names, so
# the generic BaseSegDataset carries ours.
data_root = 'data/demo/ade20k/'
dataset_type = 'BaseSegDataset'
metainfo = dict(
    classes=('ground', 'circle', 'square', 'triangle', 'star'),
    palette=[(120, 120, 120), (220, 40, 40), (40, 200, 40), (40, 60, 220),
             (230, 210, 30)])
num_classes = 5
# ADE20K's (2048, 512) scale and 512x512 crops, scaled to the 160 px images.
image_scale = (640, 160)
crop_size = (96, 96)

train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(
        type='RandomResize',
        scale=image_scale,
        ratio_range=(0.75, 1.5),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')
]
_dataset = dict(
    type=dataset_type,
    data_root=data_root,
    metainfo=metainfo,
    img_suffix='.jpg',
    seg_map_suffix='.png',
    reduce_zero_label=True)
train_dataloader = dict(
    batch_size=2,
    num_workers=0,  # tiny images: loading in the main process is cheapest
    persistent_workers=False,
    dataset=dict(
        **_dataset,
        data_prefix=dict(
            img_path='images/training', seg_map_path='annotations/training'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        **_dataset,
        data_prefix=dict(
            img_path='images/validation',
            seg_map_path='annotations/validation'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader

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
