"""MAViT: the Magnitude-Aware Linear Attention vision transformer (ICCV 2025)
as a dense-prediction backbone.

Module names and parameter shapes follow the published implementation exactly,
so its checkpoints load with ``strict=True``. Depends on torch and mmengine only.
"""
from __future__ import annotations

from collections.abc import Sequence
from numbers import Number

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..ops.amp import autocast_disabled, autocast_dtype
from ..ops.attention_variants import (
    LINEAR_ATTN_TYPES,
    attention,
    check_attn_type,
    check_kernel_function,
)
from ..ops.channel_split import channel_split
from ..ops.depthwise import (
    check_depthwise_impl,
    fused_ffn_middle,
    fused_gated_lepe,
    fused_position_norm,
    kernels_run,
    tap_major,
    tap_view,
)
from ..ops.derived_weights import DerivedWeights, compute_dtype, takes_no_gradient
from ..ops.fast_paths import DEFAULTS, FastPaths
from ..ops.mala import check_mala_impl
from ..ops.pointwise_conv import pointwise_conv
from ..ops.residual import scaled_residual
from ..ops.rope2d import (
    RoPE2d,
    RotaryTables,
    rotary_pair_weights,
    rotated_bias_table,
    rotated_projection,
)

# Published sizes (reference README). drop_path_rate is the detection /
# segmentation one.
ARCH_SETTINGS = {
    'tiny': dict(embed_dims=[64, 128, 256, 512], depths=[2, 2, 6, 2],
                 num_heads=[1, 2, 4, 8], mlp_ratios=[3.5] * 4,
                 layer_init_values=[1, 1, 1, 1], drop_path_rate=0.1),
    'small': dict(embed_dims=[64, 128, 320, 512], depths=[3, 5, 9, 3],
                  num_heads=[1, 2, 5, 8], mlp_ratios=[3.5] * 4,
                  layer_init_values=[1, 1, 1, 1], drop_path_rate=0.15),
    'base': dict(embed_dims=[96, 192, 384, 512], depths=[4, 6, 12, 6],
                 num_heads=[1, 2, 6, 8], mlp_ratios=[3.5] * 4,
                 layer_init_values=[1, 1, 1e-6, 1e-6], drop_path_rate=0.4),
    'large': dict(embed_dims=[96, 192, 448, 640], depths=[4, 7, 19, 8],
                  num_heads=[1, 2, 7, 10], mlp_ratios=[3.5] * 4,
                  layer_init_values=[1e-6] * 4, drop_path_rate=0.55),
}
ARCH_ALIASES = {'t': 'tiny', 's': 'small', 'b': 'base', 'l': 'large'}
LN_EPS = 1e-6


def resolve_arch(arch: str) -> dict:
    """The preset of ``arch`` ('tiny'|'small'|'base'|'large' or t|s|b|l)."""
    key = ARCH_ALIASES.get(str(arch).lower(), str(arch).lower())
    if key not in ARCH_SETTINGS:
        choices = sorted(ARCH_SETTINGS) + sorted(ARCH_ALIASES)
        raise ValueError(f'unknown MAViT arch {arch!r}; choose one of {choices}')
    return {name: list(value) if isinstance(value, list) else value
            for name, value in ARCH_SETTINGS[key].items()}


def build_norm2d(norm_cfg: dict | None, num_features: int) -> nn.Module:
    """BatchNorm-style norm for the stem and the downsampling layers.

    A torch-only stand-in for mmcv's ``build_norm_layer`` covering what these
    layers use: ``BN`` and ``SyncBN`` (mmengine reverts SyncBN to BN when not
    distributed), with ``eps``, ``momentum`` and ``requires_grad``.
    """
    cfg = dict(type='BN') if norm_cfg is None else dict(norm_cfg)
    norm_type = cfg.pop('type')
    requires_grad = cfg.pop('requires_grad', True)
    layers = {'BN': nn.BatchNorm2d, 'BN2d': nn.BatchNorm2d, 'SyncBN': nn.SyncBatchNorm}
    if norm_type not in layers:
        raise ValueError(f'norm_cfg type must be one of {sorted(layers)}, got {norm_type!r}')
    norm = layers[norm_type](num_features, **cfg)
    for param in norm.parameters():
        param.requires_grad = requires_grad
    return norm


# Devices whose layer norm kernels take half inputs with fp32 weight and bias
# (computing in fp32, writing the input's dtype). CUDA's read the weight in the
# input's dtype, so there it is cast (once, while no gradient flows).
_MIXED_LAYER_NORM_DEVICES = ('cpu',)


