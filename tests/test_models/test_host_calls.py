"""The host's work of an eager pass as a contract, counted without a clock.

On a GPU the eager backbone is host-bound, and MAViT-T made 4.6x Swin-T's
Python calls a forward (``devtools/host_calls.py`` says where that was
measured). The counts here are of MAViT-T's CUDA host path run on CPU
tensors, its kernels stubbed (``cuda_path_on_cpu``), at 64x64 in bf16
autocast: the calls its own code issues (``issued``), which torch's releases
hardly move. The budgets are the counts of
``benchmarks/results/host-calls-cpu-2026-11-28.json`` (7,352 a forward,
5,214 a training step, whose depthwise stages run unfused by default) with
about a tenth to spare. The same stages fused in training would add 1,260
and 1,548 (that file's ``ablations``), over the budget.
"""
from __future__ import annotations

import sys

import pytest
import torch

from devtools.host_calls import (
    PythonCalls,
    count_python_calls,
    cuda_path_on_cpu,
    eager_pass,
)
from devtools.op_census import mavit_t
from mavit_mm.ops.fast_paths import DEFAULTS, on_in

pytest.importorskip('triton')

# Calls issued by mavit_mm's code (devtools.host_calls.PythonCalls.issued).
FORWARD_BUDGET = 8_100
TRAINING_STEP_BUDGET = 5_750
# MAViT-T's fused launches: in each of its 12 blocks one per depthwise stage
# fused by default, in each of its 4 MALA layers 3; a training step adds each
# fused stage's backward (2 launches for the position stage: its norm's and
# its convolution's, 1 for the others) and MALA's 2 backward kernels.
_STAGES = {'fused_position_norm': 2, 'fused_lepe_gate': 1, 'fused_ffn_middle': 1}
# A stage set to 'inference' fuses the forward without gradients only.
_FUSED = {training: [switch for switch in _STAGES
                     if on_in(getattr(DEFAULTS, switch), training, 'cuda')]
          for training in (False, True)}
FORWARD_LAUNCHES = 12 * len(_FUSED[False]) + 4 * 3
TRAINING_STEP_LAUNCHES = (12 * len(_FUSED[True]) + 4 * 3
                          + 12 * sum(_STAGES[s] for s in _FUSED[True]) + 4 * 2)


def test_an_eager_pass_issues_no_more_python_calls_than_its_budget():
    image = torch.randn(1, 3, 64, 64)
    with cuda_path_on_cpu() as launches:
        model = mavit_t()
        counts = {}
        for name, which in (('forward', 'forward'), ('training step', 'train')):
            run = eager_pass(model, image, which)
            run()                                   # fills the caches
            before = launches.count
            counts[name] = count_python_calls(run)
            counts[name].launches = launches.count - before
    # The CUDA path ran: every stage fused by default launched (stubbed), and
    # nothing fell back.
    assert counts['forward'].launches == FORWARD_LAUNCHES
    assert counts['training step'].launches == TRAINING_STEP_LAUNCHES
    assert counts['forward'].issued <= FORWARD_BUDGET, counts['forward']
    assert counts['training step'].issued <= TRAINING_STEP_BUDGET, counts['training step']


def test_the_count_sees_every_call_and_tells_the_package_s_own():
    """Two known call trees: one of this file's (nothing of it issued by
    mavit_mm), one of a mavit_mm function calling into torch."""
    from mavit_mm.ops.derived_weights import takes_no_gradient

    def leaf(items):
        return len(items)

    # The lambda, leaf, and the builtin len.
    assert count_python_calls(lambda: leaf([1])) == PythonCalls(total=3, issued=0)
    weight = torch.nn.Parameter(torch.ones(2))
    with torch.no_grad():
        calls = count_python_calls(lambda: takes_no_gradient(weight))
    # Issued by mavit_mm: takes_no_gradient itself, its two calls
    # (is_grad_enabled, recording_graph) and recording_graph's two
    # (is_compiling, is_tracing); below those, torch's own (not pinned here).
    assert calls.issued == 5, calls
    assert calls.total > calls.issued + 1, calls      # + the lambda, + torch's own


def test_the_count_refuses_to_run_under_another_profiler():
    sys.setprofile(lambda *args: None)
    try:
        with pytest.raises(RuntimeError, match='another profiler is running'):
            count_python_calls(lambda: None)
    finally:
        sys.setprofile(None)


def test_the_stubs_leave_no_trace_behind():
    """Outside the block the kernels, the device check and the 1x1 product's
    rule are the package's own again."""
    from mavit_mm.ops import pointwise_conv, triton_support
    from mavit_mm.ops.depthwise import dispatch as depthwise_dispatch
    from mavit_mm.ops.mala import dispatch as mala_dispatch
    kernels = [d.function().kernels for d in (mala_dispatch.MALA_DISPATCH,
                                              depthwise_dispatch.DEPTHWISE_DISPATCH)]
    before = [dict(vars(module)) for module in kernels]
    rule, check = pointwise_conv.runs_as_matmul, triton_support.triton_interpreter_enabled
    with cuda_path_on_cpu() as launches:
        assert launches.stubs and all(getattr(kernels[0], name, None) is stub or
                                      getattr(kernels[1], name, None) is stub
                                      for name, stub in launches.stubs.items())
        assert pointwise_conv.runs_as_matmul is not rule
    assert [dict(vars(module)) for module in kernels] == before
    assert pointwise_conv.runs_as_matmul is rule
    assert triton_support.triton_interpreter_enabled is check
