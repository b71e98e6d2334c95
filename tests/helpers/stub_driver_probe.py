"""Runs the fused MALA's compiled-mode launch path on the CPU, under the stub
CUDA driver (``mavit_mm.tooling.triton_stub_driver``), and writes what it saw
as JSON for ``tests/test_ops/test_mala/test_direct_launch.py``.

Usage: ``python tests/helpers/stub_driver_probe.py OUT.json`` (it sets
``TRITON_INTERPRET=0`` itself: the kernels must be compiled-mode).

Written:

* ``calls``: per call of one forward + backward (the same inputs each time),
  whether direct launches were allowed, how many launches went through
  Triton's ``JITFunction.run``, and every launch as the driver received it,
  with tensors described by dtype, shape, strides and role (an input's name,
  or ``buffer`` for what the pass allocated).
* ``cases``: for a sweep of inputs (layouts, alignment, sizes, dtypes), each
  launch's plan-cache entry (by id) and the specialisation Triton's binder
  gives it.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ['TRITON_INTERPRET'] = '0'
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from mavit_mm.ops import mala as mala_ops  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402
from mavit_mm.tooling.mala_inputs import mala_inputs  # noqa: E402
from mavit_mm.tooling.triton_stub_driver import stub_cuda_driver  # noqa: E402

HEAD_DIM = 64


def model_qkv(batch, heads, height, width, dtype, offset=0, layout='channels_last'):
    """q, k, v in ``layout`` (the model's by default), ``offset`` elements into
    their storage (``mavit_mm.tooling.mala_inputs``)."""
    return mala_inputs(batch, heads, height, width, HEAD_DIM, layout=layout, dtype=dtype,
                       storage_offset=offset)


def describe(value, roles):
    if isinstance(value, torch.Tensor):
        return ['tensor', str(value.dtype), list(value.shape), list(value.stride()),
                roles.get(value.data_ptr(), 'buffer')]
    return [type(value).__name__, repr(value)]


def counted_runs(function_module):
    """Counts JITFunction.run calls of the op's kernels (Triton's path)."""
    counter = {'runs': 0}
    kernels = function_module.kernels
    for name, value in vars(kernels).items():
        if name.endswith('_kernel') and hasattr(value, 'run'):
            original = value.run

            def run(*args, _original=original, **kwargs):
                counter['runs'] += 1
                return _original(*args, **kwargs)
            value.run = run
    return counter


def probe_calls(launches_module, counter, stub):
    q, k, v = (t.detach().requires_grad_() for t in model_qkv(1, 2, 16, 20, torch.bfloat16))
    rope = RoPE2d(HEAD_DIM)(16, 20)
    dout = torch.randn(q.shape, dtype=q.dtype)
    roles = {t.data_ptr(): name for name, t in
             dict(q=q, k=k, v=v, dout=dout, angle=rope.angle).items()}
    calls = []
    for direct in (False, True, True, True):
        stub.launches.clear()
        runs = counter['runs']
        with launches_module.direct_launches(direct):
            out = mala_ops.mala_attention(q, k, v, rope, impl='triton')
            torch.autograd.grad(out, (q, k, v), dout)
        calls.append(dict(direct_allowed=direct, triton_runs=counter['runs'] - runs, launches=[
            dict(kernel=r.kernel, grid=list(r.grid), function=str(r.function),
                 packed_metadata=repr(r.packed_metadata),
                 args=[describe(a, roles) for a in r.args]) for r in stub.launches]))
    return calls


def probe_cases(launches_module, plan_module):
    """Each launch's plan-cache entry and Triton's specialisation of it."""
    plan_module._plans.clear()
    seen = []
    original = launches_module.CompiledLaunches.launch

    def launch(self, name, kernel, grid, args, meta):
        binder = kernel.device_caches[0][-1]
        specialization = binder(*args, **meta)[1]
        seen.append(dict(case=id(self), kernel=name, specialization=repr(specialization)))
        return original(self, name, kernel, grid, args, meta)
    launches_module.CompiledLaunches.launch = launch

    variants = {
        'channels_last layout': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16),
        'channels_last layout, new tensors': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16),
        'offset 8 elements (16 bytes)': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16, 8),
        'offset 1 element (2 bytes)': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16, 1),
        'offset 3 elements (6 bytes)': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16, 3),
        'contiguous heads': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16,
                                              layout='contiguous'),
        'nchw layout': lambda: model_qkv(1, 2, 16, 20, torch.bfloat16, layout='nchw'),
        'odd tokens': lambda: model_qkv(1, 2, 15, 21, torch.bfloat16),
        'one head, batch 2': lambda: model_qkv(2, 1, 16, 20, torch.bfloat16),
        'fp32': lambda: model_qkv(1, 2, 16, 20, torch.float32),
        'fp32, offset 2 elements (8 bytes)': lambda: model_qkv(1, 2, 16, 20,
                                                                 torch.float32, 2),
    }
    with launches_module.direct_launches(False):   # every launch through Triton's binder
        for label, make in variants.items():
            probe_variant(label, make, seen)
    launches_module.CompiledLaunches.launch = original
    return seen


def probe_variant(label, make, seen):
    """One forward + backward of a sweep variant; labels its launches in ``seen``."""
    q, k, v = (t.detach().requires_grad_() for t in make())
    height, width = (15, 21) if label == 'odd tokens' else (16, 20)
    rope = RoPE2d(HEAD_DIM)(height, width)
    before = len(seen)
    out = mala_ops.mala_attention(q, k, v, rope, impl='triton')
    torch.autograd.grad(out, (q, k, v), torch.randn(out.shape, dtype=out.dtype))
    for record in seen[before:]:
        record['variant'] = label


def main(output: str) -> None:
    mala_ops.triton_interpreter_enabled = lambda: True   # CPU tensors pass the dispatch
    assert mala_ops._triton_unavailable() is None, mala_ops._triton_unavailable()
    from mavit_mm.ops.mala import function, launches, plan
    counter = counted_runs(function)
    with stub_cuda_driver() as stub:
        calls = probe_calls(launches, counter, stub)
        cases = probe_cases(launches, plan)
    Path(output).write_text(json.dumps(dict(calls=calls, cases=cases), indent=1))


if __name__ == '__main__':
    main(sys.argv[1])
