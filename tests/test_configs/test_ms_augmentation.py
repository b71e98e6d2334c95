"""The "3x+MS" recipes' multi-scale + crop augmentation, built from the real
configs and run on generated COCO-format samples."""

import numpy as np
import pytest
from helpers.paths import REPO_ROOT
from helpers.tools import retarget_data_root

from mavit_mm.data.synthetic import coco_metainfo, make_coco_dataset
from mavit_mm.tooling.config import load_config

pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed')
pytest.importorskip('mmdet.datasets')

MS_CONFIGS = ['configs/mask_rcnn/mask-rcnn_mavit-t_fpn_ms-3x_coco.py',
              'configs/cascade_rcnn/cascade-mask-rcnn_mavit-t_fpn_ms-3x_coco.py']
# The published recipe: shorter side 480..800, longer side at most 1333.
SHORT_SIDE_RANGE = (480, 800)
LONG_SIDE_MAX = 1333


@pytest.fixture(scope='module')
def coco_root(tmp_path_factory):
    root = tmp_path_factory.mktemp('ms_data')
    # Non-square images: the resize must keep their aspect ratio.
    make_coco_dataset(root, num_train=3, num_val=1, image_size=(96, 128), seed=4)
    return root


@pytest.mark.parametrize('config', MS_CONFIGS)
def test_multi_scale_train_pipeline_sizes(config, coco_root):
    from mmdet.registry import DATASETS
    from mmdet.utils import register_all_modules
    from mmengine.dataset import Compose  # noqa: F401  (the dataset composes it)
    register_all_modules(init_default_scope=True)

    cfg = load_config(REPO_ROOT / config)
    retarget_data_root(cfg, str(coco_root))
    dataset_cfg = cfg.train_dataloader.dataset
    dataset_cfg.update(ann_file='annotations/instances_train.json',
                       data_prefix=dict(img='train/'), metainfo=coco_metainfo())
    dataset = DATASETS.build(dataset_cfg)
    assert len(dataset) == 3

    sizes = set()
    np.random.seed(0)  # the transforms draw from numpy's global generator
    for draw in range(24):
        sample = dataset[draw % len(dataset)]
        height, width = sample['inputs'].shape[-2:]
        short, long = min(height, width), max(height, width)
        assert SHORT_SIDE_RANGE[0] <= short <= SHORT_SIDE_RANGE[1], (height, width)
        assert long <= LONG_SIDE_MAX
        instances = sample['data_samples'].gt_instances
        assert instances.masks.height == height and instances.masks.width == width
        boxes = instances.bboxes.tensor
        if len(boxes):
            assert float(boxes[:, 2].max()) <= width + 1e-3
            assert float(boxes[:, 3].max()) <= height + 1e-3
        sizes.add((height, width))
    # Several scales were drawn, from both branches: the plain resize keeps the
    # 3:4 aspect ratio, the crop branch produces others.
    assert len({min(s) for s in sizes}) >= 4
    ratios = {round(max(s) / min(s), 2) for s in sizes}
    assert round(128 / 96, 2) in ratios and len(ratios) >= 2
