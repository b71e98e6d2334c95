# MAViT-S Cascade Mask R-CNN, 3x+MS schedule, COCO.
# Paper: 82M params, 54.2 box AP / 47.0 mask AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-S:
# put them at pretrained/mavit_s_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/cascade-mask-rcnn_mavit_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='pretrained/mavit_s_in1k.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))
