# The synthetic shapes in COCO format (data/demo/coco: 160x160 images, polygon
# masks): datasets, loaders and evaluator for the demo detectors. Names start
# with `demo_` (see demo_shapes.py); a demo config takes them as
#   train_dataloader = _base_.demo_train_dataloader
# which mmengine merges into the published config's loader: its dataset type,
# filters and sampler stay, the data, pipelines and loader settings change.
_base_ = './demo_shapes.py'

demo_data_root = 'data/demo/coco/'
demo_metainfo = dict(
    classes=_base_.demo_shape_classes, palette=_base_.demo_shape_palette)
demo_num_classes = len(_base_.demo_shape_classes)
demo_image_scale = (160, 160)  # the generated images are 160x160

# Boxes and masks are loaded for every detector (RetinaNet ignores the masks).
demo_train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=demo_image_scale, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
demo_test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=demo_image_scale, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
demo_train_dataloader = dict(
    batch_size=2,
    num_workers=0,  # tiny images: loading in the main process is cheapest
    persistent_workers=False,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        data_root=demo_data_root,
        metainfo=demo_metainfo,
        ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=demo_train_pipeline))
demo_val_dataloader = dict(
    batch_size=4,
    num_workers=0,
    persistent_workers=False,
    dataset=dict(
        data_root=demo_data_root,
        metainfo=demo_metainfo,
        ann_file='annotations/instances_val.json',
        data_prefix=dict(img='val/'),
        pipeline=demo_test_pipeline))
demo_val_evaluator = dict(
    ann_file=demo_data_root + 'annotations/instances_val.json')
