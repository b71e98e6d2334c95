# mmdet's RetinaNet (R-50 FPN base) with the MAViT backbone in place of the
# ResNet, as the published config: the backbone returns all four stages and
# the FPN starts at the second (strides 8-32), building P6/P7 with extra convs
# on the last backbone output ('on_input', as mmdet's base). The first stage's
# output norm (`backbone.extra_norms.0`, in the published checkpoints) is built
# but unused, so its parameters get no gradient: data-parallel training needs
# find_unused_parameters, as published. The size configs set
# backbone.arch / init_cfg and neck.in_channels (= the backbone's embed_dims).
_base_ = ['mmdet::_base_/models/retinanet_r50_fpn.py', './mavit.py']

model = dict(
    backbone=dict(_base_.mavit_backbone, _delete_=True),
    neck=dict(in_channels=None, start_level=1))  # in_channels: set by the size config
find_unused_parameters = True
