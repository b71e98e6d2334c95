"""Checkpoints written by mmengine's Runner load under torch.load(weights_only=True)
once mavit_mm is imported; nothing beyond the allow-list does."""
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

import mavit_mm  # noqa: F401  (installs the allow-list)
from mavit_mm import torch_load_compat

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def _save_runner_checkpoint(work_dir) -> str:
    """Train a toy model 4 iterations with validation through mmengine's Runner."""
    from mmengine.evaluator import BaseMetric
    from mmengine.model import BaseModel
    from mmengine.runner import Runner
    from torch.utils.data import Dataset

    class Model(BaseModel):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(2, 1)
            self.norm = nn.BatchNorm1d(1)

        def forward(self, inputs, targets, mode='tensor'):
            out = self.norm(self.linear(inputs))
            if mode == 'loss':
                return dict(loss=((out - targets) ** 2).mean())
            return out

    class Points(Dataset):
        metainfo = dict(classes=('a', 'b'), palette=[(1, 2, 3)])

        def __len__(self):
            return 8

        def __getitem__(self, index):
            generator = torch.Generator().manual_seed(index)
            return dict(inputs=torch.randn(2, generator=generator),
                        targets=torch.randn(1, generator=generator))

    class NumpyMetric(BaseMetric):  # numpy scalars in the metrics, as real metrics give
        def process(self, data_batch, data_samples):
            self.results.append(np.float64(0.5))

        def compute_metrics(self, results):
            return dict(score=np.float64(np.mean(results)), count=np.int64(len(results)))

    loader = dict(batch_size=4, sampler=dict(type='DefaultSampler', shuffle=False),
                  collate_fn=dict(type='default_collate'))
    runner = Runner(
        model=Model(), work_dir=str(work_dir),
        train_dataloader=dict(dataset=Points(), **loader),
        val_dataloader=dict(dataset=Points(), **loader),
        val_evaluator=[NumpyMetric()], val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='AdamW', lr=0.01)),
        param_scheduler=[dict(type='LinearLR', start_factor=0.1, by_epoch=False, begin=0, end=2),
                         dict(type='MultiStepLR', milestones=[3], by_epoch=False)],
        train_cfg=dict(by_epoch=False, max_iters=4, val_interval=2),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=4, by_epoch=False,
                                           save_best='score', rule='greater')),
        experiment_name=f'torch_load_compat_{os.getpid()}')
    runner.train()
    return os.path.join(str(work_dir), 'iter_4.pth')


@pytest.fixture(scope='module')
def runner_checkpoint(tmp_path_factory):
    return _save_runner_checkpoint(tmp_path_factory.mktemp('runner'))


def test_runner_checkpoint_loads_with_weights_only(runner_checkpoint):
    checkpoint = torch.load(runner_checkpoint, weights_only=True, map_location='cpu')
    assert checkpoint['meta']['iter'] == 4
    assert set(checkpoint) >= {'state_dict', 'optimizer', 'message_hub', 'param_schedulers'}
    history = checkpoint['message_hub']['log_scalars']['train/loss']
    assert np.isfinite(history.mean())  # the HistoryBuffer is whole, methods included
    assert history.statistics('max') >= history.statistics('min')
    assert float(checkpoint['message_hub']['log_scalars']['val/score'].current()) == 0.5


def test_mmengine_loaders_use_the_allow_list(runner_checkpoint, monkeypatch):
    """mmengine calls torch.load without weights_only (so True on torch >= 2.6):
    the load below is a weights-only one, which the test after it shows torch
    refuses without the allow-list."""
    from mmengine.runner.checkpoint import CheckpointLoader
    calls, load = [], torch.load
    monkeypatch.setattr(torch, 'load', lambda *a, **kw: calls.append(kw) or load(*a, **kw))
    checkpoint = CheckpointLoader.load_checkpoint(runner_checkpoint, map_location='cpu')
    assert checkpoint['meta']['iter'] == 4
    assert calls and all(kw.get('weights_only', True) is True for kw in calls), calls


