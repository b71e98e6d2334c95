# MAViT in a config: the import that registers it with mmdet's and mmseg's
# MODELS, and the backbone every model base here uses. The model bases copy
# `mavit_backbone` into model.backbone; mmengine refuses a key defined by two
# bases, so it has its own name (editing it after loading changes nothing).
custom_imports = dict(imports=['mavit_mm', 'mavit_mm.deploy'], allow_failed_imports=False)

mavit_backbone = dict(
    type='MAViT',
    arch=None,  # set by the size config
    drop_path_rate=None,  # None: the arch preset's (ARCH_SETTINGS, the published value)
    out_indices=(0, 1, 2, 3),
    norm_cfg=dict(type='SyncBN', requires_grad=True),
    frozen_stages=-1,
    norm_eval=False,
    with_cp=False,
    # The ImageNet-1K weights: the size config names the file.
    init_cfg=dict(type='Pretrained', checkpoint=None),
)
