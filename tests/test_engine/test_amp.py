"""The recipes' optimizer wrapper (mavit_mm/engine/amp.py):
AmpWhereAvailableOptimWrapper is mixed precision where mmengine's
AmpOptimWrapper can run, fp32 elsewhere, and found through mmdet's and mmseg's
registries."""
import warnings

import pytest


def _wrapper_cfg(**extra):
    return dict(dict(type='AmpWhereAvailableOptimWrapper', loss_scale='dynamic',
                     optimizer=dict(type='AdamW', lr=1e-4)), **extra)


def test_wrapper_found_through_mmdet_and_mmseg_registries():
    pytest.importorskip('mmdet.registry')
    pytest.importorskip('mmseg.registry')
    from mmdet.registry import OPTIM_WRAPPERS as DET
    from mmseg.registry import OPTIM_WRAPPERS as SEG

    import mavit_mm  # noqa: F401  (registers it)
    from mavit_mm.engine.amp import AmpWhereAvailableOptimWrapper
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
    before = model.weight.detach().clone()
    loss = model(torch.ones(1, 2)).sum()
    wrapper.update_params(loss)
    assert model.weight.dtype == torch.float32 and not torch.equal(model.weight, before)


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
