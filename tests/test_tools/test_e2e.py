"""End to end, through the real tools: every pipeline (Mask R-CNN, RetinaNet,
Cascade Mask R-CNN, Semantic FPN, UperNet; MAViT-T) trains a few iterations
with tools/train.py on tiny generated data, is evaluated by tools/test.py from
its saved checkpoint with the real evaluators, and resumes from a checkpoint.

Every pipeline trains with tools/train.py in a process of its own, as a user
runs it, and so does test.py's evaluation of Mask R-CNN and UperNet. The
other evaluations and the runs that go on from the checkpoints (resume,
load_from, Pretrained) call the tool's main in the test's process
(helpers.tools.tool_in_process): what they check is the Runner's, and a
process of their own would add only its start and imports. Tiny on purpose
(64 px images, 4 train / 2 val images, 2 iterations): these tests check the
plumbing and the metric reporting, not accuracy (the main job shows learning).
"""
import math
import pickle

import pytest
import torch
from helpers.tools import (
    explain,
    make_tiny_data,
    run_tool,
    tool_in_process,
    train_in_process,
    write_tiny_config,
)

from mavit_mm.tooling.demo_jobs import DEMO_JOBS
from mavit_mm.tooling.json_logs import (
    latest_test_metrics,
    run_dirs,
    training_records,
    validation_metrics_by_step,
)

pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed for these tests')
pytest.importorskip('mmdet.models')
pytest.importorskip('mmseg.models')

MAX_ITERS = 2
# For the runs whose validation or last checkpoint no test reads, and no
# other test needs run: no validation (it would run at the last iteration),
# no checkpoint hook.
NO_VALIDATION = f'train_cfg.val_begin={MAX_ITERS + 10}'
NO_CHECKPOINTS = 'default_hooks.checkpoint=None'


@pytest.fixture(scope='session')
def tiny_roots(tmp_path_factory):
    return make_tiny_data(tmp_path_factory.mktemp('e2e_data'))


@pytest.fixture(scope='session')
def e2e_root(tmp_path_factory):
    return tmp_path_factory.mktemp('e2e')


class TrainedRuns:
    """Trains each pipeline once per session (tests share the runs)."""

    def __init__(self, roots, root):
        self.roots, self.root, self.runs, self.configs = roots, root, {}, {}

    def config(self, name):
        if name not in self.configs:
            self.configs[name] = write_tiny_config(name, self.roots, self.root / 'configs',
                                                   MAX_ITERS, checkpoint_interval=1)
        return self.configs[name]

    def get(self, name, *extra_args):
        if name not in self.runs:
            work_dir = self.root / name
            result = run_tool('train.py', self.config(name), '--work-dir', work_dir,
                              *extra_args, cwd=self.root)
            assert result.returncode == 0, explain(result)
            self.runs[name] = (work_dir, result)
        return self.runs[name]


@pytest.fixture(scope='session')
def trained(tiny_roots, e2e_root):
    return TrainedRuns(tiny_roots, e2e_root)


def _check_metrics(metrics: dict, names, kind: str):
    assert metrics is not None
    for name in names:
        assert name in metrics, f'{name} missing from {sorted(metrics)}'
        value = metrics[name]
        assert isinstance(value, (int, float)) and math.isfinite(value), (name, value)
        # COCO AP is a fraction; mmseg reports percentages.
        upper = 1.0 if kind == 'coco' else 100.0
        assert 0.0 <= value <= upper, (name, value)


def _check_training(work_dir, kind, metric_names):
    assert (work_dir / f'iter_{MAX_ITERS}.pth').is_file()
    assert (work_dir / 'iter_1.pth').is_file()
    records = training_records(run_dirs(work_dir)[-1])
    train_steps = [r['step'] for r in records if 'loss' in r]
    assert train_steps == list(range(1, MAX_ITERS + 1))
    assert all(math.isfinite(r['loss']) and r['loss'] > 0 for r in records if 'loss' in r)
    # The config's validation ran at the end of training, with the real evaluator.
    _check_metrics(validation_metrics_by_step(work_dir).get(MAX_ITERS), metric_names, kind)


