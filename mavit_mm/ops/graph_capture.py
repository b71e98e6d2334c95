"""Python-side state across calls (cached tables or derived weights, in-place
shortcuts taken because no gradient flows): whether a graph is being recorded
(a TorchScript trace, an ONNX export or a Dynamo compile), where such state
must not enter, since the graph computes what it needs itself; and how a
tensor kept for later calls is built."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def recording_graph() -> bool:
    """A Dynamo compile or ``torch.export`` (the compiling flag), or a
    TorchScript trace. Both ONNX exporters record under one of these (the
    TorchScript one traces, the dynamo one runs ``torch.export``), so ONNX's
    own flag, ``torch.onnx.is_in_onnx_export()``, adds nothing here; it would
    cost more than the other two checks together (two imports a call), and
    the forward asks a few hundred times. A test runs both exporters to hold
    this (``tests/test_ops/test_graph_capture.py``)."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


@contextlib.contextmanager
def building_kept_tensors() -> Iterator[None]:
    """Where a tensor kept for later calls is built: outside ``inference_mode``
    and without gradients. Built inside ``inference_mode`` it would be an
    inference tensor, which autograd cannot save for backward: a later forward
    that records gradients (a training step, an input whose gradient is asked
    for) would fail on it."""
    with torch.inference_mode(False), torch.no_grad():
        yield


__all__ = ['recording_graph', 'building_kept_tensors']
