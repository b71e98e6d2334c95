# MAViT-B RetinaNet, 1x schedule, COCO.
# Paper: 57M params, 49.9 box AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-B:
# put them at pretrained/mavit_b_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/retinanet_mavit_fpn_1x_coco.py'

model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='pretrained/mavit_b_in1k.pth')),
    neck=dict(in_channels=[96, 192, 384, 512]))
