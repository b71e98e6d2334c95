"""Shared by the tool tests: tiny data, tiny configs derived from the demo
configs (another data root, smaller images), running the tools."""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import os.path as osp
import subprocess
from collections.abc import Iterator
from pathlib import Path

from helpers.paths import REPO_ROOT
from helpers.paths import TOOLS_DIR as TOOLS
from mavit_mm.tooling.config import iter_dataset_cfgs
from mavit_mm.tooling.demo_jobs import DEMO_JOBS
from mavit_mm.tooling.run_script import run_script

TINY_IMAGE_SIZE = (64, 64)
TINY_SPLITS = dict(num_train=4, num_val=2)
# The demo configs are for 160 px images: scale their sizes down to 64 px
# (segmentation: 128 px crops -> 64).
SIZE_FACTOR = {'coco': 0.4, 'ade20k': 0.5}


def make_tiny_data(root: Path) -> dict:
    from mavit_mm.data.synthetic import make_ade20k_dataset, make_coco_dataset
    settings = dict(image_size=TINY_IMAGE_SIZE, max_objects=2, seed=0, **TINY_SPLITS)
    return {'coco': make_coco_dataset(root / 'coco', **settings)['root'],
            'ade20k': make_ade20k_dataset(root / 'ade20k', **settings)['root']}


