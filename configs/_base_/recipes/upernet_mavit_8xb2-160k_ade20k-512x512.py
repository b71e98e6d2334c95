# MALA's UperNet + MAViT recipe: 160k iterations on ADE20K (512x512 crops, 8
# GPUs x 2 images), AdamW lr 6e-5, betas (0.9, 0.999), weight decay 0.01 but
# for the published no-decay keys, 1500-iteration linear warm-up, poly (power
# 1.0), auxiliary FCN head on stage 3 (loss weight 0.4), AMP (static loss scale
# 512). The published MAViT-L config puts 1 image on each GPU at the same lr,
# without a GPU count; the paper trains every segmentation model with 16
# images per iteration, which 8 x 2 keeps.
_base_ = [
    '../models/upernet_mavit.py',
    '../datasets/ade20k.py',
    '../schedules/schedule_160k.py',
    'mmseg::_base_/default_runtime.py',
]

# Batches padded to the 512x512 training crops, as mmseg's ADE20K configs.
data_preprocessor = dict(size=_base_.crop_size)
model = dict(data_preprocessor=data_preprocessor)
