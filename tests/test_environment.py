"""The set-up installs the whole stack: a missing piece fails here, loudly,
instead of turning other tests into skips."""
import importlib
import os

import pytest
import torch


@pytest.mark.parametrize('module', ['mmengine', 'mmcv.ops', 'mmdet.models', 'mmseg.models',
                                    'pycocotools.coco', 'triton'])
def test_stack_imports(module):
    importlib.import_module(module)


def test_pinned_versions():
    import mmcv
    import mmdet
    import mmengine
    import mmseg
    assert (mmengine.__version__, mmcv.__version__, mmdet.__version__, mmseg.__version__) == \
        ('0.10.7', '2.1.0', '3.3.0', '1.2.2')
    assert torch.__version__.split('+')[0] >= '2.0'


def test_mmcv_has_compiled_ops():
    from mmcv.ops import RoIAlign, nms
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], dtype=torch.float)
    kept, _ = nms(boxes, torch.tensor([0.9, 0.8, 0.7]), iou_threshold=0.5)
    assert kept[:, 4].tolist() == pytest.approx([0.9, 0.7])
    feature = torch.arange(16.0).reshape(1, 1, 4, 4)
    pooled = RoIAlign((1, 1), spatial_scale=1.0, sampling_ratio=1, aligned=False)(
        feature, torch.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]]))
    # one bilinear sample at the box centre (1.5, 1.5): the mean of its 4 neighbours
    assert pooled.item() == pytest.approx(feature[0, 0, 1:3, 1:3].mean().item(), abs=1e-5)


def test_setuptools_keeps_pkg_resources():
    """mmcv's setup.py and mmengine's 'mmdet::'/'mmseg::' config bases import
    pkg_resources; setuptools 82+ no longer ships it (requirements/constraints.txt)."""
    import setuptools
    importlib.import_module('pkg_resources')
    major = int(setuptools.__version__.split('.')[0])
    assert 77 <= major < 82, f'setuptools {setuptools.__version__} is outside >=77,<82'


@pytest.mark.parametrize('base', ['mmdet::_base_/default_runtime.py',
                                  'mmseg::_base_/default_runtime.py'])
def test_package_config_bases_resolve(tmp_path, base):
    """What users write in their own configs: a base from an installed package."""
    from mmengine.config import Config
    config = tmp_path / 'child.py'
    config.write_text(f"_base_ = '{base}'\n")
    cfg = Config.fromfile(str(config))
    assert cfg.default_scope == base.split('::')[0]


