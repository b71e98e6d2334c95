"""Helpers for the config tests: load a config, build its model without
pretrained weights, and make small CPU batches with real ground truth."""
from __future__ import annotations

import copy
import functools

import numpy as np
import pytest
import torch

from helpers.paths import CONFIG_DIR


def _downstream_available() -> bool:
    try:
        import mmdet.models  # noqa: F401
        import mmseg.models  # noqa: F401
    except ImportError:
        return False
    return True


# Loading configs needs mmengine only; building models needs mmdet / mmseg
# (and mmcv with its ops).
needs_downstream = pytest.mark.skipif(not _downstream_available(),
                                      reason='needs mmdet and mmseg (mmcv with ops)')

# Test images: small, and a multiple of 32 so no padding is needed.
IMG_H, IMG_W = 96, 128


def load_config(rel_path: str):
    """``configs/<rel_path>``, loaded as the tools load it: parsed once per
    test process (half a second a config, and many tests read the same
    ones), a fresh copy on every call so that no test sees another's edits."""
    return copy.deepcopy(_parsed_config(str(rel_path)))


@functools.cache
def _parsed_config(rel_path: str):
    from mavit_mm.tooling.config import load_config as load
    return load(CONFIG_DIR / rel_path)


def build_model(cfg, cpu_test: bool = False):
    """Build ``cfg.model`` with random weights (no pretrained checkpoint).

    ``cpu_test`` changes sampling settings only (no parameter changes) for a
    fast CPU check of an untrained model: fewer RoIs per image in training and
    testing, and detector test score threshold 0 so that boxes and masks come
    out; segmentors pad to the test images rather than to the 512x512 crop.
    """
    from mavit_mm.tooling.model_builder import build_model as build
    model_cfg = cfg.model.copy()
    if cpu_test:
        _shrink_for_cpu(model_cfg, IMG_H, IMG_W)
    return build(cfg, model_cfg=model_cfg)


def _shrink_for_cpu(model_cfg, height: int, width: int) -> None:
    if model_cfg.type == 'EncoderDecoder':
        model_cfg.data_preprocessor.size = (height, width)
        return
    train_cfg, test_cfg = model_cfg.train_cfg, model_cfg.test_cfg
    if 'rcnn' not in test_cfg:  # one-stage
        test_cfg.score_thr = 0.0
        test_cfg.max_per_img = 20
        return
    train_cfg.rpn_proposal.max_per_img = 200
    rcnn_train = train_cfg.rcnn if isinstance(train_cfg.rcnn, list) else [train_cfg.rcnn]
    for stage in rcnn_train:
        stage.sampler.num = 32
    test_cfg.rpn.max_per_img = 100
    test_cfg.rcnn.score_thr = 0.0
    test_cfg.rcnn.max_per_img = 10


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _image(rng: np.random.RandomState) -> torch.Tensor:
    return torch.from_numpy(rng.randint(0, 256, size=(3, IMG_H, IMG_W), dtype=np.uint8))


# Per image: boxes (x1, y1, x2, y2) and COCO label indices.
_DET_GT = [
    ([[10., 8., 70., 60.], [40., 30., 120., 90.], [4., 50., 52., 94.]], [1, 5, 17]),
    ([[20., 12., 100., 80.], [64., 40., 124., 92.]], [0, 62]),
]


def det_batch(with_mask: bool, seed: int = 0) -> dict:
    """Two images with boxes, labels and (optionally) BitmapMasks, as a
    dataloader would give them to ``DetDataPreprocessor``."""
    from mmdet.structures import DetDataSample
    from mmdet.structures.mask import BitmapMasks
    from mmengine.structures import InstanceData

    rng = np.random.RandomState(seed)
    inputs, samples = [], []
    for img_id, (boxes, labels) in enumerate(_DET_GT):
        sample = DetDataSample(metainfo=dict(
            img_id=img_id, img_path=f'<test{img_id}>.jpg', img_shape=(IMG_H, IMG_W),
            ori_shape=(IMG_H, IMG_W), scale_factor=(1.0, 1.0), flip=False,
            flip_direction=None))
        gt = InstanceData()
        gt.bboxes = torch.tensor(boxes, dtype=torch.float32)
        gt.labels = torch.tensor(labels, dtype=torch.long)
        if with_mask:
            masks = np.zeros((len(boxes), IMG_H, IMG_W), dtype=np.uint8)
            for i, (x1, y1, x2, y2) in enumerate(np.asarray(boxes, dtype=int)):
                # An ellipse inside each box.
                yy, xx = np.mgrid[0:IMG_H, 0:IMG_W]
                cx, cy, rx, ry = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) / 2, (y2 - y1) / 2
                masks[i] = ((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 <= 1
            gt.masks = BitmapMasks(masks, IMG_H, IMG_W)
        sample.gt_instances = gt
        inputs.append(_image(rng))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)


def seg_batch(num_classes: int = 150, seed: int = 0) -> dict:
    """Two images with ``gt_sem_seg`` maps (a few class regions, some 255
    ignore pixels), as a dataloader would give them to ``SegDataPreProcessor``."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample

    rng = np.random.RandomState(seed)
    inputs, samples = [], []
    for img_id in range(2):
        seg = np.zeros((IMG_H, IMG_W), dtype=np.int64)
        classes = rng.choice(num_classes, size=4, replace=False)
        seg[:, :IMG_W // 2] = classes[0]
        seg[:, IMG_W // 2:] = classes[1]
        seg[IMG_H // 3:2 * IMG_H // 3, IMG_W // 4:3 * IMG_W // 4] = classes[2]
        seg[:8, :8] = 255  # ignored
        sample = SegDataSample(metainfo=dict(
            img_path=f'<test{img_id}>.jpg', img_shape=(IMG_H, IMG_W),
            ori_shape=(IMG_H, IMG_W), flip=False))
        sample.gt_sem_seg = PixelData(data=torch.from_numpy(seg)[None])
        inputs.append(_image(rng))
        samples.append(sample)
    return dict(inputs=inputs, data_samples=samples)
