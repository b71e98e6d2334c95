"""MAViT: the Magnitude-Aware Linear Attention vision transformer (ICCV 2025)
as a dense-prediction backbone.

Read top-down, as the paper draws it: the convolutional stem, a stage of
blocks, the block (position conv, gated attention, conv FFN), the backbone.
The layers the blocks are built of, and their speed features, are in
:mod:`.layers`; the settings every block reads in :class:`.options.MAViTOptions`.

Module names and parameter shapes follow the published implementation exactly,
so its checkpoints load with ``strict=True``. Depends on torch and mmengine only.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as cp
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..ops.amp import autocast_dtype
from ..ops.attention_variants import LINEAR_ATTN_TYPES, attention, check_attn_type
from ..ops.depthwise import fused_ffn_middle, fused_gated_lepe, fused_position_norm
from ..ops.derived_weights import DerivedWeights
from ..ops.rope2d import RoPE2d, RotaryTables
from .arch import NUM_STAGES, stage_settings, whole_number
from .layers import (
    CachedCastConv2d,
    DepthwiseResidualConv,
    DropPath,
    LayerNorm2d,
    PointwiseConv2d,
    QKVOProjection,
    build_norm2d,
    split_heads,
)
from .options import DEFAULT_OPTIONS, MAViTOptions


class ConvStem(nn.Module):
    """Four 3x3 convs (strides 2, 1, 1, 2), norm + GELU between them: stride 4."""

    def __init__(self, in_channels: int, embed_dim: int, norm_cfg: dict | None, *,
                 options: MAViTOptions = DEFAULT_OPTIONS):
        super().__init__()
        hidden = embed_dim // 2

        def conv(cin: int, cout: int, stride: int) -> nn.Conv2d:
            return CachedCastConv2d(cin, cout, 3, stride=stride, padding=1,
                                    cached_weights=options.fast_paths.cached_weights)
        self.proj = nn.Sequential(
            conv(in_channels, hidden, 2), build_norm2d(norm_cfg, hidden), nn.GELU(),
            conv(hidden, hidden, 1), build_norm2d(norm_cfg, hidden), nn.GELU(),
            conv(hidden, hidden, 1), build_norm2d(norm_cfg, hidden), nn.GELU(),
            conv(hidden, embed_dim, 2), build_norm2d(norm_cfg, embed_dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Downsample(nn.Module):
    """3x3 stride-2 conv then norm, between stages."""

    def __init__(self, in_dim: int, out_dim: int, norm_cfg: dict | None, *,
                 options: MAViTOptions = DEFAULT_OPTIONS):
        super().__init__()
        self.reduction = CachedCastConv2d(in_dim, out_dim, 3, stride=2, padding=1,
                                          cached_weights=options.fast_paths.cached_weights)
        self.norm = build_norm2d(norm_cfg, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.reduction(x))


class MAViTStage(nn.Module):
    """The blocks of one stage, its RoPE angles and the downsampling after it."""

    def __init__(self, *, dim: int, out_dim: int | None, depth: int, num_heads: int,
                 mlp_ratio: float, drop_paths: Sequence[float], layerscale: bool,
                 layer_init_value: float, attn_type: str, norm_cfg: dict | None,
                 with_cp: bool = False, options: MAViTOptions = DEFAULT_OPTIONS):
        super().__init__()
        self.RoPE = RoPE2d(dim // num_heads)
        self.blocks = nn.ModuleList([
            MAViTBlock(dim=dim, num_heads=num_heads, mlp_ratio=mlp_ratio,
                       drop_path=drop_paths[i], layerscale=layerscale,
                       layer_init_value=layer_init_value, attn_type=attn_type,
                       with_cp=with_cp, options=options)
            for i in range(depth)])
        self.downsample = (Downsample(dim, out_dim, norm_cfg, options=options)
                           if out_dim is not None else None)

    def forward(self, x: torch.Tensor, downsample: bool = True
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (stage output, input of the next stage); without
        ``downsample`` (no later stage runs) the output twice."""
        rope = self.RoPE(x.shape[2], x.shape[3])
        for block in self.blocks:
            x = block(x, rope)
        return x, (self.downsample(x) if downsample and self.downsample is not None else x)