def on_the_worker_that_trains(name: str):
    """The xdist group of the tests that use pipeline ``name``'s run: under
    ``make test`` they share one worker, which trains it once (``trained`` is
    per worker), and the pipelines spread over the workers."""
    return pytest.mark.xdist_group(f'e2e-{name}')


# The cascade's run is the slowest (41 s of a 2-core make test): it runs under
# make test-slow; make test still trains and validates the cascade through the tools
# (test_our_checkpoints_feed_load_from_and_pretrained) and tests Mask R-CNN's
# whole path, which the cascade extends with two more R-CNN stages.
SLOW_E2E = ('cascade_mask_rcnn',)
# tools/test.py runs in a process of its own for one detector and one segmentor
# (Mask R-CNN: --out a .pkl file, --show-dir under the work dir; UperNet: --out
# a folder, --show-dir a path). For RetinaNet and Semantic FPN the test calls
# its main in the test's process: those two configs are evaluated in processes
# of their own by mmdet's and mmseg's test.py (test_openmmlab_tools), Semantic
# FPN's also by dist_test.sh (test_distributed_launch).
TESTED_IN_PROCESS = ('retinanet', 'sem_fpn')


@pytest.mark.parametrize('name', [
    pytest.param(name, marks=(on_the_worker_that_trains(name),
                              *((pytest.mark.slow,) if name in SLOW_E2E else ())))
    for name in DEMO_JOBS])
def test_train_then_test(trained, name, tmp_path):
    _, kind, metric_names = DEMO_JOBS[name]
    extra = ('--amp',) if name == 'retinanet' else ()
    work_dir, train_result = trained.get(name, *extra)
    _check_training(work_dir, kind, metric_names)
    # No CUDA here: the recipes' AmpWhereAvailableOptimWrapper trains in fp32,
    # loudly; Semantic FPN's recipe is fp32 (OptimWrapper) anyway.
    from mavit_mm.tooling.config import load_config
    if not torch.cuda.is_available():
        amp_recipe = (load_config(trained.config(name)).optim_wrapper.type
                      == 'AmpWhereAvailableOptimWrapper')
        announced = 'AmpWhereAvailableOptimWrapper: no CUDA' in train_result.stdout + \
            train_result.stderr
        assert announced == amp_recipe
        if extra:
            assert '--amp ignored' in train_result.stdout + train_result.stderr

    out = tmp_path / ('predictions.pkl' if kind == 'coco' else 'predictions')
    show_dir = 'painted'
    test_dir = tmp_path / 'test'
    test_args = (trained.config(name), work_dir / f'iter_{MAX_ITERS}.pth', '--work-dir',
                 test_dir, '--out', out, '--show-dir',
                 tmp_path / show_dir if kind == 'ade20k' else show_dir)
    if name in TESTED_IN_PROCESS:
        tool_in_process('test.py', *test_args, cwd=tmp_path)
    else:
        result = run_tool('test.py', *test_args, cwd=tmp_path)
        assert result.returncode == 0, explain(result)
    _check_metrics(latest_test_metrics(test_dir), metric_names, kind)

    if kind == 'coco':
        with open(out, 'rb') as f:
            predictions = pickle.load(f)
        assert len(predictions) == 2  # one entry per val image
        assert all('pred_instances' in p and 'bboxes' in p['pred_instances']
                   for p in predictions)
        painted = list((run_dirs(test_dir)[-1] / show_dir).rglob('*.jpg'))
    else:
        assert len(list(out.rglob('*.png'))) == 2  # one label map per val image
        painted = list((tmp_path / show_dir).rglob('*.png'))
    assert len(painted) == 2, painted


