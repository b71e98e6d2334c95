"""mmengine reads the model index of mmdet or mmseg (``.mim/model-index.yml``
and the 200-odd metafiles it names: about 0.18 s) for every ``mmdet::`` or
``mmseg::`` base it resolves, and our configs name three or four each, so a
config took about 0.5 s to load: the tests load several hundred. (mmdet's
metafiles end in ``.yml``, mmseg's in ``.yaml``: both are read once.) The files
are part of the installed packages and do not change during a test session,
so the tests read each once per process (``read_each_metafile_once``); what
a config resolves to is unchanged, and every tool the tests start as a
subprocess still reads them as a user's does. Before each such base mmengine
also asks whether its package is installed, reloading ``pkg_resources`` to
answer (about 0.02 s a base): the answer is kept for the process too.
"""
from __future__ import annotations

import functools
import os


def read_each_metafile_once() -> None:
    """Memoise mmengine's reads of the packages' ``.mim`` YAML files (read
    only by mmengine's config resolution) for this process."""
    from mmengine.config import utils

    load = utils.load
    if getattr(load, 'reads_metafiles_once', False):
        return

    @functools.cache
    def read_once(path: str):
        return load(path)

    @functools.wraps(load)
    def load_metafiles_once(file, *args, **kwargs):
        if not args and not kwargs and isinstance(file, str) and \
                f'{os.sep}.mim{os.sep}' in file and file.endswith(('.yml', '.yaml')):
            return read_once(file)
        return load(file, *args, **kwargs)

    load_metafiles_once.reads_metafiles_once = True
    load_metafiles_once.cache_clear = read_once.cache_clear   # for its test
    utils.load = load_metafiles_once

    from mmengine.config import config  # its own name for mmengine.utils.is_installed
    config.is_installed = functools.cache(config.is_installed)
