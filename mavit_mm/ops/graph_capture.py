"""Whether a graph is being recorded: a TorchScript trace, an ONNX export or a
Dynamo compile. Python-side state (cached tables or derived weights, in-place
shortcuts taken because no gradient flows) must not enter such a graph: the
graph computes what it needs itself."""
from __future__ import annotations

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


__all__ = ['recording_graph']
