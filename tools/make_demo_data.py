#!/usr/bin/env python
"""Generate the bundled synthetic datasets (COCO- and ADE20K-format).

Examples::

    python tools/make_demo_data.py                       # both, into data/demo/
    python tools/make_demo_data.py --kind coco --out data/demo --num-train 64 --seed 1
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO_ROOT))

from mavit_mm.data.synthetic import (  # noqa: E402
    DEMO_DATA_ROOT,
    DEMO_DATA_SETTINGS,
    SHAPE_CLASSES,
    make_ade20k_dataset,
    make_coco_dataset,
)

DEFAULT_OUT = REPO_ROOT / DEMO_DATA_ROOT
DEFAULTS = DEMO_DATA_SETTINGS


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Write small synthetic datasets of coloured shapes on textured '
                    'backgrounds: <out>/coco (COCO instance segmentation: {train,val}/*.jpg, '
                    'annotations/instances_{train,val}.json with polygon masks) and '
                    '<out>/ade20k (ADE20K layout: images/{training,validation}/*.jpg, '
                    'annotations/{training,validation}/*.png; 0 = unlabelled, use '
                    'reduce_zero_label=True). The same arguments give byte-identical files.')
    parser.add_argument('--out', type=Path, default=DEFAULT_OUT,
                        help=f'parent folder of the datasets (default: {DEFAULT_OUT})')
    parser.add_argument('--kind', choices=('coco', 'ade20k', 'both'), default='both',
                        help='which dataset(s) to write (default: both)')
    parser.add_argument('--num-train', type=int, default=DEFAULTS['num_train'],
                        help=f"training images per dataset (default: {DEFAULTS['num_train']})")
    parser.add_argument('--num-val', type=int, default=DEFAULTS['num_val'],
                        help=f"validation images per dataset (default: {DEFAULTS['num_val']})")
    parser.add_argument('--image-size', type=int, nargs='+',
                        default=list(DEFAULTS['image_size']), metavar='PX',
                        help='image size: one value for square images, or HEIGHT WIDTH '
                             '(default: %(default)s)')
    parser.add_argument('--num-classes', type=int, default=DEFAULTS['num_classes'],
                        help=f'shape classes, 1..{len(SHAPE_CLASSES)} '
                             f'({", ".join(n for n, _ in SHAPE_CLASSES)}; default: all)')
    parser.add_argument('--max-objects', type=int, default=DEFAULTS['max_objects'],
                        help=f"most shapes per image (default: {DEFAULTS['max_objects']})")
    parser.add_argument('--seed', type=int, default=DEFAULTS['seed'],
                        help=f"random seed (default: {DEFAULTS['seed']})")
    args = parser.parse_args(argv)
    if len(args.image_size) not in (1, 2):
        parser.error('--image-size takes one value (square) or two (HEIGHT WIDTH)')
    for name in ('num_train', 'num_val', 'max_objects'):
        if getattr(args, name) < 1:
            parser.error(f'--{name.replace("_", "-")} must be at least 1')
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    size = args.image_size * 2 if len(args.image_size) == 1 else args.image_size
    common = dict(num_train=args.num_train, num_val=args.num_val, image_size=size,
                  num_classes=args.num_classes, max_objects=args.max_objects, seed=args.seed)
    written = {}
    makers = {'coco': make_coco_dataset, 'ade20k': make_ade20k_dataset}
    for kind in (('coco', 'ade20k') if args.kind == 'both' else (args.kind,)):
        start = time.time()
        root = args.out / kind
        written[kind] = makers[kind](root, **common)
        print(f'{kind}: {args.num_train} train + {args.num_val} val images of '
              f'{size[0]}x{size[1]} px in {root} ({time.time() - start:.1f}s)')
    return written


if __name__ == '__main__':
    from mavit_mm.tooling.cli import run_tool
    run_tool(main, 'make_demo_data.py')
