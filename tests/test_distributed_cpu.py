"""Data-parallel training and evaluation for real, on CPUs: two processes
started by tools/dist_train.sh / tools/dist_test.sh (torchrun, gloo).

* CPUSyncBatchNorm in two gloo processes equals one BatchNorm over the
  concatenated batch (forward, gradients, running statistics).
* The config adaptations of a CPU run (gloo, CPU DistributedDataParallel,
  SyncBN replaced) and the Slurm environment.
* End to end: dist_train.sh CONFIG 2 --auto-scale-lr trains a demo pipeline;
  a probe hook in each process (tests/dist_probe.py) shows that both ranks
  trained on different images of every batch, with the learning rate scaled
  to the total batch, and ended with identical weights and BN statistics,
  equal to the saved checkpoint; tools/test.py evaluates that
  checkpoint, and dist_test.sh with two processes reports the same metrics.
"""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.config import Config
from PIL import Image
from torch import nn

from mavit_mm.engine import cpu_distributed
from mavit_mm.engine.cpu_distributed import CPUSyncBatchNorm
from mavit_mm.tooling import runner_setup
from mavit_mm.tooling.config import ConfigCheckError, load_config, set_iterations
from mavit_mm.tooling.demo_jobs import DEMO_JOBS
from mavit_mm.tooling.json_logs import latest_test_metrics
from tool_helpers import (REPO_ROOT, explain, make_tiny_data, run_tool,
                          write_tiny_config)

TESTS_DIR = Path(__file__).resolve().parent
DEMO_DATA = REPO_ROOT / 'data' / 'demo'
LAUNCHER_VARIABLES = ('MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK',
                      'NNODES', 'NODE_RANK', 'PORT')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


# -- CPUSyncBatchNorm ------------------------------------------------------------

# Per-rank batch sizes differ on purpose: the statistics weigh every sample.
BATCH_SIZES = (3, 5)
CHANNELS = 4


def _inputs():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(sum(BATCH_SIZES), CHANNELS, 5, 6, generator=generator) * 3 + 1
    upstream = torch.randn(x.shape, generator=generator)  # d loss / d output
    return x, upstream


def _sync_bn_worker(rank: int, world_size: int, init_file: str):
    dist.init_process_group('gloo', init_method=f'file://{init_file}', rank=rank,
                            world_size=world_size)
    try:
        torch.manual_seed(1)
        reference = nn.BatchNorm2d(CHANNELS, momentum=0.3)
        nn.init.uniform_(reference.weight, 0.5, 1.5)
        nn.init.uniform_(reference.bias, -0.5, 0.5)
        synced = CPUSyncBatchNorm(CHANNELS, momentum=0.3)
        synced.load_state_dict(reference.state_dict())

        x, upstream = _inputs()
        start = sum(BATCH_SIZES[:rank])
        part = slice(start, start + BATCH_SIZES[rank])

        x_ref = x.clone().requires_grad_()
        (reference(x_ref) * upstream).sum().backward()
        x_mine = x[part].clone().requires_grad_()
        out = synced(x_mine)
        (out * upstream[part]).sum().backward()

        def close(a, b, what):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), \
                f'rank {rank}: {what} differs by {(a - b).abs().max():.3g}'

        with torch.no_grad():
            expected = nn.functional.batch_norm(
                x, None, None, reference.weight, reference.bias, True, 0.0, reference.eps)
        close(out.detach(), expected[part], 'output')
        close(x_mine.grad, x_ref.grad[part], 'input gradient')
        # Each process holds the gradient of its own loss; summed over the
        # processes they are the gradient of the whole batch's loss.
        for name in ('weight', 'bias'):
            grad = getattr(synced, name).grad.clone()
            dist.all_reduce(grad)
            close(grad, getattr(reference, name).grad, f'{name} gradient')
        close(synced.running_mean, reference.running_mean, 'running mean')
        close(synced.running_var, reference.running_var, 'running variance')
        assert int(synced.num_batches_tracked) == 1
        # Eval mode: the running statistics, no communication.
        synced.eval()
        reference.eval()
        close(synced(x[part]), reference(x[part]), 'eval output')
    finally:
        dist.destroy_process_group()


def test_cpu_sync_bn_equals_batchnorm_over_all_processes(tmp_path):
    mp.spawn(_sync_bn_worker, args=(2, str(tmp_path / 'init')), nprocs=2, join=True)


