"""Whether a graph is being recorded: a TorchScript trace, an ONNX export or a
Dynamo compile. Python-side state (cached tables or derived weights, in-place
shortcuts taken because no gradient flows) must not enter such a graph: the
graph computes what it needs itself."""
from __future__ import annotations

import torch


def recording_graph() -> bool:
    # The cheap checks first: the forward asks a few hundred times.
    return (torch.compiler.is_compiling() or torch.jit.is_tracing()
            or torch.onnx.is_in_onnx_export())


__all__ = ['recording_graph']
