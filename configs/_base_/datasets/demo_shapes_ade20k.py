# The synthetic shapes in ADE20K format (data/demo/ade20k: 160x160 images,
# label PNGs): datasets and loaders for the demo segmentors. Names start with
# `demo_` (see demo_shapes.py); a demo config takes them as
#   train_dataloader = _base_.demo_train_dataloader
#
# Label PNGs: 0 unlabelled (object borders; ignored via reduce_zero_label as in
# ADE20K), 1 ground, 2.. the shapes. ADE20KDataset fixes its 150 class names,
# so the generic BaseSegDataset carries ours.
_base_ = './demo_shapes.py'

demo_data_root = 'data/demo/ade20k/'
demo_metainfo = dict(
    classes=('ground', ) + _base_.demo_shape_classes,
    palette=[(120, 120, 120)] + _base_.demo_shape_palette)
demo_num_classes = 1 + len(_base_.demo_shape_classes)
# ADE20K's (2048, 512) scale and 512x512 crops, scaled to the 160 px images.
demo_image_scale = (640, 160)
demo_crop_size = (96, 96)

demo_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(
        type='RandomResize',
        scale=demo_image_scale,
        ratio_range=(0.75, 1.5),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=demo_crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
demo_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=demo_image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')
]
demo_dataset = dict(
    type='BaseSegDataset',
    data_root=demo_data_root,
    metainfo=demo_metainfo,
    img_suffix='.jpg',
    seg_map_suffix='.png',
    reduce_zero_label=True)
demo_train_dataloader = dict(
    batch_size=2,
    num_workers=0,  # tiny images: loading in the main process is cheapest
    persistent_workers=False,
    dataset=dict(
        **demo_dataset,
        data_prefix=dict(
            img_path='images/training', seg_map_path='annotations/training'),
        pipeline=demo_train_pipeline))
demo_val_dataloader = dict(
    batch_size=1,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        **demo_dataset,
        data_prefix=dict(
            img_path='images/validation',
            seg_map_path='annotations/validation'),
        pipeline=demo_test_pipeline))
