"""The launch scripts build the right command: tools/dist_train.sh and
tools/dist_test.sh hand torchrun's to the interpreter (a stand-in that records
its arguments), tools/slurm_train.sh and tools/slurm_test.sh srun's (a fake
srun records its arguments and environment). Real two-process runs:
tests/test_distributed_cpu.py."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
