"""Which path a MALA call takes (``dispatch``): the PyTorch path, the fused
kernels, or a clear error; the cases the kernels refuse; where the dispatch
meets Triton and the GPU: the import of the kernels, Triton's out-of-resources
error, and the static check of what a GPU offers (``dispatch._gpu_shortfall``:
tf32 dots, shared memory per block)."""
import os
import subprocess
import sys
import types
import warnings

import pytest
import torch

pytest.importorskip('triton')

from helpers.mala_cases import (  # noqa: E402
    DEVICE,
    HEIGHT,
    WIDTH,
    plain_qkv,
)
from helpers.paths import REPO_ROOT  # noqa: E402

from mavit_mm.ops import triton_support  # noqa: E402
from mavit_mm.ops.mala import dispatch as mala_dispatch  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import mala_attention  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d, RotaryTables  # noqa: E402

GPU = torch.device('cuda', 0)
KIB = 1024


def test_fallback_imports_the_kernels_itself(monkeypatch, fresh_fallback_warnings):
    """``_triton_or_fallback`` must not depend on an earlier call having imported
    the Triton module (test order, a direct call)."""
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_function', None)
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_import_tried', False)

    def too_big(*args, **kwargs):
        raise mala_function.OutOfResources(300000, 232448, 'shared memory')
    monkeypatch.setattr(mala_function, 'mala_forward', too_big)
    q, k, v = plain_qkv(32, device='cpu')
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out = mala_dispatch._triton_or_fallback(q, k, v, rope, 'auto')
    assert any('do not fit' in str(w.message) for w in caught)
    assert torch.equal(out, mala_attention(q, k, v, rope, impl='torch'))


@pytest.fixture
def fresh_fallback_warnings(monkeypatch):
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_warned', set())



