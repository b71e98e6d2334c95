"""Build a detector / segmentor from one of our configs, outside the Runner.

Shared by the analysis tools (FLOPs, FPS, demo, pictures) and the tests: the
default scope of a config (loaded with ``tooling.config.load_config``) picks
the registry (mmdet or mmseg), and dummy inputs of a chosen size are made the
way each library's tensor-mode forward expects them.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from mmengine.config import Config

from .config import check_scope


def scope_registry(cfg: Config):
    """Enter the config's default scope; its MODELS registry (MAViT registered)."""
    from mmengine.registry import init_default_scope

    import mavit_mm  # noqa: F401  (registers MAViT)

    scope = check_scope(cfg)
    init_default_scope(scope)
    if scope == 'mmdet':
        from mmdet.registry import MODELS
    else:
        from mmseg.registry import MODELS
    return MODELS


def build_model(cfg: Config, with_pretrained: bool = False, model_cfg=None) -> torch.nn.Module:
    """The model of ``cfg`` (or ``model_cfg`` in its scope); the backbone's
    pretrained init is dropped unless asked."""
    registry = scope_registry(cfg)
    model_cfg = (cfg.model if model_cfg is None else model_cfg).copy()
    if not with_pretrained and 'backbone' in model_cfg:
        model_cfg.backbone = dict(model_cfg.backbone, init_cfg=None)
    return registry.build(model_cfg)


def dummy_forward_inputs(cfg: Config, height: int, width: int, batch_size: int = 1,
                         device: str = 'cpu') -> Tuple[torch.Tensor, Sequence]:
    """An input batch and data samples with the metadata ``model(inputs, samples, mode='tensor')`` needs."""
    inputs = torch.randn(batch_size, 3, height, width, device=device)
    meta = dict(img_shape=(height, width), ori_shape=(height, width),
                pad_shape=(height, width), batch_input_shape=(height, width),
                scale_factor=(1.0, 1.0))
    if cfg.default_scope == 'mmdet':
        from mmdet.structures import DetDataSample
        samples = [DetDataSample(metainfo=meta) for _ in range(batch_size)]
    else:
        from mmseg.structures import SegDataSample
        samples = [SegDataSample(metainfo=meta) for _ in range(batch_size)]
    return inputs, samples
