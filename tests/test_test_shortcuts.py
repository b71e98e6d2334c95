"""The tests' own shortcuts (tests/conftest.py installs them for every test):
each saves the time it was made for and changes no result."""
from pathlib import Path

import pytest
import torch
from helpers.paths import CONFIG_DIR


def test_a_config_reads_mmdets_and_mmsegs_metafiles_once_a_process(monkeypatch):
    """helpers/config_metafiles.py: loading a config again reads no
    ``.mim`` metafile again, mmdet's (``.yml``) nor mmseg's (``.yaml``), and
    resolves to the same config."""
    from mmengine.config import utils
    from mmengine.fileio.backends import LocalBackend

    from mavit_mm.tooling.config import load_config

    read = []
    get_text = LocalBackend.get_text

    def recording(self, filepath, *args, **kwargs):
        read.append(Path(filepath))
        return get_text(self, filepath, *args, **kwargs)
    monkeypatch.setattr(LocalBackend, 'get_text', recording)
    utils.load.cache_clear()   # (what earlier tests read)
    for config, suffix in (('mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py', '.yml'),
                           ('sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py', '.yaml')):
        first = load_config(CONFIG_DIR / config).to_dict()
        assert any(path.name == f'metafile{suffix}' for path in read), (config, read[:3])
        read.clear()
        assert load_config(CONFIG_DIR / config).to_dict() == first
        assert not [path for path in read if '.mim' in path.parts], (config, read[:3])


def test_a_config_asks_whether_its_package_is_installed_once_a_process(monkeypatch):
    """helpers/config_metafiles.py: mmengine's check before an ``mmseg::``
    base that mmseg is installed (a reload of ``pkg_resources``) runs once a
    process; the answers stay the same."""
    import importlib

    from mmengine.config import config as mmengine_config

    from mavit_mm.tooling.config import load_config

    reloads = []
    reload = importlib.reload
    monkeypatch.setattr(importlib, 'reload',
                        lambda module: reloads.append(module.__name__) or reload(module))
    mmengine_config.is_installed.cache_clear()   # (what earlier tests asked)
    config = CONFIG_DIR / 'sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py'
    first = load_config(config).to_dict()
    assert 'pkg_resources' in reloads
    reloads.clear()
    assert load_config(config).to_dict() == first
    assert reloads == []
    assert mmengine_config.is_installed('mmseg') is True
    assert mmengine_config.is_installed('no_such_package_mavit') is False



def test_the_interpreter_patches_the_language_once_a_launch_with_the_same_results(monkeypatch):
    """helpers/triton_interpreter.py: in Triton's interpreter a launch patches
    triton.language once, not again at every call of a ``@triton.jit`` helper;
    the fused MALA's outputs and gradients are bit for bit those of Triton's
    own interpreter, and the launches leave the language as they found it."""
    triton = pytest.importorskip('triton')
    import triton.language as tl
    from helpers.mala_cases import SMALL_BLOCKS, fused_with_grads, make_qkv, random_like
    from helpers.triton_interpreter import VERIFIED, _release, skip_repeated_patching
    from triton.runtime import interpreter

    from mavit_mm.ops.rope2d import RoPE2d

    if not triton.knobs.runtime.interpret:
        pytest.skip('the kernels run compiled, not in the interpreter')
    verified = _release(triton.__version__) in VERIFIED
    assert skip_repeated_patching() == verified
    if not verified:
        pytest.skip(f"triton {triton.__version__}'s interpreter runs as it is")
    q, k, v = make_qkv(batch=1, heads=2, head_dim=16)
    rope, dout = RoPE2d(16)(5, 7), random_like(q)
    language = {name: getattr(tl, name) for name in ('load', 'dot', 'sum', 'range', 'reduce')}

    def run(own: bool):
        launches = {}   # kernel -> the languages patched during its launch
        with monkeypatch.context() as patch:
            if own:   # the functions the skip wraps
                patch.setattr(interpreter, '_patch_lang', interpreter._patch_lang.__wrapped__)
                patch.setattr(interpreter.GridExecutor, '__call__',
                              interpreter.GridExecutor.__call__.__wrapped__)
            launch, patch_core = interpreter.GridExecutor.__call__, interpreter._patch_lang_core

            def counting_launch(self, *args, **kwargs):
                launches[self.fn.__name__] = []
                return launch(self, *args, **kwargs)

            def counting_patch(lang, scope):   # a call per language a _patch_lang patches
                launches[list(launches)[-1]].append(lang)
                return patch_core(lang, scope)
            patch.setattr(interpreter.GridExecutor, '__call__', counting_launch)
            patch.setattr(interpreter, '_patch_lang_core', counting_patch)
            out, grads = fused_with_grads(q, k, v, dout, rope, **SMALL_BLOCKS)
        assert {name: getattr(tl, name) for name in language} == language   # restored
        return (out, *grads), launches

    ours, launches = run(own=False)
    theirs, their_launches = run(own=True)
    assert list(launches) == list(their_launches) and len(launches) == 5   # forward 3, backward 2
    # A launch patches the kernel's language (tl), and tl.core where Triton's
    # own helpers (tl.sum...) see it: Triton's _patch_lang patches both for a
    # helper that sees both, so each at most twice. Not once a helper's call.
    for name, patched in launches.items():
        assert patched[0] is tl and set(patched) <= {tl, tl.core}, name
        assert patched.count(tl) <= 2 and patched.count(tl.core) <= 2, (name, patched)
        assert len(their_launches[name]) > 10 * len(patched), name
    for a, b in zip(ours, theirs):
        assert a.stride() == b.stride() and torch.equal(a, b)
