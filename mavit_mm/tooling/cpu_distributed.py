"""Data-parallel runs on machines without CUDA: the launch side (``tools/dist_train.sh CONFIG 2``
on a CPU), through public mmengine and torch APIs.

mmengine assumes CUDA in three places of a distributed run:

* ``mmengine.dist.init_dist`` calls ``torch.cuda.set_device(local_rank)``
  before creating the process group (``AttributeError: module 'torch._C' has no
  attribute '_cuda_setDevice'`` on a CPU-only torch). Without CUDA the tools
  create the process group themselves (:func:`init_process_group`), exactly as
  ``init_dist`` does for the pytorch and slurm launchers minus that call;
  ``Runner.setup_env`` then finds it initialised and skips ``init_dist``.
* ``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]`` to
  DistributedDataParallel, which a CPU module rejects.
* NCCL and ``torch.nn.SyncBatchNorm`` (``SyncBN``) need CUDA.

So the backend becomes gloo, and ``model_wrapper_cfg`` names
:class:`mavit_mm.engine.distributed.CPUDistributedDataParallel` (no device
ids; SyncBN layers that synchronise CPU tensors).

With CUDA nothing here changes the run.
"""
from __future__ import annotations

import datetime
import logging
import os
import subprocess
from typing import Callable, Optional

from mmengine.config import Config

from ..engine.distributed import WRAPPER
from .config import ConfigCheckError

DEFAULT_PORT = 29500


def rank_from_environment() -> int:
    """This process's global rank as the launcher set it (before the process
    group exists): RANK (torchrun), SLURM_PROCID (srun), else 0."""
    for name in ('RANK', 'SLURM_PROCID'):
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def adapt_to_cpu(cfg: Config, log: Callable[[str, int], None]) -> None:
    """The config of a distributed run (``cfg.launcher`` pytorch or slurm) made
    runnable without CUDA: gloo, and the model wrapped by CPUDistributedDataParallel."""
    if cfg.get('env_cfg') is None:
        cfg.env_cfg = dict()
    if cfg.env_cfg.get('dist_cfg') is None:
        cfg.env_cfg.dist_cfg = dict()
    dist_cfg = cfg.env_cfg.dist_cfg
    if dist_cfg.get('backend', 'nccl') == 'nccl':
        dist_cfg.backend = 'gloo'
        log('No CUDA device: distributed backend nccl replaced by gloo.', logging.WARNING)

    wrapper = cfg.get('model_wrapper_cfg')
    if wrapper is None:
        # What Runner.wrap_model builds without a model_wrapper_cfg, on CPUs.
        cfg.model_wrapper_cfg = dict(
            type=WRAPPER, broadcast_buffers=False,
            find_unused_parameters=cfg.get('find_unused_parameters', False))
    elif wrapper.get('type', 'MMDistributedDataParallel') == 'MMDistributedDataParallel':
        wrapper['type'] = WRAPPER
    else:
        wrapper['device_ids'] = None


def _slurm_environment(port: Optional[int]) -> None:
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT from srun's
    variables, as mmengine's ``_init_dist_slurm`` sets them."""
    try:
        proc_id = int(os.environ['SLURM_PROCID'])
        ntasks = int(os.environ['SLURM_NTASKS'])
        node_list = os.environ['SLURM_NODELIST']
    except KeyError as missing:
        raise ConfigCheckError(f'--launcher slurm: {missing.args[0]} is not set; start the '
                           'processes with srun (tools/slurm_train.sh)') from None
    local_rank = int(os.environ.get('SLURM_LOCALID', 0))
    if port is not None:
        os.environ['MASTER_PORT'] = str(port)
    os.environ.setdefault('MASTER_PORT', str(DEFAULT_PORT))
    if 'MASTER_ADDR' not in os.environ:
        first_host = subprocess.run(['scontrol', 'show', 'hostnames', node_list],
                                    capture_output=True, text=True).stdout.split()
        if not first_host:
            raise ConfigCheckError(f'--launcher slurm: no host from `scontrol show hostnames '
                               f'{node_list}`; set MASTER_ADDR')
        os.environ['MASTER_ADDR'] = first_host[0]
    os.environ['WORLD_SIZE'] = str(ntasks)
    os.environ['LOCAL_RANK'] = str(local_rank)
    os.environ['RANK'] = str(proc_id)


def init_process_group(cfg: Config) -> None:
    """Create the default process group of a CPU run the way mmengine's
    ``init_dist`` would (launcher pytorch: torchrun's variables; slurm: srun's),
    without its ``torch.cuda.set_device``. No-op if it exists already."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if dist.is_initialized():
        return
    dist_cfg = dict(cfg.get('env_cfg', {}).get('dist_cfg', {}))
    backend = dist_cfg.pop('backend', 'gloo')
    dist_cfg.pop('init_backend', None)
    port = dist_cfg.pop('port', None)
    if dist_cfg.get('timeout') is not None:
        dist_cfg['timeout'] = datetime.timedelta(seconds=dist_cfg['timeout'])
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method('spawn')  # as init_dist
    if cfg.launcher == 'slurm':
        _slurm_environment(port)
    elif cfg.launcher != 'pytorch':
        raise ValueError(f'launcher {cfg.launcher!r}: a CPU run supports pytorch or slurm')
    for name in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        if name not in os.environ:
            raise ConfigCheckError(f'--launcher {cfg.launcher}: {name} is not set; start the '
                               'processes with tools/dist_train.sh (torchrun) or srun')
    dist.init_process_group(backend=backend, rank=int(os.environ['RANK']),
                            world_size=int(os.environ['WORLD_SIZE']), **dist_cfg)
