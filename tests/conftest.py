"""Shared test set-up.

Without a CUDA GPU the Triton kernels run in Triton's CPU interpreter; the
variable must be set before any ``@triton.jit`` function is defined, hence here.
"""
import os
from pathlib import Path

import pytest
import torch
from helpers.paths import REFERENCE_DIR

if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')


@pytest.fixture(scope='module')
def one_torch_thread():
    """PyTorch on one thread for a module: small models run faster so, and a
    shared 2-core machine does not oversubscribe."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='session')
def reference_dir() -> Path:
    if not REFERENCE_DIR.is_dir():
        pytest.fail(f'reference data not found at {REFERENCE_DIR}: it is part of the repository')
    return REFERENCE_DIR


@pytest.fixture(scope='session')
def parity_data(reference_dir):
    # Plain tensors and containers: loads with weights_only=True.
    return torch.load(reference_dir / 'parity_tiny.pt', weights_only=True)
