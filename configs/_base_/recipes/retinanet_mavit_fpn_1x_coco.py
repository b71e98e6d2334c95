# MALA's RetinaNet + MAViT "1x" recipe (12 epochs) on COCO: AdamW lr 4e-4,
# weight decay 1e-4 on every parameter (the published config sets no
# paramwise_cfg), 16 images per iteration, AMP with a static loss scale of 512
# (the published fp16=dict(loss_scale=512.)).
_base_ = [
    '../models/retinanet_mavit_fpn.py',
    'mmdet::_base_/datasets/coco_detection.py',
    '../schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]
optim_wrapper = dict(optimizer=dict(weight_decay=0.0001), paramwise_cfg=dict(_delete_=True),
                     loss_scale=512.)
