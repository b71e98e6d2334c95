"""Our one home for reading configs (:func:`load_config`: every tool and test
loads configs through it) and deriving variants of them.

:class:`ConfigCheckError` (``mavit_mm.errors``) is what a config that cannot
work raises, here and in the pre-flight checks (:mod:`.preflight`).
"""
from __future__ import annotations

import ast
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


CONFIG_SUFFIXES = ('.py', '.yml', '.yaml', '.json')    # what mmengine's Config reads


def read_config_file(path) -> Config:
    """``Config.fromfile(path)``; a config that does not read is a
    ConfigCheckError naming the file and line at fault, where that is the
    config's own code (the file or a ``_base_`` file it names by path):
    mmengine reports a syntax error as in ``<unknown>``, whichever file holds
    it, and an error the config's code raises by a traceback through its own
    reader. An error raised elsewhere (a module of ``custom_imports``) keeps
    its traceback."""
    path = Path(path)
    if path.suffix not in CONFIG_SUFFIXES:
        raise ConfigCheckError(f'config {path}: not a config file (one of {CONFIG_SUFFIXES})')
    try:
        return Config.fromfile(str(path))
    except SyntaxError:
        found = first_syntax_error(path)
        if found is None:
            raise
        raise ConfigCheckError(f'config {found.filename}, line {found.lineno}: invalid Python '
                               f'({found.msg})') from None
    except Exception as error:
        innermost = traceback.extract_tb(error.__traceback__)[-1]
        if Path(innermost.filename).resolve() not in config_files(path):
            raise
        raise ConfigCheckError(f'config {innermost.filename}, line {innermost.lineno}: '
                               f'{type(error).__name__}: {error}') from None


def config_files(path: Path) -> list[Path]:
    """Config file ``path`` (resolved) and the ``_base_`` files it names by
    path (not ``mmdet::``/``mmseg::`` ones), theirs in turn, depth first."""
    return list(_config_tree(Path(path).resolve()))


def first_syntax_error(path: Path) -> SyntaxError | None:
    """The first syntax error among :func:`config_files`, depth first."""
    return next((error for error in _config_tree(Path(path).resolve()).values()
                 if error is not None), None)


def _config_tree(path: Path) -> dict[Path, SyntaxError | None]:
    """:func:`config_files` in order, each with its syntax error (a file that
    does not parse names no bases); each file parsed once."""
    found: dict[Path, SyntaxError | None] = {}

    def visit(file: Path) -> None:
        if file in found or not file.is_file():
            return
        found[file] = None
        if file.suffix != '.py':
            return
        try:
            tree = ast.parse(file.read_text(encoding='utf-8'), filename=str(file))
        except SyntaxError as error:
            found[file] = error
            return
        for base in _local_bases(tree):
            visit((file.parent / base).resolve())

    visit(path)
    return found


def _local_bases(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == '_base_' for target in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return []
            bases = [value] if isinstance(value, str) else \
                list(value) if isinstance(value, (list, tuple)) else []
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
