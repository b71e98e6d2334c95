"""Where the dispatch meets Triton and the GPU: the import of the kernels,
Triton's out-of-resources error, and the static check of what a GPU offers
(``dispatch._gpu_shortfall``: tf32 dots, shared memory per block)."""
import types
import warnings

import pytest
import torch

pytest.importorskip('triton')

from mavit_mm.ops import triton_support  # noqa: E402
from mavit_mm.ops.mala import dispatch as mala_dispatch  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import mala_attention  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402
from mavit_mm.tooling.mala_inputs import mala_inputs  # noqa: E402

HEIGHT, WIDTH = 5, 7
GPU = torch.device('cuda', 0)
KIB = 1024


def qkv(head_dim=32, requires_grad=False):
    return mala_inputs(1, 2, HEIGHT, WIDTH, head_dim, layout='contiguous',
                       requires_grad=requires_grad)


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_warned', set())


def test_fallback_imports_the_kernels_itself(monkeypatch, fresh_state):
    """``_triton_or_fallback`` must not depend on an earlier call having imported
    the Triton module (test order, a direct call)."""
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_function', None)
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_import_tried', False)

    def too_big(*args, **kwargs):
        raise mala_function.OutOfResources(300000, 232448, 'shared memory')
    monkeypatch.setattr(mala_function, 'mala_forward', too_big)
    q, k, v = qkv()
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out = mala_dispatch._triton_or_fallback(q, k, v, rope, 'auto')
    assert any('do not fit' in str(w.message) for w in caught)
    assert torch.equal(out, mala_attention(q, k, v, rope, impl='torch'))


# --------------------------------------------------------------------------
# The static GPU check, on made-up GPUs
# --------------------------------------------------------------------------
def fake_gpu(monkeypatch, name, major, minor, shared_kib=None):
    """``torch.cuda.get_device_properties`` answers for a GPU that is not there;
    ``shared_kib`` None: a properties object without the opt-in field."""
    properties = types.SimpleNamespace(name=name, major=major, minor=minor,
                                       multi_processor_count=8)
    if shared_kib is not None:
        properties.shared_memory_per_block_optin = shared_kib * KIB
    asked = []

    def get_device_properties(device=None):
        asked.append(device)
        return properties
    monkeypatch.setattr(torch.cuda, 'get_device_properties', get_device_properties)
    return asked


def test_a_gpu_without_tf32_dots_is_refused(monkeypatch):
    asked = fake_gpu(monkeypatch, 'Tesla T4', 7, 5, shared_kib=64)
    for head_dim in (16, 64):
        reason = mala_dispatch._gpu_shortfall(GPU, head_dim, backward=False)
        assert reason is not None
        assert 'Tesla T4' in reason and 'sm_75' in reason and 'sm_80' in reason, reason
    assert asked == [GPU, GPU]   # the tensors' own GPU


def test_a_compile_runs_the_gpu_check_as_python_not_traced(monkeypatch):
    """Under torch.compile the check is run, not traced (Dynamo would have to
    trace CUDA's device-properties object): here a property that Dynamo cannot
    trace (frame introspection), which plain Python runs."""
    import sys

    class Properties:
        name, minor, shared_memory_per_block_optin = 'NVIDIA H100 80GB HBM3', 0, 227 * KIB

        @property
        def major(self):
            return 9 if sys._getframe(0) is not None else 0
    monkeypatch.setattr(torch.cuda, 'get_device_properties', lambda device=None: Properties())
    torch._dynamo.reset()

    def step(x):
        return x + (mala_dispatch._gpu_shortfall(GPU, 64, True) is None)
    assert torch.compile(step, fullgraph=True, backend='eager')(torch.zeros(2)).tolist() == [1, 1]


@pytest.mark.parametrize('head_dim,backward', [
    (16, True), (64, False), (64, True),   # every kernel of heads up to 64 channels fits
    (96, False), (128, False),             # the wide forward does too
])
def test_an_sm86_gpu_runs_what_fits_its_99_kib(monkeypatch, head_dim, backward):
    fake_gpu(monkeypatch, 'NVIDIA GeForce RTX 3090', 8, 6, shared_kib=99)
    assert mala_dispatch._gpu_shortfall(GPU, head_dim, backward) is None


@pytest.mark.parametrize('head_dim', [68, 96, 128])
def test_an_sm86_gpu_is_short_for_the_wide_backward(monkeypatch, head_dim):
    fake_gpu(monkeypatch, 'NVIDIA GeForce RTX 3090', 8, 6, shared_kib=99)
    reason = mala_dispatch._gpu_shortfall(GPU, head_dim, backward=True)
    needed = mala_dispatch.TRITON_SHARED_BYTES[128][1] // KIB
    assert reason is not None
    for part in ('backward', f'head dim {head_dim}', f'{needed} KiB', 'NVIDIA GeForce RTX 3090',
                 '99 KiB'):
        assert part in reason, (part, reason)


@pytest.mark.parametrize('name,major,shared_kib', [('NVIDIA H100 80GB HBM3', 9, 227),
                                                   ('NVIDIA H200', 9, 227),
                                                   ('NVIDIA A100-SXM4-80GB', 8, 163)])