def test_cpu_sync_bn_is_plain_batchnorm_in_one_process():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    reference, synced = nn.BatchNorm2d(3), CPUSyncBatchNorm(3)
    assert torch.equal(synced(x), reference(x))
    assert set(synced.state_dict()) == set(reference.state_dict())


def test_model_wrapper_converts_every_sync_bn():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.SyncBatchNorm(4, momentum=0.2),
                          nn.Sequential(nn.SyncBatchNorm(4, affine=False), nn.BatchNorm2d(4)))
    weight = model[1].weight
    converted, count = cpu_distributed.to_cpu_sync_bn(model)
    assert count == 2
    assert [type(m).__name__ for m in converted.modules() if 'Norm' in type(m).__name__] == \
        ['CPUSyncBatchNorm', 'CPUSyncBatchNorm', 'BatchNorm2d']
    assert converted[1].weight is weight and converted[1].momentum == 0.2  # shared, same settings
    assert converted[2][0].weight is None
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in converted.modules())


# -- the config of a CPU run -------------------------------------------------------

def test_cpu_run_config_adaptations():
    messages = []
    cfg = Config(dict(launcher='pytorch', find_unused_parameters=True,
                      env_cfg=dict(dist_cfg=dict(backend='nccl'))))
    cpu_distributed.adapt_to_cpu(cfg, lambda message, level: messages.append(message))
    assert cfg.env_cfg.dist_cfg.backend == 'gloo'
    assert cfg.model_wrapper_cfg.type == 'CPUDistributedDataParallel'
    assert cfg.model_wrapper_cfg.find_unused_parameters is True
    assert len(messages) == 1 and 'gloo' in messages[0]
    # A config's own DDP settings are kept; another wrapper only loses its device ids.
    own = Config(dict(launcher='pytorch', model_wrapper_cfg=dict(
        type='MMDistributedDataParallel', broadcast_buffers=True)))
    cpu_distributed.adapt_to_cpu(own, lambda *args: None)
    assert own.model_wrapper_cfg == dict(type='CPUDistributedDataParallel',
                                         broadcast_buffers=True)
    other = Config(dict(launcher='pytorch', model_wrapper_cfg=dict(type='Custom')))
    cpu_distributed.adapt_to_cpu(other, lambda *args: None)
    assert other.model_wrapper_cfg == dict(type='Custom', device_ids=None)


def test_only_a_multi_process_run_without_cuda_is_changed(monkeypatch):
    monkeypatch.setattr(runner_setup, 'log', lambda *args, **kwargs: None)
    for launcher, cuda in (('none', False), ('pytorch', True), ('slurm', True)):
        monkeypatch.setattr(runner_setup, 'cuda_available', lambda: cuda)
        cfg = Config(dict(launcher=launcher, env_cfg=dict(dist_cfg=dict(backend='nccl'))))
        runner_setup.configure_dist_backend(cfg)
        assert cfg.env_cfg.dist_cfg.backend == 'nccl' and 'model_wrapper_cfg' not in cfg
    monkeypatch.setattr(runner_setup, 'cuda_available', lambda: False)
    cfg = Config(dict(launcher='slurm'))
    runner_setup.configure_dist_backend(cfg)
    assert cfg.env_cfg.dist_cfg.backend == 'gloo'
    assert cfg.model_wrapper_cfg.type == 'CPUDistributedDataParallel'


