"""Convert a published MAViT checkpoint for our configs: a backbone (--arch) or
a whole detector / segmentor (--config).

--arch: the published classification (ImageNet) or dense-prediction
checkpoints, or a whole mmdet/mmseg checkpoint: the weights are unwrapped
('model', 'state_dict', 'module.' / 'backbone.' prefixes), checked tensor by
tensor against a MAViT of the given size, and saved as
``{'state_dict': ..., 'meta': ...}``, ready for
``init_cfg=dict(type='Pretrained', checkpoint=DST)``.

--config: a whole-model checkpoint of mmdet 2.x / mmseg 0.x (or 3.x / 1.x),
heads included, for that config (mmdet 3 / mmseg 1): unwrapped, checked
against the config's model (every key, every shape: anything else is an error
naming it), training state dropped, and the class names moved from the old
meta['CLASSES'] / ['PALETTE'] to meta['dataset_meta'], where mmdet's
DetInferencer, mmseg's MMSegInferencer and tools/demo.py read them (from the
config's test dataset when the checkpoint has none). The result loads with
load_state_dict(strict=True) into the config's model.
mavit_mm/tooling/legacy_checkpoints.py says what differs between the versions.

Examples:
  python tools/model_converters/convert_checkpoint.py mala_t_in1k.pth pretrained/mavit_t_in1k.pth --arch t
  python tools/model_converters/convert_checkpoint.py work_dirs/x/epoch_12.pth backbone.pth --arch t --strict
  python tools/model_converters/convert_checkpoint.py mask_rcnn_mavit_t_mmdet2.pth mask-rcnn_mavit-t.pth \\
      --config configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


EMA_KEYS = ('model_ema', 'state_dict_ema')


def parse_args(argv=None):
    from mavit_mm.tooling.cli import ConfigOptions  # (mavit_mm where it is used, as below)

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='published or trained checkpoint')
    parser.add_argument('dst', help='where to write the converted checkpoint')
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument('--arch', help='MAViT size: t|s|b|l (a backbone checkpoint)')
    target.add_argument('--config', help='detection / segmentation config: convert the whole '
                                         'model, heads included, for it')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions, default={},
                        help='override entries of --config, key=value (mmengine syntax)')
    parser.add_argument('--state-dict-key', metavar='KEY', default=None,
                        help="with --arch: the container to convert, e.g. 'model_ema' (the EMA "
                             "weights the published classification code saves beside 'model'; "
                             "default: 'state_dict', 'model', 'module', else the top level)")
    parser.add_argument('--prefix', default=None,
                        help="keep only keys under this prefix (default: 'backbone.' when present)")
    parser.add_argument('--strict', action='store_true',
                        help='fail unless every backbone tensor is present (a dense-prediction '
                             'checkpoint); by default extra_norms may be missing (classification)')
    args = parser.parse_args(argv)
    if args.config and (args.prefix is not None or args.strict or args.state_dict_key):
        parser.error('--prefix, --strict and --state-dict-key go with --arch (--config converts '
                     'the whole model, every key checked)')
    if args.arch and args.cfg_options:
        parser.error('--cfg-options goes with --config')
    if Path(args.dst).is_dir():
        parser.error(f'{args.dst} is a folder: give the file to write')
    return args


def convert(src: str, dst: str, arch: str, prefix=None, strict: bool = False,
            state_dict_key: str | None = None) -> dict:
    import torch

    from mavit_mm.models import MAViT
    from mavit_mm.models.checkpoint import backbone_state_dict, extract_state_dict, read_checkpoint

    if not Path(src).is_file():
        raise FileNotFoundError(f'checkpoint not found: {src}')
    # Read whole, not mapped: the output may overwrite the input.
    checkpoint = read_checkpoint(src, mmap=False)
    state_dict = backbone_state_dict(extract_state_dict(checkpoint, state_dict_key), prefix)
    # EMA weights the file holds beside the converted ones (the published code's 'model_ema').
    ema_copies = [key for key in EMA_KEYS if key != state_dict_key
                  and isinstance(checkpoint, dict) and isinstance(checkpoint.get(key), dict)]
    with torch.device('meta'):      # keys and shapes: no data needed
        expected = MAViT(arch=arch).state_dict()
    kept = {k: v for k, v in state_dict.items() if k in expected}
    dropped = sorted(set(state_dict) - set(kept))
    wrong_shape = [f'{k}: {tuple(v.shape)} != {tuple(expected[k].shape)}'
                   for k, v in kept.items() if v.shape != expected[k].shape]
    missing = sorted(set(expected) - set(kept))
    allowed_missing = [] if strict else [k for k in missing if k.startswith('extra_norms.')]
    problems = wrong_shape + [f'missing {k}' for k in missing if k not in allowed_missing]
    if problems:
        raise ValueError(f'{src} does not fit MAViT-{arch.upper()}: ' + '; '.join(problems[:10]))
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    torch.save({'state_dict': kept, 'meta': dict(source=str(src), arch=arch)}, dst)
    return dict(kept=len(kept), dropped=dropped, missing=missing, not_converted=ema_copies)


def convert_full(src: str, dst: str, config: str, cfg_options=None) -> dict:
    """A whole mmdet 2.x / mmseg 0.x (or 3.x / 1.x) checkpoint for ``config``."""
    import torch

    from mavit_mm.models.checkpoint import extract_state_dict, read_checkpoint
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.legacy_checkpoints import convert_whole_model, head_num_classes
    from mavit_mm.tooling.model_builder import dataset_meta_from_config, meta_state_dict

    if not Path(src).is_file():
        raise FileNotFoundError(f'checkpoint not found: {src}')
    cfg = load_config(config, cfg_options)
    expected = meta_state_dict(cfg)
    checkpoint = read_checkpoint(src, mmap=False)     # whole: the output may overwrite it
    state_dict, meta, report = convert_whole_model(
        checkpoint, extract_state_dict(checkpoint), expected, scope=cfg.default_scope,
        num_classes=head_num_classes(cfg.model), config_meta=dataset_meta_from_config(cfg),
        source=str(src))
    meta['config'] = str(config)
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    torch.save({'state_dict': state_dict, 'meta': meta}, dst)
    return report


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.config:
        report = convert_full(args.src, args.dst, args.config, args.cfg_options)
        print(f'wrote {args.dst}: {report["tensors"]} tensors (the whole model) of a '
              f'{report["layout"]} checkpoint, loading with strict=True into {args.config}')
        classes = report['classes']
        if classes:
            shown = ', '.join(classes[:6]) + (' ...' if len(classes) > 6 else '')
            print(f'class names ({len(classes)}, from the {report["classes_from"]}): {shown}')
        else:
            print('no class names in the checkpoint or the config')
        if report['dropped']:
            print(f'dropped: {", ".join(report["dropped"])} (training state)')
        return report
    report = convert(args.src, args.dst, args.arch, args.prefix, args.strict, args.state_dict_key)
    print(f'wrote {args.dst}: {report["kept"]} backbone tensors')
    if report['dropped']:
        print(f'dropped {len(report["dropped"])} non-backbone tensors '
              f'(e.g. {", ".join(report["dropped"][:4])})')
    if report['missing']:
        print(f'not in the source (initialised by the model): {", ".join(report["missing"])}')
    for key in report['not_converted']:
        print(f'also in the source, not converted: {key!r} (--state-dict-key {key} converts it)')
    return report


if __name__ == '__main__':
    from mavit_mm.tooling.cli import run_tool
    run_tool(main, 'convert_checkpoint.py')
