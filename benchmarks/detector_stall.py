#!/usr/bin/env python
"""Diagnose the from-scratch Mask R-CNN stall (issue 8): train a demo detector
for a few iterations while recording, every ``--interval`` iterations, the
losses, the R-CNN accuracy, and the size of the backbone, FPN-lateral and FPN
outputs (max |x|, std, and the share of their energy in the spatial mean).

    python benchmarks/detector_stall.py --name mavit --iters 100
    python benchmarks/detector_stall.py --name resnet18 --backbone resnet18
    python benchmarks/detector_stall.py --name resnet18-ln --backbone resnet18-ln
    python benchmarks/detector_stall.py --name mavit-no-out-norm --backbone mavit-no-out-norm
    python benchmarks/detector_stall.py --name swin --backbone swin
    python benchmarks/detector_stall.py --name frozen --cfg-options model.backbone.frozen_stages=4
    python benchmarks/detector_stall.py --name mavit-cpe-frozen --param-lr-mult .pos. 0

Each run writes ``<out-dir>/<name>.json`` (one row per recorded iteration).
The backbone variants exist only for this experiment: ``resnet18`` is mmdet's
ResNet-18 from scratch, ``swin`` mmdet's SwinTransformer with MAViT-T's widths
(its outputs are LayerNorm'd too), ``resnet18-ln`` adds a LayerNorm over the channels of
each output (what MAViT's ``extra_norms`` do), ``mavit-no-out-norm`` returns
MAViT's stage outputs without ``extra_norms``, ``mavit-ln-stem`` has LayerNorms
where MAViT's stem and downsampling layers have BatchNorms, ``swin-convstem`` is
the Swin variant with MAViT's ConvStem in place of its 4x4 patch embedding,
``mavit-patch-merging`` has Swin's patch merging in place of MAViT's 3x3
stride-2 conv + BN downsampling, ``mavit-default-init`` keeps PyTorch's default
conv init, ``mavit-no-gate`` pins the gate ``o`` of the token mixers to 1,
``mavit-no-attn`` drops the attention term of the token mixers,
``mavit-dw-default-init`` / ``mavit-lepe-avg-init`` start the depthwise convs
from PyTorch's init / the LePE convs as mean filters, and
``swin-convstem-convdown`` is the ConvStem Swin with MAViT's conv + BN
downsampling; ``--zero`` silences block parts. Needs the demo data
(``python tools/make_demo_data.py``). Runs on a CPU, about 1 s per iteration.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
from mmengine.config import DictAction  # noqa: E402
from mmengine.hooks import Hook  # noqa: E402
from mmengine.runner import Runner  # noqa: E402
from torch import nn  # noqa: E402

import mavit_mm  # noqa: E402,F401
from mavit_mm.tooling import runner_setup  # noqa: E402
from mavit_mm.tooling.config import load_config  # noqa: E402
from mavit_mm.models.mavit import Downsample, GatedAttention, LayerNorm2d, MAViT, MAViTBlock  # noqa: E402

RESNET18 = dict(type='ResNet', depth=18, out_indices=(0, 1, 2, 3),
                norm_cfg=dict(type='BN'), norm_eval=False, init_cfg=None)
# mmdet's Swin with MAViT-T's widths (64/128/256/512) and depths; its outputs
# also pass through a LayerNorm each, like MAViT's extra_norms.
SWIN_T64 = dict(type='SwinTransformer', embed_dims=64, depths=(2, 2, 6, 2),
                num_heads=(2, 4, 8, 16), window_size=7, drop_path_rate=0.1,
                out_indices=(0, 1, 2, 3), init_cfg=None)


# --backbone NAME -> (base config or None for the demo config's MAViT, registered type)
BACKBONES = {
    'mavit': (None, 'MAViT'),
    'mavit-no-out-norm': (None, 'MAViTWithoutOutputNorm'),
    'mavit-ln-stem': (None, 'MAViTWithLayerNormStem'),
    'mavit-patch-merging': (None, 'MAViTWithPatchMerging'),
    'mavit-default-init': (None, 'MAViTWithDefaultConvInit'),
    'mavit-dw-default-init': (None, 'MAViTWithDefaultDepthwiseInit'),
    'mavit-lepe-avg-init': (None, 'MAViTWithAveragingLePE'),
    'mavit-no-gate': (None, 'MAViTWithoutGate'),
    'mavit-no-attn': (None, 'MAViTWithoutAttention'),
    'resnet18': (RESNET18, 'ResNet'),
    'resnet18-ln': (RESNET18, 'ResNetWithOutputLN'),
    'swin': (SWIN_T64, 'SwinTransformer'),
    'swin-convstem': (SWIN_T64, 'SwinWithConvStem'),
    'swin-convstem-convdown': (SWIN_T64, 'SwinWithConvStemAndConvDownsample'),
}

def register_variants():
    from mmdet.models.backbones import ResNet
    from mmdet.registry import MODELS

    @MODELS.register_module(force=True)
    class ResNetWithOutputLN(ResNet):
        """ResNet with a LayerNorm over channels on each output, as MAViT's extra_norms."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.out_norms = nn.ModuleList(LayerNorm2d(64 * 2 ** i) for i in self.out_indices)

        def forward(self, x):
            return tuple(norm(out) for norm, out in zip(self.out_norms, super().forward(x)))

    from mavit_mm.models.mavit import ConvStem
    from mmdet.models.backbones import SwinTransformer

    class ConvStemPatchEmbed(nn.Module):
        """MAViT's ConvStem (four 3x3 convs, BN, GELU; stride 4) in Swin's patch
        embedding slot, returning tokens and the map size as Swin expects."""

        def __init__(self, embed_dims: int):
            super().__init__()
            self.stem = ConvStem(3, embed_dims, dict(type='BN'))

        def forward(self, x):
            x = self.stem(x)
            return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])

    @MODELS.register_module(force=True)
    class SwinWithConvStem(SwinTransformer):
        """mmdet's Swin with MAViT's overlapping ConvStem instead of 4x4 patches."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.patch_embed = ConvStemPatchEmbed(kwargs['embed_dims'])

    class ConvDownsampleTokens(nn.Module):
        """MAViT's downsampling (3x3 stride-2 conv + BN) on Swin's tokens."""

        def __init__(self, in_channels: int, out_channels: int):
            super().__init__()
            self.down = Downsample(in_channels, out_channels, dict(type='BN'))

        def forward(self, x, hw_shape):
            x = x.transpose(1, 2).reshape(x.shape[0], -1, *hw_shape)
            x = self.down(x)
            return x.flatten(2).transpose(1, 2), (x.shape[2], x.shape[3])

    @MODELS.register_module(force=True)
    class SwinWithConvStemAndConvDownsample(SwinWithConvStem):
        """The ConvStem Swin whose patch merging is MAViT's conv + BN downsampling."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            for stage in self.stages:
                if stage.downsample is not None:
                    reduction = stage.downsample.reduction
                    stage.downsample = ConvDownsampleTokens(reduction.in_features // 4,
                                                            reduction.out_features)

    @MODELS.register_module(force=True)
    class MAViTWithPatchMerging(MAViT):
        """MAViT whose 3x3 stride-2 conv + BN downsampling is Swin's patch
        merging (2x2 patches, LayerNorm, then a linear map to the next width)."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            for stage in self.layers:
                if stage.downsample is not None:
                    conv = stage.downsample.reduction
                    stage.downsample = nn.Sequential(
                        nn.PixelUnshuffle(2), LayerNorm2d(4 * conv.in_channels),
                        nn.Conv2d(4 * conv.in_channels, conv.out_channels, 1, bias=False))

    @MODELS.register_module(force=True)
    class MAViTWithoutGate(MAViT):
        """MAViT whose token mixers have the gate pinned to 1:
        ``proj(attention + lepe)`` instead of ``proj(o * (attention + lepe))``."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            for module in self.modules():
                if isinstance(module, GatedAttention):
                    module.register_forward_pre_hook(_pin_gate_to_one)

    @MODELS.register_module(force=True)
    class MAViTWithoutAttention(MAViT):
        """MAViT whose token mixers drop the attention term:
        ``proj(o * lepe(v))``, a pure conv net with MAViT's other parts."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            for module in self.modules():
                if isinstance(module, MAViTBlock):
                    module.attn = GatedLePEOnly(module.attn)

    @MODELS.register_module(force=True)
    class MAViTWithDefaultConvInit(MAViT):
        """MAViT whose convs keep PyTorch's default (Kaiming-uniform) init instead
        of init_weights' trunc-normal(0.02); norms are reset as before."""

        def init_weights(self):
            for module in self.modules():
                if isinstance(module, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)):
                    nn.init.ones_(module.weight)
                    nn.init.zeros_(module.bias)

    @MODELS.register_module(force=True)
    class MAViTWithDefaultDepthwiseInit(MAViT):
        """MAViT whose depthwise convs (CPE, LePE, FFN) keep PyTorch's default
        init (uniform, bound 1/sqrt(k*k)) instead of trunc-normal(0.02): local
        mixing from the first step."""

        def init_weights(self):
            super().init_weights()
            for module in self.modules():
                if isinstance(module, nn.Conv2d) and module.groups == module.in_channels > 1:
                    module.reset_parameters()

    @MODELS.register_module(force=True)
    class MAViTWithAveragingLePE(MAViT):
        """MAViT whose LePE convs start as 5x5 mean filters (each token mixes in
        the average of its neighbourhood, as a window attention does at init)."""

        def init_weights(self):
            super().init_weights()
            for module in self.modules():
                if isinstance(module, GatedAttention):
                    nn.init.constant_(module.lepe.weight, 1.0 / module.lepe.weight[0].numel())

    @MODELS.register_module(force=True)
    class MAViTWithLayerNormStem(MAViT):
        """MAViT whose stem and downsampling BatchNorms are LayerNorms over channels
        (as Swin's patch embedding and merging are): tells BN and LN apart."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            for module in list(self.modules()):
                for name, child in module.named_children():
                    if isinstance(child, nn.modules.batchnorm._BatchNorm):
                        setattr(module, name, LayerNorm2d(child.num_features))

    @MODELS.register_module(force=True)
    class MAViTWithoutOutputNorm(MAViT):
        """MAViT returning its stage outputs before extra_norms."""

        def forward(self, x):
            x = self.patch_embed(x)
            outs = []
            for i, stage in enumerate(self.layers):
                out, x = stage(x)
                if i in self.out_indices:
                    outs.append(out)
            return tuple(outs)


class GatedLePEOnly(nn.Module):
    """A GatedAttention's own parameters, computing ``proj(o * lepe(v))``."""

    def __init__(self, attention: GatedAttention):
        super().__init__()
        self.inner = attention

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        _, _, v, o = self.inner.qkvo(x).chunk(4, dim=1)
        return self.inner.proj(o * self.inner.lepe(v))


