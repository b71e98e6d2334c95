"""The backbone's speed features, each behind a switch.

``MAViT(fast_paths=dict(name=False))`` turns a feature off; every feature is
on by default. Each one computes exactly the plain formula beside it (up to
the rounding of the compute dtype), so any combination gives the same model:
the switches exist so that one GPU run can measure what each feature is worth
(``benchmarks/gpu_check.py``, step ``ablations``), and so that a suspected
feature can be ruled out in a user's own run.

=========================  ==========================================================  ===============
switch                     what it does (plain formula when off)                       modes
=========================  ==========================================================  ===============
``cached_weights``         weights in the compute dtype (half copies of convolution    eager,
                           weights and biases, layer scales, norm weights) and the     CUDA graph
                           folded depthwise kernels are kept per parameter version
                           while no gradient flows (:class:`DerivedWeights`); off:
                           cast and folded at every call
``folded_residual_conv``   ``x + dwconv(x)`` as one convolution, the identity folded   all
                           into the kernel's centre tap; off: a convolution and an add
``channel_split``          the qkvo split's backward writes one channels_last          all (training)
                           gradient; off: autograd's split backward
``joint_qk_rotation``      the softmax stages rotate q and k as one tensor; off: two    all
                           rotations
``dense_rope``             half-precision softmax stages without gradients, the joint  eager,
                           rotation: q, k and their pair swaps from one matrix         CUDA graph
                           product, the qk bias in a rotated table, rotated by two
                           multiply-adds on dense maps (needs ``joint_qk_rotation``);
                           off: the qkvo convolution's slice, rotated with a flip
``in_place_residual``      without gradients, residual adds are written into the       eager,
                           stream (a map the block made itself); off: a new map        CUDA graph
``fused_position_norm``    where the depthwise kernels run (``depthwise_impl``):       all
                           ``x + dwconv3x3(x) + b`` and the first LayerNorm in one
                           pass (:mod:`.depthwise`); off: the convolution, then the
                           norm
``fused_lepe_gate``        likewise, ``o * (attention + dwconv5x5(v) + b)`` in one     all
                           pass, reading v and o in the qkvo map; off: the LePE
                           convolution, an add and a multiply
``fused_ffn_middle``       likewise, ``GELU(h) + dwconv3x3(GELU(h)) + b`` in one       all
                           pass; off: GELU, then the (folded) convolution
``matmul_1x1``             the block's 1x1 convolutions as matrix products over the    all
                           pixels (``addmm``, bias in the GEMM's epilogue) on CUDA
                           and under compile (:mod:`.pointwise_conv`); off:
                           convolutions
=========================  ==========================================================  ===============

"modes" says where a feature can act. Under ``torch.compile`` (and TorchScript
tracing, ONNX export) Python-side caches and in-place shortcuts stand aside by
design (:func:`~.graph_capture.recording_graph`), and inductor fuses the plain
formula itself, so those features are ablated under CUDA graphs only.
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
    fused_ffn_middle: bool = True
    matmul_1x1: bool = True

    @classmethod
    def resolve(cls, value: FastPaths | Mapping[str, bool] | None) -> FastPaths:
        """``None`` (all on), a ``FastPaths``, or a dict of switches to change."""
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
ALL_ON = FastPaths()   # the default (frozen, so one instance serves every module)
# Where each switch can change what runs (module docstring, "modes").
FAST_PATH_MODES = {
    'cached_weights': ('eager', 'cuda-graph'),
    'folded_residual_conv': ('eager', 'cuda-graph', 'compile'),
    'channel_split': ('eager', 'cuda-graph', 'compile'),   # with gradients only
    'joint_qk_rotation': ('eager', 'cuda-graph', 'compile'),
    'dense_rope': ('eager', 'cuda-graph'),
    'in_place_residual': ('eager', 'cuda-graph'),
    'fused_position_norm': ('eager', 'cuda-graph', 'compile'),
    'fused_lepe_gate': ('eager', 'cuda-graph', 'compile'),
    'fused_ffn_middle': ('eager', 'cuda-graph', 'compile'),
    'matmul_1x1': ('eager', 'cuda-graph', 'compile'),
}
# Switches that act only where the depthwise kernels run (depthwise_impl).
DEPTHWISE_KERNEL_SWITCHES = ('fused_position_norm', 'fused_lepe_gate', 'fused_ffn_middle')

# Switches that change only a training step (a backward), not a forward.
TRAINING_ONLY = ('channel_split',)

__all__ = ['FastPaths', 'ALL_ON', 'FAST_PATHS', 'FAST_PATH_MODES', 'TRAINING_ONLY',
           'DEPTHWISE_KERNEL_SWITCHES']
