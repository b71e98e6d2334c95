"""What ``tools/train.py`` and ``tools/test.py`` share: applying the command-line
options to the config, adapting it to the machine, and building mmengine's Runner,
for detection and segmentation configs alike (``cfg.default_scope``).
"""
from __future__ import annotations

import logging
import os
import os.path as osp

from mmengine.config import Config
from mmengine.logging import print_log

from ..engine import amp, cpu_distributed
from .config import ConfigCheckError, FormattedOnceConfig

CFG_OPTIONS_HELP = (
    'override settings of the config, as key=value pairs merged into it, e.g. '
    'train_cfg.max_iters=100 optim_wrapper.optimizer.lr=1e-4. A list value is given as '
    'key="[a,b]" or key=a,b, nested lists/tuples as key="[(a,b),(c,d)]" (quotes needed, '
    'no spaces).')
LAUNCHER_HELP = ('how the processes were started: none (one process), pytorch (torchrun / '
                 'tools/dist_train.sh, tools/dist_test.sh), slurm (srun) or mpi (Open MPI\'s '
                 'mpirun, with MASTER_ADDR set)')
LAUNCHERS = ['none', 'pytorch', 'slurm', 'mpi']
LOCAL_RANK_HELP = ('rank of this process on its node; set by older launchers '
                   '(torch.distributed.launch). torchrun sets the LOCAL_RANK variable instead')


def log(message: str, level: int = logging.INFO) -> None:
    """Log through mmengine's current logger (the console before a Runner exists);
    in a multi-process run only the first process logs (once, not once per rank)."""
    if cpu_distributed.rank_from_environment() == 0:
        print_log(message, logger='current', level=level)


def export_local_rank(local_rank: int) -> None:
    """mmengine reads the rank from LOCAL_RANK; older launchers pass --local-rank."""
    os.environ.setdefault('LOCAL_RANK', str(local_rank))


def set_work_dir(cfg: Config, work_dir: str | None, config_path: str) -> None:
    """Priority: --work-dir, then the config's work_dir, then ./work_dirs/<config name>."""
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(config_path))[0])


def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def configure_amp(cfg: Config, amp_requested: bool) -> None:
    """Mixed precision where it helps (CUDA); plain fp32 OptimWrapper on a CPU.

    ``AmpWhereAvailableOptimWrapper`` (:mod:`mavit_mm.engine.amp`) chooses itself
    and is left as it is; mmengine's AmpOptimWrapper becomes OptimWrapper without
    CUDA. ``--amp`` turns a plain OptimWrapper into AmpOptimWrapper on a GPU and is
    ignored, loudly, on a CPU. A plain OptimWrapper (the config's, or set with
    ``--cfg-options optim_wrapper.type=OptimWrapper`` to train in fp32) drops
    the recipe's AMP-only settings (``loss_scale``, ...), which it would refuse.
    """
    optim_wrapper = cfg.get('optim_wrapper')
    if optim_wrapper is None:
        if amp_requested:
            log('--amp ignored: the config has no optim_wrapper', logging.WARNING)
        return
    wrapper_type = optim_wrapper.get('type', 'OptimWrapper')
    if not cuda_available():
        if wrapper_type == 'AmpOptimWrapper':
            optim_wrapper.type = 'OptimWrapper'
            log('No CUDA device: the config\'s AmpOptimWrapper is replaced by OptimWrapper '
                '(fp32 training; mixed precision needs a GPU).', logging.WARNING)
        if amp_requested:
            log('--amp ignored: no CUDA device, training in fp32.', logging.WARNING)
        # (the replacement's own line says why, so its drop is not announced again)
        _drop_amp_only_settings(optim_wrapper, announce=wrapper_type != 'AmpOptimWrapper')
        return
    if amp_requested:
        if wrapper_type in ('AmpOptimWrapper', amp.NAME):
            log(f'--amp: mixed precision is already on in the config ({wrapper_type}).')
        else:
            optim_wrapper.type = 'AmpOptimWrapper'
            optim_wrapper.setdefault('loss_scale', 'dynamic')
            log('--amp: training with AmpOptimWrapper (dynamic loss scale).')
    _drop_amp_only_settings(optim_wrapper)


