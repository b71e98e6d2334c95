"""mmdet's and mmseg's own tools (``<package>/.mim/tools/train.py`` and
``test.py``, as shipped in their pip packages) train and evaluate our configs
with nothing to set: no environment variable, no ``--cfg-options``.

The configs import mavit_mm themselves (``custom_imports``), which registers
MAViT and the recipes' ``AmpWhereAvailableOptimWrapper`` (mixed precision on a
GPU, fp32 on a CPU) in mmengine's root registries. Each tool runs in its own
process, as a user runs it, on tiny generated data for 2 iterations; the test
run's metrics are read back from its JSON log.
"""
import math
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from mavit_mm.tooling.json_logs import latest_test_metrics
from mavit_mm.tooling.demo_jobs import DEMO_JOBS
from tool_helpers import explain, make_tiny_data, write_tiny_config

pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed for these tests')
pytest.importorskip('mmdet.models')
pytest.importorskip('mmseg.models')

MAX_ITERS = 2
# One pipeline per package: the cheapest of each.
CASES = {'mmdet': 'retinanet', 'mmseg': 'sem_fpn'}


def package_tool(package: str, tool: str) -> Path:
    """``<package>/.mim/tools/<tool>`` of the installed package."""
    module = __import__(package)
    path = Path(module.__file__).parent / '.mim' / 'tools' / tool
    if not path.is_file():
        pytest.skip(f'{package} is installed without its tools ({path} missing)')
    return path


def run_package_tool(package: str, tool: str, *args, cwd) -> subprocess.CompletedProcess:
    """The package's own tool in a subprocess, with the environment as it is
    (no PYTHONPATH, nothing mavit-specific)."""
    command = [sys.executable, str(package_tool(package, tool)), *map(str, args)]
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.pop('PYTHONPATH', None)
    start = time.time()
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env,
                            timeout=600)
    result.seconds = time.time() - start
    return result


# -- the recipes' optimizer wrapper ----------------------------------------------

def _wrapper_cfg(**extra):
    return dict(dict(type='AmpWhereAvailableOptimWrapper', loss_scale='dynamic',
                     optimizer=dict(type='AdamW', lr=1e-4)), **extra)


def test_wrapper_found_through_mmdet_and_mmseg_registries():
    import mavit_mm  # noqa: F401  (registers it)
    from mavit_mm.engine.amp import AmpWhereAvailableOptimWrapper
    from mmdet.registry import OPTIM_WRAPPERS as DET
    from mmseg.registry import OPTIM_WRAPPERS as SEG
    assert DET.get('AmpWhereAvailableOptimWrapper') is AmpWhereAvailableOptimWrapper
    assert SEG.get('AmpWhereAvailableOptimWrapper') is AmpWhereAvailableOptimWrapper


def test_wrapper_without_amp_device_is_fp32_optim_wrapper(monkeypatch):
    import torch
    from mmengine.optim import AmpOptimWrapper, OptimWrapper, build_optim_wrapper
    from mavit_mm.engine import amp
    monkeypatch.setattr(amp, 'amp_available', lambda: False)
    model = torch.nn.Linear(2, 2)
    wrapper = build_optim_wrapper(model, _wrapper_cfg(dtype='bfloat16',
                                                      clip_grad=dict(max_norm=1.0)))
    assert type(wrapper) is OptimWrapper and not isinstance(wrapper, AmpOptimWrapper)
    assert wrapper.clip_grad_kwargs == dict(max_norm=1.0)
    assert isinstance(wrapper.optimizer, torch.optim.AdamW)
    # It trains, in fp32.
    loss = model(torch.ones(1, 2)).sum()
    wrapper.update_params(loss)


def test_wrapper_with_amp_device_is_amp_optim_wrapper(monkeypatch):
    """Where mmengine's AmpOptimWrapper can run, the wrapper is one, built from
    the same arguments (faked here on a CPU: AmpOptimWrapper checks the device
    through mmengine.device's is_cuda_available)."""
    import torch
    from mmengine.optim import AmpOptimWrapper, build_optim_wrapper
    from mmengine.optim.optimizer import amp_optimizer_wrapper
    from mavit_mm.engine import amp
    monkeypatch.setattr(amp, 'amp_available', lambda: True)
    monkeypatch.setattr(amp_optimizer_wrapper, 'is_cuda_available', lambda: True)
    with warnings.catch_warnings():  # GradScaler without CUDA may warn and disable itself
        warnings.simplefilter('ignore')
        wrapper = build_optim_wrapper(torch.nn.Linear(2, 2),
                                      _wrapper_cfg(loss_scale=512.0, dtype='bfloat16'))
    assert isinstance(wrapper, AmpOptimWrapper)
    assert wrapper.cast_dtype is torch.bfloat16
    assert wrapper._scale_update_param == 512.0
    assert 'loss_scaler' in wrapper.state_dict()


# -- the packages' own train.py / test.py ------------------------------------------

@pytest.fixture(scope='module')
def tiny_roots(tmp_path_factory):
    return make_tiny_data(tmp_path_factory.mktemp('openmmlab_tools_data'))


@pytest.mark.parametrize('package', list(CASES))
def test_package_tools_train_then_test(package, tiny_roots, tmp_path):
    import torch
    name = CASES[package]
    _, kind, metric_names = DEMO_JOBS[name]
    config = write_tiny_config(name, tiny_roots, tmp_path / 'configs', MAX_ITERS,
                               checkpoint_interval=MAX_ITERS)
    # The tiny config keeps the published recipe's optimizer wrapper.
    from mavit_mm.tooling.config import load_config
    assert load_config(config).optim_wrapper.type == 'AmpWhereAvailableOptimWrapper'

    work_dir = tmp_path / 'train'
    train = run_package_tool(package, 'train.py', config, '--work-dir', work_dir, cwd=tmp_path)
    assert train.returncode == 0, explain(train)
    output = train.stdout + train.stderr
    assert 'AmpOptimizerWrapper is only available' not in output
    if torch.cuda.is_available():
        assert 'AmpWhereAvailableOptimWrapper: mixed-precision training' in output, output[-3000:]
    else:
        assert 'AmpWhereAvailableOptimWrapper: no CUDA' in output, output[-3000:]
    checkpoint = work_dir / f'iter_{MAX_ITERS}.pth'
    assert checkpoint.is_file(), sorted(p.name for p in work_dir.iterdir())

    test_dir = tmp_path / 'test'
    test = run_package_tool(package, 'test.py', config, checkpoint, '--work-dir', test_dir,
                            cwd=tmp_path)
    assert test.returncode == 0, explain(test)
    metrics = latest_test_metrics(test_dir)
    assert metrics is not None, explain(test)
    for metric in metric_names:
        assert metric in metrics, f'{metric} missing from {sorted(metrics)}'
        value = metrics[metric]
        upper = 1.0 if kind == 'coco' else 100.0  # COCO AP is a fraction, mmseg percent
        assert isinstance(value, (int, float)) and math.isfinite(value), (metric, value)
        assert 0.0 <= value <= upper, (metric, value)
    print(f'{package}: train {train.seconds:.1f} s, test {test.seconds:.1f} s, {metrics}')
