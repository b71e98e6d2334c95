"""The installed package stands alone: a wheel of ``mavit_mm``, installed into
a fresh venv, builds MAViT-T through mmdet's and mmseg's registries and runs a
forward from a folder outside the checkout, loading nothing from it (not
``devtools/``, the tests' and benchmarks' instruments, which are not installed).

Offline: the wheel is built without build isolation (this environment's
setuptools, pinned below 82 by ``requirements/constraints.txt``) and installed
with ``--no-index --no-deps``; the fresh venv reuses this environment's torch
and OpenMMLab stack through a ``.pth`` line naming its site-packages. A plain
path there, not ``site.addsitedir``: that would run this environment's own
``.pth`` files, among them the editable install that points at a checkout.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT

pytest.importorskip('mmdet')
pytest.importorskip('mmseg')

# What setup.py reads to build the wheel; the rest of the checkout stays behind.
BUILD_INPUTS = ('setup.py', 'README.md', 'mavit_mm')

IMPORT_AND_FORWARD = '''
import sys
from pathlib import Path

import torch

import mavit_mm

site, checkout, stack = map(Path, sys.argv[1:4])
assert Path(mavit_mm.__file__).resolve().is_relative_to(site), mavit_mm.__file__

from mmdet.registry import MODELS as DET_MODELS
from mmseg.registry import MODELS as SEG_MODELS

for registry in (DET_MODELS, SEG_MODELS):
    torch.manual_seed(0)
    model = registry.build(dict(type='MAViT', arch='tiny')).eval()
    with torch.no_grad():
        features = model(torch.randn(1, 3, 64, 96))
    assert [tuple(f.shape) for f in features] == [
        (1, 64, 16, 24), (1, 128, 8, 12), (1, 256, 4, 6), (1, 512, 2, 3)], \\
        [f.shape for f in features]

instruments = sorted(name for name in sys.modules if name.split('.')[0] == 'devtools')
assert not instruments, instruments


def in_checkout(module) -> bool:   # the stack's site-packages may lie in the checkout's .venv
    path = Path(getattr(module, '__file__', None) or '/').resolve()
    return path.is_relative_to(checkout) and not path.is_relative_to(stack)


from_checkout = sorted(name for name, module in list(sys.modules.items()) if in_checkout(module))
assert not from_checkout, from_checkout
print('wheel ok', mavit_mm.__version__)
'''


def _run(command, **kwargs):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                            timeout=600, **kwargs)
    assert result.returncode == 0, f'{command}\n{result.stdout}\n{result.stderr}'
    return result


@pytest.mark.slow
def test_wheel_installed_in_a_fresh_venv_builds_mavit_t_without_the_checkout(tmp_path):
    source = tmp_path / 'source'
    source.mkdir()
    for name in BUILD_INPUTS:
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name,
                            ignore=shutil.ignore_patterns('__pycache__'))
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    dist = tmp_path / 'dist'
    _run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--no-build-isolation',
          '--no-index', '--wheel-dir', dist, source])
    [wheel] = dist.glob('mavit_mm-*.whl')
    tops = {name.split('/')[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {top for top in tops if not top.endswith('.dist-info')} == {'mavit_mm'}, tops

    venv = tmp_path / 'venv'
    base_python = getattr(sys, '_base_executable', sys.executable)
    _run([base_python, '-m', 'venv', '--without-pip', venv])
    python = venv / 'bin' / 'python'
    site = Path(_run([python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'])
                .stdout.strip())
    stack = Path(sysconfig.get_path('purelib'))
    (site / 'this_environments_stack.pth').write_text(f'{stack}\n')
    _run([sys.executable, '-m', 'pip', '--python', python, 'install', '--no-deps',
          '--no-index', wheel])

    outside = tmp_path / 'elsewhere'
    outside.mkdir()
    env = {key: value for key, value in os.environ.items()
           if key not in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV')}
    env['PYTHONNOUSERSITE'] = '1'
    result = _run([python, '-c', IMPORT_AND_FORWARD, site.resolve(), REPO_ROOT.resolve(),
                   stack.resolve()],
                  cwd=outside, env=env)
    assert 'wheel ok' in result.stdout
