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

Besides ``True`` and ``False``, some switches take a condition
(``CONDITIONS``, :func:`on_in`): a fused depthwise stage ``'inference'``
(``INFERENCE``), on where no gradient flows and off in a training step
(:meth:`~mavit_mm.models.options.MAViTOptions.fuses`); ``channel_split``
``'cpu'`` (``CPU``), on for tensors on the CPU and off elsewhere.

The defaults follow the ablations of ``DEFAULTS_MEASURED_BY`` (rendered in
docs/gpu.md's ``gpu-ablations`` block) by the modes users run: inference is
judged by its forwards under a CUDA graph and compiled, training by its eager
training steps (the ablations' training steps under a CUDA graph and
compiled, of ``channel_split`` alone, inform). A feature is on where it measured
faster than its plain formula and off where it measured slower; within
``NO_MEASURABLE_EFFECT`` it makes no measurable difference. The eager forwards
at batch 1 are the host's pace, not the GPU's (23-37 ms a forward against
3.4 ms replayed from a CUDA graph, the rounds' ratios spread over 0.64-1.54),
so they inform but do not bind. Beyond that:

- ``fused_position_norm`` and ``fused_lepe_gate`` are ``'inference'``: 7.5% and
  6% faster forwards under a CUDA graph, but 6% and 3% slower eager training
  steps, which at this size go at the host's pace: a training step of MAViT-T
  issues 2,040 and 2,688 more Python calls with them than with the plain
  formulas (the autograd functions, the backward's launches;
  ``benchmarks/results/host-calls-cpu-2026-11-28.json``, its ``ablations``).
- ``fused_ffn_middle`` is off: slower in every mode measured (its kernel
  recomputes the GELU for each of the nine taps).
- ``channel_split`` is ``'cpu'``: on a GPU no measurable difference under a
  CUDA graph and a 6% slower eager training step (384 more Python calls a
  step, the same file), but on the CPU, where a step is the kernels' pace, a
  training step at 512x512 was 5.7% slower without it
  (``benchmarks/results/backbone-ab-cpu-2026-11-28-08f71e3-vs-6a1cf71-train.json``).
- ``dense_rope`` stays on: no measurable difference under a CUDA graph (and
  480 more Python calls a forward on the host, the same file), but without
  it the half-precision softmax stages rotate q and k with flips and
  multiplies on strided maps, which the layout contract refuses
  (``tests/test_models/test_op_census.py``).
- ``folded_residual_conv`` and ``in_place_residual`` make no measurable
  difference under a CUDA graph; the folded convolution saves the eager
  training step 2%, and the in-place sums save allocating a map a residual.
- ``folded_residual_conv`` and ``joint_qk_rotation`` stand aside under
  compile, where ``gpu-h100-2026-11-27/part-2/ablations.json`` measured them
  slower.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

# Conditions a switch may take besides True and False (on_in): on where no
# gradient flows (off in training), on for CPU tensors (off on a GPU).
INFERENCE = 'inference'
CPU = 'cpu'
FUSED_STAGES = ('fused_position_norm', 'fused_lepe_gate', 'fused_ffn_middle')
CONDITIONS = {name: (INFERENCE,) for name in FUSED_STAGES} | {'channel_split': (CPU,)}
# The device type that condition CPU is on for (devtools' host-call counts run
# CUDA's host path on CPU tensors, and set it to 'cuda' meanwhile).
CPU_DEVICE_TYPE = 'cpu'


@dataclasses.dataclass(frozen=True)
class FastPaths:
    """Which speed features the backbone uses (module docstring)."""

    cached_weights: bool = True
    folded_residual_conv: bool = True
    channel_split: bool | str = 'cpu'   # faster on the CPU only (module docstring)
    joint_qk_rotation: bool = True
    dense_rope: bool = True
    in_place_residual: bool = True
    fused_position_norm: bool | str = 'inference'   # slower eager training steps
    fused_lepe_gate: bool | str = 'inference'
    fused_ffn_middle: bool | str = False            # measured slower
    tap_major_weights: bool = True
    matmul_1x1: bool = True

    def __post_init__(self):
        wrong = {name: flag for name, flag in self.as_dict().items()
                 if not isinstance(flag, bool) and flag not in CONDITIONS.get(name, ())}
        if wrong:
            raise ValueError('fast_paths switches take True or False, and '
                             + ', '.join(f'{name} {conditions[0]!r}'
                                         for name, conditions in CONDITIONS.items())
                             + f' too; got {wrong}')

    @classmethod
    def resolve(cls, value: FastPaths | Mapping[str, bool | str] | None) -> FastPaths:
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
        return cls(**value)   # __post_init__ checks the settings

    def without(self, *names: str) -> FastPaths:
        """These switches off, the others as they are."""
        return FastPaths.resolve({**self.as_dict(), **{name: False for name in names}})

    def as_dict(self) -> dict[str, bool | str]:
        return dataclasses.asdict(self)


def on_in(setting: bool | str, training: bool, device_type: str) -> bool:
    """Whether a switch set to ``setting`` is on in a training step
    (``training``: gradients flow) or a forward without gradients, on tensors
    of ``device_type`` (``'cuda'``, ``'cpu'``)."""
    return (setting is True or (setting == INFERENCE and not training)
            or (setting == CPU and device_type == CPU_DEVICE_TYPE))


FAST_PATHS = tuple(field.name for field in dataclasses.fields(FastPaths))
DEFAULTS = FastPaths()   # frozen, so one instance serves every module
ALL_ON = FastPaths(**dict.fromkeys(FAST_PATHS, True))
# The GPU run whose ablations set the defaults (module docstring).
DEFAULTS_MEASURED_BY = 'benchmarks/results/gpu-h200-2026-11-28/part-12/ablations.json'
# Within this of its plain formula a switch makes no measurable difference
# (off over on, in the cited ablations).
NO_MEASURABLE_EFFECT = 0.015
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

__all__ = ['FastPaths', 'DEFAULTS', 'ALL_ON', 'DEFAULTS_MEASURED_BY', 'FAST_PATHS', 'INFERENCE',
           'CPU', 'CONDITIONS', 'FUSED_STAGES', 'NO_MEASURABLE_EFFECT', 'on_in',
           'FAST_PATH_MODES', 'TRAINING_ONLY', 'INFERENCE_ONLY']
