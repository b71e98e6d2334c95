# mmseg's ADE20K (150 classes; training: random resize to 0.5-2.0 of
# (2048, 512) and 512x512 crops; test: (2048, 512) keeping the ratio, single
# scale) at MALA's batch: 2 images per GPU (8 GPUs x 2 = 16), not mmseg's 4.
_base_ = 'mmseg::_base_/datasets/ade20k.py'

train_dataloader = dict(batch_size=2)
