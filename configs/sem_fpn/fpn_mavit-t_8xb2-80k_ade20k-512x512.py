# MAViT-T Semantic FPN, 80k iterations, ADE20K.
# Paper: 18M params, 47.6 mIoU.
# The backbone starts from the ImageNet-1K classification weights of MAViT-T:
# put them at pretrained/mavit_t_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/fpn_mavit_8xb2-80k_ade20k-512x512.py'

model = dict(
    backbone=dict(arch='tiny', init_cfg=dict(checkpoint='pretrained/mavit_t_in1k.pth')),
    neck=dict(in_channels=[64, 128, 256, 512]))
