# Mask R-CNN + MAViT, "1x" (12 epochs) on COCO, as published: AdamW lr 4e-4,
# weight decay 0.05, no decay on norms, 16 images per iteration, AMP.
_base_ = [
    '../models/mask-rcnn_mavit_fpn.py',
    '../datasets/coco_instance.py',
    '../schedules/schedule_1x.py',
    '../default_runtime_det.py',
]