def test_sm80_and_sm90_gpus_run_every_case(monkeypatch, name, major, shared_kib):
    fake_gpu(monkeypatch, name, major, 0, shared_kib=shared_kib)
    for head_dim in (16, 32, 48, 64, 96, 128):
        for backward in (False, True):
            assert mala_dispatch._gpu_shortfall(GPU, head_dim, backward) is None, \
                (head_dim, backward)


def test_properties_without_the_shared_memory_field_pass(monkeypatch):
    # Older PyTorch releases lack shared_memory_per_block_optin: the check
    # then trusts the GPU, and a launch that finds it short falls back on
    # Triton's out-of-resources error.
    fake_gpu(monkeypatch, 'Some sm_80 GPU', 8, 0)
    assert mala_dispatch._gpu_shortfall(GPU, 128, backward=True) is None


def test_the_shared_memory_table_covers_every_padded_head_dim():
    # Heads are padded to 64 or 128 channels; forward takes no more than backward.
    table = mala_dispatch.TRITON_SHARED_BYTES
    assert set(table) == {64, 128}
    assert all(0 < forward <= backward for forward, backward in table.values())
    assert table[64][1] <= 99 * KIB      # sm_86 / sm_89 run the narrow backward
    assert max(table[128]) <= 227 * KIB  # sm_90 runs everything


# --------------------------------------------------------------------------
# What the dispatch does with the verdict
# --------------------------------------------------------------------------
def test_the_check_is_asked_about_the_passes_the_call_needs(monkeypatch):
    """The tensors' device and head dim, and whether a backward will follow:
    gradients enabled and one of q, k, v requiring them."""
    asked = []

    def recording(device, head_dim, backward):
        asked.append((device, head_dim, backward))
    monkeypatch.setattr(mala_dispatch, '_gpu_shortfall', recording)
    # The interpreter stands in for the GPU (whatever this machine has).
    monkeypatch.setattr(triton_support, 'triton_interpreter_enabled', lambda: True)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    q, k, v = qkv()
    assert mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True) is None
    q.requires_grad_()
    assert mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True) is None
    with torch.no_grad():
        assert mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True) is None
    cpu = torch.device('cpu')
    assert asked == [(cpu, 32, False), (cpu, 32, True), (cpu, 32, False)]


def test_a_shortfall_is_a_clear_error_under_triton(monkeypatch, fresh_state):
    """The verdict names what the GPU lacks: 'triton' raises it (and 'auto',
    on a CUDA tensor, warns it once and takes the PyTorch path)."""
    reason = ('the backward kernels for head dim 96 need 160 KiB of shared memory per block; '
              'NVIDIA GeForce RTX 3090 offers 99 KiB')
    monkeypatch.setattr(mala_dispatch, '_gpu_shortfall', lambda device, head_dim, backward: reason)
    # The interpreter stands in for the GPU (whatever this machine has).
    monkeypatch.setattr(triton_support, 'triton_interpreter_enabled', lambda: True)
    q, k, v = qkv(requires_grad=True)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    unsupported = mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True)
    assert unsupported == (reason, RuntimeError)
    with pytest.raises(RuntimeError, match="mala_impl='triton' cannot run this case: the "
                                           'backward kernels for head dim 96 need 160 KiB'):
        mala_attention(q, k, v, rope, impl='triton')


def test_a_shortfall_falls_back_once_under_auto(monkeypatch, fresh_state):
    """'auto' on a CUDA tensor: one warning naming the shortfall, the PyTorch
    path's result. The CUDA tensor is a CPU one that says it is on cuda:0,
    as far as the dispatch looks (its device)."""
    reason = 'Tesla T4 (sm_75) has no tf32 tensor cores; the kernels need sm_80 or newer'
    monkeypatch.setattr(mala_dispatch, '_gpu_shortfall', lambda device, head_dim, backward: reason)
    q, k, v = qkv()
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    expected = mala_attention(q, k, v, rope, impl='torch')
    cuda_q, cuda_k, cuda_v = (OnCuda(t) for t in (q, k, v))
    torch_path = []
    monkeypatch.setattr(mala_dispatch, '_torch_mala',
                        lambda q, k, v, rope: torch_path.append(1) or expected)
    monkeypatch.setattr(mala_dispatch, '_triton_or_fallback', no_triton)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(2):
            assert mala_dispatch.mala_attention(cuda_q, cuda_k, cuda_v, rope,
                                                impl='auto') is expected
    messages = [str(w.message) for w in caught if 'falls back' in str(w.message)]
    assert messages == [f"MALA falls back to the PyTorch path: {reason}. Pass "
                        "mala_impl='torch' to choose it explicitly."]
    assert torch_path == [1, 1]


def no_triton(*args):
    raise AssertionError('the Triton path was taken despite the shortfall')


class OnCuda:
    """A q / k / v stand-in whose device is cuda:0: what the dispatch reads
    of a tensor before it picks a path (shape, dtype, device, strides,
    requires_grad)."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.device = GPU

    def __getattr__(self, name):
        return getattr(self._tensor, name)
