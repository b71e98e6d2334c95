# MAViT-T RetinaNet, 1x schedule, COCO.
# Paper: 24M params, 45.6 box AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-T:
# put them at pretrained/mavit_t_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/retinanet_mavit_fpn_1x_coco.py'

model = dict(
    backbone=dict(arch='tiny', init_cfg=dict(checkpoint='pretrained/mavit_t_in1k.pth')),
    neck=dict(in_channels=[64, 128, 256, 512]))