# Block parts that --zero silences, by their module path inside a MAViTBlock.
ZEROABLE = {'cpe': 'pos', 'lepe': 'attn.lepe', 'ffn-dwconv': 'ffn.dwconv'}


def _zero_output(module, inputs, output):
    return torch.zeros_like(output)


def zero_block_parts(model: nn.Module, parts) -> int:
    count = 0
    for block in model.modules():
        if isinstance(block, MAViTBlock):
            for part in parts:
                block.get_submodule(ZEROABLE[part].replace('attn.', 'attn.inner.')
                                    if isinstance(block.attn, GatedLePEOnly)
                                    else ZEROABLE[part]).register_forward_hook(_zero_output)
                count += 1
    return count


def _pin_gate_to_one(attention: GatedAttention, inputs) -> None:
    # The gate o is the last quarter of qkvo's outputs: weight 0 and bias 1
    # make it exactly 1, whatever the optimiser did to them since the last step.
    gate = slice(3 * attention.dim, 4 * attention.dim)
    with torch.no_grad():
        attention.qkvo.weight[gate] = 0
        attention.qkvo.bias[gate] = 1


def tensor_stats(t: torch.Tensor) -> list:
    """[max |x|, std, share of the energy in the per-channel spatial mean]."""
    t = t.detach().float()
    mean_hw = t.mean((2, 3), keepdim=True)
    common = (mean_hw ** 2).sum() * t.shape[2] * t.shape[3] / (t ** 2).sum().clamp_min(1e-12)
    return [round(t.abs().max().item(), 3), round(t.std().item(), 4), round(common.item(), 3)]


