# MAViT-S RetinaNet, 1x schedule, COCO.
# Paper: 34M params, 48.3 box AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-S:
# put them at pretrained/mavit_s_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/retinanet_mavit_fpn_1x_coco.py'

model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='pretrained/mavit_s_in1k.pth')),
    neck=dict(in_channels=[64, 128, 320, 512]))
