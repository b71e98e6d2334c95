# MALA's Semantic FPN + MAViT recipe: 80k iterations on ADE20K (512x512 crops,
# 8 GPUs x 2 images), AdamW lr 1e-4, weight decay 1e-4, poly to 1e-6, fp32.
_base_ = [
    '../models/fpn_mavit.py',
    '../datasets/ade20k.py',
    '../schedules/schedule_80k.py',
    'mmseg::_base_/default_runtime.py',
]

# Batches padded to the 512x512 training crops, as mmseg's ADE20K configs.
data_preprocessor = dict(size=_base_.crop_size)
model = dict(data_preprocessor=data_preprocessor)
