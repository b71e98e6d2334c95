"""Our one home for reading configs (:func:`load_config`: every tool and test
loads configs through it) and deriving variants of them.

:class:`ConfigCheckError` (``mavit_mm.errors``) is what a config that cannot
work raises, here and in the pre-flight checks (:mod:`.preflight`).
"""
from __future__ import annotations

import ast
import sysconfig
import traceback
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from mmengine.config import Config

from ..errors import ConfigCheckError

SCOPES = ('mmdet', 'mmseg')


def check_scope(cfg: Config, where: str = 'the config') -> str:
    """The config's ``default_scope``, which must be mmdet or mmseg."""
    scope = cfg.get('default_scope')
    if scope not in SCOPES:
        raise ConfigCheckError(f'{where}: default_scope must be one of {SCOPES}, got {scope!r}')
    return scope


class FormattedOnceConfig(Config):
    """mmengine's Config whose ``pretty_text`` runs yapf once per content.

    mmengine formats the whole config with yapf, which is slow, each time it logs
    it, dumps it, hands it to the visualiser, records it in the runtime info and
    writes a checkpoint: the same text each time. The unformatted text is the
    key, so a config that changed formats anew and the result is always what
    ``Config.pretty_text`` gives. Deep copies (the Runner takes one) keep the class."""

    _formatted: ClassVar[OrderedDict[str, str]] = OrderedDict()
    _CACHE_SIZE: ClassVar[int] = 8

    @classmethod
    def of(cls, cfg: Config) -> FormattedOnceConfig:
        """``cfg`` as a FormattedOnceConfig (the same state: dict, file name,
        text, environment variables); itself when it is one already."""
        if isinstance(cfg, cls):
            return cfg
        other = cls.__new__(cls)
        other.__setstate__(cfg.__getstate__())
        return other

    @property
    def pretty_text(self) -> str:
        unformatted = Config(self.to_dict(), format_python_code=False).pretty_text
        cache = FormattedOnceConfig._formatted
        if unformatted in cache:
            cache.move_to_end(unformatted)
            return cache[unformatted]
        text = super().pretty_text
        cache[unformatted] = text
        if len(cache) > self._CACHE_SIZE:
            cache.popitem(last=False)
        return text


def load_config(path, cfg_options: dict | None = None) -> FormattedOnceConfig:
    """``Config.fromfile(path)`` with ``cfg_options`` (``--cfg-options``) merged in;
    a missing file, a file mmengine cannot read as a config (:func:`read_config_file`)
    or a scope other than mmdet / mmseg is a ConfigCheckError."""
    if not Path(path).is_file():
        raise ConfigCheckError(f'config file not found: {path}')
    cfg = read_config_file(path)
    if cfg_options:
        try:
            cfg.merge_from_dict(cfg_options)
        except (TypeError, KeyError) as error:  # a key under a value that is no dict, ...
            raise ConfigCheckError(f'--cfg-options: {error}') from None
    check_scope(cfg, str(path))
    return FormattedOnceConfig.of(cfg)


def read_config_file(path) -> Config:
    """``Config.fromfile(path)``; a file that does not read as a config is a
    ConfigCheckError naming the file and line at fault: mmengine reports a
    syntax error as in ``<unknown>``, whether it is in the file or in one of
    its ``_base_`` files, and an error the config's code raises by a traceback
    through its own reader."""
    try:
        return Config.fromfile(str(path))
    except SyntaxError as error:
        found = first_syntax_error(Path(path)) or error
        where = found.filename if found.filename not in (None, '<unknown>') else path
        raise ConfigCheckError(f'config {where}, line {found.lineno}: invalid Python '
                               f'({found.msg})') from None
    except Exception as error:
        # The innermost frame of a config file's code (mmengine runs it under its path).
        config_frames = [frame for frame in traceback.extract_tb(error.__traceback__)
                         if _is_config_code(frame.filename)]
        where = (f'{config_frames[-1].filename}, line {config_frames[-1].lineno}'
                 if config_frames else str(path))
        raise ConfigCheckError(f'config {where}: cannot be read as a config '
                               f'({type(error).__name__}: {error})') from None


def _is_config_code(filename: str) -> bool:
    """Whether a traceback's frame is in a config's code: a .py file outside
    Python's and the installed packages' folders, and not this module."""
    path = Path(filename).resolve()
    if path.suffix != '.py' or path == Path(__file__).resolve():
        return False
    return not any(path.is_relative_to(folder) for folder in _LIBRARY_FOLDERS)


_LIBRARY_FOLDERS = tuple({Path(sysconfig.get_paths()[name]).resolve()
                          for name in ('stdlib', 'platstdlib', 'purelib', 'platlib')})


def first_syntax_error(path: Path, _seen: frozenset = frozenset()) -> SyntaxError | None:
    """The first syntax error of config file ``path`` or of the ``_base_``
    files it names by path (not ``mmdet::``/``mmseg::`` ones), depth first."""
    if path in _seen or path.suffix != '.py' or not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as error:
        return error
    for base in _local_bases(tree):
        found = first_syntax_error((path.parent / base).resolve(), _seen | {path})
        if found is not None:
            return found
    return None


def _local_bases(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == '_base_' for target in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return []
            bases = [value] if isinstance(value, str) else list(value)
            return [base for base in bases if isinstance(base, str) and '::' not in base]
    return []


def iter_dataset_cfgs(dataset_cfg, where: str) -> Iterator[tuple[dict, str]]:
    """Leaf dataset configs of ``dataset_cfg`` (unwrapping Repeat/Concat/... wrappers),
    each with where it sits in the config."""
    if isinstance(dataset_cfg, (list, tuple)):
        for i, item in enumerate(dataset_cfg):
            yield from iter_dataset_cfgs(item, f'{where}[{i}]')
    elif isinstance(dataset_cfg, dict):
        inner = next((key for key in ('datasets', 'dataset') if key in dataset_cfg), None)
        if inner is None:
            yield dataset_cfg, where
        else:
            yield from iter_dataset_cfgs(dataset_cfg[inner], f'{where}.{inner}')


def set_iterations(cfg, max_iters: int, checkpoint_interval: int = None) -> None:
    """Iteration-based training of ``max_iters``, the lr schedule scaled to it,
    validation at the end, checkpoints every ``checkpoint_interval``."""
    old = cfg.train_cfg.get('max_iters')
    if old is None:
        raise ValueError('set_iterations needs an iteration-based train_cfg (max_iters)')
    factor = max_iters / old
    cfg.train_cfg.max_iters = max_iters
    cfg.train_cfg.val_interval = max_iters
    for scheduler in cfg.get('param_scheduler') or []:
        if scheduler.get('by_epoch', True):
            continue
        for key in ('begin', 'end'):
            if key in scheduler:
                scheduler[key] = max(0, int(round(scheduler[key] * factor)))
        if scheduler.get('end', 1) <= scheduler.get('begin', 0):
            scheduler['end'] = scheduler.get('begin', 0) + 1
        if 'milestones' in scheduler:
            scheduler['milestones'] = [max(1, int(round(m * factor)))
                                       for m in scheduler['milestones']]
    hooks = cfg.default_hooks
    hooks.checkpoint.interval = checkpoint_interval or max_iters
    hooks.logger.interval = min(hooks.logger.get('interval', 50), max_iters)
    if cfg.get('log_processor'):
        cfg.log_processor['window_size'] = min(cfg.log_processor.get('window_size', 10),
                                               max_iters)
