# Baseline: Mask R-CNN + Swin-T (mmdet's SwinTransformer), for side-by-side
# speed and memory (tools/analysis_tools/benchmark_fps.py). Swin-T as in
# mmdet's mask-rcnn_swin-t-p4-w7_fpn_1x_coco: 96 channels, depths 2/2/6/2,
# heads 3/6/12/24, 7x7 windows, drop path 0.2; and its recipe: AdamW lr 1e-4
# (MAViT's is 4e-4), 1000-iteration warm-up, no decay on the relative position
# tables and norms (the keys schedule_1x.py already names). Mixed precision as
# MAViT's recipe (mmdet's Swin-T 1x trains in fp32), so that speed and memory
# compare like for like. For accuracy runs, point init_cfg at the Swin-T
# ImageNet-1K weights (mmdet's configs/swin README).
_base_ = ['../mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='SwinTransformer',
        embed_dims=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        mlp_ratio=4,
        qkv_bias=True,
        drop_path_rate=0.2,
        patch_norm=True,
        out_indices=(0, 1, 2, 3),
        with_cp=False,
        convert_weights=True,
        init_cfg=None),
    neck=dict(in_channels=[96, 192, 384, 768]))

optim_wrapper = dict(optimizer=dict(lr=0.0001))
param_scheduler = [
    dict(_base_.param_scheduler[0], end=1000),  # mmdet's Swin-T warm-up
    _base_.param_scheduler[1],
]
