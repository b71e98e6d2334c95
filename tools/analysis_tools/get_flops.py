"""Parameters and complexity of a MAViT model (or of a Swin baseline), in both
counting conventions.

The paper's FLOPs columns match a counter of convolutions and linear layers
only ("layer MACs"); the attention products (softmax q k^T / a v, MALA's k^T v
and q kv) are reported separately ("attention MACs"). All figures are
multiply-accumulates, as mmdet/mmseg model zoos report them ("GFLOPs").

Examples:
  python tools/analysis_tools/get_flops.py configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py --shape 800 1280
  python tools/analysis_tools/get_flops.py configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py --shape 512 2048
  python tools/analysis_tools/get_flops.py --arch t --shape 224 224          # backbone alone, no config
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from mavit_mm.tooling.cli import ConfigOptions, image_side  # noqa: E402
from mavit_mm.tooling.complexity import count_complexity  # noqa: E402
from mavit_mm.tooling.results_file import write_json  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', nargs='?',
                        help='model config; omit and give --arch to count the backbone alone')
    parser.add_argument('--arch', help='backbone size t|s|b|l when no config is given')
    parser.add_argument('--shape', type=image_side, nargs='+', metavar='SIDE',
                        help='input height and width, or one side for a square (default: '
                             '800 1280 for a detector or a backbone alone, the detection '
                             'convention; 512 2048 for a segmentor, as the segmentation papers '
                             'count)')
    parser.add_argument('--backbone-only', action='store_true',
                        help='count only the backbone of the config')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions, default={},
                        help='override config entries, key=value (mmengine syntax)')
    parser.add_argument('--json', metavar='FILE', help='also write the figures as JSON here')
    args = parser.parse_args(argv)
    if (args.config is None) == (args.arch is None):
        parser.error('give a config or --arch (one of them)')
    if args.shape is not None:
        if len(args.shape) > 2:
            parser.error(f'--shape takes HEIGHT WIDTH or one side, got {len(args.shape)} values')
        args.shape = args.shape * (3 - len(args.shape))     # one side: a square
    return args


# The default input of each scope: the sizes the papers count at.
DEFAULT_SHAPES = {'mmseg': [512, 2048]}
DETECTION_SHAPE = [800, 1280]


def measure(args) -> dict:
    """The figures, counted on the meta device where the model's forward reads
    no value (a backbone, a segmentor, RetinaNet's heads): shapes alone, in a
    moment at any size; else (a two-stage detector's proposals, a constructor
    that reads a value, as Swin's) on the CPU. Both count the same modules."""
    try:
        return count_on(args, 'meta')
    except (RuntimeError, NotImplementedError):     # a value read on the meta device
        return count_on(args, 'cpu')


def count_on(args, device: str) -> dict:
    import torch

    if args.config is None:
        from mavit_mm.models import MAViT
        height, width = args.shape or DETECTION_SHAPE
        with torch.device(device):
            model = MAViT(arch=args.arch).eval()
        backbone, full = model, None
        scope = 'backbone'
    else:
        from mavit_mm.tooling.config import load_config
        from mavit_mm.tooling.model_builder import build_model, dummy_forward_inputs
        cfg = load_config(args.config, args.cfg_options)
        height, width = args.shape or DEFAULT_SHAPES.get(cfg.default_scope, DETECTION_SHAPE)
        with torch.device(device):
            model = build_model(cfg).eval()
        backbone = model.backbone
        full = None if args.backbone_only else (
            model, dummy_forward_inputs(cfg, height, width, device=device))
        scope = cfg.default_scope
    image = torch.randn(1, 3, height, width, device=device)
    figures = dict(input_shape=[height, width], scope=scope, counted_on=device,
                   backbone=count_complexity(backbone, lambda: backbone(image)).as_dict())
    if full is not None:
        model, (inputs, samples) = full
        figures['model'] = count_complexity(
            model, lambda: model(inputs, samples, mode='tensor')).as_dict()
    return figures


def main(argv=None) -> dict:
    args = parse_args(argv)
    figures = measure(args)
    print(f'input {figures["input_shape"][0]}x{figures["input_shape"][1]} '
          f'({args.config or "MAViT-" + args.arch.upper()})')
    print(f'{"part":<10}{"params (M)":>12}{"layer GMACs":>14}{"attention GMACs":>18}'
          f'{"total GMACs":>14}')
    for part in ('backbone', 'model'):
        if part in figures:
            f = figures[part]
            print(f'{part:<10}{f["params"] / 1e6:>12.2f}{f["layer_macs"] / 1e9:>14.1f}'
                  f'{f["attention_macs"] / 1e9:>18.1f}{f["total_macs"] / 1e9:>14.1f}')
    print('layer GMACs: convolutions and linear layers (the paper\'s convention); '
          'attention GMACs: the attention products those counters leave out '
          '(MAViT\'s, and the windows of mmdet\'s and mmseg\'s Swin).')
    if args.json:
        write_json(args.json, figures)
    return figures


if __name__ == '__main__':
    from mavit_mm.tooling.cli import run_tool
    run_tool(main, 'get_flops.py')