def _drop_amp_only_settings(optim_wrapper, announce: bool = True) -> None:
    """A plain OptimWrapper without AmpOptimWrapper's own arguments."""
    if optim_wrapper.get('type', 'OptimWrapper') != 'OptimWrapper':
        return
    dropped = [key for key in amp.AMP_ONLY_KEYS if key in optim_wrapper]
    for key in dropped:
        optim_wrapper.pop(key)
    if dropped and announce:
        log(f'optim_wrapper is a plain OptimWrapper (fp32): {", ".join(dropped)} dropped '
            '(settings of AmpOptimWrapper).')


def configure_dist_backend(cfg: Config) -> None:
    """A distributed run without CUDA made runnable (:mod:`mavit_mm.engine.cpu_distributed`)."""
    if cfg.get('launcher', 'none') == 'none' or cuda_available():
        return
    cpu_distributed.adapt_to_cpu(cfg, log)


def configure_resume(cfg: Config, resume: str | None) -> None:
    """--resume (no value / 'auto'): latest checkpoint of the work dir; --resume FILE: that file."""
    if resume is None:
        return
    cfg.resume = True
    cfg.load_from = None if resume == 'auto' else resume


def configure_auto_scale_lr(cfg: Config) -> None:
    auto_scale_lr = cfg.get('auto_scale_lr')
    if not auto_scale_lr or 'base_batch_size' not in auto_scale_lr:
        raise ConfigCheckError(
            '--auto-scale-lr needs auto_scale_lr = dict(enable=False, base_batch_size=N) in '
            'the config, N being the total batch size its learning rate is meant for '
            '(16 for the published MAViT recipes)')
    auto_scale_lr.enable = True


def configure_visualization(cfg: Config, show_dir: str | None, show: bool = False,
                            wait_time: float = 2.0) -> None:
    """Draw predictions of the test run into ``show_dir`` and / or, with
    ``show``, in a window for ``wait_time`` seconds each (mmdet's and mmseg's
    ``tools/test.py --show-dir / --show / --wait-time``)."""
    hooks = cfg.get('default_hooks') or {}
    hook = hooks.get('visualization')
    if hook is None:
        raise ConfigCheckError("--show-dir and --show need default_hooks.visualization (a "
                               "DetVisualizationHook / SegVisualizationHook) in the config")
    hook['draw'] = True
    if show:
        hook['show'] = True
        hook['wait_time'] = wait_time
    if cfg.default_scope != 'mmdet':
        # SegVisualizationHook draws every `interval` images through the visualizer.
        hook['interval'] = 1
    if show_dir is None:
        return
    if cfg.default_scope == 'mmdet':
        # DetVisualizationHook saves to <work_dir>/<timestamp>/<test_out_dir>.
        hook['test_out_dir'] = show_dir
    else:
        cfg.visualizer['save_dir'] = show_dir


# mmdet's default test-time augmentation where a config names none (as its own
# tools/test.py --tta): the image and its horizontal flip, boxes merged by NMS.
DET_TTA_MODEL = dict(type='DetTTAModel',
                     tta_cfg=dict(nms=dict(type='nms', iou_threshold=0.5), max_per_img=100))
DET_TTA_META_KEYS = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor', 'flip',
                     'flip_direction')


def configure_tta(cfg: Config) -> None:
    """Test-time augmentation, as mmdet's and mmseg's ``tools/test.py --tta``:
    the config's ``tta_model`` wraps its model and ``tta_pipeline`` replaces the
    test pipeline. mmseg's ADE20K base names both (flips at six scales); an
    mmdet config without them gets mmdet's flip default. mmdet 3.3's
    DetTTAModel merges boxes only, so a model with masks is refused."""
    # The dataset that runs the pipeline, inside wrappers (RepeatDataset ...).
    dataset = cfg.test_dataloader.dataset
    while 'dataset' in dataset:
        dataset = dataset.dataset
    if 'pipeline' not in dataset:
        raise ConfigCheckError('--tta: the test dataset has no pipeline of its own to replace '
                               '(a ConcatDataset of several?)')
    if cfg.default_scope == 'mmdet':
        roi_head = cfg.model.get('roi_head') or {}
        if roi_head.get('mask_head') is not None:
            raise ConfigCheckError(
                '--tta: mmdet 3.3 has no test-time augmentation for instance segmentation '
                "(DetTTAModel merges boxes only); this config's model predicts masks")
        cfg.setdefault('tta_model', DET_TTA_MODEL)
        if 'tta_pipeline' not in cfg:
            pipeline = list(dataset.pipeline)
            pipeline[-1] = dict(type='TestTimeAug', transforms=[
                [dict(type='RandomFlip', prob=1.), dict(type='RandomFlip', prob=0.)],
                [dict(type='PackDetInputs', meta_keys=DET_TTA_META_KEYS)]])
            cfg.tta_pipeline = pipeline
    missing = [key for key in ('tta_model', 'tta_pipeline') if key not in cfg]
    if missing:
        raise ConfigCheckError(f'--tta: the config names no {" or ".join(missing)}')
    cfg.model = dict(cfg.tta_model, module=cfg.model)
    dataset.pipeline = cfg.tta_pipeline
    log(f'--tta: {cfg.tta_model["type"]} over the config\'s tta_pipeline')


