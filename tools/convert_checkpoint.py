"""Convert a published MAViT checkpoint into a backbone checkpoint for our configs.

Accepts the published classification (ImageNet) or dense-prediction checkpoints,
or a whole mmdet/mmseg checkpoint: the weights are unwrapped ('model',
'state_dict', 'module.' / 'backbone.' prefixes), checked tensor by tensor against
a MAViT of the given size, and saved as ``{'state_dict': ..., 'meta': ...}``,
ready for ``init_cfg=dict(type='Pretrained', checkpoint=DST)``.

Examples:
  python tools/convert_checkpoint.py mala_t_in1k.pth pretrained/mavit_t_in1k.pth --arch t
  python tools/convert_checkpoint.py work_dirs/x/epoch_12.pth backbone.pth --arch t --strict
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='published or trained checkpoint')
    parser.add_argument('dst', help='where to write the backbone checkpoint')
    parser.add_argument('--arch', required=True, help='MAViT size: t|s|b|l')
    parser.add_argument('--prefix', default=None,
                        help="keep only keys under this prefix (default: 'backbone.' when present)")
    parser.add_argument('--strict', action='store_true',
                        help='fail unless every backbone tensor is present (a dense-prediction '
                             'checkpoint); by default extra_norms may be missing (classification)')
    return parser.parse_args(argv)


def convert(src: str, dst: str, arch: str, prefix=None, strict: bool = False) -> dict:
    import torch
    from mmengine.runner.checkpoint import CheckpointLoader

    from mavit_mm.models import MAViT
    from mavit_mm.utils.checkpoint import backbone_state_dict, extract_state_dict

    if not Path(src).is_file():
        raise FileNotFoundError(f'checkpoint not found: {src}')
    state_dict = backbone_state_dict(
        extract_state_dict(CheckpointLoader.load_checkpoint(src, map_location='cpu')), prefix)
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
    return dict(kept=len(kept), dropped=dropped, missing=missing)


def main(argv=None) -> dict:
    args = parse_args(argv)
    report = convert(args.src, args.dst, args.arch, args.prefix, args.strict)
    print(f'wrote {args.dst}: {report["kept"]} backbone tensors')
    if report['dropped']:
        print(f'dropped {len(report["dropped"])} non-backbone tensors '
              f'(e.g. {", ".join(report["dropped"][:4])})')
    if report['missing']:
        print(f'not in the source (initialised by the model): {", ".join(report["missing"])}')
    return report


if __name__ == '__main__':
    main()
