"""The backbone's speed features, each behind a switch.

``MAViT(fast_paths=dict(name=False))`` turns a feature off, ``True`` on. Each
one computes exactly the plain formula beside it (up to the rounding of the
compute dtype), so any combination gives the same model: the switches exist so
that one GPU run can measure what each feature is worth
(``benchmarks/gpu_check.py``, steps ``ablations`` and ``ablations-compile``),
and so that a suspected feature can be ruled out in a user's own run.

=========================  ======================================================================
switch                     what it does (plain formula when off)
=========================  ======================================================================
``cached_weights``         weights in the compute dtype (half copies of convolution weights and
                           biases, layer scales, norm weights) and the folded depthwise kernels
                           are kept per parameter version while no gradient flows
                           (:class:`DerivedWeights`); off: cast and folded at every call
``folded_residual_conv``   ``x + dwconv(x)`` as one convolution, the identity folded into the
                           kernel's centre tap; off: a convolution and an add
``channel_split``          the qkvo split's backward writes one channels_last gradient; off:
                           autograd's split backward
``joint_qk_rotation``      the softmax stages rotate q and k as one tensor; off: two rotations
``dense_rope``             half-precision softmax stages without gradients, the joint rotation:
                           q, k and their pair swaps from one matrix product, the qk bias in a
                           rotated table, rotated by two multiply-adds on dense maps (needs
                           ``joint_qk_rotation``); off: the qkvo convolution's slice, rotated
                           with a flip
``in_place_residual``      without gradients, residual adds are written into the stream (a map
                           the block made itself); off: a new map
``fused_position_norm``    where the depthwise kernels run (``depthwise_impl``):
                           ``x + dwconv3x3(x) + b`` and the first LayerNorm in one pass
                           (:mod:`.depthwise`); off: the convolution, then the norm
``fused_lepe_gate``        likewise, ``o * (attention + dwconv5x5(v) + b)`` in one pass, reading
                           v and o in the qkvo map; off: the LePE convolution, an add and a
                           multiply
``fused_ffn_middle``       likewise, ``GELU(h) + dwconv3x3(GELU(h)) + b`` in one pass; off: GELU,
                           then the (folded) convolution
``tap_major_weights``      where the depthwise kernels run, their kernels read tap-major,
                           ``(k * k, C)``: a tap one vector load (a copy kept per weight value
                           while no gradient flows); off: the ``(C, 1, k, k)`` parameter read in
                           place, a load per channel
``matmul_1x1``             the block's 1x1 convolutions as matrix products over the pixels
                           (``addmm``, bias in the GEMM's epilogue) on CUDA and under compile
                           (:mod:`.pointwise_conv`); off: convolutions
=========================  ======================================================================

Where each switch can act: ``FAST_PATH_MODES``. Under ``torch.compile`` (and
TorchScript tracing, ONNX export) Python-side caches and in-place shortcuts
stand aside by design (:func:`~.graph_capture.recording_graph`), and inductor
fuses the plain formula itself.

The defaults follow the ablations of ``DEFAULTS_MEASURED_BY`` (rendered in
docs/gpu.md's ``gpu-ablations`` block; its eager rows drifted, so no default
rests on them): a feature is on where it measured faster than its plain
formula. Inference runs under CUDA graphs and compiled; training runs eager.
Beyond that:

- ``fused_ffn_middle`` is off: measured slower; its kernel recomputes the GELU
  for each of the nine taps.
- ``folded_residual_conv`` and ``in_place_residual`` make no measurable
  difference under a CUDA graph; they are on for eager mode, where each saves
  a launch a block and the host sets the pace.
- ``folded_residual_conv`` and ``joint_qk_rotation`` stand aside under
  compile, where ``gpu-h100-2026-11-27/part-2/ablations.json`` measured them
  slower (the later run ablates neither there).
- ``channel_split`` makes no measurable difference under a CUDA graph or
  compiled; it is on for eager training.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class FastPaths:
    """Which speed features the backbone uses (module docstring)."""

    cached_weights: bool = True
    folded_residual_conv: bool = True
    channel_split: bool = True
    joint_qk_rotation: bool = True
    dense_rope: bool = True
    in_place_residual: bool = True
    fused_position_norm: bool = True
    fused_lepe_gate: bool = True
    fused_ffn_middle: bool = False     # measured slower (module docstring)
    tap_major_weights: bool = True
    matmul_1x1: bool = True

    @classmethod
    def resolve(cls, value: FastPaths | Mapping[str, bool] | None) -> FastPaths:
        """``None`` (the defaults), a ``FastPaths``, or a dict of switches to change."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f'fast_paths must be a dict of switches, got {value!r}')
        unknown = sorted(set(value) - set(FAST_PATHS))
        if unknown:
            raise ValueError(f'unknown fast_paths switch(es) {unknown}; the switches are '
                             f'{list(FAST_PATHS)}')
        not_bool = {name: flag for name, flag in value.items() if not isinstance(flag, bool)}
        if not_bool:
            raise ValueError(f'fast_paths switches take True or False, got {not_bool}')
        return cls(**value)

    def without(self, *names: str) -> FastPaths:
        """These switches off, the others as they are."""
        return FastPaths.resolve({**self.as_dict(), **{name: False for name in names}})

    def as_dict(self) -> dict[str, bool]:
        return dataclasses.asdict(self)


FAST_PATHS = tuple(field.name for field in dataclasses.fields(FastPaths))
DEFAULTS = FastPaths()   # frozen, so one instance serves every module
ALL_ON = FastPaths(**dict.fromkeys(FAST_PATHS, True))
# The GPU run whose ablations set the defaults (module docstring).
DEFAULTS_MEASURED_BY = 'benchmarks/results/gpu-h100-2026-11-27b/part-2/ablations.json'
# Where each switch can change what runs.
FAST_PATH_MODES = {
    'cached_weights': ('eager', 'cuda-graph'),
    'folded_residual_conv': ('eager', 'cuda-graph'),
    'channel_split': ('eager', 'cuda-graph', 'compile'),   # with gradients only
    'joint_qk_rotation': ('eager', 'cuda-graph'),
    'dense_rope': ('eager', 'cuda-graph'),
    'in_place_residual': ('eager', 'cuda-graph'),
    'fused_position_norm': ('eager', 'cuda-graph', 'compile'),
    'fused_lepe_gate': ('eager', 'cuda-graph', 'compile'),
    'fused_ffn_middle': ('eager', 'cuda-graph', 'compile'),
    'tap_major_weights': ('eager', 'cuda-graph', 'compile'),
    'matmul_1x1': ('eager', 'cuda-graph', 'compile'),
}
# Switches that change only a training step (a backward), not a forward.
TRAINING_ONLY = ('channel_split',)
# Switches that act only where no gradient flows (a forward under no_grad,
# frozen weights): they change nothing in a training step of trainable weights.
INFERENCE_ONLY = ('cached_weights', 'dense_rope', 'in_place_residual')

__all__ = ['FastPaths', 'DEFAULTS', 'ALL_ON', 'DEFAULTS_MEASURED_BY', 'FAST_PATHS',
           'FAST_PATH_MODES', 'TRAINING_ONLY', 'INFERENCE_ONLY']
