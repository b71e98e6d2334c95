"""Triton's CPU interpreter without the set-up it repeats inside a kernel.

Each launch under ``TRITON_INTERPRET=1`` (``GridExecutor.__call__``) patches
``triton.language`` for the interpreter (its builtins, ``tl.tensor``'s
methods, ``tl.range``, ``tl.reduce``...) and undoes it after the launch. Each
call of a ``@triton.jit`` helper inside the kernel (``InterpretedFunction.
__call__``) patches the same modules again, not undone: ``inspect.getmembers``
over ``tl``, ``tl.tensor`` and ``tl.math`` each time, to replace builtins the
launch already replaced (a replaced one is no longer a builtin: skipped) and
to set the same interpreter functions again (the launch's restore puts the
originals back over them). The fused kernels call a dozen helpers per tile:
that repeated set-up was a third of test_mala_numerics.py's time and more of
the kernels' own (cProfile: ``_patch_builtin`` and ``inspect.getmembers``).

:func:`skip_repeated_patching` makes a helper's call skip it while the launch
in progress has already patched the languages the helper's globals name
(``tl``, ``tl.core``); the launch's own patch, a helper's first patch of
another language, the kernel code, its numpy semantics and the restore are
Triton's. Only for the Triton releases whose interpreter was read for this
(``VERIFIED``); elsewhere nothing changes. tests/test_test_shortcuts.py
checks that the fused MALA gives the same bits with Triton's own patching.
"""
from __future__ import annotations

import functools
import inspect
import os

# Triton releases (major, minor) whose interpreter.py was checked to patch
# in GridExecutor.__call__ (undone) and InterpretedFunction.__call__ (not
# undone), both through the module-level _patch_lang.
VERIFIED = {(3, 9)}


def _release(version: str) -> tuple[int, int]:
    major, minor = version.split('.')[:2]
    return int(major), int(''.join(ch for ch in minor if ch.isdigit()) or 0)


def skip_repeated_patching() -> bool:
    """Install the skip where kernels run in the interpreter (idempotent);
    whether it is installed. Call it after ``TRITON_INTERPRET`` is set."""
    if os.environ.get('TRITON_INTERPRET', '0').strip().lower() not in ('1', 'true', 'yes', 'on',
                                                                        'y'):
        return False   # (without importing triton: on a GPU the tests import it when they need it)
    try:
        import triton
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return False
    if not triton.knobs.runtime.interpret or _release(triton.__version__) not in VERIFIED:
        return False
    if getattr(interpreter._patch_lang, 'skips_repeats', False):
        return True
    patch_lang, launch = interpreter._patch_lang, interpreter.GridExecutor.__call__
    # The language modules patched by the launch in progress (None: no launch).
    state = {'patched': None}

    @functools.cache   # a kernel's helpers are called thousands of times
    def languages(fn) -> frozenset[int]:
        # What _patch_lang itself looks for in the function's globals.
        return frozenset(id(value) for value in fn.__globals__.values()
                         if inspect.ismodule(value) and value in (tl, tl.core))

    @functools.wraps(patch_lang)
    def patch_lang_once(fn):
        patched = state['patched']
        wanted = None if patched is None else languages(fn)
        if wanted and wanted <= patched:
            return interpreter._LangPatchScope()   # nothing to undo
        scope = patch_lang(fn)   # (Triton's own error where no language is visible)
        if wanted:
            patched |= wanted
        return scope

    @functools.wraps(launch)
    def launch_patching_once(self, *args, **kwargs):
        outer, state['patched'] = state['patched'], set()
        try:
            return launch(self, *args, **kwargs)
        finally:
            state['patched'] = outer

    patch_lang_once.skips_repeats = True
    interpreter._patch_lang = patch_lang_once
    interpreter.GridExecutor.__call__ = launch_patching_once
    return True
