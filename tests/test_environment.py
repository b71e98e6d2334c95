"""The set-up installs the whole stack: a missing piece fails here, loudly,
instead of turning other tests into skips."""
import importlib

import pytest
import torch


@pytest.mark.parametrize('module', ['mmengine', 'mmcv.ops', 'mmdet.models', 'mmseg.models',
                                    'pycocotools.coco', 'triton'])
def test_stack_imports(module):
    importlib.import_module(module)


def test_pinned_versions():
    import mmcv
    import mmdet
    import mmengine
    import mmseg
    assert (mmengine.__version__, mmcv.__version__, mmdet.__version__, mmseg.__version__) == \
        ('0.10.7', '2.1.0', '3.3.0', '1.2.2')
    assert torch.__version__.split('+')[0] >= '2.0'


def test_mmcv_has_compiled_ops():
    from mmcv.ops import RoIAlign, nms
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], dtype=torch.float)
    kept, _ = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    assert kept[:, 4].tolist() == pytest.approx([0.9, 0.7])
    feature = torch.arange(16.0).reshape(1, 1, 4, 4)
    pooled = RoIAlign((1, 1), spatial_scale=1.0, sampling_ratio=1, aligned=False)(
        feature, torch.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]]))
    # one bilinear sample at the box centre (1.5, 1.5): the mean of its 4 neighbours
    assert pooled.item() == pytest.approx(feature[0, 0, 1:3, 1:3].mean().item(), abs=1e-5)


def test_setuptools_keeps_pkg_resources():
    """mmcv's setup.py and mmengine's 'mmdet::'/'mmseg::' config bases import
    pkg_resources; setuptools 82+ no longer ships it (requirements/constraints.txt)."""
    import setuptools
    importlib.import_module('pkg_resources')
    major = int(setuptools.__version__.split('.')[0])
    assert 77 <= major < 82, f'setuptools {setuptools.__version__} is outside >=77,<82'


@pytest.mark.parametrize('base', ['mmdet::_base_/default_runtime.py',
                                  'mmseg::_base_/default_runtime.py'])
def test_package_config_bases_resolve(tmp_path, base):
    """What users write in their own configs: a base from an installed package."""
    from mmengine.config import Config
    config = tmp_path / 'child.py'
    config.write_text(f"_base_ = '{base}'\n")
    cfg = Config.fromfile(str(config))
    assert cfg.default_scope == base.split('::')[0]