def write_tiny_config(name: str, data_roots: dict, out_dir: Path, max_iters: int = 2,
                      checkpoint_interval: int = 1) -> Path:
    """The pipeline's demo config on the tiny data, ``max_iters`` iterations,
    batches of 2, a log line every iteration; dumped as a standalone config."""
    from mavit_mm.tooling.config import load_config, set_iterations
    config, kind, _ = DEMO_JOBS[name]
    cfg = load_config(REPO_ROOT / config)
    retarget_data_root(cfg, str(data_roots[kind]))
    rescale_image_sizes(cfg, SIZE_FACTOR[kind])
    set_iterations(cfg, max_iters, checkpoint_interval)
    cfg.train_dataloader.batch_size = 2
    cfg.val_dataloader.batch_size = 2
    cfg.default_hooks.logger.interval = 1
    keep_all_predictions(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f'{name}_tiny.py'
    cfg.dump(str(path))
    return path


DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
EVALUATORS = ('val_evaluator', 'test_evaluator')


def dataset_cfgs_of(cfg) -> Iterator[dict]:
    """The leaf dataset configs of every dataloader of ``cfg``."""
    for name in DATALOADERS:
        loader = cfg.get(name)
        if loader is not None:
            for dataset_cfg, _ in iter_dataset_cfgs(loader.get('dataset'), name):
                yield dataset_cfg


def retarget_data_root(cfg, new_root: str) -> None:
    """Point every dataset (and the COCO evaluators' ann_file) at ``new_root``."""
    new_root = new_root.rstrip('/') + '/'
    old_roots = set()
    for dataset_cfg in dataset_cfgs_of(cfg):
        old_roots.add(dataset_cfg.get('data_root') or '')
        dataset_cfg['data_root'] = new_root
    # The evaluators name the annotation file with the data root in front.
    old_root = old_roots.pop() if len(old_roots) == 1 else ''

    for name in EVALUATORS:
        evaluators = cfg.get(name)
        for evaluator in evaluators if isinstance(evaluators, list) else [evaluators]:
            if isinstance(evaluator, dict) and evaluator.get('ann_file'):
                ann_file = evaluator['ann_file']
                if old_root and ann_file.startswith(old_root):
                    evaluator['ann_file'] = osp.join(new_root, ann_file[len(old_root):].lstrip('/'))


# Pipeline transform keys holding image sizes, (w, h) pairs or lists of them.
_SIZE_KEYS = ('scale', 'scales', 'crop_size', 'img_scale')


def _scaled(value, factor: float):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(1, int(round(value * factor)))
    if isinstance(value, (list, tuple)):
        return type(value)(_scaled(v, factor) for v in value)
    return value


def _iter_transforms(pipeline) -> Iterator[dict]:
    for transform in pipeline or []:
        if isinstance(transform, dict):
            yield transform
            nested = transform.get('transforms')  # RandomChoice / TestTimeAug nest lists
            if isinstance(nested, (list, tuple)):
                for item in nested:
                    yield from _iter_transforms(item if isinstance(item, (list, tuple))
                                                else [item])
        elif isinstance(transform, (list, tuple)):
            yield from _iter_transforms(transform)


def rescale_image_sizes(cfg, factor: float) -> None:
    """Multiply every image size in the pipelines (and the seg preprocessor's
    padding size) by ``factor``: the same augmentation on smaller images."""
    for dataset_cfg in dataset_cfgs_of(cfg):
        for transform in _iter_transforms(dataset_cfg.get('pipeline')):
            for key in _SIZE_KEYS:
                if key in transform:
                    transform[key] = _scaled(transform[key], factor)
    preprocessor = cfg.model.get('data_preprocessor') or {}
    if preprocessor.get('size'):
        preprocessor['size'] = _scaled(preprocessor['size'], factor)


def save_initialised_checkpoint(cfg, path: Path, dataset_meta: dict = None,
                                seed: int = 0) -> Path:
    """A checkpoint of the freshly built (seeded) model of ``cfg`` (a config
    or its path), meta as mmengine's Runner writes it: ``dataset_meta`` (class
    names, palette) when given. For tools that draw, time or count, not learn."""
    import torch

    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.model_builder import build_model
    cfg = load_config(cfg) if isinstance(cfg, (str, Path)) else cfg
    torch.manual_seed(seed)
    meta = {} if dataset_meta is None else dict(dataset_meta=dict(dataset_meta))
    torch.save(dict(state_dict=build_model(cfg).state_dict(), meta=meta), path)
    return Path(path)


def keep_all_predictions(cfg) -> None:
    """A detector after 2 iterations scores below the usual thresholds (RetinaNet
    starts at its 0.01 prior); with nothing predicted CocoMetric reports no
    metric at all. Threshold 0 keeps the evaluation meaningful to parse."""
    test_cfg = cfg.model.get('test_cfg')
    if test_cfg is None:
        return
    for stage in (test_cfg, test_cfg.get('rcnn')):
        if stage is not None and 'score_thr' in stage:
            stage.score_thr = 0.0


def run_tool(tool: str, *args, cwd=None, timeout: int = 600,
             environ=None) -> subprocess.CompletedProcess:
    """Run ``tools/<tool>`` in a subprocess, as a user would; output captured.
    ``environ``: its environment (default: this process's)."""
    return run_script(TOOLS / tool, *args, cwd=cwd, timeout=timeout, environ=environ)


@contextlib.contextmanager
def working_directory(path) -> Iterator[None]:
    """``path`` as the working directory for the duration (Python 3.11's
    ``contextlib.chdir``; the project supports 3.10)."""
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextlib.contextmanager
def fresh_mmengine_instances():
    """mmengine's named global instances (its ``ManagerMixin`` classes: the
    loggers, message hubs, visualizers, default scopes) as a new process has
    them, none, for the duration; afterwards this process's own are back and
    the log files of the ones made meanwhile closed.

    A Runner takes over an instance of the name its config gives: mmdet's
    and mmseg's configs name their visualizer 'visualizer', so a second run
    in one process would log into the first run's folder."""
    from collections import OrderedDict

    from mmengine.logging import MMLogger
    from mmengine.utils import ManagerMixin

    def manager_classes():
        found, stack = [], [ManagerMixin]
        while stack:
            cls = stack.pop()
            found.append(cls)
            stack.extend(cls.__subclasses__())
        return found

    saved = {cls: cls.__dict__['_instance_dict'] for cls in manager_classes()}
    for cls in saved:
        cls._instance_dict = OrderedDict()
    try:
        yield
    finally:
        for logger in MMLogger._instance_dict.values():
            for handler in list(logger.handlers):
                if isinstance(handler, logging.FileHandler):
                    logger.removeHandler(handler)
                    handler.close()
        for cls in manager_classes():   # those imported meanwhile too
            cls._instance_dict = saved.get(cls, OrderedDict())


@contextlib.contextmanager
def process_settings_kept():
    """The process-wide settings a Runner changes (mmengine's ``setup_env``
    and ``set_random_seed``: the start method of multiprocessing, OpenCV's
    threads, cuDNN's benchmark mode, the random generators' states, the
    environment) back as they were afterwards, so that the tests run after
    an in-process tool in the same worker see the process they would have
    seen without it."""
    import multiprocessing
    import random

    import cv2
    import numpy as np
    import torch
    environ = dict(os.environ)
    start_method = multiprocessing.get_start_method(allow_none=True)
    cv2_threads = cv2.getNumThreads()
    cudnn = torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic
    generators = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda_generators = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        for name in os.environ.keys() - environ.keys():
            del os.environ[name]
        for name, value in environ.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        multiprocessing.set_start_method(start_method, force=True)
        cv2.setNumThreads(cv2_threads)
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = cudnn
        random.setstate(generators[0])
        np.random.set_state(generators[1])
        torch.set_rng_state(generators[2])
        if cuda_generators is not None:
            torch.cuda.set_rng_state_all(cuda_generators)


def tool_in_process(tool: str, *args, cwd):
    """``tools/<tool>``'s ``main(argv)`` in this process, run from ``cwd``
    with mmengine's global instances as in a new process
    (``fresh_mmengine_instances``), this process's settings kept
    (``process_settings_kept``); what ``main`` returns. A failure is the
    tool's exception, raised here.

    For runs whose subject is what the Runner does, with a config and tool
    that other tests run in a process of their own, as a user does: here
    they skip that process's start and imports, 5-8 s of each run."""
    with working_directory(cwd), process_settings_kept(), fresh_mmengine_instances():
        return load_tool(tool.removesuffix('.py')).main([str(arg) for arg in args])


def train_in_process(*args, cwd) -> str:
    """``tool_in_process('train.py', *args)``; what its Runner logged (the
    run's ``<timestamp>.log``, where mmengine's logger writes each line it
    prints on the console)."""
    from mavit_mm.tooling.json_logs import run_dirs
    tool_in_process('train.py', *args, cwd=cwd)
    argv = [str(arg) for arg in args]
    run_dir = run_dirs(argv[argv.index('--work-dir') + 1])[-1]
    return (run_dir / f'{run_dir.name}.log').read_text()


def explain(result: subprocess.CompletedProcess) -> str:
    # stderr first, where the traceback is: a CI log that keeps only the head of
    # a failure message then still shows the cause, not a config dump.
    return (f'exit {result.returncode}\n--- stderr (tail) ---\n{result.stderr[-6000:]}'
            f'\n--- stdout (tail) ---\n{result.stdout[-3000:]}')


def load_tool(name: str):
    """Import ``tools/<name>.py`` as a module (to call its main(argv) in-process);
    ``name`` may hold a folder: ``'analysis_tools/get_flops'``."""
    spec = importlib.util.spec_from_file_location(f'mavit_tool_{Path(name).name}',
                                                  TOOLS / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