def test_without_the_allow_list_the_checkpoint_is_refused(runner_checkpoint):
    """Guards the test above: torch really refuses these files by default."""
    code = ('import torch, sys; torch.load(sys.argv[1], weights_only=True, '
            'map_location="cpu")')
    result = subprocess.run([sys.executable, '-c', code, runner_checkpoint],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert 'Weights only load failed' in result.stderr


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}',))


class _GetattrGadget:
    def __reduce__(self):
        from mmengine.logging import HistoryBuffer
        return (getattr, (HistoryBuffer, '__subclasses__'))


def test_code_running_checkpoint_is_refused(tmp_path):
    marker = tmp_path / 'code_ran'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {}, 'meta': _RunsCode(marker)}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    assert not marker.exists()


def test_getattr_is_limited_to_history_buffer_statistics(tmp_path):
    path = tmp_path / 'gadget.pth'
    torch.save({'meta': _GetattrGadget()}, path)
    with pytest.raises(pickle.UnpicklingError, match='__subclasses__'):
        torch.load(path, weights_only=True)
    from mmengine.logging import HistoryBuffer
    assert torch_load_compat.restricted_getattr(HistoryBuffer, 'mean') is HistoryBuffer.mean
    with pytest.raises(pickle.UnpicklingError):
        torch_load_compat.restricted_getattr(os, 'system')


def test_object_arrays_and_other_classes_are_refused(tmp_path):
    objects = tmp_path / 'objects.pth'
    torch.save({'meta': np.array([1, 'text'], dtype=object)}, objects)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(objects, weights_only=True)
    module = tmp_path / 'module.pth'
    torch.save({'model': nn.Linear(2, 2)}, module)  # a whole module, not a state dict
    with pytest.raises(pickle.UnpicklingError):
        torch.load(module, weights_only=True)


def test_numeric_numpy_payloads_load(tmp_path):
    path = tmp_path / 'numpy.pth'
    payload = {'f': np.float32(1.5), 'i': np.int64(3), 'a': np.arange(4, dtype=np.uint8),
               'b': np.array([True, False])}
    torch.save(payload, path)
    loaded = torch.load(path, weights_only=True)
    assert loaded['f'] == np.float32(1.5) and loaded['i'] == 3
    np.testing.assert_array_equal(loaded['a'], payload['a'])
    np.testing.assert_array_equal(loaded['b'], payload['b'])


@pytest.fixture
def http_server(tmp_path, monkeypatch):
    """Serves ``tmp_path / 'served'`` at http://127.0.0.1:<port>/; torch.hub
    downloads into ``tmp_path / 'hub'``."""
    import functools
    import http.server
    import threading
    served = tmp_path / 'served'
    served.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hub_dir = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path / 'hub'))
    yield served, f'http://127.0.0.1:{server.server_address[1]}'
    torch.hub.set_dir(hub_dir)
    server.shutdown()


def test_checkpoints_at_a_url_load_weights_only_too(http_server, tmp_path):
    """mmengine reads http(s) checkpoints (load_from, a Pretrained init_cfg)
    through torch.hub's loader, whose weights_only defaults to False: a
    checkpoint there could run code. Ours reads them as the local files are."""
    from mmengine.runner import CheckpointLoader

    from mavit_mm import MAViT
    from mavit_mm.errors import UnreadableCheckpointError
    served, url = http_server
    source = MAViT('t', depths=[1, 1, 1, 1])
    torch.save({'state_dict': source.state_dict()}, served / 'mavit_t.pth')
    model = MAViT('t', depths=[1, 1, 1, 1],
                  init_cfg=dict(type='Pretrained', checkpoint=f'{url}/mavit_t.pth'))
    model.init_weights()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())
    marker = tmp_path / 'code_ran'
    torch.save({'state_dict': source.state_dict(), 'meta': _RunsCode(marker)}, served / 'evil.pth')
    for load in (lambda: CheckpointLoader.load_checkpoint(f'{url}/evil.pth', map_location='cpu'),
                 MAViT('t', depths=[1, 1, 1, 1], init_cfg=dict(
                     type='Pretrained', checkpoint=f'{url}/evil.pth')).init_weights):
        with pytest.raises(UnreadableCheckpointError,
                           match=r'cannot read http://.*/evil\.pth as a checkpoint \(torch.load '
                                 r'with weights_only=True refused it'):
            load()
    assert not marker.exists()


