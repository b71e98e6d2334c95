"""The layers MAViT's blocks are built of. Each computes the plain formula in its
docstring, some faster (switches: :mod:`mavit_mm.ops.fast_paths`), and keeps the
parameters and state-dict keys of the plain torch layer it stands for, so the
published checkpoints load into them unchanged.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..ops.amp import autocast_disabled
from ..ops.channel_split import channel_split
from ..ops.depthwise import tap_major, tap_view
from ..ops.derived_weights import DerivedWeights, compute_dtype, takes_no_gradient
from ..ops.fast_paths import DEFAULTS, FastPaths, on_in
from ..ops.pointwise_conv import pointwise_conv
from ..ops.residual import scaled_residual
from ..ops.rope2d import RotaryTables, rotary_pair_weights, rotated_bias_table, rotated_projection

LN_EPS = 1e-6
# Devices whose layer norm kernels take half inputs with fp32 weight and bias; CUDA's
# read the weight in the input's dtype, so there it is cast (kept while no gradient flows).
_MIXED_LAYER_NORM_DEVICES = ('cpu',)


def build_norm2d(norm_cfg: dict | None, num_features: int) -> nn.Module:
    """``BN``, ``SyncBN`` or another batch norm of mmengine's registry (such as
    ``CPUSyncBN``), with ``eps``, ``momentum``, ``requires_grad``, for the stem
    and the downsampling layers: a torch-only stand-in for mmcv's
    ``build_norm_layer`` (mmengine reverts SyncBN to BN when not distributed)."""
    cfg = dict(type='BN') if norm_cfg is None else dict(norm_cfg)
    norm_type = cfg.pop('type')
    requires_grad = cfg.pop('requires_grad', True)
    layers = {'BN': nn.BatchNorm2d, 'BN2d': nn.BatchNorm2d, 'SyncBN': nn.SyncBatchNorm}
    layer = layers.get(norm_type) or _registered_batch_norm(norm_type)
    if layer is None:
        raise ValueError(f'norm_cfg type must be a batch norm: one of {sorted(layers)} or '
                         f'another registered in mmengine\'s MODELS, got {norm_type!r}')
    norm = layer(num_features, **cfg)
    for param in norm.parameters():
        param.requires_grad = requires_grad
    return norm


def _registered_batch_norm(name) -> type | None:
    """The batch norm class mmengine's MODELS registry holds as ``name``, if any."""
    from mmengine.registry import MODELS
    layer = MODELS.get(name) if isinstance(name, str) else None
    return layer if isinstance(layer, type) and issubclass(layer, _BatchNorm) else None


def split_heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(B, n * C, H, W) -> (B, n * C / head_dim, N, head_dim), a view: the heads
    of q, k or v, or of q and k together. Of a channels_last map the view has
    channel stride 1, as SDPA's flash kernels and the fused MALA op read it."""
    batch, _, height, width = t.shape
    return t.reshape(batch, -1, head_dim, height * width).transpose(-1, -2)


