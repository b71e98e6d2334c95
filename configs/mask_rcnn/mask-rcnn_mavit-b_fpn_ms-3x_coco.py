# MAViT-B Mask R-CNN, 3x+MS schedule, COCO.
# Paper: 67M params, 53.2 box AP / 47.0 mask AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-B:
# put them at pretrained/mavit_b_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/mask-rcnn_mavit_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='pretrained/mavit_b_in1k.pth')),
    neck=dict(in_channels=[96, 192, 384, 512]))
