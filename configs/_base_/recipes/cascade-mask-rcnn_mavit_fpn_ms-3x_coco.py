# MALA's Cascade Mask R-CNN (4conv1fc GIoU box heads) + MAViT "3x+MS" recipe
# (36 epochs, DETR-style multi-scale + crop augmentation) on COCO: AdamW lr
# 4e-4, weight decay 0.05, no decay on norm layers (the published config adds
# norm_decay_mult=0 to the Mask R-CNN keys: the stem's and box heads'
# BatchNorms too), 500-iteration warm-up, 16 images per iteration, AMP
# (MAViT-L: 8 images, lr 2e-4, as published).
_base_ = [
    '../models/cascade-mask-rcnn_mavit_fpn.py',
    '../datasets/coco_instance_ms-crop.py',
    '../schedules/schedule_3x.py',
    'mmdet::_base_/default_runtime.py',
]

optim_wrapper = dict(paramwise_cfg=dict(norm_decay_mult=0.))
