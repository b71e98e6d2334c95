# MAViT-L Semantic FPN, 80k iterations, ADE20K.
# Paper: 98M params, 52.8 mIoU.
# The backbone starts from the ImageNet-1K classification weights of MAViT-L:
# put them at pretrained/mavit_l_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/fpn_mavit_8xb2-80k_ade20k-512x512.py'

model = dict(
    backbone=dict(arch='large', init_cfg=dict(checkpoint='pretrained/mavit_l_in1k.pth')),
    neck=dict(in_channels=[96, 192, 448, 640]))
