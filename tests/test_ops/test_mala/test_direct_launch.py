"""Direct launches of the fused MALA's compiled kernels (``CompiledLaunches``).

After a case's first launch of a kernel through Triton's ``JITFunction.run``,
later launches call the ``CompiledKernel`` Triton returned. On the CPU this is
checked two ways:

* in compiled mode, under a stub CUDA driver (``tests/helpers/
  stub_driver_probe.py`` in a subprocess, interpreter off; the kernels compile
  for sm_90): direct launches hand the driver exactly what Triton's path hands
  it, and no plan-cache entry ever meets two Triton specialisations;
* in this process, with stand-ins for Triton's objects: when a direct launch
  is taken, and when Triton's path is kept (the interpreter, a binder that
  binds otherwise, pre-run hooks, ``DIRECT_LAUNCH = False``).

On a GPU, ``tests/test_ops/test_mala/test_mala_cuda.py`` compares the results.
"""
import collections
import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip('triton')

from helpers.paths import REPO_ROOT  # noqa: E402

from mavit_mm.ops import mala as mala_ops  # noqa: E402
from mavit_mm.ops.mala import launches as mala_launches  # noqa: E402
from mavit_mm.ops.mala import plan as mala_plan  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402
from mavit_mm.tooling.triton_stub_driver import stub_cuda_driver  # noqa: E402

KERNELS = ('_forward_partials_kernel', '_forward_combine_kernel', '_forward_output_kernel',
           '_backward_query_kernel', '_backward_key_kernel')


@pytest.fixture(scope='module')
def probe(tmp_path_factory):
    output = tmp_path_factory.mktemp('probe') / 'probe.json'
    env = {key: value for key, value in os.environ.items()
           if key not in ('TRITON_INTERPRET', 'TRITON_DEFAULT_FP_FUSION')}
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'tests' / 'helpers' / 'stub_driver_probe.py'),
         str(output)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(json.loads(output.read_text()), stderr=result.stderr)


def test_compiles_say_their_fp_fusion(probe):
    # The kernels ask for fused multiply-adds themselves (launches.FP_FUSION),
    # so Triton 3.9 has no default to warn about and 3.10's new default
    # changes nothing.
    assert 'FP_FUSION' not in probe['stderr'], probe['stderr'][-2000:]


def test_direct_launches_hand_the_driver_what_tritons_path_does(probe):
    triton_call, *direct_calls = probe['calls']
    # Call 1 goes through JITFunction.run (5 kernels: forward and backward);
    # later calls of the same case never do.
    assert not triton_call['direct_allowed'] and triton_call['triton_runs'] == 5
    assert [launch['kernel'] for launch in triton_call['launches']] == list(KERNELS)
    assert direct_calls and all(call['triton_runs'] == 0 for call in direct_calls)
    for call in direct_calls:
        # grid (padded to 3 dimensions), kernel handle, packed metadata and every
        # argument (constexprs included, tensors by dtype/shape/strides/role)
        assert call['launches'] == triton_call['launches']
    roles = {arg[-1] for launch in triton_call['launches'] for arg in launch['args']
             if arg[0] == 'tensor'}
    assert roles == {'q', 'k', 'v', 'dout', 'angle', 'buffer'}
    assert all(len(launch['grid']) == 3 for launch in triton_call['launches'])


def test_one_plan_cache_entry_is_one_triton_specialisation(probe):
    # What Triton's binder specialises a launch on (pointer dtype and 16-byte
    # alignment, integers equal to 1 or divisible by 16) is fixed by the plan
    # cache's key: launching an entry's compiled kernels directly is safe.
    specialisations = collections.defaultdict(set)
    variants = collections.defaultdict(set)
    for launch in probe['cases']:
        specialisations[launch['case'], launch['kernel']].add(launch['specialization'])
        variants[launch['case']].add(launch['variant'])
    mixed = {key: values for key, values in specialisations.items() if len(values) > 1}
    assert not mixed, mixed
    # The sweep does meet what Triton tells apart: misaligned views are other
    # specialisations, so other entries, and aligned ones share an entry.
    by_variant = collections.defaultdict(set)
    for launch in probe['cases']:
        if launch['kernel'] == 'partials':
            by_variant[launch['variant']].add(launch['specialization'])
    assert by_variant['offset 1 element (2 bytes)'] != by_variant['channels_last layout']
    assert by_variant['offset 8 elements (16 bytes)'] == by_variant['channels_last layout']
    shared = [sorted(names) for names in variants.values() if len(names) > 1]
    assert ['channels_last layout', 'channels_last layout, new tensors',
            'offset 8 elements (16 bytes)'] in shared
    assert ['offset 1 element (2 bytes)', 'offset 3 elements (6 bytes)'] in shared


