# MAViT-L RetinaNet, 1x schedule, COCO.
# Paper: 104M params, 50.6 box AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-L:
# put them at pretrained/mavit_l_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/retinanet_mavit_fpn_1x_coco.py'

model = dict(
    backbone=dict(arch='large', init_cfg=dict(checkpoint='pretrained/mavit_l_in1k.pth')),
    neck=dict(in_channels=[96, 192, 448, 640]))
