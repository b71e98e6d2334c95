# MAViT-T UperNet, 160k iterations, ADE20K.
# Paper: 44M params, 48.4 mIoU (single scale).
# The backbone starts from the ImageNet-1K classification weights of MAViT-T:
# put them at pretrained/mavit_t_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/upernet_mavit_8xb2-160k_ade20k-512x512.py'

model = dict(
    backbone=dict(arch='tiny', init_cfg=dict(checkpoint='pretrained/mavit_t_in1k.pth')),
    decode_head=dict(in_channels=[64, 128, 256, 512]),
    auxiliary_head=dict(in_channels=256))  # stage 3
