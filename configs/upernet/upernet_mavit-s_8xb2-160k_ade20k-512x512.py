# MAViT-S UperNet, 160k iterations, ADE20K.
# Paper: 55M params, 51.0 mIoU (single scale).
# The backbone starts from the ImageNet-1K classification weights of MAViT-S:
# put them at pretrained/mavit_s_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/upernet_mavit_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(arch='small', init_cfg=dict(checkpoint='pretrained/mavit_s_in1k.pth')),
    decode_head=dict(in_channels=[64, 128, 320, 512]),
    auxiliary_head=dict(in_channels=320))  # stage 3