def rope_for(head_dim):
    # RoPE2d refuses head dims that are not multiples of 4: build the tables directly.
    return RotaryTables(torch.ones(head_dim // 2), HEIGHT, WIDTH)



# --------------------------------------------------------------------------
# Which path a call takes, and the cases the kernels refuse
# --------------------------------------------------------------------------
@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the CPU fallback')
def test_auto_on_cpu_uses_torch_path_silently(monkeypatch, fresh_fallback_warnings):
    # On a CPU the PyTorch path is the best there is: no warning, even with the
    # interpreter on ('auto' never runs the interpreter).
    def no_triton(*args):
        raise AssertionError("'auto' must not run the kernels on CPU")
    monkeypatch.setattr(mala_dispatch, '_triton_mala', no_triton)
    q, k, v = plain_qkv(32)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        outs = [mala_attention(q, k, v, rope, impl='auto') for _ in range(3)]
    assert not [w for w in caught if 'falls back' in str(w.message)]
    expected = mala_attention(q, k, v, rope, impl='torch')
    assert all(torch.equal(out, expected) for out in outs)



@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_auto_on_cuda_falls_back_once_per_reason(fresh_fallback_warnings):
    wide = plain_qkv(132)
    double = plain_qkv(32, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(3):
            mala_attention(*wide, rope_for(132), impl='auto')
            mala_attention(*double, RoPE2d(32)(HEIGHT, WIDTH), impl='auto')
    assert len([w for w in caught if 'falls back' in str(w.message)]) == 2



def test_triton_rejects_head_dim_130():
    q, k, v = plain_qkv(130)
    with pytest.raises(ValueError, match='head dim 130'):
        mala_attention(q, k, v, rope_for(130), impl='triton')



def test_triton_rejects_float64():
    q, k, v = plain_qkv(32, dtype=torch.float64)
    with pytest.raises(ValueError, match='float64'):
        mala_attention(q, k, v, RoPE2d(32)(HEIGHT, WIDTH), impl='triton')



def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setattr(triton_support, 'triton_interpreter_enabled', lambda: False)
    q, k, v = plain_qkv(32, device='cpu')
    with pytest.raises(RuntimeError, match='CUDA'):
        mala_attention(q, k, v, RoPE2d(32)(HEIGHT, WIDTH), impl='triton')



def test_unknown_impl_is_rejected():
    q, k, v = plain_qkv(32)
    with pytest.raises(ValueError, match='mala_impl'):
        mala_attention(q, k, v, RoPE2d(32)(HEIGHT, WIDTH), impl='cuda')



def test_triton_rejects_unpaired_rope_angles():
    q, k, v = plain_qkv(32)
    rope = RotaryTables(torch.arange(16, dtype=torch.float32), HEIGHT, WIDTH)
    with pytest.raises(ValueError, match='repeat each frequency'):
        mala_attention(q, k, v, rope, impl='triton')



def test_loading_unpaired_angles_is_caught_at_load_time():
    rope_module = RoPE2d(32)
    rope_module.load_state_dict({'angle': torch.arange(16, dtype=torch.float32)})
    assert not rope_module.angles_paired
    q, k, v = plain_qkv(32)
    with pytest.raises(ValueError, match='repeat each frequency'):
        mala_attention(q, k, v, rope_module(HEIGHT, WIDTH), impl='triton')
    rope_module.load_state_dict(RoPE2d(32).state_dict())
    assert rope_module.angles_paired
    mala_attention(q, k, v, rope_module.to(DEVICE)(HEIGHT, WIDTH), impl='triton')



def test_head_offsets_past_int32_are_refused():
    q = torch.empty_strided((1, 1, 65536, 64), (0, 0, 1, 2 ** 26), device='meta')
    reason = mala_dispatch._int32_offset_overflow(q, q, q)
    assert reason is not None and 'int32' in reason
    small = torch.empty_strided((1, 1, 65536, 64), (0, 0, 1, 65536), device='meta')
    assert mala_dispatch._int32_offset_overflow(small, small, small) is None



def test_import_and_fallback_without_triton():
    script = (
        "import sys, warnings\n"
        "sys.modules['triton'] = None\n"          # makes `import triton` fail
        "import torch, mavit_mm\n"
        "from mavit_mm.ops.mala import mala_attention\n"
        "from mavit_mm.ops.rope2d import RoPE2d\n"
        "assert not any(m.startswith('triton') for m in sys.modules if sys.modules[m])\n"
        "q = k = v = torch.randn(1, 1, 12, 16)\n"
        "rope = RoPE2d(16)(3, 4)\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    mala_attention(q, k, v, rope, impl='auto')\n"
        "try:\n"
        "    mala_attention(q, k, v, rope, impl='triton')\n"
        "except RuntimeError as exc:\n"
        "    assert 'triton is not available' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('no error without triton')\n"
    )
    # With the interpreter asked for, as on a CPU: the device check passes, so
    # the error is the missing package's, on every machine.
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, 'TRITON_INTERPRET': '1'})
    assert result.returncode == 0, result.stderr[-2000:]



def test_unsupported_triton_version_is_refused_with_its_reason():
    script = (
        "import triton\n"
        "triton.__version__ = '3.11.0'\n"
        "import torch\n"
        "from mavit_mm.ops.mala import mala_attention\n"
        "from mavit_mm.ops.rope2d import RoPE2d\n"
        "q = k = v = torch.randn(1, 1, 12, 16)\n"
        "try:\n"
        "    mala_attention(q, k, v, RoPE2d(16)(3, 4), impl='triton')\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, env={**os.environ, 'TRITON_INTERPRET': '1'})
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'triton 3.11.0 is outside the versions' in result.stdout



# --------------------------------------------------------------------------
# Triton's out-of-resources error
# --------------------------------------------------------------------------
def out_of_resources():
    return mala_function.OutOfResources(300000, 232448, 'shared memory')



def test_out_of_resources_falls_back_under_auto(monkeypatch, fresh_fallback_warnings):
    def too_big(*args, **kwargs):
        raise out_of_resources()
    monkeypatch.setattr(mala_function, 'mala_forward', too_big)
    q, k, v = plain_qkv(32)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out = mala_dispatch._triton_or_fallback(q, k, v, rope, 'auto')
        mala_dispatch._triton_or_fallback(q, k, v, rope, 'auto')
    messages = [str(w.message) for w in caught if 'falls back' in str(w.message)]
    assert len(messages) == 1 and 'do not fit' in messages[0] and 'shared memory' in messages[0]
    assert torch.equal(out, mala_attention(q, k, v, rope, impl='torch'))
    with pytest.raises(RuntimeError, match="mala_impl='triton'.*do not fit"):
        mala_attention(q, k, v, rope, impl='triton')



def test_no_gpu_check_off_cuda():
    # The CPU (the interpreter) has no GPU to be short of.
    for head_dim in (16, 64, 96, 128):
        for backward in (False, True):
            assert mala_dispatch._gpu_shortfall(torch.device('cpu'), head_dim,
                                                backward) is None



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


def test_compile_constant_marks_as_torch_compiler_does():
    """The checks above are marked by triton_support.compile_constant, which
    sets what torch.compiler.assume_constant_result sets without importing
    Dynamo (that a fresh import stays without it: test_fresh_compile.py)."""
    def ours():
        return 1

    def public():
        return 1
    assert triton_support.compile_constant(ours) is ours
    torch.compiler.assume_constant_result(public)
    assert vars(ours) == vars(public) != {}


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
    q, k, v = plain_qkv(32, device='cpu')
    assert mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True) is None
    q.requires_grad_()
    assert mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True) is None
    with torch.no_grad():
        assert mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True) is None
    cpu = torch.device('cpu')
    assert asked == [(cpu, 32, False), (cpu, 32, True), (cpu, 32, False)]


