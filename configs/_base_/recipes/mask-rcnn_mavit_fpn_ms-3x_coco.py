# MALA's Mask R-CNN + MAViT "3x+MS" recipe (36 epochs, DETR-style multi-scale
# + crop augmentation) on COCO: AdamW lr 4e-4, weight decay 0.05 but for the
# published no-decay keys, 500-iteration warm-up, 16 images per iteration, AMP
# (MAViT-L: 8 images, lr 2e-4, as published).
_base_ = [
    '../models/mask-rcnn_mavit_fpn.py',
    '../datasets/coco_instance_ms-crop.py',
    '../schedules/schedule_3x.py',
    'mmdet::_base_/default_runtime.py',
]
