# MAViT-L UperNet, 160k iterations, ADE20K.
# Paper: 125M params, 53.6 mIoU (single scale).
# The backbone starts from the ImageNet-1K classification weights of MAViT-L:
# put them at pretrained/mavit_l_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/upernet_mavit_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(arch='large', init_cfg=dict(checkpoint='pretrained/mavit_l_in1k.pth')),
    decode_head=dict(in_channels=[96, 192, 448, 640]),
    auxiliary_head=dict(in_channels=448))  # stage 3
