"""The fused MALA as PyTorch operators, with its autograd.

Imported only when the Triton path is taken (it imports triton). What the
kernels compute is described in ``kernels.py``; their launches in
``launches.py``, how a case is planned in ``plan.py``. What is saved for
backward is q, k, v (the caller's own tensors, no copies) and one fp32
``(B*heads, d + 3, d)`` stats tensor: the centred KV matrix, mean k, mean
rotated k and mean v.
"""
from __future__ import annotations

import torch

from . import kernels
from .launches import (
    BackwardLaunches,
    CompiledLaunches,
    ForwardLaunches,
    LaunchPlan,
    _empty_like_layout,
)
from .plan import planned_case
from .triton_support import on_device


def mala_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
                 width: int, plan: LaunchPlan, compiled: CompiledLaunches | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``out`` and the per-head fp32 stats saved for backward."""
    return ForwardLaunches(q, k, v, angle, width, plan, compiled=compiled).run()


def mala_backward(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  angle: torch.Tensor, stats: torch.Tensor, width: int, plan: LaunchPlan,
                  compiled: CompiledLaunches | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return BackwardLaunches(dout, q, k, v, angle, stats, width, plan, compiled=compiled).run()


# The fused MALA as PyTorch operators: ``mavit_mm::mala`` (forward, returns
# ``out`` and the fp32 stats saved for backward) and ``mavit_mm::mala_backward``,
# with fake implementations and an autograd formula, so that torch.compile
# treats them as opaque nodes and nothing in them syncs with the host. The
# plan overrides travel as ints, 0 meaning "the default".
@torch.library.custom_op('mavit_mm::mala', mutates_args=())
def mala_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
            width: int, block_n: int = 0, tokens_per_chunk: int = 0,
            tokens_per_program: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
    with on_device(q.device):
        case = planned_case(q, k, v, angle, width, block_n, tokens_per_chunk, tokens_per_program)
        return mala_forward(q, k, v, angle, width, case.plan, case.compiled)


@mala_op.register_fake
def _mala_fake(q, k, v, angle, width, block_n=0, tokens_per_chunk=0, tokens_per_program=0):
    batch, heads, _, head_dim = q.shape
    stats = q.new_empty(batch * heads, head_dim + kernels.STATS_EXTRA_ROWS.value, head_dim,
                        dtype=torch.float32)
    return _empty_like_layout(q), stats


@torch.library.custom_op('mavit_mm::mala_backward', mutates_args=())
def mala_backward_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     angle: torch.Tensor, stats: torch.Tensor, width: int, block_n: int = 0,
                     tokens_per_chunk: int = 0, tokens_per_program: int = 0
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    angle = angle.to(device=q.device, dtype=torch.float32).contiguous()
    with on_device(q.device):
        case = planned_case(q, k, v, angle, width, block_n, tokens_per_chunk,
                            tokens_per_program, dout=dout, stats=stats)
        return mala_backward(dout, q, k, v, angle, stats, width, case.plan, case.compiled)


@mala_backward_op.register_fake
def _mala_backward_fake(dout, q, k, v, angle, stats, width, block_n=0, tokens_per_chunk=0,
                        tokens_per_program=0):
    return _empty_like_layout(q), _empty_like_layout(k), _empty_like_layout(v)


def _mala_setup_context(ctx, inputs, output):
    q, k, v, angle, width, *overrides = inputs
    ctx.save_for_backward(q, k, v, angle, output[1])
    ctx.width = width
    ctx.overrides = overrides


def _mala_autograd(ctx, dout, _dstats):
    q, k, v, angle, stats = ctx.saved_tensors
    dq, dk, dv = mala_backward_op(dout, q, k, v, angle, stats, ctx.width, *ctx.overrides)
    return dq, dk, dv, None, None, None, None, None


mala_op.register_autograd(_mala_autograd, setup_context=_mala_setup_context)


def fused_mala(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, angle: torch.Tensor,
               width: int, block_n: int | None = None, tokens_per_chunk: int | None = None,
               tokens_per_program: int | None = None) -> torch.Tensor:
    """Fused MALA; the caller has checked the case is supported (see ``__init__``).

    The overrides go to :func:`.plan.make_launch_plan`; ``None`` keeps its default.
    """
    out, _ = mala_op(q, k, v, angle, width, block_n or 0, tokens_per_chunk or 0,
                     tokens_per_program or 0)
    return out