def test_a_shortfall_is_a_clear_error_under_triton(monkeypatch, fresh_fallback_warnings):
    """The verdict names what the GPU lacks: 'triton' raises it (and 'auto',
    on a CUDA tensor, warns it once and takes the PyTorch path)."""
    reason = ('the backward kernels for head dim 96 need 160 KiB of shared memory per block; '
              'NVIDIA GeForce RTX 3090 offers 99 KiB')
    monkeypatch.setattr(mala_dispatch, '_gpu_shortfall', lambda device, head_dim, backward: reason)
    # The interpreter stands in for the GPU (whatever this machine has).
    monkeypatch.setattr(triton_support, 'triton_interpreter_enabled', lambda: True)
    q, k, v = plain_qkv(32, device='cpu', requires_grad=True)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    unsupported = mala_dispatch.triton_unsupported(q, k, v, rope, allow_interpreter=True)
    assert unsupported == (reason, RuntimeError)
    with pytest.raises(RuntimeError, match="mala_impl='triton' cannot run this case: the "
                                           'backward kernels for head dim 96 need 160 KiB'):
        mala_attention(q, k, v, rope, impl='triton')


def test_a_shortfall_falls_back_once_under_auto(monkeypatch, fresh_fallback_warnings):
    """'auto' on a CUDA tensor: one warning naming the shortfall, the PyTorch
    path's result. The CUDA tensor is a CPU one that says it is on cuda:0,
    as far as the dispatch looks (its device)."""
    reason = 'Tesla T4 (sm_75) has no tf32 tensor cores; the kernels need sm_80 or newer'
    monkeypatch.setattr(mala_dispatch, '_gpu_shortfall', lambda device, head_dim, backward: reason)
    q, k, v = plain_qkv(32, device='cpu')
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


def test_host_grid_arithmetic_is_triton_s():
    # The launch paths size grids and tiles with triton_support's cdiv and
    # next_power_of_2 (Triton's own are constexpr functions, slow on the host):
    # the same numbers as Triton's.
    import triton
    for a in range(0, 300):
        for b in (1, 2, 3, 16, 64, 100):
            assert triton_support.cdiv(a, b) == triton.cdiv(a, b), (a, b)
    for n in range(1, 5000):
        assert triton_support.next_power_of_2(n) == triton.next_power_of_2(n), n