def test_messages_only_from_the_first_process(monkeypatch):
    printed = []
    monkeypatch.setattr(runner_setup, 'print_log', lambda message, **kwargs: printed.append(message))
    monkeypatch.setenv('RANK', '1')
    runner_setup.log('from rank 1')
    monkeypatch.setenv('RANK', '0')
    runner_setup.log('from rank 0')
    monkeypatch.delenv('RANK')
    monkeypatch.setenv('SLURM_PROCID', '3')
    runner_setup.log('from slurm task 3')
    assert printed == ['from rank 0']


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    scontrol = bin_dir / 'scontrol'
    scontrol.write_text('#!/usr/bin/env bash\n'
                        '[ "$1 $2 $3" = "show hostnames node[07-08]" ] && '
                        'printf "node07\\nnode08\\n"\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv('PATH', f'{bin_dir}{os.pathsep}{os.environ["PATH"]}')
    # _slurm_environment writes these into os.environ: set through monkeypatch
    # first so that they are restored (removed) afterwards and cannot leak into
    # the launches of later tests (a stray MASTER_ADDR sends torchrun elsewhere).
    for name in ('MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK'):
        monkeypatch.setenv(name, '')
        monkeypatch.delenv(name)


def test_close_process_group_ends_the_run(tmp_path):
    # The tools destroy the group themselves after train / test: left to
    # interpreter shutdown, gloo could abort a rank that had finished (SIGABRT).
    dist.init_process_group('gloo', init_method=f'file://{tmp_path / "store"}', rank=0,
                            world_size=1)
    assert dist.is_initialized()
    runner_setup.close_process_group()
    assert not dist.is_initialized()
    runner_setup.close_process_group()   # nothing to close: no error


def test_slurm_environment(fake_scontrol, monkeypatch):
    """What --launcher slurm derives from srun's variables (as mmengine's _init_dist_slurm)."""
    monkeypatch.setenv('SLURM_PROCID', '9')
    monkeypatch.setenv('SLURM_NTASKS', '16')
    monkeypatch.setenv('SLURM_LOCALID', '1')
    monkeypatch.setenv('SLURM_NODELIST', 'node[07-08]')
    cpu_distributed._slurm_environment(port=None)
    assert {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR',
                                       'MASTER_PORT')} == dict(
        RANK='9', WORLD_SIZE='16', LOCAL_RANK='1', MASTER_ADDR='node07', MASTER_PORT='29500')
    cpu_distributed._slurm_environment(port=29611)  # dist_cfg.port wins
    assert os.environ['MASTER_PORT'] == '29611'


def test_slurm_launcher_outside_srun_is_a_clear_error(fake_scontrol, monkeypatch):
    for name in ('SLURM_PROCID', 'SLURM_NTASKS', 'SLURM_NODELIST'):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigCheckError, match='SLURM_PROCID is not set'):
        cpu_distributed._slurm_environment(port=None)


# -- --auto-scale-lr on the published configs (docs/training.md's table) -------------

PUBLISHED = ('mask_rcnn', 'retinanet', 'cascade_rcnn', 'sem_fpn', 'upernet')
# Starting learning rate after --auto-scale-lr, by number of GPUs (2 images each).
README_SCALED_LR = {
    'mask_rcnn': {1: 5e-5, 4: 2e-4, 8: 4e-4, 16: 8e-4},
    'retinanet': {1: 5e-5, 4: 2e-4, 8: 4e-4, 16: 8e-4},
    'cascade_rcnn': {1: 5e-5, 4: 2e-4, 8: 4e-4, 16: 8e-4},
    'sem_fpn': {1: 1.25e-5, 4: 5e-5, 8: 1e-4, 16: 2e-4},
    'upernet': {1: 7.5e-6, 4: 3e-5, 8: 6e-5, 16: 1.2e-4},
}


def test_auto_scale_lr_of_the_published_configs():
    """mmengine's Runner.scale_lr, run on every published config for 1, 4, 8 and
    16 GPUs, gives the learning rates docs/training.md lists."""
    from types import SimpleNamespace
    from mmengine.logging import MMLogger
    from mmengine.optim import OptimWrapper
    from mmengine.runner import Runner

    configs = sorted(path for family in PUBLISHED
                     for path in (REPO_ROOT / 'configs' / family).glob('*.py'))
    assert len(configs) == 24
    for path in configs:
        cfg = load_config(path)
        assert cfg.train_dataloader.batch_size == 2, path.name
        assert cfg.auto_scale_lr == dict(enable=False, base_batch_size=16), path.name
        for gpus, expected in README_SCALED_LR[path.parent.name].items():
            optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(1))],
                                          lr=cfg.optim_wrapper.optimizer.lr)
            runner = SimpleNamespace(_train_dataloader=cfg.train_dataloader, world_size=gpus,
                                     param_schedulers=None,
                                     logger=MMLogger.get_instance('auto_scale_lr_test'))
            Runner.scale_lr(runner, OptimWrapper(optimizer),
                            dict(cfg.auto_scale_lr, enable=True))
            assert math.isclose(optimizer.param_groups[0]['lr'], expected), \
                (path.name, gpus, optimizer.param_groups[0]['lr'])
    # Without the flag (enable=False, as in the configs) the lr is the config's.
    optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=4e-4)
    Runner.scale_lr(runner, OptimWrapper(optimizer), dict(enable=False, base_batch_size=16))
    assert optimizer.param_groups[0]['lr'] == 4e-4


# -- end to end: dist_train.sh / test.py / dist_test.sh ------------------------------