@on_the_worker_that_trains('mask_rcnn')
def test_resume_from_a_checkpoint_continues_its_iteration(trained, tmp_path):
    """--resume CKPT: the iteration and the optimizer's state come from the
    checkpoint (AdamW's step count goes on from 1 to 2; a fresh optimizer's
    would be 1)."""
    work_dir, _ = trained.get('mask_rcnn')
    resumed_dir = tmp_path / 'resumed'
    log = train_in_process(trained.config('mask_rcnn'), '--work-dir', resumed_dir,
                           '--resume', work_dir / 'iter_1.pth', '--cfg-options', NO_VALIDATION,
                           cwd=tmp_path)
    assert 'resumed epoch: 0, iter: 1' in log
    records = training_records(run_dirs(resumed_dir)[-1])
    assert [r['step'] for r in records if 'loss' in r] == [2]  # iteration 1 not redone
    assert (resumed_dir / 'iter_2.pth').is_file() and not (resumed_dir / 'iter_1.pth').exists()
    # (Importing mavit_mm, above, allow-listed what mmengine's checkpoints hold.
    # Memory-mapped: the step counts are read, not the 0.4 GB around them.)
    for checkpoint, step in ((work_dir / 'iter_1.pth', 1.0), (resumed_dir / 'iter_2.pth', 2.0)):
        optimizer = torch.load(checkpoint, map_location='cpu', weights_only=True,
                               mmap=True)['optimizer']
        steps = {float(state['step']) for state in optimizer['state'].values()}
        assert steps == {step}, (checkpoint.name, steps)


@on_the_worker_that_trains('upernet')
def test_auto_resume_from_the_work_dir(trained, tmp_path):
    """--resume without a value: the latest checkpoint of the work dir."""
    import os
    import shutil
    work_dir, _ = trained.get('upernet')
    copy = tmp_path / 'upernet'

    def link_checkpoints(source, target):
        # A checkpoint is only read (0.7 GB each: a hard link, not a copy); the
        # other files are copied, since the run writes over last_checkpoint.
        (os.link if source.endswith('.pth') else shutil.copy2)(source, target)
    shutil.copytree(work_dir, copy, ignore=shutil.ignore_patterns('2*'),  # no old logs
                    copy_function=link_checkpoints)
    (copy / 'last_checkpoint').write_text(str(copy / f'iter_{MAX_ITERS}.pth'))
    log = train_in_process(trained.config('upernet'), '--work-dir', copy, '--resume',
                           '--cfg-options', f'train_cfg.max_iters={MAX_ITERS + 1}',
                           NO_VALIDATION, cwd=tmp_path)
    assert f'resumed epoch: 0, iter: {MAX_ITERS}' in log
    records = training_records(run_dirs(copy)[-1])
    assert [r['step'] for r in records if 'loss' in r] == [MAX_ITERS + 1]
    assert (copy / f'iter_{MAX_ITERS + 1}.pth').is_file()


@on_the_worker_that_trains('mask_rcnn')
def test_our_checkpoints_feed_load_from_and_pretrained(trained, tmp_path):
    """A saved Mask R-CNN checkpoint as load_from of Cascade Mask R-CNN (shared
    backbone/neck/RPN) and as init_cfg=Pretrained of a segmentor's backbone:
    both read through torch.load(weights_only=True) with no env var."""
    work_dir, _ = trained.get('mask_rcnn')
    checkpoint = work_dir / f'iter_{MAX_ITERS}.pth'
    log = train_in_process(trained.config('cascade_mask_rcnn'), '--work-dir',
                           tmp_path / 'cascade', '--cfg-options', f'load_from={checkpoint}',
                           'train_cfg.max_iters=1', NO_CHECKPOINTS, cwd=tmp_path)
    assert f'Load checkpoint from {checkpoint}' in log
    # Its validation at that iteration is make test's run of the cascade's
    # predict path and evaluation (test_train_then_test's cascade case is slow).
    _check_metrics(validation_metrics_by_step(tmp_path / 'cascade').get(1),
                   DEMO_JOBS['cascade_mask_rcnn'][2], 'coco')
    # The demo configs train from scratch (init_cfg=None): replace it, as a user would.
    pretrained_config = tmp_path / 'fpn_pretrained.py'
    pretrained_config.write_text(
        f"_base_ = [{str(trained.config('sem_fpn'))!r}]\n"
        f"model = dict(backbone=dict(init_cfg=dict(\n"
        f"    _delete_=True, type='Pretrained', checkpoint={str(checkpoint)!r})))\n")
    log = train_in_process(pretrained_config, '--work-dir', tmp_path / 'fpn',
                           '--cfg-options', 'train_cfg.max_iters=1', NO_VALIDATION,
                           NO_CHECKPOINTS, cwd=tmp_path)
    assert 'MAViT: loaded' in log and str(checkpoint) in log
    assert 'missing keys' not in log  # every backbone tensor came from the checkpoint
