# mmdet's Cascade Mask R-CNN (R-50 FPN base) with the MAViT backbone in place
# of the ResNet and MALA's box heads (as Swin's cascade configs): each of the
# three stages a ConvFCBBoxHead with 4 shared convs (SyncBN) + 1 shared fc and
# a decoded-box GIoU loss, in place of mmdet's 2fc heads with smooth L1.
# Regression stays class-agnostic as in mmdet's base: with it the models match
# the published config's sizes (MAViT-S 81.07M, B 103.76M, L 150.68M);
# class-specific regression would add 3 x 0.32M. CascadeRoIHead builds one
# mask head per stage (three).
# The size configs set backbone.arch / init_cfg and neck.in_channels
# (= the backbone's embed_dims).
_base_ = ['mmdet::_base_/models/cascade-mask-rcnn_r50_fpn.py', './mavit.py']

model = dict(
    backbone=dict(_base_.mavit_backbone, _delete_=True),
    neck=dict(in_channels=None),  # set by the size config
    roi_head=dict(bbox_head=[
        dict(
            head,  # mmdet's stage head: its coder's stds, class-agnostic regression
            type='ConvFCBBoxHead',
            num_shared_convs=4,
            num_shared_fcs=1,
            conv_out_channels=256,
            norm_cfg=dict(type='SyncBN', requires_grad=True),
            reg_decoded_bbox=True,
            loss_bbox=dict(type='GIoULoss', loss_weight=10.0))
        for head in _base_.model.roi_head.bbox_head
    ]))