def _probe_config(base: Path, probe_dir: Path, out: Path) -> Path:
    cfg = load_config(base)
    cfg.custom_imports = dict(imports=['dist_probe'], allow_failed_imports=False)
    cfg.custom_hooks = list(cfg.get('custom_hooks') or []) + [
        dict(type='RankProbeHook', out_dir=str(probe_dir))]
    cfg.dump(str(out))
    return out


def _launch(script: str, *args, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run tools/<script> as a user would, on a free port, one thread per process.

    torchrun and its workers run in a session of their own: on a timeout the
    whole session is killed (no orphaned workers) and the test fails with the
    output so far."""
    # A fresh shell's environment: no launcher variables (a MASTER_ADDR would
    # be the script's --master_addr), the tests' hook importable.
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARIABLES and not k.startswith('SLURM_')}
    env.update(PORT=str(free_port()), OMP_NUM_THREADS='1', PYTHON=sys.executable,
               PYTHONUNBUFFERED='1',
               PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS_DIR),
                                                        os.environ.get('PYTHONPATH')])))
    command = ['bash', str(REPO_ROOT / 'tools' / script), *map(str, args)]
    start = time.time()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, cwd=cwd, env=env, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f'{script} did not finish in {timeout} s (killed): a hang, or a machine '
                    f'too busy\n--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n'
                    f'{stderr[-4000:]}')
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    result.seconds = time.time() - start
    return result


def _check_two_process_training(probe_dir: Path, checkpoint: Path, max_iters: int):
    probes = [probe_dir / f'rank{rank}.pt' for rank in (0, 1)]
    missing = [p.name for p in probes if not p.is_file()]
    assert not missing, f'no probe from {missing}: that process did not train'
    rank0, rank1 = (torch.load(p, weights_only=False) for p in probes)
    for rank, probe in enumerate((rank0, rank1)):
        assert (probe['rank'], probe['world_size'], probe['iters']) == (rank, 2, max_iters)
        assert probe['wrapper'] == 'CPUDistributedDataParallel'
        assert 'CPUSyncBatchNorm' in probe['norm_types']
        assert 'SyncBatchNorm' not in probe['norm_types']
        assert len(probe['batches']) == max_iters
    # Data parallel: in every iteration the two processes trained on different images.
    for step, (mine, theirs) in enumerate(zip(rank0['batches'], rank1['batches'])):
        assert mine and theirs and not set(mine) & set(theirs), (step, mine, theirs)

    # The same model in both processes after training: gradients averaged and
    # BN statistics synchronised (each process saw other images), ...
    state0, state1 = rank0['state_dict'], rank1['state_dict']
    assert state0.keys() == state1.keys()
    differing = [k for k in state0 if not torch.equal(state0[k], state1[k])]
    assert not differing, f'ranks differ after training in {differing[:10]}'
    bn_means = [k for k in state0 if k.endswith('running_mean')]
    assert bn_means and any(state0[k].abs().sum() > 0 for k in bn_means)
    # ... that training changed, ...
    changed = [name for name, before in rank0['initial_sums'].items()
               if not math.isclose(before, float(state0[name].double().sum()),
                                   rel_tol=0, abs_tol=0)]
    assert len(changed) > 0.5 * len(rank0['initial_sums']), \
        f'only {len(changed)} of {len(rank0["initial_sums"])} parameters changed'
    # ... and what the checkpoint holds.
    saved = torch.load(checkpoint, map_location='cpu', weights_only=False)['state_dict']
    assert saved.keys() == state0.keys()
    assert all(torch.equal(saved[k], state0[k]) for k in saved)


def _train_and_evaluate(config: Path, work: Path, max_iters: int, metric: str):
    probe_dir = work / 'probe'
    probed = _probe_config(config, probe_dir, work / f'probed_{config.name}')
    train_dir = work / 'train'
    result = _launch('dist_train.sh', probed, 2, '--work-dir', train_dir, '--auto-scale-lr',
                     cwd=REPO_ROOT)
    assert result.returncode == 0, explain(result)
    output = result.stdout + result.stderr
    # Said once (by rank 0), not once per process.
    assert output.count('distributed backend nccl replaced by gloo') == 1, output[-3000:]
    assert output.count('replaced by CPUSyncBatchNorm') == 1, output[-3000:]
    assert sum('mixed precision' in line for line in output.splitlines()) == 1
    assert 'Distributed training: True' in output
    checkpoint = train_dir / f'iter_{max_iters}.pth'
    assert checkpoint.is_file(), sorted(p.name for p in train_dir.iterdir())
    _check_two_process_training(probe_dir, checkpoint, max_iters)
    # --auto-scale-lr: lr x (2 processes x batch size) / auto_scale_lr.base_batch_size.
    cfg = load_config(config)
    total_batch = 2 * cfg.train_dataloader.batch_size
    ratio = total_batch / cfg.auto_scale_lr.base_batch_size
    assert (f'based on batch size of {cfg.auto_scale_lr.base_batch_size} and the current '
            f'batch size is {total_batch}. Scaling the original LR by {ratio}') in output
    for rank in (0, 1):
        base_lrs = torch.load(probe_dir / f'rank{rank}.pt', weights_only=False)['base_lrs']
        assert base_lrs and all(math.isclose(lr, cfg.optim_wrapper.optimizer.lr * ratio)
                                for lr in base_lrs), base_lrs
    timings = dict(dist_train=result.seconds)

    # Segmentation --out: one predicted label PNG per image, written by the
    # process that evaluated it.
    one_per_batch = ('--cfg-options', 'test_dataloader.batch_size=1')
    single = run_tool('test.py', config, checkpoint, '--work-dir', work / 'test1',
                      '--out', work / 'pred1', *one_per_batch, cwd=REPO_ROOT)
    assert single.returncode == 0, explain(single)
    metrics = latest_test_metrics(work / 'test1')
    assert metrics and metric in metrics, metrics
    assert math.isfinite(metrics[metric]) and metrics[metric] >= 0
    predictions = sorted(p.name for p in (work / 'pred1').iterdir())
    assert len(predictions) >= 2 and len(predictions) % 2 == 0, predictions
    timings['test'] = single.seconds

    double = _launch('dist_test.sh', config, checkpoint, 2, '--work-dir', work / 'test2',
                     '--out', work / 'pred2', *one_per_batch, cwd=REPO_ROOT)
    assert double.returncode == 0, explain(double)
    metrics2 = latest_test_metrics(work / 'test2')
    assert metrics2 is not None and metrics2.keys() == metrics.keys()
    for name, value in metrics.items():
        assert math.isclose(metrics2[name], value, rel_tol=1e-6, abs_tol=1e-6), \
            (name, value, metrics2[name])
    # Both processes evaluated, half the images each (one per batch), and
    # predicted what one process does.
    output = double.stdout + double.stderr
    half = len(predictions) // 2
    assert f'Iter(test) [{half}/{half}]' in output, output[-3000:]
    assert f'Iter(test) [{len(predictions)}/{len(predictions)}]' not in output
    predictions2 = sorted(p.name for p in (work / 'pred2').iterdir())
    assert predictions2 == predictions
    for name in predictions:
        assert np.array_equal(np.array(Image.open(work / 'pred1' / name)),
                              np.array(Image.open(work / 'pred2' / name))), name
    timings['dist_test'] = double.seconds
    return metrics, timings


@pytest.mark.skipif(sys.platform == 'win32', reason='bash launcher')
def test_dist_train_two_processes_on_cpu(tmp_path):
    """dist_train.sh CONFIG 2 on the Semantic FPN demo pipeline (the smallest
    MAViT-T model, SyncBN in backbone and head), tiny generated demo data."""
    pytest.importorskip('mmseg.models')
    roots = make_tiny_data(tmp_path / 'data')
    max_iters = 3
    config = write_tiny_config('sem_fpn', roots, tmp_path / 'configs', max_iters)
    metrics, timings = _train_and_evaluate(config, tmp_path, max_iters, 'mIoU')
    print(f'metrics {metrics}; seconds {timings}')


@pytest.mark.slow
@pytest.mark.skipif(not (DEMO_DATA / 'ade20k').is_dir(),
                    reason='bundled demo data missing: python tools/make_demo_data.py')
def test_dist_train_upernet_demo_config(tmp_path):
    """The issue's command on the bundled demo data: the UperNet-T demo config
    as shipped, 4 iterations, 2 processes; then test.py and dist_test.sh."""
    pytest.importorskip('mmseg.models')
    max_iters = 4
    cfg = load_config(REPO_ROOT / DEMO_JOBS['upernet'].config)
    set_iterations(cfg, max_iters)
    cfg.default_hooks.logger.interval = 1
    config = tmp_path / 'upernet_demo_4iters.py'
    cfg.dump(str(config))
    metrics, timings = _train_and_evaluate(config, tmp_path, max_iters, 'mIoU')
    print(f'metrics {metrics}; seconds {timings}')
