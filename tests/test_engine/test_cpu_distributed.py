"""The pieces of a data-parallel run on CPUs (mavit_mm/engine/cpu_distributed.py
and the run set-up of mavit_mm/tooling/runner_setup.py), without the launch
scripts:

* CPUSyncBatchNorm in two gloo processes equals one BatchNorm over the
  concatenated batch (forward, gradients, running statistics).
* The config adaptations of a CPU run (gloo, CPU DistributedDataParallel,
  SyncBN replaced) and the Slurm environment.

Real two-process runs through tools/dist_train.sh and tools/dist_test.sh:
tests/test_tools/test_distributed_launch.py.
"""
from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.config import Config
from torch import nn

from mavit_mm.engine import cpu_distributed
from mavit_mm.engine.cpu_distributed import CPUSyncBatchNorm
from mavit_mm.tooling import runner_setup
from mavit_mm.tooling.config import ConfigCheckError

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
        monkeypatch.setattr(runner_setup, 'cuda_available', lambda cuda=cuda: cuda)
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


def test_close_process_group_ends_the_run(tmp_path, monkeypatch):
    # The tools destroy the group themselves after train / test, then end the
    # process without interpreter shutdown, where gloo could abort a rank that
    # had finished (SIGABRT).
    exits = []

    def fake_exit(code):
        exits.append(code)
    monkeypatch.setattr(runner_setup, '_closed_a_group', False)
    monkeypatch.setattr(runner_setup.os, '_exit', fake_exit)
    # The logs are flushed and closed first (not this test process's own).
    monkeypatch.setattr(runner_setup.logging, 'shutdown', lambda: exits.append('logs'))
    runner_setup.close_process_group()   # nothing to close: no error
    runner_setup.exit_if_distributed()   # a run of one process ends as ever
    assert exits == []
    dist.init_process_group('gloo', init_method=f'file://{tmp_path / "store"}', rank=0,
                            world_size=1)
    assert dist.is_initialized()
    runner_setup.close_process_group()
    assert not dist.is_initialized()
    runner_setup.exit_if_distributed()
    assert exits == ['logs', 0]


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


def test_mpi_launcher_takes_open_mpis_variables(fake_scontrol, monkeypatch):
    """--launcher mpi, as mmengine's _init_dist_mpi reads mpirun's variables;
    MASTER_ADDR is the user's to set. A group of one then really forms."""
    for name in ('OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'OMPI_COMM_WORLD_LOCAL_RANK'):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigCheckError, match='--launcher mpi: OMPI_COMM_WORLD_RANK is not set'):
        cpu_distributed._mpi_environment(port=None)
    monkeypatch.setenv('OMPI_COMM_WORLD_RANK', '5')
    monkeypatch.setenv('OMPI_COMM_WORLD_SIZE', '8')
    monkeypatch.setenv('OMPI_COMM_WORLD_LOCAL_RANK', '1')
    with pytest.raises(ConfigCheckError, match='--launcher mpi: MASTER_ADDR is not set'):
        cpu_distributed._mpi_environment(port=None)
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    cpu_distributed._mpi_environment(port=29612)
    assert {k: os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_PORT')} == \
        dict(RANK='5', WORLD_SIZE='8', LOCAL_RANK='1', MASTER_PORT='29612')
    assert cpu_distributed.rank_from_environment() == 5
    monkeypatch.setenv('OMPI_COMM_WORLD_RANK', '0')
    monkeypatch.setenv('OMPI_COMM_WORLD_SIZE', '1')
    with socket.socket() as probe:      # a free port for the group's store
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    cfg = Config(dict(launcher='mpi', env_cfg=dict(dist_cfg=dict(backend='gloo', port=port))))
    cpu_distributed.init_process_group(cfg)
    try:
        assert dist.get_rank() == 0 and dist.get_world_size() == 1
    finally:
        dist.destroy_process_group()