# --------------------------------------------------------------------------
# When a direct launch is taken: stand-ins for Triton's kernel and binary
# --------------------------------------------------------------------------
class FakeCompiled:
    """A CompiledKernel's launch interface: ``compiled[grid](*args)``."""

    def __init__(self):
        self.launches = []

    def launch_metadata(self, grid, stream, *args):
        return None

    def __getitem__(self, grid):
        return lambda *args: self.launches.append((grid, args))


class FakeKernel:
    """A JITFunction's launch interface, with a binder for device 0 that binds
    positional arguments then the constexprs (``BLOCK``) as Triton's does."""

    def __init__(self, binds=None):
        self.compiled = FakeCompiled()
        self.runs = []
        self.pre_run_hooks = []

        def binder(*args, BLOCK, **options):
            values = binds(args, BLOCK) if binds else (*args, BLOCK)
            return dict(enumerate(values)), [], options
        self.device_caches = {0: ({}, {}, None, None, binder)}

    def __getitem__(self, grid):
        def run(*args, **meta):
            self.runs.append((grid, args, meta))
            return self.compiled
        return run


def launch_three_times(kernel, compiled_launches=None):
    compiled_launches = compiled_launches or mala_launches.CompiledLaunches()
    args = (torch.empty(4), 7, 2.5)
    with stub_cuda_driver():
        for _ in range(3):
            compiled_launches.launch('partials', kernel, (3, 2), args, dict(BLOCK=16, num_warps=4))
    return compiled_launches, args


def test_later_launches_call_the_compiled_kernel_with_the_constexprs():
    kernel = FakeKernel()
    compiled_launches, args = launch_three_times(kernel)
    assert len(kernel.runs) == 1 and compiled_launches.direct('partials')
    assert kernel.compiled.launches == [((3, 2, 1), (*args, 16))] * 2


@pytest.mark.parametrize('why', ['binds otherwise', 'pre-run hook', 'no compiled kernel',
                                 'switched off'])
def test_tritons_path_is_kept(monkeypatch, why):
    kernel = FakeKernel(binds=(lambda args, block: (block, *args))
                        if why == 'binds otherwise' else None)
    if why == 'pre-run hook':
        kernel.pre_run_hooks.append(lambda *args, **kwargs: None)
    if why == 'no compiled kernel':   # the interpreter returns none
        kernel.compiled = None
    if why == 'switched off':
        monkeypatch.setattr(mala_launches, 'DIRECT_LAUNCH', False)
    compiled_launches, _ = launch_three_times(kernel)
    assert len(kernel.runs) == 3
    assert compiled_launches.direct('partials') == (why == 'switched off')
    assert kernel.compiled is None or not kernel.compiled.launches


def test_interpreted_kernels_keep_tritons_path(monkeypatch):
    # The CPU interpreter (how CI runs the kernels) returns no compiled kernel:
    # every launch of every kernel goes through Triton, and results are exact.
    monkeypatch.setattr(mala_plan, '_plans', mala_plan._LRUCache(mala_plan.PLAN_CACHE_SIZE))
    rope = RoPE2d(16)(4, 5)
    q, k, v = (torch.randn(1, 2, 20, 16, dtype=torch.float64).float().requires_grad_()
               for _ in range(3))
    for _ in range(2):
        out = mala_ops.mala_attention(q, k, v, rope, impl='triton')
        out.sum().backward()
    expected = mala_ops.mala_attention(q.double(), k.double(), v.double(), rope, impl='torch')
    assert torch.allclose(out.double(), expected, atol=1e-5)
    cases = list(mala_plan._plans._entries.values())
    assert len(cases) == 2   # forward and backward
    assert not any(case.compiled.direct(name) for case in cases
                   for name in mala_launches.ForwardLaunches.KERNELS
                   + mala_launches.BackwardLaunches.KERNELS)
