"""Build a detector / segmentor (or its datasets' metadata, or dummy inputs for
its tensor-mode forward) from one of our configs, outside the Runner: the
config's default scope picks the registries (mmdet or mmseg).
"""
from __future__ import annotations

import copy
import importlib
from collections.abc import Sequence

import torch
from mmengine.config import Config

from .config import check_scope


def scope_registry(cfg: Config, name: str = 'MODELS'):
    """Enter the config's default scope; its registry ``name`` (MODELS,
    DATASETS, VISUALIZERS, ...) from mmdet or mmseg, MAViT registered."""
    from mmengine.registry import init_default_scope

    import mavit_mm  # noqa: F401  (registers MAViT)

    scope = check_scope(cfg)
    init_default_scope(scope)
    return getattr(importlib.import_module(f'{scope}.registry'), name)


def build_model(cfg: Config, model_cfg=None) -> torch.nn.Module:
    """The model of ``cfg`` (or ``model_cfg`` in its scope), without the
    backbone's pretrained init."""
    registry = scope_registry(cfg)
    model_cfg = (cfg.model if model_cfg is None else model_cfg).copy()
    if 'backbone' in model_cfg:
        model_cfg.backbone = dict(model_cfg.backbone, init_cfg=None)
    return registry.build(model_cfg)


def meta_state_dict(cfg: Config, model_cfg=None) -> dict[str, torch.Tensor]:
    """The state dict of ``cfg``'s model (or ``model_cfg``) by key, shape and
    dtype, with no data: what fitting a checkpoint to it reads. Built on the
    meta device, it costs no memory and no init (MAViT-L's cascade: 0.1 s
    against 3 s and 1 GB on the CPU, in every process of a data-parallel run's
    pre-flight check). A model whose constructor reads a tensor's values
    (mmdet's Swin calls ``.item()``) is built on the CPU instead."""
    try:
        with torch.device('meta'):
            return build_model(cfg, model_cfg).state_dict()
    except Exception:   # a config error raises again here, on the CPU
        return build_model(cfg, model_cfg).state_dict()


def dataset_meta_from_config(cfg: Config) -> dict:
    """``dict(classes=..., palette=...)`` of the config's test dataset, built
    without reading its annotations (``lazy_init``), as mmdet's DetInferencer
    reads its palette; what mmengine's Runner saves as ``meta.dataset_meta``."""
    from ..models.checkpoint import normalised_dataset_meta

    dataset_cfg = copy.deepcopy(cfg.test_dataloader.dataset)
    dataset_cfg['lazy_init'] = True
    metainfo = scope_registry(cfg, 'DATASETS').build(dataset_cfg).metainfo
    return normalised_dataset_meta(metainfo['classes'], metainfo.get('palette'))


def dummy_forward_inputs(cfg: Config, height: int, width: int, batch_size: int = 1,
                         device: str = 'cpu') -> tuple[torch.Tensor, Sequence]:
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