def configure_prediction_output(cfg: Config, out: str) -> None:
    """mmseg: --out is a folder for the predicted label maps (set on the evaluator).

    Every process creates the folder: mmseg's IoUMetric creates it in the main
    process only, with no barrier, so in a distributed test another rank could
    save its first map before the folder exists (FileNotFoundError)."""
    if cfg.default_scope == 'mmseg':
        os.makedirs(out, exist_ok=True)
        evaluators = cfg.test_evaluator
        for evaluator in evaluators if isinstance(evaluators, list) else [evaluators]:
            evaluator['output_dir'] = out
    elif not out.endswith(('.pkl', '.pickle')):
        raise ConfigCheckError(f'--out {out}: detection predictions are dumped to a pickle '
                               'file; give a path ending in .pkl or .pickle')


def attach_prediction_dump(runner, cfg: Config, out: str) -> None:
    """mmdet: --out is a pickle of the predictions, written by DumpDetResults."""
    if cfg.default_scope != 'mmdet':
        return
    from mmdet.evaluation import DumpDetResults
    runner.test_evaluator.metrics.append(DumpDetResults(out_file_path=out))


_closed_a_group = False   # whether this process ran distributed and is done


def close_process_group() -> None:
    """End a distributed run cleanly: wait for every process, then destroy the
    process group."""
    global _closed_a_group
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        _closed_a_group = True


def exit_if_distributed() -> None:
    """End a process whose distributed run is done (``close_process_group``)
    without interpreter shutdown, where gloo's threads can still abort it
    (SIGABRT, "terminate called without an active exception") and torchrun then
    reports the run as failed. The runner's objects (data loader workers among
    them) are freed and the logs and streams flushed first. A tool's last call."""
    if not _closed_a_group:
        return
    import gc
    import sys
    gc.collect()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def add_cache_reset_after_ema(cfg: Config) -> None:
    """Beside an EMAHook, the hook that starts MAViT's cached derived weights
    afresh after its swaps (:class:`~mavit_mm.engine.hooks.FreshDerivedWeightsAfterEMAHook`)."""
    hooks = list(cfg.get('custom_hooks') or [])
    names = [_hook_name(hook.get('type')) for hook in hooks]
    if 'EMAHook' in names and 'FreshDerivedWeightsAfterEMAHook' not in names:
        from ..engine import hooks as _registers_the_hook  # noqa: F401
        cfg.custom_hooks = hooks + [dict(type='FreshDerivedWeightsAfterEMAHook')]


def _hook_name(hook_type) -> str:
    """A hook's registered name as a config gives it: a name (with a scope,
    'mmengine.EMAHook', or without) or the class."""
    name = hook_type if isinstance(hook_type, str) else getattr(hook_type, '__name__', '')
    return name.split('.')[-1]


def build_runner(cfg: Config):
    """mmengine's Runner (or the config's runner_type), built from the config.

    Without CUDA the process group of a distributed run is created here, since
    mmengine's ``init_dist`` would call ``torch.cuda.set_device``."""
    if cfg.get('launcher', 'none') != 'none' and not cuda_available():
        cpu_distributed.init_process_group(cfg)
    add_cache_reset_after_ema(cfg)
    cfg = FormattedOnceConfig.of(cfg)   # yapf once, not at every log, dump and checkpoint
    if 'runner_type' in cfg:
        from mmengine.registry import RUNNERS
        return RUNNERS.build(cfg)
    from mmengine.runner import Runner
    return Runner.from_cfg(cfg)
