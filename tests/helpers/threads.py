"""PyTorch's thread count for a block of tests."""
import contextlib

import torch


@contextlib.contextmanager
def torch_threads(count: int):
    """PyTorch on ``count`` threads inside the block, the count before it after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
