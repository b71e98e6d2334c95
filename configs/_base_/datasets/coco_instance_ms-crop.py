# mmdet's COCO instance segmentation with the DETR-style multi-scale training
# augmentation of MALA's "3x+MS" recipe (as mmdet's Swin ms-crop-3x configs):
# either resize the shorter side to one of 480..800 (step 32, longer side
# <= 1333), or resize to 400/500/600, take a random 384-600 crop and resize
# that to 480..800. Test as mmdet's coco_instance.py.
_base_ = 'mmdet::_base_/datasets/coco_instance.py'

train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomChoice',
        transforms=[
            [
                dict(
                    type='RandomChoiceResize',
                    scales=[(short, 1333) for short in range(480, 801, 32)],
                    keep_ratio=True)
            ],
            [
                dict(
                    type='RandomChoiceResize',
                    scales=[(400, 1333), (500, 1333), (600, 1333)],
                    keep_ratio=True),
                dict(
                    type='RandomCrop',
                    crop_type='absolute_range',
                    crop_size=(384, 600),
                    allow_negative_crop=True),
                dict(
                    type='RandomChoiceResize',
                    scales=[(short, 1333) for short in range(480, 801, 32)],
                    keep_ratio=True)
            ],
        ]),
    dict(type='PackDetInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
