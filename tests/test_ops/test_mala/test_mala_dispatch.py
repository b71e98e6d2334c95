"""Where the dispatch meets Triton's failures: imports, compiler errors."""
import warnings

import pytest
import torch

pytest.importorskip('triton')

from mavit_mm.ops import mala as mala_ops  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import launches as mala_launches  # noqa: E402
from mavit_mm.ops.mala import (
    mala_attention,  # noqa: E402
    triton_support,  # noqa: E402
)
from mavit_mm.ops.mala import plan as mala_plan  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402
from mavit_mm.tooling.mala_inputs import mala_inputs  # noqa: E402

HEIGHT, WIDTH = 5, 7


def qkv(head_dim=32):
    return mala_inputs(1, 2, HEIGHT, WIDTH, head_dim, layout='contiguous')


@pytest.fixture
def fresh_state(monkeypatch):
    monkeypatch.setattr(mala_ops, '_warned_fallback_reasons', set())
    monkeypatch.setattr(mala_plan, '_compiled_resources', {})
    monkeypatch.setattr(mala_plan, '_shortfalls', {})


def test_fallback_imports_the_kernels_itself(monkeypatch, fresh_state):
    """``_triton_or_fallback`` must not depend on an earlier call having imported
    the Triton module (test order, a direct call)."""
    monkeypatch.setattr(mala_ops, '_function', None)
    monkeypatch.setattr(mala_ops, '_triton_import_tried', False)

    def too_big(*args, **kwargs):
        raise triton_support.OutOfResources(300000, 232448, 'shared memory')
    monkeypatch.setattr(mala_function, 'mala_forward', too_big)
    q, k, v = qkv()
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out = mala_ops._triton_or_fallback(q, k, v, rope, 'auto')
    assert any('do not fit' in str(w.message) for w in caught)
    assert torch.equal(out, mala_attention(q, k, v, rope, impl='torch'))


class FailingKernel:
    def warmup(self, *args, grid, **meta):
        raise RuntimeError('PTX assembly aborted due to errors')


def forward_launches():
    q, k, v = qkv()
    angle = RoPE2d(32).angle
    plan = mala_plan.make_launch_plan(HEIGHT * WIDTH, 2, 32, q.dtype, q.device)
    return mala_launches.ForwardLaunches(q, k, v, angle, WIDTH, plan, allocate=False)


def test_a_compiler_error_is_a_compile_failure_naming_the_kernel(monkeypatch, fresh_state):
    launches = forward_launches()
    _, meta = launches.table['partials']
    launches.table = dict(launches.table, partials=(FailingKernel(), meta))
    monkeypatch.setattr(torch.cuda, 'current_device', lambda: 0)
    with pytest.raises(mala_plan.CompileFailure, match='partials kernel failed to compile.*PTX'):
        mala_plan.compiled_resources(launches, 'partials')
    assert issubclass(mala_plan.CompileFailure, RuntimeError)


def test_a_compiler_error_becomes_a_reason_not_a_crash(monkeypatch, fresh_state):
    """What the GPU check would meet: the verdict names the failure, so 'auto'
    falls back (one warning) and 'triton' raises a clear error."""
    def failing(launches, name):
        raise mala_plan.CompileFailure(f'the {name} kernel failed to compile: RuntimeError: x')
    monkeypatch.setattr(mala_plan, 'compiled_resources', failing)
    q, k, v = qkv()
    reason = mala_plan._compiled_shortfall(q, k, v, WIDTH, backward=True)
    assert reason.startswith('the partials kernel failed to compile') and 'head dim 32' in reason
    # The device check skipped (no GPU here), the interpreter dispatch sees the verdict.
    monkeypatch.setattr(mala_plan, 'resource_shortfall', mala_plan._compiled_shortfall)
    monkeypatch.setenv('TRITON_INTERPRET', '1')
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with pytest.raises(RuntimeError, match="mala_impl='triton' cannot run this case: the "
                                           'partials kernel failed to compile'):
        mala_attention(q, k, v, rope, impl='triton')
