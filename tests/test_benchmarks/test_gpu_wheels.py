"""The GPU machine's wheel kit (``scripts/gpu_wheels.sh``): mmseg's UperNet and
Swin run with an mmcv that has no C++ ops, its ``mmcv._ext`` the stub
``scripts/mmcv_ext_stub.py``.

The kit's mmcv wheel is mmcv 2.1.0's sources built with ``MMCV_WITH_OPS=0``
(building needs the network, so CI does not): the same Python files as the
installed mmcv without its compiled ``_ext``. So the tests build that package
from the installed one (its files, less the compiled ``_ext``, plus the
stub); where ``.whl/`` holds a built wheel, it is tested too.
"""
import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.paths import REPO_ROOT

mmcv = pytest.importorskip('mmcv')
pytest.importorskip('mmseg')

STUB = REPO_ROOT / 'scripts' / 'mmcv_ext_stub.py'
MMCV_DIR = Path(mmcv.__file__).parent
BUILT_WHEELS = sorted((REPO_ROOT / '.whl').glob('mmcv_lite-2.1.0-*.whl'))


def load_stub():
    spec = importlib.util.spec_from_file_location('mmcv_ext_stub', STUB)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ops_loaded_from_ext() -> set[str]:
    """Every name an ``mmcv.ops`` module asks ``load_ext('_ext', [...])`` for."""
    names = set()
    for path in (MMCV_DIR / 'ops').glob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, 'attr', '') == 'load_ext' \
                    and ast.literal_eval(node.args[0]) == '_ext':
                names |= set(ast.literal_eval(node.args[1]))
    return names


def test_stub_has_every_op_mmcv_asks_for_and_each_raises_a_clear_error():
    stub = load_stub()
    names = ops_loaded_from_ext()
    assert len(names) > 100 and {'nms', 'roi_align_forward'} <= names
    # mmcv.utils.ext_loader.load_ext asserts hasattr for each of them.
    assert all(hasattr(stub, name) for name in names)
    with pytest.raises(stub.MissingOpError,
                       match=r'without its C\+\+ ops \(MMCV_WITH_OPS=0.*_ext\.roi_align_forward '
                             'is not available'):
        stub.roi_align_forward(1, 2, spatial_scale=0.5)
    assert stub.nms.__name__ == 'nms'
    assert stub.get_compiler_version() == 'none (MMCV_WITH_OPS=0)'
    # Private and dunder names stay missing (copy, pickle, inspect probe them).
    assert not hasattr(stub, '__wrapped__') and not hasattr(stub, '_private')


def mmcv_without_ops(site, source: str):
    """``site/mmcv``: the installed mmcv's files less its compiled ops plus the
    stub (``sources``), or the kit's built wheel installed (``wheel``)."""
    if source == 'sources':
        shutil.copytree(MMCV_DIR, site / 'mmcv',
                        ignore=shutil.ignore_patterns('_ext*.so', '_ext*.pyd', '__pycache__'))
        shutil.copy(STUB, site / 'mmcv' / '_ext.py')
        return
    wheel = BUILT_WHEELS[-1]
    assert wheel.name.endswith('py3-none-any.whl')
    assert 'mmcv/_ext.py' in zipfile.ZipFile(wheel).namelist()
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps',
                    '--no-compile', '--target', str(site), str(wheel)], check=True)


PROBE = r'''
import sys
sys.modules['mmdet'] = None   # not on the GPU machine: mmseg must do without it
import torch, mmcv, mmcv.ops, mmseg.models
assert mmcv._ext.__file__.startswith(sys.argv[1]) and mmcv._ext.WITH_OPS is False
from mavit_mm.tooling.config import load_config
from mavit_mm.tooling.model_builder import build_model, dummy_forward_inputs
for config in sys.argv[2:]:
    cfg = load_config(config)
    model = build_model(cfg).eval()
    inputs, samples = dummy_forward_inputs(cfg, 64, 64)
    with torch.no_grad():
        logits = model(inputs, samples, mode='tensor')
    print(config, type(model.backbone).__name__, tuple(logits.shape))
try:
    mmcv.ops.nms(torch.zeros(1, 4), torch.zeros(1), 0.5)
except RuntimeError as exc:
    print('nms:', exc)
'''


@pytest.mark.parametrize('source', [
    'sources', pytest.param('wheel', marks=pytest.mark.skipif(
        not BUILT_WHEELS, reason='no mmcv wheel in .whl/: run scripts/gpu_wheels.sh'))])
def test_mmseg_runs_upernet_and_swin_with_mmcv_without_ops(tmp_path, source):
    from benchmarks.gpu_check_lib.models import UPERNET_CONFIGS
    site = tmp_path / 'site'
    site.mkdir()
    mmcv_without_ops(site, source)
    result = subprocess.run([sys.executable, '-c', PROBE, str(site), *UPERNET_CONFIGS],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, 'PYTHONPATH': f'{site}:{REPO_ROOT}'})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split()[1:] for line in lines[:2]] == [
        ['MAViT', '(1,', '150,', '16,', '16)'], ['SwinTransformer', '(1,', '150,', '16,', '16)']]
    assert lines[2].startswith('nms: mmcv was built without its C++ ops (MMCV_WITH_OPS=0')


def test_gpu_wheels_script_builds_the_stub_into_mmcv():
    script = (REPO_ROOT / 'scripts' / 'gpu_wheels.sh').read_text()
    assert subprocess.run(['bash', '-n', REPO_ROOT / 'scripts' / 'gpu_wheels.sh']).returncode == 0
    assert 'cp "$root/scripts/mmcv_ext_stub.py" "$build/mmcv-2.1.0/mmcv/_ext.py"' in script
    assert 'MMCV_WITH_OPS=0' in script and 'mmsegmentation==1.2.2' in script
    assert 'requirements/constraints.txt' in script and 'mmdet' not in script.split('set -euo')[1]


def test_kit_script_prints_its_help_and_refuses_odd_arguments(tmp_path):
    # --help prints the header and builds nothing; an option it does not know,
    # or a second folder, is refused before any download (no "--help" folder).
    script = REPO_ROOT / 'scripts' / 'gpu_wheels.sh'
    shown = subprocess.run(['bash', str(script), '--help'], cwd=tmp_path, capture_output=True,
                           text=True, timeout=30)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith('The wheels a bare GPU machine needs')
    assert 'bash scripts/gpu_wheels.sh [DEST]' in shown.stdout
    assert 'set -euo' not in shown.stdout
    for args, reason in ((['--dest', 'x'], 'unknown option --dest'),
                         (['a', 'b'], 'takes one DEST folder, got 2')):
        refused = subprocess.run(['bash', str(script), *args], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and reason in refused.stderr, refused.stderr
    assert list(tmp_path.iterdir()) == []
