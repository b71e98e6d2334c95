"""``mmcv._ext`` for an mmcv built without its C++ ops (``MMCV_WITH_OPS=0``).

``scripts/gpu_wheels.sh`` puts this file into mmcv 2.1.0's sources as
``mmcv/_ext.py`` before building the wheel for the GPU machine. ``import
mmcv.ops`` (which mmseg and mmdet do on import) loads ``mmcv._ext`` and checks
``hasattr`` for each op a module wraps (``mmcv.utils.ext_loader.load_ext``):
here every public name is a function that raises :class:`MissingOpError` when
called. So the imports work, a model that calls no mmcv op (UperNet, Swin,
MAViT) runs, and one that calls an op fails with a message that says why.
Standard library only: it is copied, not imported from this repository.
"""

WITH_OPS = False
# What mmcv.ops.info reports about the build; environment reports call these.
_BUILD_INFO = {'get_compiler_version': 'none (MMCV_WITH_OPS=0)',
               'get_compiling_cuda_version': 'none (MMCV_WITH_OPS=0)'}


class MissingOpError(RuntimeError):
    """An mmcv C++ op called in a build without them."""


def missing_op_message(name: str) -> str:
    return (f'mmcv was built without its C++ ops (MMCV_WITH_OPS=0, scripts/gpu_wheels.sh): '
            f'mmcv._ext.{name} is not available; a model that needs it needs mmcv built '
            'with MMCV_WITH_OPS=1 (scripts/setup.sh)')


def __getattr__(name: str):
    # Private and dunder names stay missing: copy, pickle and inspect probe them.
    if name.startswith('_'):
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    if name in _BUILD_INFO:
        return lambda: _BUILD_INFO[name]

    def missing_op(*args, **kwargs):
        raise MissingOpError(missing_op_message(name))
    missing_op.__name__ = missing_op.__qualname__ = name
    return missing_op
