# MALA's Cascade Mask R-CNN (4conv1fc GIoU box heads) + MAViT "3x+MS" recipe
# (36 epochs, DETR-style multi-scale + crop augmentation) on COCO: AdamW lr
# 4e-4, weight decay 0.05, no decay on norms, 500-iteration warm-up, 16 images
# per iteration, AMP.
_base_ = [
    '../models/cascade-mask-rcnn_mavit_fpn.py',
    '../datasets/coco_instance_ms-crop.py',
    '../schedules/schedule_3x.py',
    'mmdet::_base_/default_runtime.py',
]