def test_model_zoo_names_load_weights_only_too(http_server, tmp_path, monkeypatch):
    """mmengine resolves open-mmlab://, torchvision:// and mmcls:// names to an
    address and downloads it past the http(s) loader, with torch.hub's
    weights_only=False. Ours resolve them by mmengine's own tables (here
    pointed at a local server) and read them weights-only."""
    from mmengine.runner import CheckpointLoader
    from mmengine.runner import checkpoint as mmengine_checkpoint

    from mavit_mm import MAViT
    from mavit_mm.errors import UnreadableCheckpointError
    served, url = http_server
    weights = MAViT('t', depths=[1, 1, 1, 1]).state_dict()
    torch.save({'state_dict': weights}, served / 'mavit_t.pth')
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in weights.items()} | {
        'head.fc.weight': torch.zeros(2, 2)}}, served / 'classifier.pth')
    marker = tmp_path / 'code_ran'
    torch.save({'state_dict': weights, 'meta': _RunsCode(marker)}, served / 'evil.pth')
    # open-mmlab:// reads mmengine's table and the user's open_mmlab.json
    # under MMENGINE_HOME; the other two tables come from mmengine's package.
    home = tmp_path / 'mmengine_home'
    home.mkdir()
    (home / 'open_mmlab.json').write_text(json.dumps(
        {'mavit_t': f'{url}/mavit_t.pth', 'evil': f'{url}/evil.pth'}))
    monkeypatch.setenv('MMENGINE_HOME', str(home))
    monkeypatch.setattr(mmengine_checkpoint, 'get_torchvision_models',
                        lambda: {'mavit_t': f'{url}/mavit_t.pth', 'evil': f'{url}/evil.pth'})
    monkeypatch.setattr(mmengine_checkpoint, 'get_mmcls_models',
                        lambda: {'mavit_t': f'{url}/classifier.pth', 'evil': f'{url}/evil.pth'})

    def same(state_dict):
        return state_dict.keys() == weights.keys() and all(
            torch.equal(v, weights[k]) for k, v in state_dict.items())
    for scheme in ('open-mmlab://', 'openmmlab://', 'torchvision://', 'modelzoo://', 'mmcls://'):
        # mmcls: the classifier's backbone weights, without their prefix.
        assert same(CheckpointLoader.load_checkpoint(f'{scheme}mavit_t', 'cpu')['state_dict'])
        with pytest.raises(UnreadableCheckpointError, match=rf'{scheme}evil is http://\S+/evil.pth: cannot read '
                           r'http://\S+/evil.pth as a checkpoint \(torch.load with weights_only=True '
                           r'refused it'):
            CheckpointLoader.load_checkpoint(f'{scheme}evil', map_location='cpu')
        with pytest.raises(UnreadableCheckpointError, match=rf'{scheme} knows no model '
                           r"'resnet1000' \(mmengine.runner.checkpoint.get_\w+_models\(\) lists "
                           r'the \d+ names'):
            CheckpointLoader.load_checkpoint(f'{scheme}resnet1000', map_location='cpu')
    assert not marker.exists()
    model = MAViT('t', depths=[1, 1, 1, 1],
                  init_cfg=dict(type='Pretrained', checkpoint='open-mmlab://mavit_t'))
    model.init_weights()
    assert same(model.state_dict())