class FeatureStatsHook(Hook):
    priority = 'LOW'

    def __init__(self, out_file: Path, interval: int):
        self.out_file, self.interval = out_file, interval
        self.rows, self.current = [], {}

    def before_train(self, runner) -> None:
        model = runner.model

        def record(name):
            def hook(module, inputs, output):
                if module.training:
                    outs = output if isinstance(output, (tuple, list)) else [output]
                    self.current[name] = [tensor_stats(o) for o in outs]
            return hook

        model.backbone.register_forward_hook(record('backbone'))
        model.neck.register_forward_hook(record('fpn'))
        for i, lateral in enumerate(model.neck.lateral_convs):
            lateral.register_forward_hook(record(f'fpn_lateral{i}'))

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        step = runner.iter + 1
        if step != 1 and step % self.interval:
            return
        row = dict(iter=step, **{k: round(float(v), 4) for k, v in (outputs or {}).items()},
                   **self.current)
        self.rows.append(row)
        runner.logger.info('stats ' + json.dumps(row))
        self.out_file.write_text(json.dumps(self.rows, indent=1))

    def after_val_epoch(self, runner, metrics=None) -> None:
        self.rows.append(dict(iter=runner.iter, val={k: float(v) for k, v in (metrics or {}).items()}))
        self.out_file.write_text(json.dumps(self.rows, indent=1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--config', default='configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py')
    parser.add_argument('--name', required=True, help='run name: <out-dir>/<name>.json')
    parser.add_argument('--backbone', default='mavit',
                        choices=sorted(BACKBONES))
    parser.add_argument('--zero', nargs='+', default=[], choices=sorted(ZEROABLE),
                        help='MAViT parts whose output is replaced by zeros in every block '
                             '(cpe: x + pos(x) becomes x; lepe; ffn-dwconv)')
    parser.add_argument('--iters', type=int, default=100)
    parser.add_argument('--interval', type=int, default=10)
    parser.add_argument('--evaluate', action='store_true', help='run validation at the end')
    parser.add_argument('--out-dir', type=Path, default=Path('work_dirs/detector_stall'))
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={})
    parser.add_argument('--param-lr-mult', nargs=2, action='append', default=[],
                        metavar=('NAME_PART', 'MULT'),
                        help='lr (and decay) multiplier for parameters whose name contains '
                             "NAME_PART, e.g. '.pos.' 0 freezes MAViT's CPE convs")
    args = parser.parse_args(argv)

    register_variants()
    cfg = load_config(args.config, args.cfg_options)
    out_indices = tuple(cfg.model.backbone.get('out_indices', (0, 1, 2, 3)))
    base, backbone_type = BACKBONES[args.backbone]
    if base is None:  # the config's MAViT, as a variant class
        cfg.model.backbone.type = backbone_type
    else:  # ResNet-18 and Swin have MAViT-T's widths: same stages, same neck
        cfg.model.backbone = dict(base, out_indices=out_indices, type=backbone_type)
    if args.param_lr_mult:
        paramwise = dict(cfg.optim_wrapper.get('paramwise_cfg', {}))
        custom = dict(paramwise.get('custom_keys', {}))
        for name_part, mult in args.param_lr_mult:
            custom[name_part] = dict(lr_mult=float(mult), decay_mult=float(mult))
        paramwise['custom_keys'] = custom
        cfg.optim_wrapper.paramwise_cfg = paramwise
    runner_setup.configure_amp(cfg, False)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    cfg.work_dir = str(args.out_dir / args.name)
    cfg.train_cfg.max_iters = args.iters
    cfg.train_cfg.val_interval = args.iters if args.evaluate else 10 ** 9
    for scheduler in cfg.param_scheduler:
        if scheduler.type == 'MultiStepLR':
            scheduler.end, scheduler.milestones = args.iters, [int(args.iters * 0.87)]
    cfg.default_hooks.checkpoint = dict(type='CheckpointHook', by_epoch=False, interval=10 ** 9)
    runner = Runner.from_cfg(cfg)
    if args.zero:
        count = zero_block_parts(runner.model.backbone, args.zero)
        runner.logger.info(f'zeroed {args.zero} in the backbone ({count} modules)')
    runner.register_hook(FeatureStatsHook(args.out_dir / f'{args.name}.json', args.interval))
    start = time.time()
    runner.train()
    print(f'{args.name}: {args.iters} iterations in {time.time() - start:.0f} s; '
          f'rows in {args.out_dir / (args.name + ".json")}')


if __name__ == '__main__':
    main()
