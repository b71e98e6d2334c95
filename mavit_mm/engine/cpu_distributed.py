"""Data-parallel training without CUDA (``tools/dist_train.sh CONFIG 2`` on a CPU),
through public mmengine and torch APIs; with CUDA nothing here changes a run.

mmengine assumes CUDA three times in a distributed run: ``init_dist`` calls
``torch.cuda.set_device`` (so :func:`init_process_group` creates the group the
same way minus that call, and ``Runner.setup_env`` then skips ``init_dist``),
``Runner.wrap_model`` passes ``device_ids=[LOCAL_RANK]``, which a CPU module
rejects, and NCCL and ``torch.nn.SyncBatchNorm`` refuse CPU tensors. So
:func:`adapt_to_cpu` picks gloo and names :class:`CPUDistributedDataParallel`,
which passes no device ids and turns every SyncBN layer into :class:`CPUSyncBatchNorm`.
"""
from __future__ import annotations

import datetime
import inspect
import logging
import os
import subprocess
from collections.abc import Callable

import torch
import torch.distributed as dist
from mmengine.config import Config
from mmengine.logging import print_log
from mmengine.model import MMDistributedDataParallel
from mmengine.registry import MODEL_WRAPPERS, MODELS
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.parallel import DistributedDataParallel

from ..errors import ConfigCheckError

WRAPPER = 'CPUDistributedDataParallel'
DEFAULT_PORT = 29500


# -- CPUSyncBatchNorm --------------------------------------------------------------
class _AllReduceSum(torch.autograd.Function):
    """Sum over the processes of ``group``; the gradient is summed the same way."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        tensor = tensor.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
        return tensor

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


@MODELS.register_module(name='CPUSyncBN')
class CPUSyncBatchNorm(_BatchNorm):
    """Synchronised BatchNorm over N-d inputs (N >= 2) that runs on CPUs.

    BatchNorm's parameters, buffers and state-dict keys. In training mode in a
    multi-process run, the batch statistics come from two all-reduces over the
    group's backend (sums and count, then the centred sum of squares), with
    gradients flowing through them: forward, backward and running statistics
    are those of one BatchNorm over the concatenated batch of all processes.
    Otherwise a plain BatchNorm. Configs may name it ``CPUSyncBN``. Not a
    subclass of ``torch.nn.SyncBatchNorm``, which DDP refuses in a CPU model.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum=0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group=None, device=None, dtype=None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         device=device, dtype=dtype)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f'expected at least 2D input (got {input.dim()}D input)')

    def _sync_group(self):
        """The process group to synchronise over, or None when nothing is to sync."""
        if not (self.training and dist.is_available() and dist.is_initialized()):
            return None
        group = self.process_group or dist.group.WORLD
        return group if dist.get_world_size(group) > 1 else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        group = self._sync_group()
        if group is None:
            return super().forward(input)  # plain BatchNorm
        self._check_input_dim(input)

        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)

        channels = input.size(1)
        dims = [0] + list(range(2, input.dim()))
        shape = [1, channels] + [1] * (input.dim() - 2)
        x = input.float()
        count = x.new_full((1, ), x.numel() // channels)
        totals = _AllReduceSum.apply(torch.cat([x.sum(dims), count]), group)
        n = totals[channels].detach()
        if n < 1:
            raise ValueError('CPUSyncBatchNorm: the batch is empty on every process')
        mean = totals[:channels] / n
        centred = x - mean.view(shape)
        var = _AllReduceSum.apply(centred.pow(2).sum(dims), group) / n
        out = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)

        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (n / (n - 1)) if n > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.detach(), alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.detach(), alpha=factor)
        return out.to(input.dtype)


# -- the model wrapper -----------------------------------------------------------
def _sync_bn_types() -> tuple:
    try:
        from mmcv.ops import SyncBatchNorm as MMSyncBatchNorm
    except ImportError:
        return (nn.SyncBatchNorm,)
    return (nn.SyncBatchNorm, MMSyncBatchNorm)


def to_cpu_sync_bn(module: nn.Module, sync_types: tuple | None = None
                   ) -> tuple[nn.Module, int]:
    """``module`` with every SyncBN (torch's SyncBatchNorm, mmcv's) replaced by
    :class:`CPUSyncBatchNorm` sharing its parameters and buffers; and how many."""
    sync_types = sync_types or _sync_bn_types()
    if isinstance(module, sync_types) and not isinstance(module, CPUSyncBatchNorm):
        converted = CPUSyncBatchNorm(module.num_features, module.eps, module.momentum,
                                     module.affine, module.track_running_stats,
                                     process_group=getattr(module, 'process_group', None))
        if module.affine:
            converted.weight, converted.bias = module.weight, module.bias
        converted.running_mean = module.running_mean
        converted.running_var = module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.training = module.training
        return converted, 1
    count = 0
    for name, child in module.named_children():
        converted, n = to_cpu_sync_bn(child, sync_types)
        if converted is not child:
            setattr(module, name, converted)
        count += n
    return module, count


