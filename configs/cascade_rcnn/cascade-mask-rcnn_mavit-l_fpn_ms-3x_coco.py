# MAViT-L Cascade Mask R-CNN, 3x+MS schedule, COCO.
# Paper: 152M params, 56.0 box AP / 48.4 mask AP.
# The backbone starts from the ImageNet-1K classification weights of MAViT-L:
# put them at pretrained/mavit_l_in1k.pth (relative to the directory the
# tools are run from) or point `checkpoint` below at them.
_base_ = '../_base_/recipes/cascade-mask-rcnn_mavit_fpn_ms-3x_coco.py'

model = dict(
    backbone=dict(arch='large', init_cfg=dict(checkpoint='pretrained/mavit_l_in1k.pth')),
    neck=dict(in_channels=[96, 192, 448, 640]))

# As the published casrcnn_l_3x.py: 1 image per GPU and half the other sizes' lr, so
# 8 images per iteration on 8 GPUs (--auto-scale-lr scales from that).
train_dataloader = dict(batch_size=1)
optim_wrapper = dict(optimizer=dict(lr=0.0002))
auto_scale_lr = dict(base_batch_size=8)
