"""Shared test set-up.

Without a CUDA GPU the Triton kernels run in Triton's CPU interpreter; the
variable must be set before any ``@triton.jit`` function is defined, hence here.

Under pytest-xdist (``make test`` runs ``pytest -n auto``) each worker gets an
equal share of the cores for PyTorch's threads, itself and the tools it
starts (``OMP_NUM_THREADS``), so that the workers together do not
oversubscribe the machine: on 2 cores, 2 workers of 1 thread.
"""
import os
from pathlib import Path

import pytest
import torch
from helpers.paths import REFERENCE_DIR
from helpers.threads import torch_threads
from helpers.xdist_groups import group_tests_sharing_module_fixtures, groups_first

if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')


def _threads_per_worker() -> int | None:
    workers = int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '0') or 0)
    if not workers:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    return max(1, (cores or 1) // workers)


WORKER_THREADS = _threads_per_worker()
if WORKER_THREADS is not None:
    torch.set_num_threads(WORKER_THREADS)
    for variable in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ[variable] = str(WORKER_THREADS)


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
        groups_first(items)
