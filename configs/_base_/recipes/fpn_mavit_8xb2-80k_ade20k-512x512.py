# Semantic FPN + MAViT, 80k iterations on ADE20K (512x512 crops, 8 GPUs x 2
# images), as published: AdamW lr 1e-4, weight decay 1e-4, poly, AMP.
_base_ = [
    '../models/fpn_mavit.py',
    '../datasets/ade20k.py',
    '../schedules/schedule_80k.py',
    '../default_runtime_seg.py',
]
