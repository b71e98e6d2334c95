"""The demo configs: which bundled dataset each trains on and which metrics
say how well it did. One table for the main job (``tools/main_job.py``), the
end-to-end tests and the config tests.
"""
from __future__ import annotations

from typing import NamedTuple


class DemoJob(NamedTuple):
    config: str                      # relative to the repository root
    data_kind: str                   # 'coco' or 'ade20k' (data/demo/<kind>)
    headline_metrics: tuple[str, ...]  # as mmengine logs them


DEMO_JOBS = {
    'mask_rcnn': DemoJob(
        'configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py', 'coco',
        ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50')),
    'retinanet': DemoJob(
        'configs/demo/retinanet_mavit-t_fpn_demo-shapes.py', 'coco',
        ('coco/bbox_mAP', 'coco/bbox_mAP_50')),
    'cascade_mask_rcnn': DemoJob(
        'configs/demo/cascade-mask-rcnn_mavit-t_fpn_ms-3x_demo-shapes.py', 'coco',
        ('coco/bbox_mAP', 'coco/segm_mAP')),
    'sem_fpn': DemoJob(
        'configs/demo/fpn_mavit-t_demo-shapes.py', 'ade20k', ('mIoU', 'mAcc', 'aAcc')),
    'upernet': DemoJob(
        'configs/demo/upernet_mavit-t_demo-shapes.py', 'ade20k', ('mIoU', 'mAcc', 'aAcc')),
}
