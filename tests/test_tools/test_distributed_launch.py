"""Distributed launching, through the scripts a user runs.

* The launch scripts build the right command: tools/dist_train.sh and
  tools/dist_test.sh hand torchrun's to the interpreter (a stand-in that
  records its arguments), tools/slurm_train.sh and tools/slurm_test.sh srun's
  (a fake srun records its arguments and environment).
* --auto-scale-lr on the published configs gives docs/training.md's table.
* Data-parallel training and evaluation for real, on CPUs: two processes
  started by tools/dist_train.sh / tools/dist_test.sh (torchrun, gloo).
  dist_train.sh CONFIG 2 --auto-scale-lr trains a demo pipeline; a probe hook
  in each process (tests/helpers/dist_probe.py) shows that both ranks trained
  on different images of every batch, with the learning rate scaled to the
  total batch, and ended with identical weights and BN statistics, equal to
  the saved checkpoint; tools/test.py evaluates that checkpoint, and
  dist_test.sh with two processes reports the same metrics.

The pieces of a CPU run (CPUSyncBatchNorm, the config adaptations, the Slurm
environment): tests/test_engine/test_cpu_distributed.py.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.paths import REPO_ROOT, TESTS_DIR
from helpers.threads import torch_threads
from helpers.tools import explain, make_tiny_data, tool_in_process, write_tiny_config
from PIL import Image
from torch import nn

from mavit_mm.tooling.config import load_config, set_iterations
from mavit_mm.tooling.demo_jobs import DEMO_JOBS
from mavit_mm.tooling.json_logs import latest_test_metrics

DEMO_DATA = REPO_ROOT / 'data' / 'demo'
LAUNCHER_VARIABLES = ('MASTER_ADDR', 'MASTER_PORT', 'RANK', 'WORLD_SIZE', 'LOCAL_RANK',
                      'NNODES', 'NODE_RANK', 'PORT')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


# -- the commands of the launch scripts --------------------------------------------
# A stand-in interpreter records what dist_*.sh hand to it.

@pytest.fixture
def recording_python(tmp_path):
    """A fake interpreter writing its argv (one per line) and PYTHONPATH."""
    record = tmp_path / 'argv.txt'
    fake = tmp_path / 'python'
    fake.write_text('#!/usr/bin/env bash\n'
                    f'printf "%s\\n" "$@" > {record}\n'
                    f'echo "PYTHONPATH=$PYTHONPATH" >> {record}\n')
    fake.chmod(0o755)
    return fake, record


def _run(script, args, python, **env):
    return subprocess.run(['bash', str(REPO_ROOT / 'tools' / script), *args],
                          env=dict(os.environ, PYTHON=str(python), **env),
                          capture_output=True, text=True)


def test_dist_train_command(recording_python):
    python, record = recording_python
    result = _run('dist_train.sh', ['cfg.py', '8', '--amp', '--cfg-options', 'a=1'], python,
                  NNODES='2', NODE_RANK='1', MASTER_ADDR='10.0.0.7', PORT='29611')
    assert result.returncode == 0, result.stderr
    argv = record.read_text().splitlines()
    assert argv[:2] == ['-m', 'torch.distributed.run']
    for flag in ('--nnodes=2', '--node_rank=1', '--master_addr=10.0.0.7',
                 '--master_port=29611', '--nproc_per_node=8'):
        assert flag in argv
    tool = argv.index(str(REPO_ROOT / 'tools' / 'train.py'))
    assert argv[tool + 1:tool + 7] == ['cfg.py', '--launcher', 'pytorch', '--amp',
                                       '--cfg-options', 'a=1']
    # The checkout is importable without installing it.
    assert argv[-1].startswith(f'PYTHONPATH={REPO_ROOT}')


def test_dist_test_command_and_defaults(recording_python):
    python, record = recording_python
    env = {k: v for k, v in os.environ.items()
           if k not in ('NNODES', 'NODE_RANK', 'MASTER_ADDR', 'PORT')}
    result = subprocess.run(
        ['bash', str(REPO_ROOT / 'tools' / 'dist_test.sh'), 'cfg.py', 'ckpt.pth', '2',
         '--out', 'r.pkl'], env=dict(env, PYTHON=str(python)), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    argv = record.read_text().splitlines()
    for flag in ('--nnodes=1', '--node_rank=0', '--master_addr=127.0.0.1',
                 '--master_port=29500', '--nproc_per_node=2'):
        assert flag in argv
    tool = argv.index(str(REPO_ROOT / 'tools' / 'test.py'))
    assert argv[tool + 1:tool + 6] == ['cfg.py', 'ckpt.pth', '--launcher', 'pytorch', '--out']


@pytest.mark.parametrize('script, args', [('dist_train.sh', ['cfg.py']),
                                          ('dist_test.sh', ['cfg.py', 'ckpt.pth'])])
def test_missing_arguments_print_usage(recording_python, script, args):
    python, record = recording_python
    result = _run(script, args, python)
    assert result.returncode == 2 and 'usage:' in result.stderr
    assert not record.exists()


@pytest.mark.parametrize('script, words', [
    ('dist_train.sh', ['CONFIG GPUS_PER_NODE', 'NNODES', 'NODE_RANK', 'MASTER_ADDR', 'PORT']),
    ('dist_test.sh', ['CONFIG CHECKPOINT GPUS_PER_NODE', 'NNODES', 'PORT']),
    ('slurm_train.sh', ['PARTITION JOB_NAME CONFIG WORK_DIR', 'GPUS_PER_NODE',
                        'CPUS_PER_TASK', 'SRUN_ARGS']),
    ('slurm_test.sh', ['PARTITION JOB_NAME CONFIG CHECKPOINT', 'GPUS_PER_NODE',
                       'CPUS_PER_TASK', 'SRUN_ARGS'])])
def test_help(script, words):
    for flag in ('-h', '--help'):
        result = subprocess.run(['bash', str(REPO_ROOT / 'tools' / script), flag],
                                capture_output=True, text=True)
        assert result.returncode == 0 and not result.stderr
        assert f'tools/{script}' in result.stdout
        for word in words:
            assert word in result.stdout, word


@pytest.mark.parametrize('env, message', [
    ({}, None),
    ({'NNODES': '2', 'NODE_RANK': '2'}, 'NODE_RANK=2 must be below NNODES=2'),
    ({'PORT': 'auto'}, "PORT must be a whole number, got 'auto'"),
    ({'NNODES': '0'}, "NNODES must be a positive whole number, got '0'")])
def test_dist_launch_settings_are_checked(recording_python, env, message):
    python, record = recording_python
    result = _run('dist_train.sh', ['cfg.py', '2'], python, **env)
    if message is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 2 and message in result.stderr
    assert not record.exists()
    bad_gpus = _run('dist_test.sh', ['cfg.py', 'ckpt.pth', 'two'], python)
    assert bad_gpus.returncode == 2
    assert "GPUS_PER_NODE must be a positive whole number, got 'two'" in bad_gpus.stderr


# -- Slurm -----------------------------------------------------------------------
# No Slurm here: a fake srun first on PATH records its arguments and environment.

SLURM_SETTINGS = ('GPUS', 'GPUS_PER_NODE', 'CPUS_PER_TASK', 'SRUN_ARGS', 'MASTER_PORT')


@pytest.fixture
def fake_srun(tmp_path):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    argv_file, env_file = tmp_path / 'srun_argv.txt', tmp_path / 'srun_env.txt'
    srun = bin_dir / 'srun'
    srun.write_text('#!/usr/bin/env bash\n'
                    f'printf "%s\\n" "$@" > {argv_file}\n'
                    f'env > {env_file}\n')
    srun.chmod(0o755)

    def run(script, args, **env):
        base = {k: v for k, v in os.environ.items() if k not in SLURM_SETTINGS}
        base['PATH'] = f'{bin_dir}{os.pathsep}{base["PATH"]}'
        result = subprocess.run(['bash', str(REPO_ROOT / 'tools' / script), *args],
                                env=dict(base, PYTHON='/opt/py/bin/python', **env),
                                capture_output=True, text=True)
        argv = argv_file.read_text().splitlines() if argv_file.exists() else None
        environment = (dict(line.split('=', 1) for line in env_file.read_text().splitlines()
                            if '=' in line) if env_file.exists() else None)
        return result, argv, environment

    return run


def test_slurm_train_command_and_environment(fake_srun):
    result, argv, env = fake_srun(
        'slurm_train.sh', ['gpu_part', 'mavit-upernet', 'configs/x.py', 'work_dirs/x',
                           '--amp', '--cfg-options', 'a=1'],
        GPUS='16', GPUS_PER_NODE='8', CPUS_PER_TASK='6',
        SRUN_ARGS='--quotatype=auto --time=72:00:00', MASTER_PORT='29611')
    assert result.returncode == 0, result.stderr
    assert argv == ['-p', 'gpu_part', '--job-name=mavit-upernet', '--gres=gpu:8',
                    '--ntasks=16', '--ntasks-per-node=8', '--cpus-per-task=6',
                    '--kill-on-bad-exit=1', '--quotatype=auto', '--time=72:00:00',
                    '/opt/py/bin/python', '-u', str(REPO_ROOT / 'tools' / 'train.py'),
                    'configs/x.py', '--work-dir=work_dirs/x', '--launcher=slurm',
                    '--amp', '--cfg-options', 'a=1']
    # srun hands its environment to the tasks: the checkout importable, the
    # caller's variables (MASTER_PORT for the process group) passed on.
    assert env['PYTHONPATH'].split(os.pathsep)[0] == str(REPO_ROOT)
    assert env['MASTER_PORT'] == '29611'
    assert env['GPUS'] == '16' and env['SRUN_ARGS'] == '--quotatype=auto --time=72:00:00'
    # The command is echoed (set -x) for the job log.
    assert 'srun -p gpu_part' in result.stderr


def test_slurm_test_command_and_defaults(fake_srun):
    result, argv, env = fake_srun('slurm_test.sh', ['p1', 'eval', 'c.py', 'ckpt.pth',
                                                    '--out', 'r.pkl'])
    assert result.returncode == 0, result.stderr
    assert argv == ['-p', 'p1', '--job-name=eval', '--gres=gpu:8', '--ntasks=8',
                    '--ntasks-per-node=8', '--cpus-per-task=5', '--kill-on-bad-exit=1',
                    '/opt/py/bin/python', '-u', str(REPO_ROOT / 'tools' / 'test.py'),
                    'c.py', 'ckpt.pth', '--launcher=slurm', '--out', 'r.pkl']
    assert env['PYTHONPATH'].split(os.pathsep)[0] == str(REPO_ROOT)
    # Fewer GPUs than a node has: one node, GPUS processes.
    _, argv, _ = fake_srun('slurm_test.sh', ['p1', 'eval', 'c.py', 'ckpt.pth'], GPUS='2')
    assert '--gres=gpu:2' in argv and '--ntasks=2' in argv and '--ntasks-per-node=2' in argv


def test_slurm_default_interpreter_is_the_checkouts(fake_srun, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != 'PYTHON'}
    bin_dir = tmp_path / 'bin'
    result = subprocess.run(
        ['bash', str(REPO_ROOT / 'tools' / 'slurm_train.sh'), 'p', 'j', 'c.py', 'w'],
        env=dict(env, PATH=f'{bin_dir}{os.pathsep}{env["PATH"]}'),
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / 'srun_argv.txt').read_text().splitlines()
    venv_python = REPO_ROOT / '.venv' / 'bin' / 'python'
    expected = str(venv_python) if venv_python.exists() else 'python'
    assert argv[argv.index('-u') - 1] == expected


@pytest.mark.parametrize('script', ['slurm_train.sh', 'slurm_test.sh'])
def test_slurm_errors(fake_srun, tmp_path, script):
    result, argv, _ = fake_srun(script, ['p', 'j', 'c.py'])
    assert result.returncode == 2 and 'usage:' in result.stderr and argv is None
    result, argv, _ = fake_srun(script, ['p', 'j', 'c.py', 'x'], GPUS='eight')
    assert result.returncode == 2 and argv is None
    assert "GPUS must be a positive integer, got 'eight'" in result.stderr
    # No srun on PATH (not a Slurm node): says so instead of "command not found".
    only_dirname = tmp_path / 'only_dirname'
    only_dirname.mkdir()
    (only_dirname / 'dirname').symlink_to(shutil.which('dirname'))
    result = subprocess.run(['/bin/bash', str(REPO_ROOT / 'tools' / script), 'p', 'j', 'c.py',
                             'x'], env=dict(PATH=str(only_dirname), PYTHON='py'),
                            capture_output=True, text=True)
    assert result.returncode == 127 and 'srun not found' in result.stderr


# -- --auto-scale-lr on the published configs (docs/training.md's table) -------------

PUBLISHED = ('mask_rcnn', 'retinanet', 'cascade_rcnn', 'sem_fpn', 'upernet')
# docs/training.md's table columns after the factor, by config family.
TABLE_COLUMNS = (('mask_rcnn', 'retinanet', 'cascade_rcnn'), ('sem_fpn',), ('upernet',))


LARGE_3X_CONFIGS = ('mask-rcnn_mavit-l_fpn_ms-3x_coco.py',
                    'cascade-mask-rcnn_mavit-l_fpn_ms-3x_coco.py')


def documented_scaled_lr() -> dict[str, dict[int, float]]:
    """Starting learning rate after --auto-scale-lr, by family and number of
    GPUs (2 images each), as docs/training.md's table lists it; its factor
    column checked against GPUs x 2 / 16 on the way."""
    table = {family: {} for family in PUBLISHED}
    for row in (REPO_ROOT / 'docs' / 'training.md').read_text().splitlines():
        match = re.match(r'\| (\d+) x 2 = \d+[^|]*\| ([\d.]+) \|(.*)\|$', row)
        if match:
            gpus = int(match.group(1))
            assert float(match.group(2)) == gpus * 2 / 16, row
            for families, cell in zip(TABLE_COLUMNS, match.group(3).split('|'), strict=True):
                for family in families:
                    table[family][gpus] = float(cell)
    assert all(sorted(rates) == [1, 4, 8, 16] for rates in table.values()), table
    return table


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
    documented = documented_scaled_lr()
    for path in configs:
        cfg = load_config(path)
        # The MAViT-L 3x detectors: 1 image per GPU at lr 2e-4 for 8 images, so
        # half the table's rate at each number of GPUs (docs/training.md).
        large_3x = path.name in LARGE_3X_CONFIGS
        assert cfg.train_dataloader.batch_size == (1 if large_3x else 2), path.name
        assert cfg.auto_scale_lr == dict(enable=False,
                                         base_batch_size=8 if large_3x else 16), path.name
        for gpus, expected in documented[path.parent.name].items():
            expected = expected / 2 if large_3x else expected
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
    cfg.custom_imports = dict(imports=['helpers.dist_probe'], allow_failed_imports=False)
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
    # The recipe's AMP wrapper, where it has one (Semantic FPN's is fp32), says
    # it trains in fp32 here: once too.
    amp = load_config(config).optim_wrapper.type == 'AmpWhereAvailableOptimWrapper'
    assert sum('mixed precision' in line for line in output.splitlines()) == int(amp)
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
    # The one-process reference: tools/test.py's main in this process (the
    # tool's own process: test_e2e). One thread, as each process of the
    # launch below: oneDNN's convolutions sum in an order that follows the
    # thread count, and a pixel whose two best classes tie to float rounding
    # would flip between 2 threads and 1.
    start = time.time()
    with torch_threads(1):
        tool_in_process('test.py', config, checkpoint, '--work-dir', work / 'test1',
                        '--out', work / 'pred1', *one_per_batch, cwd=REPO_ROOT)
    timings['test'] = time.time() - start
    metrics = latest_test_metrics(work / 'test1')
    assert metrics and metric in metrics, metrics
    assert math.isfinite(metrics[metric]) and metrics[metric] >= 0
    predictions = sorted(p.name for p in (work / 'pred1').iterdir())
    assert len(predictions) >= 2 and len(predictions) % 2 == 0, predictions

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
    # The last checkpoint only (0.2 GB each), the one the test evaluates.
    config = write_tiny_config('sem_fpn', roots, tmp_path / 'configs', max_iters,
                               checkpoint_interval=max_iters)
    metrics, timings = _train_and_evaluate(config, tmp_path, max_iters, 'mIoU')
    print(f'metrics {metrics}; seconds {timings}')


@pytest.mark.slow
@pytest.mark.skipif(not (DEMO_DATA / 'ade20k').is_dir(),
                    reason='bundled demo data missing: python tools/make_demo_data.py')
def test_dist_train_upernet_demo_config(tmp_path):
    """dist_train.sh CONFIG 2 --auto-scale-lr on the bundled demo data: the
    UperNet-T demo config as shipped, 4 iterations, 2 processes; then test.py
    and dist_test.sh."""
    pytest.importorskip('mmseg.models')
    max_iters = 4
    cfg = load_config(REPO_ROOT / DEMO_JOBS['upernet'].config)
    set_iterations(cfg, max_iters)
    cfg.default_hooks.logger.interval = 1
    config = tmp_path / 'upernet_demo_4iters.py'
    cfg.dump(str(config))
    metrics, timings = _train_and_evaluate(config, tmp_path, max_iters, 'mIoU')
    print(f'metrics {metrics}; seconds {timings}')


def test_a_test_record_two_processes_wrote_over_each_other_reads_as_one(tmp_path):
    """dist_test.sh: each process dumps the (gathered, equal) metrics into the
    same ``<timestamp>.json``, from the file's start; a shorter record leaves
    the tail of the longer one (seen in a 2-process run under load)."""
    run = tmp_path / '20261127_024500'
    run.mkdir()
    (run / f'{run.name}.json').write_text(
        '{"aAcc": 91.17, "mIoU": 18.23, "mAcc": 31.26, "data_time": 0.00537872314453125, '
        '"time": 0.04520058631896973}5}\n')
    assert latest_test_metrics(tmp_path) == {'aAcc': 91.17, 'mIoU': 18.23, 'mAcc': 31.26}
