# Runtime of the segmentation configs (mmseg 1.x).
default_scope = 'mmseg'
# Registers MAViT in mmseg's MODELS registry.
custom_imports = dict(imports=['mavit_mm', 'mavit_mm.deploy'], allow_failed_imports=False)

env_cfg = dict(
    cudnn_benchmark=True,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),
)
vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(
    type='SegLocalVisualizer', vis_backends=vis_backends, name='visualizer')
log_processor = dict(by_epoch=False)
log_level = 'INFO'
load_from = None
resume = False

tta_model = dict(type='SegTTAModel')
