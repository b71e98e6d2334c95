# MALA's Mask R-CNN + MAViT "1x" recipe (12 epochs) on COCO: AdamW lr 4e-4,
# weight decay 0.05 but for the published no-decay keys, 16 images per
# iteration, AMP.
_base_ = [
    '../models/mask-rcnn_mavit_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    '../schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
