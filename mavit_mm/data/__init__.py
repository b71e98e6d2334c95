"""Synthetic COCO- and ADE20K-format datasets for demos and end-to-end tests."""
from .synthetic import (
    SHAPE_CLASSES,
    ade20k_metainfo,
    coco_metainfo,
    dataset_complete,
    make_ade20k_dataset,
    make_coco_dataset,
    read_manifest,
)

__all__ = ['SHAPE_CLASSES', 'make_coco_dataset', 'make_ade20k_dataset', 'coco_metainfo',
           'ade20k_metainfo', 'dataset_complete', 'read_manifest']
