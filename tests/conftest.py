"""Shared test set-up.

Without a CUDA GPU the Triton kernels run in Triton's CPU interpreter; the
variable must be set before any ``@triton.jit`` function is defined, hence here.

Under pytest-xdist (``make test`` runs ``pytest -n auto``) each worker gets an
equal share of the cores for PyTorch's threads, itself and the tools it
starts (``OMP_NUM_THREADS``), so that the workers together do not
oversubscribe the machine: on 2 cores, 2 workers of 1 thread.
"""
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from helpers.config_metafiles import read_each_metafile_once
from helpers.durations import DurationRecorder, heaviest_first, recorded_durations
from helpers.paths import REFERENCE_DIR
from helpers.threads import torch_threads
from helpers.triton_interpreter import skip_repeated_patching
from helpers.xdist_groups import group_tests_sharing_module_fixtures

if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')
skip_repeated_patching()   # the same interpreter, without its repeated set-up (see there)


def _threads_per_worker() -> int | None:
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '0') or 0)
    if not workers:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    return max(1, (cores or 1) // workers)


read_each_metafile_once()   # configs load in 0.1 s instead of 0.5 s (see there)

WORKER_THREADS = _threads_per_worker()
if WORKER_THREADS is not None:
    torch.set_num_threads(WORKER_THREADS)
    for variable in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ[variable] = str(WORKER_THREADS)


# The most disk ``make test`` takes at once, with margin: its tmp_path folders
# (checkpoints, exported models) and Triton's and inductor's caches.
# benchmarks/newcomer_path.py measures it ('make test', peak_disk_gb).
NEEDED_FREE_GB = 10


def pytest_sessionstart(session):
    """Refuse to start, with the reason, on a disk too full for the run: a
    full disk midway fails hundreds of tests with unrelated errors."""
    if os.environ.get('PYTEST_XDIST_WORKER'):
        return   # the controller checked
    needed = float(os.environ.get('MAVIT_TEST_FREE_GB', NEEDED_FREE_GB))
    folder = Path(session.config.getoption('basetemp') or tempfile.gettempdir())
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free / 1e9
    if free < needed:
        pytest.exit(f'{free:.1f} GB free on the disk of {folder}, where the tests write; '
                    f'they need about {needed:g} GB. Free some space, point TMPDIR (or '
                    f'--basetemp) at a larger disk, or set MAVIT_TEST_FREE_GB to the GB '
                    f'to require.', returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(autouse=True, scope='session')
def exact_fp32_references():
    """On a GPU, fp32 convolutions and matrix products in full fp32: cuDNN
    runs them in TF32 by default on sm_80 and newer (a 10-bit mantissa), which
    would make every fp32 reference computed through PyTorch too coarse for
    the tolerances the kernels are held to. The kernels choose their own dot
    precision (mala.function's DOT_PRECISION), whatever these flags say."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(scope='module')
def one_torch_thread():
    """PyTorch on one thread for a module: small models run faster so, and a
    shared 2-core machine does not oversubscribe."""
    with torch_threads(1):
        yield


@pytest.fixture(scope='session')
def reference_dir() -> Path:
    if not REFERENCE_DIR.is_dir():
        pytest.fail(f'reference data not found at {REFERENCE_DIR}: it is part of the repository')
    return REFERENCE_DIR


@pytest.fixture(scope='session')
def parity_data(reference_dir):
    # Plain tensors and containers: loads with weights_only=True.
    return torch.load(reference_dir / 'parity_tiny.pt', weights_only=True)



@pytest.hookimpl(tryfirst=True)   # before xdist renames the grouped tests
def pytest_collection_modifyitems(config, items):
    group_tests_sharing_module_fixtures(items)
    if WORKER_THREADS is not None:   # the order the workers report, which xdist schedules by
        heaviest_first(items, recorded_durations())


DURATIONS = DurationRecorder()


def pytest_runtest_logreport(report):
    if DurationRecorder.wanted():
        DURATIONS.add(report)


def pytest_sessionfinish(session):
    path = DurationRecorder.wanted()
    if path:
        DURATIONS.write(path)
