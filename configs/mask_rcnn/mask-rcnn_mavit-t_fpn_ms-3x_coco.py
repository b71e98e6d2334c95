# MAViT-T Mask R-CNN, 3x+MS schedule, COCO.
# Paper: no published result for this size.
# The backbone starts from the ImageNet-1K classification weights of MAViT-T:
# put them at pretrained/mavit_t_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/mask-rcnn_mavit_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(arch='tiny', init_cfg=dict(checkpoint='pretrained/mavit_t_in1k.pth')),
    neck=dict(in_channels=[64, 128, 256, 512]))