def _pytest_alone(args, cwd, **env_changes):
    """A pytest session of its own (none of this session's xdist variables)."""
    import os
    import subprocess
    import sys
    env = {key: value for key, value in os.environ.items() if not key.startswith('PYTEST_')}
    env.update(env_changes)
    return subprocess.run([sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider', *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_make_tests_workers_keep_shared_fixtures_on_one_worker(tmp_path):
    """``make test`` runs ``pytest -n auto --dist loadgroup``: tests sharing a
    fixture their module builds once, and tests of one explicit group, run on
    one worker. (pytest 9.2 with pytest-xdist 3.8 silently
    drops the groups: requirements/tests.txt pins pytest below it.)"""
    import json

    from helpers.paths import REPO_ROOT
    (tmp_path / 'conftest.py').write_text(
        f'import sys\nsys.path.insert(0, {str(REPO_ROOT / "tests")!r})\n'
        'import pytest\n'
        'from helpers.xdist_groups import group_tests_sharing_module_fixtures\n'
        '@pytest.hookimpl(tryfirst=True)\n'   # before xdist renames the grouped tests
        'def pytest_collection_modifyitems(config, items):\n'
        '    group_tests_sharing_module_fixtures(items)\n')
    (tmp_path / 'test_spread.py').write_text(
        'import json, os, pytest\n'
        'def record(name):\n'
        '    with open(os.path.join(os.path.dirname(__file__), name), "w") as f:\n'
        '        json.dump(os.environ.get("PYTEST_XDIST_WORKER"), f)\n'
        '@pytest.fixture(scope="module")\n'
        'def built_once():\n'
        '    return 1\n'
        + ''.join(f'def test_shared_{i}(built_once):\n    record("shared_{i}")\n'
                  for i in range(4))
        + ''.join(f'@pytest.mark.xdist_group("g")\ndef test_grouped_{i}():\n'
                  f'    record("grouped_{i}")\n' for i in range(4))
        + ''.join(f'def test_free_{i}():\n    import time; time.sleep(0.2)\n'
                  f'    record("free_{i}")\n' for i in range(8)))
    result = _pytest_alone(['-n', '2', '--dist', 'loadgroup', '-q', str(tmp_path)], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    def workers(prefix):
        return {json.loads((tmp_path / f'{prefix}_{i}').read_text())
                for i in range(8 if prefix == 'free' else 4)}
    assert len(workers('shared')) == 1 and len(workers('grouped')) == 1
    assert workers('free') <= {'gw0', 'gw1'}


def test_a_passing_test_leaves_nothing_on_the_disk_and_a_failing_one_its_folder(tmp_path):
    """pytest.ini's retention: a run writes GBs of checkpoints under tmp_path;
    only a failed test's folder stays, for its post-mortem."""
    from helpers.paths import REPO_ROOT
    (tmp_path / 'test_writes.py').write_text(
        'def test_passes(tmp_path):\n'
        '    (tmp_path / "passed.bin").write_bytes(bytes(1 << 20))\n'
        'def test_fails(tmp_path):\n'
        '    (tmp_path / "failed.bin").write_bytes(bytes(1 << 20))\n'
        '    assert False\n')
    temp = tmp_path / 'temp'
    temp.mkdir()
    result = _pytest_alone(['-c', str(REPO_ROOT / 'pytest.ini'), '--rootdir', str(tmp_path),
                            'test_writes.py'], tmp_path, TMPDIR=str(temp))
    assert '1 failed, 1 passed' in result.stdout, result.stdout[-3000:] + result.stderr[-3000:]
    assert [path.name for path in temp.rglob('*.bin')] == ['failed.bin']


def test_a_disk_too_full_stops_the_run_before_its_tests_with_the_reason():
    from helpers.paths import REPO_ROOT
    result = _pytest_alone(['-p', 'no:xdist', 'tests/test_environment.py::test_stack_imports'],
                           REPO_ROOT, MAVIT_TEST_FREE_GB='1e12')
    output = result.stdout + result.stderr
    assert result.returncode == 4, output[-3000:]
    assert 'GB free on the disk of' in output and 'MAVIT_TEST_FREE_GB' in output
    assert 'passed' not in output


def test_fp32_references_run_without_tf32():
    """tests/conftest.py turns TF32 off for the whole session: on sm_80 and
    newer cuDNN would otherwise compute every fp32 convolution reference with
    a 10-bit mantissa, coarser than the kernels' fp32 tolerances (2e-5)."""
    assert torch.backends.cudnn.allow_tf32 is False
    assert torch.backends.cuda.matmul.allow_tf32 is False


def test_child_processes_keep_the_packages_on_the_parents_pythonpath(monkeypatch, tmp_path):
    """The GPU machine installs mmengine and mmseg with ``pip --target`` onto
    PYTHONPATH: a test's child process that replaced PYTHONPATH with the
    repository lost them (the first GPU run: ModuleNotFoundError: mmengine)."""
    import subprocess
    import sys

    from helpers.paths import REPO_ROOT, child_environment
    (tmp_path / 'only_on_pythonpath.py').write_text('FOUND = True\n')
    monkeypatch.setenv('PYTHONPATH', str(tmp_path))
    result = subprocess.run(
        [sys.executable, '-c', 'import only_on_pythonpath, mavit_mm.ops.fast_paths'],
        cwd=tmp_path.parent, env=child_environment(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert child_environment()['PYTHONPATH'].split(os.pathsep)[0] == str(REPO_ROOT)


@pytest.mark.parametrize('version', ['3.9.18', '3.13.0'])
def test_setup_refuses_a_python_outside_3_10_to_3_12_before_making_the_venv(tmp_path, version):
    """scripts/setup.sh names the interpreter and the Pythons it supports, and
    makes nothing, for a Python it cannot install the stack for (3.13: no
    numpy<2 wheels; 3.9: below torch 2.13). A stand-in interpreter answers
    ``-V`` with ``version`` and fails every other call."""
    import shutil
    import subprocess

    from helpers.paths import REPO_ROOT
    root = tmp_path / 'checkout'
    shutil.copytree(REPO_ROOT / 'scripts', root / 'scripts')
    shutil.copytree(REPO_ROOT / 'requirements', root / 'requirements')
    shutil.copy(REPO_ROOT / 'setup.py', root)
    python = tmp_path / 'python3'
    python.write_text(f'#!/bin/sh\n[ "$1" = -V ] && echo "Python {version}" && exit 0\nexit 1\n')
    python.chmod(0o755)
    result = subprocess.run(['bash', str(root / 'scripts' / 'setup.sh')], capture_output=True,
                            text=True, timeout=60, env={**os.environ, 'PYTHON': str(python)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert (f'{python} is Python {version}: this project needs Python 3.10, 3.11 or 3.12'
            in result.stdout), result.stdout
    assert not (root / '.venv').exists()
