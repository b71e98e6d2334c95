# Baseline: UperNet + Swin-T (mmseg's SwinTransformer) in MAViT-T's UperNet
# recipe, for side-by-side speed and memory (tools/analysis_tools/benchmark_fps.py). Swin-T as
# in mmseg's swin-tiny UperNet config: 96 channels, depths 2/2/6/2, heads
# 3/6/12/24, 7x7 windows, drop path 0.3. The recipe is mmseg's Swin-T one (the
# same optimizer, no-decay keys and schedule) but for mixed precision, kept so
# that speed and memory compare like for like. For accuracy runs, point
# init_cfg at the Swin-T ImageNet-1K weights (mmseg's configs/swin README).
_base_ = ['../upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='SwinTransformer',
        embed_dims=96,
        depths=[2, 2, 6, 2],
        num_heads=[3, 6, 12, 24],
        window_size=7,
        mlp_ratio=4,
        strides=(4, 2, 2, 2),
        out_indices=(0, 1, 2, 3),
        qkv_bias=True,
        patch_norm=True,
        use_abs_pos_embed=False,
        drop_path_rate=0.3,
        init_cfg=None),
    decode_head=dict(in_channels=[96, 192, 384, 768]),
    auxiliary_head=dict(in_channels=384))
