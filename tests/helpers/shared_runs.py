"""Work one test session does once, whichever module and worker asks first:
the others wait for it and reuse it (pytest-xdist's recipe for session
fixtures: a folder the session's workers share, and a file lock).

``demo_detector_run`` is such a run: a demo detector trained with
tools/train.py on the demo-sized synthetic data. The demo Mask R-CNN's
(``demo_mask_rcnn_run``) is the detector-learns test's (make test-slow), which judges its
iterations; ``demo_coco_data`` is also the deployment tests' data.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from helpers.paths import REPO_ROOT
from helpers.tools import explain, retarget_data_root, run_tool

MASK_RCNN_CONFIG = 'configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py'
# The xdist group of every test that uses the run: one worker trains it and
# runs them all, so no worker sits waiting on the lock while another trains.
MASK_RCNN_GROUP = 'demo-mask-rcnn-run'
# The detector-learns test judges iterations 31-40 of the run.
MASK_RCNN_ITERS = 40
# The demo-sized data: 64 training images of 160 px (the validation split is
# drawn from its own generator, so its size leaves the training set as it is).
COCO_SETTINGS = dict(num_train=64, num_val=16, image_size=(160, 160), max_objects=3, seed=0)


def session_dir(tmp_path_factory) -> Path:
    """A folder every worker of this session shares (the workers' own
    temporary folders are inside it); without workers, the session's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get('PYTEST_XDIST_WORKER') else base


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """``<session folder>/<name>``, filled by ``build`` once per session: the
    first caller builds while the others wait on the lock. A build that failed
    leaves no mark of completion, so the next caller tries again (and fails
    with its own message)."""
    root = session_dir(tmp_path_factory) / name
    with FileLock(f'{root}.lock'):
        done = root / '.complete'
        if not done.exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            build(root)
            done.touch()
    return root


def demo_coco_data(tmp_path_factory) -> Path:
    """The demo-sized synthetic COCO data (COCO_SETTINGS), written once."""
    def build(root: Path) -> None:
        from mavit_mm.data.synthetic import make_coco_dataset
        make_coco_dataset(root / 'coco', **COCO_SETTINGS)
    return built_once(tmp_path_factory, 'demo_coco', build) / 'coco'


def demo_detector_run(tmp_path_factory, config: str, iters: int) -> tuple[Path, Path]:
    """(config, work dir) of the demo detector ``config`` trained ``iters``
    iterations on ``demo_coco_data`` with the config's own schedule (warm-up
    included, stopped early), seed 0, a log record every iteration, no
    validation, the last checkpoint kept; once per session."""
    data_root = demo_coco_data(tmp_path_factory)
    name = Path(config).stem

    def build(root: Path) -> None:
        from mavit_mm.tooling.config import load_config
        cfg = load_config(REPO_ROOT / config)
        retarget_data_root(cfg, str(data_root))
        cfg.train_cfg.max_iters = iters
        cfg.train_cfg.val_interval = iters + 1
        cfg.default_hooks.logger.interval = 1
        cfg.default_hooks.checkpoint.interval = iters
        cfg.randomness = dict(seed=0)
        cfg.dump(str(root / f'{name}.py'))
        result = run_tool('train.py', root / f'{name}.py', '--work-dir', root / 'work',
                          cwd=root, timeout=1800)
        assert result.returncode == 0, explain(result)

    root = built_once(tmp_path_factory, f'{name}_{iters}_iters', build)
    return root / f'{name}.py', root / 'work'


def demo_mask_rcnn_run(tmp_path_factory) -> tuple[Path, Path]:
    """The demo Mask R-CNN's run (``demo_detector_run``), MASK_RCNN_ITERS
    iterations."""
    return demo_detector_run(tmp_path_factory, MASK_RCNN_CONFIG, MASK_RCNN_ITERS)
