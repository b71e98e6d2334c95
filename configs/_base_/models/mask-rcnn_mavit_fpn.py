# mmdet's Mask R-CNN (R-50 FPN base) with the MAViT backbone in place of the
# ResNet; heads, assigners and test settings are mmdet's, as published.
# The size configs set backbone.arch / init_cfg and neck.in_channels
# (= the backbone's embed_dims).
_base_ = ['mmdet::_base_/models/mask-rcnn_r50_fpn.py', './mavit.py']

model = dict(
    backbone=dict(_base_.mavit_backbone, _delete_=True),
    neck=dict(in_channels=None))  # set by the size config
