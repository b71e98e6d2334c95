# UperNet with a MAViT backbone, ADE20K: UPerHead (512 channels) on the four
# stages and an auxiliary FCNHead on stage 3 (in_index 2, loss weight 0.4).
# The size configs set backbone.arch / init_cfg,
# decode_head.in_channels (= embed_dims) and auxiliary_head.in_channels
# (= embed_dims[2]).
norm_cfg = dict(type='SyncBN', requires_grad=True)
data_preprocessor = dict(
    type='SegDataPreProcessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255,
    size=(512, 512))
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    backbone=dict(
        type='MAViT',
        arch=None,  # set by the size config
        drop_path_rate=None,  # None: the arch preset's (ARCH_SETTINGS, the published value)
        out_indices=(0, 1, 2, 3),
        norm_cfg=norm_cfg,
        frozen_stages=-1,
        norm_eval=False,
        with_cp=False,
        # init_cfg (the ImageNet-1K weights) is set by the size config
    ),
    decode_head=dict(
        type='UPerHead',
        in_channels=None,  # set by the size config
        in_index=[0, 1, 2, 3],
        pool_scales=(1, 2, 3, 6),
        channels=512,
        dropout_ratio=0.1,
        num_classes=150,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)),
    auxiliary_head=dict(
        type='FCNHead',
        in_channels=None,  # set by the size config
        in_index=2,
        channels=256,
        num_convs=1,
        concat_input=False,
        dropout_ratio=0.1,
        num_classes=150,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=0.4)),
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))