class MAViTBlock(nn.Module):
    """Conditional position conv, gated attention and conv FFN, with layer scale:

    ``x = x + pos(x)``; ``x = x + gamma_1 * attn(norm1(x))``;
    ``x = x + gamma_2 * ffn(norm2(x))`` (each branch under stochastic depth).
    """

    def __init__(self, *, dim: int, num_heads: int, mlp_ratio: float, drop_path: float = 0.0,
                 layerscale: bool = True, layer_init_value: float = 1.0,
                 attn_type: str = 'mala', with_cp: bool = False,
                 options: MAViTOptions = DEFAULT_OPTIONS):
        super().__init__()
        self.with_cp = with_cp
        self.layerscale = layerscale
        self.options = options
        if layerscale:
            self.gamma_1 = nn.Parameter(torch.full((1, dim, 1, 1), float(layer_init_value)))
            self.gamma_2 = nn.Parameter(torch.full((1, dim, 1, 1), float(layer_init_value)))
        # Registration order gives the published state-dict order.
        cached = options.fast_paths.cached_weights
        self.norm1 = LayerNorm2d(dim, cached_weights=cached)
        self.attn = GatedAttention(dim, num_heads, attn_type, options=options)
        self.norm2 = LayerNorm2d(dim, cached_weights=cached)
        self.ffn = ConvFFN(dim, int(mlp_ratio * dim), options=options)
        self.pos = DepthwiseResidualConv(dim, 3, options.fast_paths)   # x + pos(x)
        self.drop_path = DropPath(drop_path)
        self.derived = DerivedWeights(cached)

    def _forward(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        stream, normed = self.position(x)                    # x = x + pos(x)
        # Sums are written into the stream only where it is a map of this
        # block's own, never into its input (it may be a stage's output).
        in_place = self.options.fast_paths.in_place_residual and stream is not x
        stream = self.drop_path.residual(                    # x = x + gamma_1 * attn(norm1(x))
            stream, self.attn(normed, rope), self.layer_scale(1, stream), in_place)
        return self.drop_path.residual(                      # x = x + gamma_2 * ffn(norm2(x))
            stream, self.ffn(self.norm2(stream)), self.layer_scale(2, stream), in_place)

    def position(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x + pos(x)`` and its ``norm1``: one fused pass where the options
        let it run (:meth:`MAViTOptions.fuses`)."""
        if self.options.fuses('position_norm', x, weight=self.pos.weight,
                              norm_channels=x.shape[1],
                              parameters=lambda: (self.pos.bias, *self.norm1.parameters())):
            norm = self.norm1.norm
            taps = self.pos.depthwise_taps(self.options.fast_paths.tap_major_weights)
            return fused_position_norm(x, taps, self.pos.bias, norm.weight, norm.bias, norm.eps)
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


class GatedAttention(nn.Module):
    """MAViT token mixer: ``proj(o * (attention(q, k, v) + lepe(v)))``.

    One 1x1 conv gives q, k, v and the gate o (:class:`.layers.QKVOProjection`);
    ``lepe`` is a 5x5 depthwise conv on v; q and k are rotated by the stage's
    2D RoPE. ``attention`` is :func:`mavit_mm.ops.attention` of ``attn_type``
    (formulas: :mod:`mavit_mm.ops.attention_variants`).

    The options' ``inline_residual`` adds, to an ``'inline'`` attention,
    InLine's local residual: ``sum_j r_j v_j`` over each token's 3x3
    neighbourhood (zero padded), with per-channel weights ``r = MLP(mean_n
    x_n)`` from the pooled input (1x1 convs grouped by head, GELU between:
    ``residual.0`` / ``residual.2``).
    """

    def __init__(self, dim: int, num_heads: int, attn_type: str = 'mala', *,
                 options: MAViTOptions = DEFAULT_OPTIONS):
        super().__init__()
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.attn_type = check_attn_type(attn_type)
        self.options = options
        fast_paths, cached = options.fast_paths, options.fast_paths.cached_weights
        self.qkvo = QKVOProjection(dim, num_heads, attn_type == 'softmax', fast_paths)
        self.lepe = CachedCastConv2d(dim, dim, 5, padding=2, groups=dim, cached_weights=cached)
        self.proj = PointwiseConv2d(dim, dim, fast_paths)
        self.residual = nn.Sequential(
            CachedCastConv2d(dim, dim, 1, groups=num_heads, cached_weights=cached), nn.GELU(),
            CachedCastConv2d(dim, 9 * dim, 1, groups=num_heads, cached_weights=cached),
        ) if options.inline_residual and attn_type == 'inline' else None

    def forward(self, x: torch.Tensor, rope: RotaryTables) -> torch.Tensor:
        height, width = x.shape[2:]
        # channels_last (free inside the backbone): channel-contiguous head views.
        x = x.contiguous(memory_format=torch.channels_last)
        q, k, v, o = self.qkvo.project(x, rope)
        out = attention(q, k, self.split_heads(v), self.attn_type,
                        None if self.qkvo.rotates_qk else rope,     # (rotated by the projection)
                        self.options.kernel_function, impl=self.options.mala_impl)
        out = self.merge_heads(out, height, width)
        if self.residual is not None:
            out = out + self._local_residual(x, v)
        return self.proj(self.gated_lepe(out, v, o))

    def gated_lepe(self, out: torch.Tensor, v: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """``o * (out + lepe(v))``: one fused pass where the options let it run
        (:meth:`MAViTOptions.fuses`)."""
        if self.options.fuses('lepe_gate', v, out, o, weight=self.lepe.weight,
                              parameters=lambda: (self.lepe.bias,)):
            taps = self.lepe.depthwise_taps(self.options.fast_paths.tap_major_weights)
            return fused_gated_lepe(v, taps, self.lepe.bias, out, o)
        return o * (out + self.lepe(v))

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        """(B, n * C, H, W) -> (B, n * heads, N, d): :func:`.layers.split_heads`."""
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
        extra = (f', kernel_function={self.options.kernel_function}'
                 if self.attn_type in LINEAR_ATTN_TYPES else '')
        return f'attn_type={self.attn_type}, num_heads={self.num_heads}{extra}'


class ConvFFN(nn.Module):
    """1x1 conv up, GELU, residual 3x3 depthwise conv (``h + dwconv(h)``), 1x1 conv down."""

    def __init__(self, dim: int, hidden_dim: int, *, options: MAViTOptions = DEFAULT_OPTIONS):
        super().__init__()
        self.options = options
        # Registration order gives the published state-dict order.
        self.fc1 = PointwiseConv2d(dim, hidden_dim, options.fast_paths)
        self.act = nn.GELU()
        self.fc2 = PointwiseConv2d(hidden_dim, dim, options.fast_paths)
        self.dwconv = DepthwiseResidualConv(hidden_dim, 3, options.fast_paths)   # h + dwconv(h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.middle(self.fc1(x)))

    def middle(self, h: torch.Tensor) -> torch.Tensor:
        """``GELU(h) + dwconv(GELU(h))``: one fused pass where the options let
        it run (:meth:`MAViTOptions.fuses`)."""
        if self.options.fuses('ffn_middle', h, weight=self.dwconv.weight,
                              parameters=lambda: (self.dwconv.bias,)):
            taps = self.dwconv.depthwise_taps(self.options.fast_paths.tap_major_weights)
            return fused_ffn_middle(h, taps, self.dwconv.bias)
        return self.dwconv(self.act(h))


def _pretrained_entry(init_cfg) -> dict | None:
    """The ``type='Pretrained'`` entry of an ``init_cfg`` (a dict or a list of
    them), checked: at most one, with a ``checkpoint``."""
    entries = init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]
    found = [cfg for cfg in entries if cfg is not None and cfg.get('type') == 'Pretrained']
    if len(found) > 1:
        raise ValueError(f'init_cfg names {len(found)} Pretrained checkpoints; give one')
    if found and not found[0].get('checkpoint'):
        raise ValueError("init_cfg=dict(type='Pretrained') needs a checkpoint (a path or URL)")
    return found[0] if found else None


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
        out_indices: Stages whose (normed) outputs are returned. Stages after
            the last of them do not run: their weights stay (published
            checkpoints load strictly) but take no gradient, so that none
            goes unused under DDP.
        attn_types: Per stage, one of ``mavit_mm.ops.ATTN_TYPES`` (published:
            ``'mala'`` in stages 1-2, ``'softmax'`` in 3-4; formulas in
            :mod:`mavit_mm.ops.attention_variants`), each with the published keys.
        kernel_function, inline_residual, mala_impl, depthwise_impl, fast_paths:
            The options every block reads, e.g. ``mala_impl='torch'`` or
            ``fast_paths=dict(cached_weights=False)``: what each does is in
            :class:`~mavit_mm.models.options.MAViTOptions`.
        norm_cfg: Norm of the stem and downsampling layers (``BN``/``SyncBN``).
        frozen_stages: Freeze the stem (0) and stages ``< frozen_stages``; -1: none, 4: all.
        norm_eval: Keep the batch norms in eval mode while training.
        with_cp: Gradient checkpointing of every block.
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
            if not isinstance(pretrained, str):
                raise TypeError(f'pretrained must be a checkpoint path or URL, got '
                                f'{type(pretrained).__name__}')
            if init_cfg is not None:
                raise ValueError('give the checkpoint as pretrained or init_cfg, not both')
            warnings.warn('MAViT: pretrained is deprecated, use init_cfg=dict('
                          "type='Pretrained', checkpoint=...)", DeprecationWarning, stacklevel=2)
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg=init_cfg)
        _pretrained_entry(self.init_cfg)     # checked when built, read when initialised
        settings = stage_settings(
            arch, embed_dims=embed_dims, depths=depths, num_heads=num_heads,
            mlp_ratios=mlp_ratios, drop_path_rate=drop_path_rate, layerscales=layerscales,
            layer_init_values=layer_init_values, attn_types=attn_types)
        for name, value in settings.items():      # self.embed_dims, self.depths, ...
            setattr(self, name, value)
        if isinstance(out_indices, (int, str)) or not out_indices:
            raise TypeError(f'out_indices must be a non-empty sequence of stage indices, '
                            f'e.g. (0, 1, 2, 3), got {out_indices!r}')
        self.out_indices = tuple(sorted({whole_number(f'out_indices[{i}]', index, 0)
                                         for i, index in enumerate(out_indices)}))
        self.options = MAViTOptions(kernel_function=kernel_function,
                                    inline_residual=inline_residual, mala_impl=mala_impl,
                                    depthwise_impl=depthwise_impl, fast_paths=fast_paths)
        self.options.check_stages(self.attn_types)
        if not all(0 <= index < NUM_STAGES for index in self.out_indices):
            raise ValueError(f'out_indices {self.out_indices} must lie in [0, {NUM_STAGES - 1}]')
        self.in_channels = whole_number('in_channels', in_channels, 1)
        try:
            self.frozen_stages = whole_number('frozen_stages', frozen_stages, -1)
            known = self.frozen_stages <= NUM_STAGES
        except ValueError:
            known = False
        if not known:
            raise ValueError(f'frozen_stages must lie in [-1, {NUM_STAGES}] (-1: none, 0: the '
                             f'stem, k: the stem and stages 1-k), got {frozen_stages!r}')
        self.norm_eval = norm_eval

        options = self.options
        self.patch_embed = ConvStem(self.in_channels, self.embed_dims[0], norm_cfg, options=options)
        drop_paths = torch.linspace(0, self.drop_path_rate, sum(self.depths), device='cpu').tolist()
        self.layers = nn.ModuleList()
        for i in range(NUM_STAGES):
            first = sum(self.depths[:i])
            self.layers.append(MAViTStage(
                dim=self.embed_dims[i],
                out_dim=self.embed_dims[i + 1] if i + 1 < NUM_STAGES else None,
                depth=self.depths[i], num_heads=self.num_heads[i],
                mlp_ratio=self.mlp_ratios[i],
                drop_paths=drop_paths[first:first + self.depths[i]],
                layerscale=self.layerscales[i], layer_init_value=self.layer_init_values[i],
                attn_type=self.attn_types[i], norm_cfg=norm_cfg, with_cp=with_cp,
                options=options))
        # Keyed by stage index ('extra_norms.2.norm.weight' as published), and
        # only for returned stages so no parameter goes unused under DDP.
        self.extra_norms = nn.ModuleDict(
            {str(i): LayerNorm2d(self.embed_dims[i], cached_weights=options.fast_paths.cached_weights)
             for i in self.out_indices})
        self._freeze_stages()
        for module in self._unused_modules():
            module.requires_grad_(False)

    def _unused_modules(self) -> list[nn.Module]:
        """What no returned output depends on: the downsampling after the
        last returned stage, and the stages after it."""
        last = self.out_indices[-1]
        downsample = self.layers[last].downsample
        unused = [downsample] if downsample is not None else []
        return unused + list(self.layers[last + 1:])

    # -- mmdet backbone conventions -------------------------------------------
    def _freeze_stages(self) -> None:
        frozen = [self.patch_embed] if self.frozen_stages >= 0 else []
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
        # A runner sets the mode after a swap of the weights (clear_derived_weights).
        self.clear_derived_weights()
        self._freeze_stages()
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, _BatchNorm):
                    module.eval()
        return self

    def clear_derived_weights(self) -> None:
        """Start the caches of derived weights (half copies, folded kernels)
        afresh. Edits through ``param.data`` (mmengine's EMAHook swaps its
        averaged weights so) leave no trace in the version counters the caches
        key on: after one, call this (or set the mode: ``train`` / ``eval``)."""
        for module in self.modules():
            if isinstance(getattr(module, 'derived', None), DerivedWeights):
                module.derived.clear()

    def init_weights(self) -> None:
        """The published initialisation, then ``init_cfg``'s: mmengine's
        initialisers, and a ``Pretrained`` checkpoint (alone or in a list)
        loaded last, through MAViT's loader (:mod:`.checkpoint`)."""
        if self._is_init:
            super().init_weights()      # mmengine's warning: initialised already, nothing done
            return
        init_cfg = self.init_cfg
        pretrained = _pretrained_entry(init_cfg)
        entries = list(init_cfg) if isinstance(init_cfg, (list, tuple)) else [init_cfg]
        others = [cfg for cfg in entries if cfg is not None and cfg is not pretrained]
        # mmengine's BaseModule.init_weights applies self.init_cfg: the entries
        # it has initialisers for, without the checkpoint. The published
        # initialisation runs before a checkpoint too: what it lacks (an
        # ablation's InLine residual in a MALA checkpoint) starts as published.
        self.init_cfg = others if isinstance(init_cfg, (list, tuple)) else (others or [None])[0]
        try:
            self._published_init()
            super().init_weights()
        finally:
            self.init_cfg = init_cfg
        if pretrained is not None:
            from .checkpoint import load_pretrained_backbone
            self._is_init = False       # not until the checkpoint has loaded: a retry loads it
            load_pretrained_backbone(self, pretrained['checkpoint'],
                                     prefix=pretrained.get('prefix'),
                                     logger=MMLogger.get_current_instance())
            self._is_init = True

    def _published_init(self) -> None:
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (nn.LayerNorm, _BatchNorm)):
                if module.weight is not None:
                    nn.init.ones_(module.weight)
                    nn.init.zeros_(module.bias)

    # -- forward ------------------------------------------------------------
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if x.dim() != 4:
            raise ValueError(f'MAViT expects a 4-D (N, C, H, W) input, got shape '
                             f'{tuple(x.shape)}')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'MAViT expects {self.in_channels} input channels, got '
                             f'{x.shape[1]} (input shape {tuple(x.shape)})')
        autocast = autocast_dtype(x.device.type)
        self._check_input_dtype(x, autocast)
        # channels_last inside (docs/architecture.md); contiguous NCHW out, one copy
        # per output, as mmcv's C++/CUDA ops (RoIAlign) read raw memory as NCHW.
        # Under autocast the stem's cast of an fp32 image joins the layout copy.
        compute_dtype = autocast if x.dtype == torch.float32 else None
        if not torch.jit.is_tracing() and x.shape[0] == 0:   # (a trace: no branch on the batch)
            return self._empty_outputs(x, compute_dtype or x.dtype)
        x = self.patch_embed(x.to(dtype=compute_dtype or x.dtype,
                                  memory_format=torch.channels_last))
        outs: list[torch.Tensor] = []
        last = self.out_indices[-1]       # no later stage runs (_unused_modules)
        for i, stage in enumerate(self.layers):
            out, x = stage(x, downsample=i < last)
            if i in self.out_indices:
                outs.append(self.extra_norms[str(i)](out).contiguous())
            if i == last:
                break
        return tuple(outs)

    def _check_input_dtype(self, x: torch.Tensor, autocast: torch.dtype | None) -> None:
        if not x.is_floating_point():
            raise TypeError(f'MAViT expects a floating-point image (normalised, as the data '
                            f'preprocessor gives it), got {x.dtype}')
        weight_dtype = self.patch_embed.proj[0].weight.dtype
        if autocast is None:
            if x.dtype != weight_dtype:
                raise TypeError(f'MAViT got a {x.dtype} input but its weights are '
                                f'{weight_dtype}: cast the input or the model, or run under '
                                f'torch.autocast')
        # Autocast casts fp32 and half tensors to its dtype, never float64; what
        # it leaves alone must already be in it.
        elif weight_dtype not in (torch.float32, autocast) or x.dtype == torch.float64:
            raise TypeError(f'under torch.autocast to {autocast}, MAViT takes torch.float32 or '
                            f'{autocast} weights and a torch.float32, torch.float16 or '
                            f'torch.bfloat16 input; got {weight_dtype} weights and a {x.dtype} '
                            f'input')

    def _empty_outputs(self, x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """An empty batch's outputs: the maps a batch of images of this size
        gets, with no image (as mmdet's ResNet gives; the blocks' reshapes
        cannot take a batch of 0). Every stride-2 conv halves a side, rounding
        up: two in the stem, one before each later stage. With gradients they
        are in the graph as a batch's would be: a backward gives the input and
        every trainable weight a zero gradient (DDP needs one from every
        process)."""
        height, width = x.shape[2:]
        outs = []
        for i in range(NUM_STAGES):
            for _ in range(2 if i == 0 else 1):
                height, width = -(-height // 2), -(-width // 2)
            if i in self.out_indices:
                outs.append(x.new_empty(0, self.embed_dims[i], height, width, dtype=dtype))
        if torch.is_grad_enabled():
            sources = [t for t in (x, *self.parameters()) if t.requires_grad]
            if sources:
                zero = sum(t.flatten()[:0].sum() for t in sources)   # exactly 0, in the graph
                outs = [out + zero for out in outs]
        return tuple(outs)