class Conv2d(nn.Conv2d):
    """``nn.Conv2d`` (same parameters, keys and result) whose weight and bias
    meet the input in the dtype the layer computes in: under autocast, half
    copies kept per weight value while no gradient flows
    (:class:`~mavit_mm.ops.derived_weights.DerivedWeights`, switch
    ``cached_weights``), instead of autocast's casts at every call."""

    def __init__(self, *args, cached_weights: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.derived = DerivedWeights(cached_weights)

    def weights_for(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight, bias)`` in the dtype the layer computes ``x`` in; where
        no copy can be kept (a gradient flows, switch off), as they are, for
        autocast to cast as it would."""
        dtype = compute_dtype(x, self.weight)
        if dtype == self.weight.dtype or not self.derived.caches(self.weight):
            return self.weight, self.bias
        return self.derived.cast('compute', (self.weight, self.bias), dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, *self.weights_for(x))

    def depthwise_taps(self, tap_major_layout: bool) -> torch.Tensor:
        """A depthwise kernel as the fused depthwise ops take it, ``(k * k,
        C)``: tap-major (:func:`~mavit_mm.ops.depthwise.tap_major`, kept per
        weight value while no gradient flows; switch ``tap_major_weights``)
        or a view of the parameter."""
        if not tap_major_layout:
            return tap_view(self.weight)
        return self.derived.get('taps', (self.weight,), self.weight.dtype, self.weight.device,
                                lambda: tap_major(self.weight))


class PointwiseConv2d(Conv2d):
    """A 1x1 :class:`Conv2d` (same parameters and keys) that runs as a matrix
    product over the pixels of a channels_last map (switch ``matmul_1x1``:
    :func:`~mavit_mm.ops.pointwise_conv.pointwise_conv`)."""

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


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of an NCHW tensor (key ``<name>.norm.*``).

    Returns a channels_last tensor (an NHWC buffer seen as NCHW): free for a
    channels_last input, which is what the backbone keeps inside (layout:
    ``docs/architecture.md``). The backbone's outputs are made contiguous NCHW
    in :meth:`MAViT.forward`, since mmcv's RoIAlign reads raw memory as NCHW.

    A half input (bf16 / fp16, e.g. under autocast) is normalised in one op
    that computes in fp32 and returns the input's dtype: CUDA's autocast
    would otherwise cast the whole map to fp32 and back (three passes over it
    where one will do, and an fp32 map for the next convolution to cast).
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
        (:func:`~mavit_mm.ops.residual.scaled_residual`): the layer scale (in
        ``x``'s dtype) and the per-sample keep mask are one small factor.
        Written into ``x`` (a map the block made itself) where ``in_place``
        allows it and no gradient flows."""
        keep = self._keep_scale(x)
        if keep is not None:
            scale = keep if scale is None else scale * keep
        tensors = (x, branch) if scale is None else (x, branch, scale)
        return scaled_residual(x, branch, scale, in_place=in_place and takes_no_gradient(*tensors))

    def extra_repr(self) -> str:
        return f'drop_prob={self.drop_prob}'


class DepthwiseResidualConv(Conv2d):
    """``x + conv(x)`` of a depthwise 'same' convolution, as one convolution.

    The identity is folded into the centre tap of the kernel, which saves a
    full pass over the map for the add (switch ``folded_residual_conv``; off,
    and under compile: the convolution, then the add). The folded kernel is built in the compute
    dtype (autocast's where it is on), and, while no gradient flows, once per
    weight value. Parameters and keys are those of the plain ``nn.Conv2d``
    (the identity is a non-persistent buffer).
    """

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
        return self.derived.get('folded', (self.weight, self.identity), dtype,
                                self.weight.device,
                                lambda: (self.weight + self.identity).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Not under compile: the weights are graph inputs there, so the fold is
        # a kernel of its own at every call (mavit_mm.ops.fast_paths).
        if not self.folded or torch.compiler.is_compiling():
            return x + super().forward(x)
        dtype = compute_dtype(x, self.weight)
        bias = self.bias                        # (autocast casts it where none is kept)
        if dtype != bias.dtype and self.derived.caches(bias):
            (bias,) = self.derived.cast('bias', (bias,), dtype)
        return self._conv_forward(x, self.folded_weight(dtype), bias)


class ConvStem(nn.Module):
    """Four 3x3 convs (strides 2, 1, 1, 2), norm + GELU between them: stride 4."""

    def __init__(self, in_channels: int, embed_dim: int, norm_cfg: dict | None,
                 fast_paths: FastPaths = DEFAULTS):
        super().__init__()
        hidden = embed_dim // 2
        cached = fast_paths.cached_weights
        self.proj = nn.Sequential(
            Conv2d(in_channels, hidden, 3, stride=2, padding=1, cached_weights=cached),
            build_norm2d(norm_cfg, hidden), nn.GELU(),
            Conv2d(hidden, hidden, 3, stride=1, padding=1, cached_weights=cached),
            build_norm2d(norm_cfg, hidden), nn.GELU(),
            Conv2d(hidden, hidden, 3, stride=1, padding=1, cached_weights=cached),
            build_norm2d(norm_cfg, hidden), nn.GELU(),
            Conv2d(hidden, embed_dim, 3, stride=2, padding=1, cached_weights=cached),
            build_norm2d(norm_cfg, embed_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Downsample(nn.Module):
    """3x3 stride-2 conv then norm, between stages."""

    def __init__(self, in_dim: int, out_dim: int, norm_cfg: dict | None,
                 fast_paths: FastPaths = DEFAULTS):
        super().__init__()
        self.reduction = Conv2d(in_dim, out_dim, 3, stride=2, padding=1,
                                cached_weights=fast_paths.cached_weights)
        self.norm = build_norm2d(norm_cfg, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.reduction(x))


class ConvFFN(nn.Module):
    """1x1 conv up, GELU, residual 3x3 depthwise conv (``h + dwconv(h)``), 1x1 conv down."""

    def __init__(self, dim: int, hidden_dim: int, fast_paths: FastPaths = DEFAULTS,
                 depthwise_impl: str = 'auto'):
        super().__init__()
        # Registration order gives the published state-dict order.
        self.fc1 = PointwiseConv2d(dim, hidden_dim, fast_paths)
        self.act = nn.GELU()
        self.fc2 = PointwiseConv2d(hidden_dim, dim, fast_paths)
        self.dwconv = DepthwiseResidualConv(hidden_dim, 3, fast_paths)   # h + dwconv(h)
        self.fused = fast_paths.fused_ffn_middle
        self.tap_major = fast_paths.tap_major_weights
        self.depthwise_impl = depthwise_impl

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.middle(self.fc1(x)))

    def middle(self, h: torch.Tensor) -> torch.Tensor:
        """``GELU(h) + dwconv(GELU(h))``: one fused pass where the depthwise
        kernels run (switch ``fused_ffn_middle``)."""
        if self.fused and kernels_run(self.depthwise_impl, h, weight=self.dwconv.weight):
            return fused_ffn_middle(h, self.dwconv.depthwise_taps(self.tap_major),
                                    self.dwconv.bias)
        return self.dwconv(self.act(h))


def split_heads(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(B, n * C, H, W) -> (B, n * C / head_dim, N, head_dim), a view (no
    copy): the heads of q, k or v, or of q and k together.

    Of a channels_last map the view has channel stride 1, the layout SDPA's
    flash kernels need and the fused MALA op reads in whole channel rows
    (``channels_last`` in ``devtools.mala_inputs``, which cuts its
    inputs with this function).
    """
    batch, _, height, width = t.shape
    return t.reshape(batch, -1, head_dim, height * width).transpose(-1, -2)


class GatedAttention(nn.Module):
    """MAViT token mixer: ``proj(o * (attention(q, k, v) + lepe(v)))``.

    One 1x1 conv gives q, k, v and the gate o; ``lepe`` is a 5x5 depthwise conv
    on v; q and k are rotated by the stage's 2D RoPE. ``attn_type`` is one of
    ``ATTN_TYPES`` (published: ``'mala'`` in stages 1-2, ``'softmax'`` in 3-4),
    computed by :func:`mavit_mm.ops.attention` with ``kernel_function`` as phi
    of the linear variants (formulas: :mod:`mavit_mm.ops.attention_variants`).

    ``inline_residual`` (``'inline'`` only) adds InLine's local residual to the
    attention output: ``sum_j r_j v_j`` over each token's 3x3 neighbourhood
    (zero padded), with per-channel weights ``r = MLP(mean_n x_n)`` from the
    pooled input (1x1 convs grouped by head, GELU between: ``residual.0`` /
    ``residual.2``). Without it the module has exactly the published keys.
    """

    def __init__(self, dim: int, num_heads: int, attn_type: str = 'mala',
                 mala_impl: str = 'auto', kernel_function: str = 'elu',
                 inline_residual: bool = False, fast_paths: FastPaths = DEFAULTS,
                 depthwise_impl: str = 'auto'):
        super().__init__()
        self.dim = dim
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.attn_type = check_attn_type(attn_type)
        self.mala_impl = mala_impl
        self.kernel_function = check_kernel_function(kernel_function)
        self.fast_paths = fast_paths
        self.depthwise_impl = depthwise_impl
        self.joint_rotation = attn_type == 'softmax' and fast_paths.joint_qk_rotation
        if inline_residual and attn_type != 'inline':
            raise ValueError(f"inline_residual is InLine's; attn_type is {attn_type!r}")
        cached = fast_paths.cached_weights
        self.qkvo = PointwiseConv2d(dim, 4 * dim, fast_paths)
        self.lepe = Conv2d(dim, dim, 5, padding=2, groups=dim, cached_weights=cached)
        self.proj = PointwiseConv2d(dim, dim, fast_paths)
        self.residual = nn.Sequential(
            Conv2d(dim, dim, 1, groups=num_heads, cached_weights=cached), nn.GELU(),
            Conv2d(dim, 9 * dim, 1, groups=num_heads, cached_weights=cached),
        ) if inline_residual else None
        self.derived = DerivedWeights(cached)

    @property
    def rotates_qk(self) -> bool:
        """Whether the projection rotates q and k, together (the softmax stages,
        switch ``joint_qk_rotation``); elsewhere the attention rotates them.
        Not under compile, where the two rotations fuse into their neighbours
        (:mod:`~mavit_mm.ops.fast_paths`)."""
        return self.joint_rotation and not torch.compiler.is_compiling()

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, n * C, H, W) -> (B, n * heads, N, d): :func:`split_heads`."""
        return split_heads(t, self.head_dim)

    def merge_heads(self, t: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """(B, heads, N, d) -> channels_last (B, C, H, W): a view when ``t`` is
        token-major in memory ((B, N, heads, d), as SDPA, the fused MALA op and
        single-head MALA return it); one copy otherwise."""
        return (t.transpose(1, 2).reshape(t.shape[0], height, width, self.dim)
                .permute(0, 3, 1, 2))

    def query_key(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``(B, heads, N, d)`` pre-activation q and k of input ``x`` (what
        :func:`mavit_mm.ops.attention_scores` takes)."""
        q, k, _, _ = self.qkvo(x.contiguous(memory_format=torch.channels_last)).chunk(4, dim=1)
        return self.split_heads(q), self.split_heads(k)

    def forward(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        height, width = x.shape[2:]
        # channels_last in, so that q, k, v are channel-contiguous head views
        # (free inside the backbone, which is channels_last already).
        x = x.contiguous(memory_format=torch.channels_last)
        q, k, v, o = self.project(x, rope)
        out = attention(q, k, self.split_heads(v), self.attn_type,
                        None if self.rotates_qk else rope, self.kernel_function,
                        impl=self.mala_impl)
        out = self.merge_heads(out, height, width)
        if self.residual is not None:
            out = out + self._local_residual(x, v)
        return self.proj(self.gated_lepe(out, v, o))

    def gated_lepe(self, out: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """``o * (out + lepe(v))``: one fused pass where the depthwise kernels
        run (switch ``fused_lepe_gate``)."""
        if self.fast_paths.fused_lepe_gate and kernels_run(self.depthwise_impl, v, out, o,
                                                           weight=self.lepe.weight):
            taps = self.lepe.depthwise_taps(self.fast_paths.tap_major_weights)
            return fused_gated_lepe(v, taps, self.lepe.bias, out, o)
        return o * (out + self.lepe(v))

    def project(self, x: torch.Tensor, rope: RotaryTables):
        """The qkvo convolution cut into q and k, as ``(B, heads, N, d)``
        views, and v and o, as maps; q and k rotated where ``rotates_qk``."""
        dim, split = self.dim, self.fast_paths.channel_split
        if self.rotates_qk and self._dense_rope(x):
            weight, bias = self.qkvo.weights_for(x)
            v, o = channel_split(self.qkvo.product(x, weight[2 * dim:], bias[2 * dim:]),
                                 (dim, dim), split)
            qk = self.split_heads(self._rotated_qk(x, rope))
        else:
            qk, v, o = channel_split(self.qkvo(x), (2 * dim, dim, dim), split)
            qk = self.split_heads(qk)                      # q's heads, then k's
            if self.rotates_qk:
                qk = rope.rotate(qk)                       # one rotation of both
        return qk[:, :self.num_heads], qk[:, self.num_heads:], v, o

    def _dense_rope(self, x: torch.Tensor) -> bool:
        """Whether q and k are rotated by :func:`~mavit_mm.ops.rope2d.rotated_projection`
        (switch ``dense_rope``): in half precision, where the plain rotation
        flips pairs, while no gradient reaches the qkvo weights (its pair
        weights and rotated bias are built once, not at every training step)
        and not while compiling (inductor fuses the plain formula into one
        kernel)."""
        return (self.fast_paths.dense_rope
                and compute_dtype(x, self.qkvo.weight) in (torch.float16, torch.bfloat16)
                and takes_no_gradient(self.qkvo.weight, self.qkvo.bias))

    def _rotated_qk(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        """``R(q), R(k)`` as one channels_last map, from dense operands."""
        dtype, qk_channels = compute_dtype(x, self.qkvo.weight), 2 * self.dim
        weight, bias = self.qkvo.weight[:qk_channels], self.qkvo.bias[:qk_channels]
        pair_weights = self.derived.get('qk_pair_weights', (self.qkvo.weight,), dtype,
                                        x.device, lambda: rotary_pair_weights(weight).to(dtype))
        bias_table = self.derived.get('qk_bias_table', (self.qkvo.bias, rope.angle), dtype,
                                      x.device, lambda: rotated_bias_table(bias, rope, dtype),
                                      state=(rope.height, rope.width))
        cos, signed_sin = rope.tables(dtype, x.device)
        return rotated_projection(x, pair_weights, bias_table, cos, signed_sin)

    def _local_residual(self, x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """InLine's ``sum_j r_j v_j`` over 3x3 neighbourhoods: a depthwise 3x3
        conv of v whose weights come from the pooled input, per image."""
        batch, channels, height, width = v.shape
        weights = self.residual(x.mean(dim=(2, 3), keepdim=True))      # (B, 9C, 1, 1)
        weights = weights.reshape(batch * channels, 1, 3, 3).to(v.dtype)
        out = F.conv2d(v.reshape(1, batch * channels, height, width), weights, padding=1,
                       groups=batch * channels)
        return out.reshape(batch, channels, height, width)

    def extra_repr(self) -> str:
        extra = ''
        if self.attn_type in LINEAR_ATTN_TYPES:
            extra = f', kernel_function={self.kernel_function}'
        return f'attn_type={self.attn_type}, num_heads={self.num_heads}{extra}'


class MAViTBlock(nn.Module):
    """Conditional position conv, gated attention and conv FFN, with layer scale."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, drop_path: float,
                 layerscale: bool, layer_init_value: float, attn_type: str,
                 mala_impl: str, with_cp: bool, kernel_function: str = 'elu',
                 inline_residual: bool = False, fast_paths: FastPaths = DEFAULTS,
                 depthwise_impl: str = 'auto'):
        super().__init__()
        self.with_cp = with_cp
        self.layerscale = layerscale
        self.in_place_residual = fast_paths.in_place_residual
        if layerscale:
            self.gamma_1 = nn.Parameter(torch.full((1, dim, 1, 1), float(layer_init_value)))
            self.gamma_2 = nn.Parameter(torch.full((1, dim, 1, 1), float(layer_init_value)))
        # Registration order gives the published state-dict order.
        cached = fast_paths.cached_weights
        self.norm1 = LayerNorm2d(dim, cached_weights=cached)
        self.attn = GatedAttention(dim, num_heads, attn_type, mala_impl, kernel_function,
                                   inline_residual, fast_paths, depthwise_impl)
        self.norm2 = LayerNorm2d(dim, cached_weights=cached)
        self.ffn = ConvFFN(dim, int(mlp_ratio * dim), fast_paths, depthwise_impl)
        self.pos = DepthwiseResidualConv(dim, 3, fast_paths)   # x + pos(x)
        self.drop_path = DropPath(drop_path)
        self.derived = DerivedWeights(cached)
        self.fused_position_norm = fast_paths.fused_position_norm
        self.tap_major = fast_paths.tap_major_weights
        self.depthwise_impl = depthwise_impl

    def _forward(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        stream, normed = self.position(x)                    # x = x + pos(x)
        # The sums below may be written into the stream only where it is a
        # map of this block's own, never into its input (a variant whose
        # position step returned its input would otherwise overwrite the
        # previous stage's output).
        in_place = self.in_place_residual and stream is not x
        stream = self.drop_path.residual(                    # x = x + gamma_1 * attn(norm1(x))
            stream, self.attn(normed, rope), self.layer_scale(1, stream), in_place)
        return self.drop_path.residual(                      # x = x + gamma_2 * ffn(norm2(x))
            stream, self.ffn(self.norm2(stream)), self.layer_scale(2, stream), in_place)

    def position(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x + pos(x)`` and its ``norm1``: one fused pass where the
        depthwise kernels run (switch ``fused_position_norm``)."""
        if self.fused_position_norm and kernels_run(self.depthwise_impl, x, weight=self.pos.weight,
                                                    norm_channels=x.shape[1]):
            norm = self.norm1.norm
            return fused_position_norm(x, self.pos.depthwise_taps(self.tap_major), self.pos.bias,
                                       norm.weight, norm.bias, norm.eps)
        x = self.pos(x)
        return x, self.norm1(x)

    def layer_scale(self, index: int, x: torch.Tensor) -> torch.Tensor | None:
        """``gamma_<index>`` in ``x``'s dtype (the residual stream's), or ``None``
        without layer scale."""
        if not self.layerscale:
            return None
        gamma = self.gamma_1 if index == 1 else self.gamma_2
        return gamma if gamma.dtype == x.dtype else self.derived.cast(f'gamma_{index}', (gamma,),
                                                                      x.dtype)[0]

    def forward(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        if self.with_cp and x.requires_grad:
            return cp.checkpoint(self._forward, x, rope, use_reentrant=False)
        return self._forward(x, rope)


class MAViTStage(nn.Module):
    """The blocks of one stage, its RoPE angles and the downsampling after it."""

    def __init__(self, dim: int, out_dim: int | None, depth: int, num_heads: int,
                 mlp_ratio: float, drop_paths: Sequence[float], layerscale: bool,
                 layer_init_value: float, attn_type: str, mala_impl: str,
                 norm_cfg: dict | None, with_cp: bool, kernel_function: str = 'elu',
                 inline_residual: bool = False, fast_paths: FastPaths = DEFAULTS,
                 depthwise_impl: str = 'auto'):
        super().__init__()
        self.RoPE = RoPE2d(dim // num_heads)
        self.blocks = nn.ModuleList([
            MAViTBlock(dim, num_heads, mlp_ratio, drop_paths[i], layerscale,
                       layer_init_value, attn_type, mala_impl, with_cp,
                       kernel_function, inline_residual, fast_paths, depthwise_impl)
            for i in range(depth)])
        self.downsample = (Downsample(dim, out_dim, norm_cfg, fast_paths)
                           if out_dim is not None else None)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (stage output, input of the next stage)."""
        rope = self.RoPE(x.shape[2], x.shape[3])
        for block in self.blocks:
            x = block(x, rope)
        return x, (self.downsample(x) if self.downsample is not None else x)


def _per_stage(name: str, value, num_stages: int, kind=None) -> list:
    """Expand a scalar to every stage, or check a list has one entry per stage."""
    if kind is not None and isinstance(value, kind):
        return [value] * num_stages
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f'{name} must be a list with one entry per stage ({num_stages}), '
                         f'got {value!r}')
    if len(value) != num_stages:
        raise ValueError(f'{name} must have {num_stages} entries (one per stage), '
                         f'got {len(value)}: {list(value)}')
    return list(value)


class MAViT(BaseModule):
    """MAViT backbone for mmdet / mmseg.

    Args:
        arch: Preset size, ``'tiny'|'small'|'base'|'large'`` (or ``t|s|b|l``);
            any explicit argument below overrides its entry.
        embed_dims, depths, num_heads, mlp_ratios, layerscales, layer_init_values:
            Per-stage settings, published names.
        drop_path_rate: Stochastic depth rate, linear over all blocks.
        projection: Accepted for compatibility with published configs; unused.
        in_channels: Channels of the input image.
        out_indices: Stages whose (normed) outputs are returned.
        attn_types: Per stage, one of ``mavit_mm.ops.ATTN_TYPES``:
            ``'mala'`` (published in stages 1-2), ``'softmax'`` (published in
            3-4), ``'linear'``, ``'inline'``, ``'mala_no_beta'``,
            ``'mala_no_gamma'``, ``'softmax_qnorm'`` (formulas in
            :mod:`mavit_mm.ops.attention_variants`). Every variant keeps the
            published state-dict keys.
        kernel_function: phi of every linear variant, ``'elu'`` (elu + 1, as
            published), ``'relu'`` or ``'exp'`` (the paper's Table 10).
        inline_residual: InLine's local 3x3 residual in the ``'inline'``
            stages (adds ``attn.residual.*`` parameters); off by default.
        mala_impl: ``'auto'|'torch'|'triton'``, the MALA implementation (the
            fused kernels run ``'mala'`` with the ``'elu'`` kernel).
        depthwise_impl: ``'auto'|'torch'|'triton'``, the implementation of the
            block's depthwise stages (:mod:`mavit_mm.ops.depthwise`): the fused
            Triton kernels (``'auto'``: on CUDA) or the modules themselves.
        norm_cfg: Norm of the stem and downsampling layers (``BN``/``SyncBN``).
        frozen_stages: Freeze the stem (0) and stages ``< frozen_stages``; -1: none.
        norm_eval: Keep the batch norms in eval mode while training.
        with_cp: Gradient checkpointing of every block.
        fast_paths: Speed features to switch on or off, e.g.
            ``dict(dense_rope=False)`` (by default, those measured faster;
            each computes the same model: :mod:`mavit_mm.ops.fast_paths`).
        pretrained: Deprecated shortcut for ``init_cfg=dict(type='Pretrained')``.
        init_cfg: mmengine init config; ``type='Pretrained'`` loads a published
            MAViT checkpoint (classification or dense prediction).
    """

    def __init__(self,
                 arch: str | None = 'tiny',
                 embed_dims: Sequence[int] | None = None,
                 depths: Sequence[int] | None = None,
                 num_heads: Sequence[int] | None = None,
                 mlp_ratios=None,
                 drop_path_rate: float | None = None,
                 layerscales=None,
                 layer_init_values=None,
                 projection=None,
                 in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 attn_types: Sequence[str] = ('mala', 'mala', 'softmax', 'softmax'),
                 kernel_function: str = 'elu',
                 inline_residual: bool = False,
                 mala_impl: str = 'auto',
                 depthwise_impl: str = 'auto',
                 norm_cfg: dict | None = dict(type='BN', requires_grad=True),  # noqa: B006 (read only)
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 fast_paths: dict | None = None,
                 pretrained: str | None = None,
                 init_cfg=None):
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError('give the checkpoint as pretrained or init_cfg, not both')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg=init_cfg)
        preset = resolve_arch(arch) if arch is not None else {}
        explicit = dict(embed_dims=embed_dims, depths=depths, num_heads=num_heads,
                        mlp_ratios=mlp_ratios, drop_path_rate=drop_path_rate,
                        layer_init_values=layer_init_values)
        settings = {**preset, **{k: v for k, v in explicit.items() if v is not None}}
        missing = [k for k in explicit if k not in settings]
        if missing:
            raise ValueError(f'without an arch preset MAViT needs {missing}')

        num_stages = len(_per_stage('depths', settings['depths'], len(settings['depths'])))
        self.embed_dims = [int(d) for d in _per_stage('embed_dims', settings['embed_dims'], num_stages)]
        self.depths = [int(d) for d in settings['depths']]
        self.num_heads = [int(h) for h in _per_stage('num_heads', settings['num_heads'], num_stages)]
        self.mlp_ratios = _per_stage('mlp_ratios', settings['mlp_ratios'], num_stages, Number)
        self.layer_init_values = _per_stage('layer_init_values', settings['layer_init_values'],
                                            num_stages, Number)
        self.layerscales = _per_stage('layerscales', True if layerscales is None else layerscales,
                                      num_stages, bool)
        self.attn_types = _per_stage('attn_types', attn_types, num_stages, str)
        self.drop_path_rate = float(settings['drop_path_rate'])
        self.out_indices = tuple(sorted(set(int(i) for i in out_indices)))
        self.kernel_function = check_kernel_function(kernel_function)
        self.inline_residual = bool(inline_residual)
        self.mala_impl = check_mala_impl(mala_impl)
        self.depthwise_impl = check_depthwise_impl(depthwise_impl)
        self.fast_paths = FastPaths.resolve(fast_paths)
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.in_channels = in_channels
        self._check_settings(num_stages)

        self.patch_embed = ConvStem(in_channels, self.embed_dims[0], norm_cfg, self.fast_paths)
        drop_paths = torch.linspace(0, self.drop_path_rate, sum(self.depths)).tolist()
        self.layers = nn.ModuleList()
        for i in range(num_stages):
            first = sum(self.depths[:i])
            self.layers.append(MAViTStage(
                dim=self.embed_dims[i],
                out_dim=self.embed_dims[i + 1] if i + 1 < num_stages else None,
                depth=self.depths[i], num_heads=self.num_heads[i],
                mlp_ratio=self.mlp_ratios[i],
                drop_paths=drop_paths[first:first + self.depths[i]],
                layerscale=self.layerscales[i], layer_init_value=self.layer_init_values[i],
                attn_type=self.attn_types[i], mala_impl=self.mala_impl,
                norm_cfg=norm_cfg, with_cp=with_cp, kernel_function=self.kernel_function,
                inline_residual=self.inline_residual and self.attn_types[i] == 'inline',
                fast_paths=self.fast_paths, depthwise_impl=self.depthwise_impl))
        # Keyed by stage index ('extra_norms.2.norm.weight' as published), and
        # only for returned stages so no parameter goes unused under DDP.
        self.extra_norms = nn.ModuleDict(
            {str(i): LayerNorm2d(self.embed_dims[i], cached_weights=self.fast_paths.cached_weights)
             for i in self.out_indices})
        self._freeze_stages()

    def _check_settings(self, num_stages: int) -> None:
        for i, (dim, heads) in enumerate(zip(self.embed_dims, self.num_heads)):
            if heads <= 0 or dim % heads != 0:
                raise ValueError(f'stage {i}: embed_dims {dim} is not divisible by '
                                 f'num_heads {heads}')
            if (dim // heads) % 4 != 0:
                raise ValueError(f'stage {i}: head dim {dim // heads} (embed_dims {dim} / '
                                 f'num_heads {heads}) must be divisible by 4 for 2D RoPE')
        for i, attn_type in enumerate(self.attn_types):
            check_attn_type(attn_type, name=f'attn_types[{i}]')
        linear_stages = [t for t in self.attn_types if t in LINEAR_ATTN_TYPES]
        if self.kernel_function != 'elu' and not linear_stages:
            raise ValueError(f'kernel_function={self.kernel_function!r} is phi of the linear '
                             f'attentions {LINEAR_ATTN_TYPES}, but no stage uses one '
                             f'(attn_types {self.attn_types})')
        if self.inline_residual and 'inline' not in self.attn_types:
            raise ValueError("inline_residual=True needs an 'inline' stage, got attn_types "
                             f'{self.attn_types}')
        if (self.mala_impl == 'triton' and self.kernel_function != 'elu'
                and 'mala' in self.attn_types):
            raise ValueError(f"mala_impl='triton': the fused kernels run MALA with the 'elu' "
                             f'kernel only, not {self.kernel_function!r}; use '
                             "mala_impl='auto' or 'torch'")
        for index in self.out_indices:
            if not 0 <= index < num_stages:
                raise ValueError(f'out_indices {self.out_indices} must lie in '
                                 f'[0, {num_stages - 1}]')
        if self.in_channels <= 0:
            raise ValueError(f'in_channels must be positive, got {self.in_channels}')

    # -- mmdet backbone conventions -------------------------------------------
    def _freeze_stages(self) -> None:
        frozen = []
        if self.frozen_stages >= 0:
            frozen.append(self.patch_embed)
        for i in range(min(self.frozen_stages, len(self.layers))):
            frozen.append(self.layers[i])
            if str(i) in self.extra_norms:
                frozen.append(self.extra_norms[str(i)])
        for module in frozen:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        # Edits through ``param.data`` (mmengine's EMAHook swaps its averaged
        # weights in and out that way before and after each evaluation) leave
        # no trace in the version counters the caches key on; a runner sets
        # the mode after such a swap, so the caches start afresh here.
        for module in self.modules():
            if isinstance(getattr(module, 'derived', None), DerivedWeights):
                module.derived.clear()
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self

    def init_weights(self) -> None:
        if self.init_cfg is not None and self.init_cfg.get('type') == 'Pretrained':
            from .checkpoint import load_pretrained_backbone
            load_pretrained_backbone(self, self.init_cfg['checkpoint'],
                                     prefix=self.init_cfg.get('prefix'),
                                     logger=MMLogger.get_current_instance())
            self._is_init = True
            return
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.LayerNorm, _BatchNorm)):
                if module.weight is not None:
                    nn.init.ones_(module.weight)
                    nn.init.zeros_(module.bias)
        super().init_weights()

    # -- forward ------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if x.dim() != 4:
            raise ValueError(f'MAViT expects a 4-D (N, C, H, W) input, got shape '
                             f'{tuple(x.shape)}')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'MAViT expects {self.in_channels} input channels, got '
                             f'{x.shape[1]} (input shape {tuple(x.shape)})')
        # Inside: channels_last throughout (convolutions, norms, attention;
        # docs/architecture.md). Out: contiguous NCHW, one copy per output,
        # because mmcv's C++/CUDA ops (RoIAlign) read raw memory as NCHW.
        # Under autocast an fp32 image is cast in the same copy (the stem's
        # convolution would cast it anyway).
        compute_dtype = autocast_dtype(x.device.type) if x.dtype == torch.float32 else None
        x = self.patch_embed(x.to(dtype=compute_dtype or x.dtype,
                                  memory_format=torch.channels_last))
        outs: list[torch.Tensor] = []
        for i, stage in enumerate(self.layers):
            out, x = stage(x)
            if i in self.out_indices:
                outs.append(self.extra_norms[str(i)](out).contiguous())
        return tuple(outs)
