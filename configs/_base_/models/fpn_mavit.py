# mmseg's Semantic FPN (R-50 base: FPN neck + FPNHead) with the MAViT backbone
# in place of the ResNet, for the 150 ADE20K classes.
# The size configs set backbone.arch / init_cfg and neck.in_channels
# (= the backbone's embed_dims).
_base_ = ['mmseg::_base_/models/fpn_r50.py', './mavit.py']

model = dict(
    pretrained=None,  # the ResNet's; MAViT's weights are in backbone.init_cfg
    backbone=dict(_base_.mavit_backbone, _delete_=True),
    neck=dict(in_channels=None),  # set by the size config
    decode_head=dict(num_classes=150))
