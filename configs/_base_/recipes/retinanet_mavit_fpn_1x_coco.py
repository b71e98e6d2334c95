# RetinaNet + MAViT, "1x" (12 epochs) on COCO, as published: AdamW lr 4e-4,
# weight decay 1e-4, no decay on norms, 16 images per iteration, AMP.
_base_ = [
    '../models/retinanet_mavit_fpn.py',
    '../datasets/coco_detection.py',
    '../schedules/schedule_1x.py',
    '../default_runtime_det.py',
]
optim_wrapper = dict(optimizer=dict(weight_decay=0.0001))
