"""The Swin-T every comparison runs against: mmseg's ``SwinTransformer`` as
the UperNet baseline config builds it (the op and compiled censuses, the GPU
check's rows)."""
from __future__ import annotations

import torch

from devtools.checkout import REPO_ROOT

SWIN_T_CONFIG = 'configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py'


def swin_t() -> torch.nn.Module:
    """Swin-T with the backbone settings of ``SWIN_T_CONFIG`` (96 channels,
    depths 2/2/6/2, windows of 7), freshly initialised, in training mode.
    Needs mmseg."""
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.model_builder import build_model
    cfg = load_config(REPO_ROOT / SWIN_T_CONFIG)
    return build_model(cfg, model_cfg=cfg.model.backbone)


__all__ = ['SWIN_T_CONFIG', 'swin_t']
