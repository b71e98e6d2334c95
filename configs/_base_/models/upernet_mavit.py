# mmseg's UperNet (R-50 base: UPerHead with 512 channels on the four stages,
# auxiliary FCNHead on stage 3, loss weight 0.4) with the MAViT backbone in
# place of the ResNet, for the 150 ADE20K classes.
# The size configs set backbone.arch / init_cfg, decode_head.in_channels
# (= embed_dims) and auxiliary_head.in_channels (= embed_dims[2]).
_base_ = ['mmseg::_base_/models/upernet_r50.py', './mavit.py']

model = dict(
    pretrained=None,  # the ResNet's; MAViT's weights are in backbone.init_cfg
    backbone=dict(_base_.mavit_backbone, _delete_=True),
    decode_head=dict(in_channels=None, num_classes=150),  # in_channels: set by the size config
    auxiliary_head=dict(in_channels=None, num_classes=150))
