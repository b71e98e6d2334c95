"""Tensors computed from parameters, kept while no gradient flows.

A forward in eval mode (inference, a benchmark, a CUDA graph's warm-up) that
casts its weights to autocast's dtype, or folds an identity into a kernel,
would otherwise redo that at every call, a small kernel each (the bf16 copy
kernels of benchmarks/results/gpu-h200-2026-11-26/part-a/model-profile.json).
:class:`DerivedWeights` does it once per parameter value. The switch is
``cached_weights`` (:mod:`.fast_paths`).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .amp import autocast_dtype
from .graph_capture import building_kept_tensors, recording_graph


def takes_no_gradient(*tensors: torch.Tensor) -> bool:
    """No autograd graph will be built through ``tensors``, and the call is
    not being traced or compiled: derived weights may be cached, results may
    be written in place."""
    # Plain loops, not any(...): the forward asks a few hundred times, and
    # each generator step is a Python call of its own.
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return False
    return not recording_graph()


def compute_dtype(x: torch.Tensor, param: torch.Tensor) -> torch.dtype:
    """The dtype a layer computes in: autocast's where it is on for ``x``'s
    device, else the parameters' own."""
    return autocast_dtype(x.device.type) or param.dtype


class DerivedWeights:
    """Tensors computed from parameters (a cast, a folded kernel), kept while
    no gradient flows.

    An entry is rebuilt when the device or dtype asked for changes, when the
    caller's ``state`` (e.g. a feature-map size) changes, or when a parameter
    it came from changes: a new storage (a move, a load into a new tensor) or
    an in-place update (an optimizer step, ``load_state_dict``; both advance
    the tensor's version counter). With gradients, under tracing or
    compiling, or when ``enabled`` is off, nothing is cached: the caller's
    ``build`` runs each time. One entry per name, so the cache stays bounded.
    An entry built inside ``inference_mode`` serves later calls with
    gradients too (:func:`~.graph_capture.building_kept_tensors`).
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._entries: dict = {}

    def get(self, name: str, sources: tuple[torch.Tensor, ...], dtype: torch.dtype,
            device: torch.device, build: Callable, state=None):
        if not self.caches(*sources):
            return build()
        return self._kept(name, sources, dtype, device, build, state)

    def caches(self, *sources: torch.Tensor) -> bool:
        """Whether :meth:`get` keeps what it builds from ``sources`` now.
        (Inference tensors, e.g. of a model moved inside inference_mode, keep
        no version counter to tell a change by.)"""
        # is_inference() last: Dynamo cannot trace it, and under compile
        # takes_no_gradient has already said no.
        if not (self.enabled and takes_no_gradient(*sources)):
            return False
        for t in sources:
            if t.is_inference():
                return False
        return True

    def cast(self, name: str, tensors: tuple[torch.Tensor | None, ...], dtype: torch.dtype,
             uncast_unless_kept: bool = False) -> tuple[torch.Tensor | None, ...]:
        """``tensors`` in ``dtype`` (``None`` stays ``None``); those already in
        it are returned as they are, so an fp32 forward builds nothing. Where
        nothing can be kept: cast copies, or with ``uncast_unless_kept``
        ``tensors`` as they are (for autocast to cast)."""
        sources = tuple([t for t in tensors if t is not None and t.dtype != dtype])
        if not sources:
            return tensors
        if not self.caches(*sources):
            return tensors if uncast_unless_kept else _cast(tensors, dtype)
        return self._kept(name, sources, dtype, sources[0].device,
                          lambda: _cast(tensors, dtype), None)

    def _kept(self, name: str, sources: tuple[torch.Tensor, ...], dtype: torch.dtype,
              device: torch.device, build: Callable, state):
        """The entry ``name``, rebuilt where a source has changed."""
        # What the entry is built from: each source's storage and version.
        key = (dtype, device, state, *[(t.data_ptr(), t._version) for t in sources])
        entry = self._entries.get(name)
        if entry is None or entry[0] != key:
            with building_kept_tensors():
                entry = self._entries[name] = (key, build())
        return entry[1]

    def clear(self) -> None:
        self._entries.clear()


def _cast(tensors: tuple[torch.Tensor | None, ...], dtype: torch.dtype
          ) -> tuple[torch.Tensor | None, ...]:
    return tuple(None if t is None else t.to(dtype) for t in tensors)


__all__ = ['DerivedWeights', 'takes_no_gradient', 'compute_dtype']
