# mmdet's Cascade Mask R-CNN (R-50 FPN base) with the MAViT backbone in place
# of the ResNet and MALA's box heads (as Swin's cascade configs): each of the
# three stages a ConvFCBBoxHead with 4 shared convs (SyncBN) + 1 shared fc and
# a decoded-box GIoU loss, in place of mmdet's 2fc heads with smooth L1.
# Box regression is class-specific (reg_class_agnostic=False), as the
# published heads and Swin's / ConvNeXt's 4conv1fc heads: 3 x 0.32M parameters
# more than mmdet's class-agnostic base, the paper's sizes (MAViT-S 82M, B
# 105M, L 152M). CascadeRoIHead builds one mask head per stage (three).
# The size configs set backbone.arch / init_cfg and neck.in_channels
# (= the backbone's embed_dims).
_base_ = ['mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py', './mavit.py']

model = dict(
    backbone=dict(_base_.mavit_backbone, _delete_=True),
    neck=dict(in_channels=None),  # set by the size config
    roi_head=dict(bbox_head=[
        dict(
            head,  # mmdet's stage head: its coder's stds
            type='ConvFCBBoxHead',
            reg_class_agnostic=False,
            num_shared_convs=4,
            num_shared_fcs=1,
            conv_out_channels=256,
            norm_cfg=dict(type='SyncBN', requires_grad=True),
            reg_decoded_bbox=True,
            loss_bbox=dict(type='GIoULoss', loss_weight=10.0))
        for head in _base_.model.roi_head.bbox_head
    ]))
