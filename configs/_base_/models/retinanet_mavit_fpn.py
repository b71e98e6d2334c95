# mmdet's RetinaNet (R-50 FPN base) with the MAViT backbone in place of the
# ResNet. As for Swin / PVT: the backbone returns stages 1-3 only (strides
# 8-32; no unused stage-0 output norm) and the FPN starts at its first input,
# building P6/P7 with extra convs on the last backbone output ('on_input', as
# mmdet's base). The size configs set backbone.arch / init_cfg and
# neck.in_channels (= embed_dims[1:]).
_base_ = ['mmdet::_base_/models/retinanet_r50_fpn.py', './mavit.py']

model = dict(
    backbone=dict(_base_.mavit_backbone, _delete_=True, out_indices=(1, 2, 3)),
    neck=dict(in_channels=None, start_level=0))  # in_channels: set by the size config
