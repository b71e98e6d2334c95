"""tools/dist_train.sh and tools/dist_test.sh hand the right torchrun command
to the interpreter (a stand-in that records its arguments)."""
import os
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