class CachedCastConv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters, keys and result) whose weight and bias
    meet the input in the compute dtype as copies kept per weight value
    (:class:`~mavit_mm.ops.derived_weights.DerivedWeights`, switch ``cached_weights``).

    Its subclasses name ``nn.Conv2d`` again among their direct bases: an
    ``init_cfg`` with ``layer='Conv2d'`` (mmengine's Kaiming, Constant, ...)
    matches a module by the names of its class and of its direct bases only,
    and would pass them over."""

    def __init__(self, *args, cached_weights: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.derived = DerivedWeights(cached_weights)

    def weights_for(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight, bias)`` in ``x``'s compute dtype; as they are (for autocast
        to cast) where no copy can be kept (a gradient flows, switch off)."""
        weight, bias = self.weight, self.bias
        dtype = compute_dtype(x, weight)
        if dtype == weight.dtype:
            return weight, bias
        return self.derived.cast('compute', (weight, bias), dtype, uncast_unless_kept=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, *self.weights_for(x))

    def depthwise_taps(self, tap_major_layout: bool) -> torch.Tensor:
        """The kernel as the fused depthwise ops take it, ``(k * k, C)``: tap-major
        (:func:`~mavit_mm.ops.depthwise.tap_major`, kept per weight value) or a view."""
        if not tap_major_layout:
            return tap_view(self.weight)
        return self.derived.get('taps', (self.weight,), self.weight.dtype, self.weight.device,
                                lambda: tap_major(self.weight))


class PointwiseConv2d(CachedCastConv2d, nn.Conv2d):
    """A 1x1 :class:`CachedCastConv2d` (same parameters and keys) that runs as
    a matrix product over the pixels of a channels_last map (switch
    ``matmul_1x1``: :func:`~mavit_mm.ops.pointwise_conv.pointwise_conv`)."""

    def __init__(self, in_channels: int, out_channels: int, fast_paths: FastPaths = DEFAULTS):
        super().__init__(in_channels, out_channels, 1, cached_weights=fast_paths.cached_weights)
        self.as_matmul = fast_paths.matmul_1x1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x, *self.weights_for(x))

    def product(self, x: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        """This layer's 1x1 product of ``x`` with ``weight`` and ``bias`` (its
        own, or a slice of them), as the switch says."""
        return pointwise_conv(x, weight, bias) if self.as_matmul else F.conv2d(x, weight, bias)


class DepthwiseResidualConv(CachedCastConv2d, nn.Conv2d):
    """``x + conv(x)`` of a depthwise 'same' convolution, as one convolution whose
    kernel has the identity folded into its centre tap (switch
    ``folded_residual_conv``), built in the compute dtype and kept per weight
    value while no gradient flows. Keys are those of the plain ``nn.Conv2d``
    (the identity is a non-persistent buffer)."""

    def __init__(self, channels: int, kernel_size: int, fast_paths: FastPaths = DEFAULTS):
        super().__init__(channels, channels, kernel_size, padding=kernel_size // 2,
                         groups=channels, cached_weights=fast_paths.cached_weights)
        self.folded = fast_paths.folded_residual_conv
        identity = torch.zeros_like(self.weight)
        identity[:, :, kernel_size // 2, kernel_size // 2] = 1.0
        self.register_buffer('identity', identity, persistent=False)

    def folded_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The kernel of ``x + conv(x)`` in ``dtype`` (summed in the weight's
        own precision, then cast)."""
        return self.derived.get('folded', (self.weight, self.identity), dtype, self.weight.device,
                                lambda: (self.weight + self.identity).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Not under compile: the weights are graph inputs there, so the fold is
        # a kernel of its own at every call (mavit_mm.ops.fast_paths).
        if not self.folded or torch.compiler.is_compiling():
            return x + super().forward(x)
        dtype = compute_dtype(x, self.weight)
        # (autocast casts the bias where no copy is kept)
        (bias,) = self.derived.cast('bias', (self.bias,), dtype, uncast_unless_kept=True)
        return self._conv_forward(x, self.folded_weight(dtype), bias)


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of an NCHW tensor (key ``<name>.norm.*``),
    returned channels_last: free for the channels_last maps the backbone keeps
    inside (``docs/architecture.md``).

    A half input is normalised in one op that computes in fp32 and returns the
    input's dtype, where CUDA's autocast would cast the whole map to fp32 and
    back (and leave an fp32 map for the next convolution to cast).
    """

    def __init__(self, num_channels: int, eps: float = LN_EPS, cached_weights: bool = True):
        super().__init__()
        self.norm = nn.LayerNorm(num_channels, eps=eps)
        self.derived = DerivedWeights(cached_weights)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        nhwc = x.permute(0, 2, 3, 1)
        if x.dtype not in (torch.float16, torch.bfloat16) or x.dtype == self.norm.weight.dtype:
            return self.norm(nhwc).permute(0, 3, 1, 2)
        weight, bias = self.norm.weight, self.norm.bias
        if x.device.type not in _MIXED_LAYER_NORM_DEVICES:
            weight, bias = self.derived.cast('affine', (weight, bias), x.dtype)
        with autocast_disabled(x.device.type):
            out = F.layer_norm(nhwc, self.norm.normalized_shape, weight, bias, self.norm.eps)
        return out.permute(0, 3, 1, 2)


class DropPath(nn.Module):
    """Stochastic depth per sample."""

    def __init__(self, drop_prob: float = 0.0):
        super().__init__()
        self.drop_prob = drop_prob

    def _keep_scale(self, x: torch.Tensor) -> torch.Tensor | None:
        """Per sample, 0 (dropped) or 1 / keep_prob, shaped (B, 1, ...);
        ``None`` when nothing is dropped (eval, or drop_prob 0)."""
        if self.drop_prob == 0.0 or not self.training:
            return None
        keep_prob = 1.0 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep_prob)
        return mask / keep_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = self._keep_scale(x)
        return x if keep is None else x * keep

    def residual(self, x: torch.Tensor, branch: torch.Tensor,
                 scale: torch.Tensor | None = None, in_place: bool = True) -> torch.Tensor:
        """``x + self(scale * branch)`` in one pass over the map
        (:func:`~mavit_mm.ops.residual.scaled_residual`), the layer scale (in
        ``x``'s dtype) and the keep mask one small factor; written into ``x``
        where ``in_place`` allows it and no gradient flows."""
        keep = self._keep_scale(x)
        if keep is not None:
            scale = keep if scale is None else scale * keep
        tensors = (x, branch) if scale is None else (x, branch, scale)
        return scaled_residual(x, branch, scale, in_place=in_place and takes_no_gradient(*tensors))

    def extra_repr(self) -> str:
        return f'drop_prob={self.drop_prob}'


class QKVOProjection(PointwiseConv2d, nn.Conv2d):
    """The gated attention's input projection: one 1x1 convolution (key
    ``qkvo.*``) whose output is q, k, v and the gate o.

    Plain formula (:meth:`project`): ``q, k, v, o = chunk(qkvo(x), 4)``, q and
    k cut into heads and left for the attention to rotate by the stage's 2D
    RoPE. The same, faster: q and k rotated here as one tensor
    (:attr:`rotates_qk`, switch ``joint_qk_rotation``); ``R(q), R(k)`` straight
    from the input (switch ``dense_rope``:
    :func:`~mavit_mm.ops.rope2d.rotated_projection`); one channels_last
    gradient from the split's backward (switch ``channel_split``).
    """

    def __init__(self, dim: int, num_heads: int, joint_rotation: bool,
                 fast_paths: FastPaths = DEFAULTS):
        super().__init__(dim, 4 * dim, fast_paths)
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.joint_rotation = joint_rotation and fast_paths.joint_qk_rotation
        self.dense_rope = fast_paths.dense_rope
        self.split = fast_paths.channel_split

    @property
    def rotates_qk(self) -> bool:
        """Whether :meth:`project` rotates q and k (elsewhere the attention
        rotates them). Not under compile, where the two rotations fuse into
        their neighbours (:mod:`~mavit_mm.ops.fast_paths`)."""
        return self.joint_rotation and not torch.compiler.is_compiling()

    def project(self, x: torch.Tensor, rope: RotaryTables) -> tuple[torch.Tensor, ...]:
        """``q, k, v, o``: q and k as ``(B, heads, N, d)`` views, rotated where
        :attr:`rotates_qk`; v and o as maps."""
        dim = self.dim
        if self.rotates_qk and self._takes_dense_rope(x):
            weight, bias = self.weights_for(x)
            v, o = channel_split(self.product(x, weight[2 * dim:], bias[2 * dim:]),
                                 (dim, dim), self.one_gradient_write(x))
            qk = split_heads(self._rotated_qk(x, rope), self.head_dim)
        else:
            qk, v, o = channel_split(self(x), (2 * dim, dim, dim), self.one_gradient_write(x))
            qk = split_heads(qk, self.head_dim)            # q's heads, then k's
            if self.rotates_qk:
                qk = rope.rotate(qk)                       # one rotation of both
        return qk[:, :self.num_heads], qk[:, self.num_heads:], v, o

    def one_gradient_write(self, x: torch.Tensor) -> bool:
        """Whether the split of ``x``'s projection writes one gradient (switch
        ``channel_split``, a condition of the device)."""
        return on_in(self.split, training=True, device_type=x.device.type)

    def _takes_dense_rope(self, x: torch.Tensor) -> bool:
        """Dense RoPE in half precision, where the plain rotation flips pairs,
        while no gradient reaches the weights (its pair weights and rotated
        bias are built once, not at every training step)."""
        return (self.dense_rope
                and compute_dtype(x, self.weight) in (torch.float16, torch.bfloat16)
                and takes_no_gradient(self.weight, self.bias))

    def _rotated_qk(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        """``R(q), R(k)`` as one channels_last map, from dense operands."""
        dtype, qk_channels = compute_dtype(x, self.weight), 2 * self.dim
        weight, bias = self.weight[:qk_channels], self.bias[:qk_channels]
        pair_weights = self.derived.get('qk_pair_weights', (self.weight,), dtype,
                                        x.device, lambda: rotary_pair_weights(weight).to(dtype))
        bias_table = self.derived.get('qk_bias_table', (self.bias, rope.angle), dtype,
                                      x.device, lambda: rotated_bias_table(bias, rope, dtype),
                                      state=(rope.height, rope.width))
        cos, signed_sin = rope.tables(dtype, x.device)
        return rotated_projection(x, pair_weights, bias_table, cos, signed_sin)


__all__ = ['build_norm2d', 'split_heads', 'CachedCastConv2d', 'PointwiseConv2d',
           'DepthwiseResidualConv', 'LayerNorm2d', 'DropPath', 'QKVOProjection', 'LN_EPS']