_DDP_HAS_FORWARD_SYNC_BUFFERS = 'forward_sync_buffers' in inspect.signature(
    DistributedDataParallel.__init__).parameters


@MODEL_WRAPPERS.register_module()
class CPUDistributedDataParallel(MMDistributedDataParallel):
    """mmengine's MMDistributedDataParallel for a model on CPUs: no device ids,
    and SyncBN layers that synchronise CPU tensors (one log line says how many)."""

    def __init__(self, module: nn.Module, **kwargs):
        kwargs['device_ids'] = None
        kwargs['output_device'] = None
        if 'broadcast_buffers' in kwargs and _DDP_HAS_FORWARD_SYNC_BUFFERS:
            # torch >= 2.13 deprecates broadcast_buffers (a FutureWarning per
            # process); the same per-forward behaviour under its new name.
            kwargs.setdefault('forward_sync_buffers', kwargs.pop('broadcast_buffers'))
        module, count = to_cpu_sync_bn(module)
        if count:
            print_log(f'No CUDA device: {count} SyncBN layers (torch.nn.SyncBatchNorm needs '
                      'a GPU) replaced by CPUSyncBatchNorm, which synchronises the batch '
                      'statistics of all processes over gloo.', logger='current',
                      level=logging.WARNING)
        super().__init__(module=module, **kwargs)


# -- the launch side -------------------------------------------------------------
def rank_from_environment() -> int:
    """This process's global rank as the launcher set it (before the process
    group exists): RANK (torchrun), SLURM_PROCID (srun), OMPI_COMM_WORLD_RANK
    (mpirun), else 0."""
    for name in ('RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK'):
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value)
    return 0


def adapt_to_cpu(cfg: Config, log: Callable[[str, int], None]) -> None:
    """The config of a distributed run (``cfg.launcher`` pytorch, slurm or mpi) made
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


def _slurm_environment(port: int | None) -> None:
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
    os.environ.update(WORLD_SIZE=str(ntasks), LOCAL_RANK=str(local_rank), RANK=str(proc_id))


def _mpi_environment(port: int | None) -> None:
    """RANK, WORLD_SIZE, LOCAL_RANK and MASTER_PORT from Open MPI's variables,
    as mmengine's ``_init_dist_mpi`` reads them; MASTER_ADDR the user's."""
    try:
        rank = os.environ['OMPI_COMM_WORLD_RANK']
        world_size = os.environ['OMPI_COMM_WORLD_SIZE']
    except KeyError as missing:
        raise ConfigCheckError(f'--launcher mpi: {missing.args[0]} is not set; start the '
                               'processes with mpirun (Open MPI)') from None
    if 'MASTER_ADDR' not in os.environ:
        raise ConfigCheckError('--launcher mpi: MASTER_ADDR is not set; set it to the first '
                               "process's host, as mmengine's MPI launch needs")
    if port is not None:
        os.environ['MASTER_PORT'] = str(port)
    os.environ.setdefault('MASTER_PORT', str(DEFAULT_PORT))
    os.environ.update(RANK=rank, WORLD_SIZE=world_size,
                      LOCAL_RANK=os.environ.get('OMPI_COMM_WORLD_LOCAL_RANK', '0'))


def init_process_group(cfg: Config) -> None:
    """Create the default process group of a CPU run the way mmengine's
    ``init_dist`` would (launcher pytorch: torchrun's variables; slurm: srun's;
    mpi: Open MPI's), without its ``torch.cuda.set_device``. No-op if it exists
    already."""
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
    elif cfg.launcher == 'mpi':
        _mpi_environment(port)
    elif cfg.launcher != 'pytorch':
        raise ValueError(f'launcher {cfg.launcher!r}: a CPU run supports pytorch, slurm or mpi')
    for name in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT'):
        if name not in os.environ:
            raise ConfigCheckError(f'--launcher {cfg.launcher}: {name} is not set; start the '
                                   'processes with tools/dist_train.sh (torchrun) or srun')
    dist.init_process_group(backend=backend, rank=int(os.environ['RANK']),
                            world_size=int(os.environ['WORLD_SIZE']), **dist_cfg)
