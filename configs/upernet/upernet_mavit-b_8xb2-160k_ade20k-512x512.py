# MAViT-B UperNet, 160k iterations, ADE20K.
# Paper: 77M params, 52.8 mIoU (single scale).
# The backbone starts from the ImageNet-1K classification weights of MAViT-B:
# put them at pretrained/mavit_b_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/upernet_mavit_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(arch='base', init_cfg=dict(checkpoint='pretrained/mavit_b_in1k.pth')),
    decode_head=dict(in_channels=[96, 192, 384, 512]),
    auxiliary_head=dict(in_channels=384))  # stage 3
