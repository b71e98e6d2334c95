"""The op census of one bf16 eager backbone forward, MAViT-T against Swin-T,
counted without a clock by the rule in ``devtools/op_census.py``
(its module docstring).

Each backbone (``census_backbones``: MAViT-T with the fused MALA op, which
counts as one op as one launch does on CUDA; mmseg's Swin-T) runs two forwards under ``torch.autocast('cpu', bf16)``
and ``no_grad``, each in its own autocast context, at one input size (default
128x256, batch 1): the first also fills the caches later ones reuse (RoPE
tables, folded depthwise kernels); the second, ``steady``, is the rule's
census. Writes JSON: per backbone and forward, the counts (non-view aten ops,
weight casts, activation casts, mixed-layout and mixed-dtype elementwise ops,
bytes read and written), and for the steady forward which ops and operands
each category counts, and the ops by name. ``tests/test_models/test_op_census.py``
holds the contract; this records the numbers. The fused op is dispatched
through Triton's CPU interpreter path but launches no kernel
(``fused_launches_skipped``): a census reads no values, and its counts are
the same.

Example:
  python benchmarks/op_census.py --out benchmarks/results/op-census-cpu-2026-11-26.json
  python benchmarks/op_census.py --size 512 2048   # bytes moved at the GPU's size
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault('TRITON_INTERPRET', '1')   # before triton is imported

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from devtools.op_census import CENSUS_SIZE  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', type=int, nargs=2, default=CENSUS_SIZE, metavar=('H', 'W'),
                        help='input size (default %(default)s)')
    parser.add_argument('--out', type=Path, help='JSON to write (default: print only)')
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    from devtools.checkout import git_commit
    from devtools.op_census import (
        CENSUS_BACKBONES,
        census_backbones,
        first_and_steady,
        fused_launches_skipped,
    )
    torch.set_num_threads(1)
    image = torch.randn(1, 3, *args.size, generator=torch.Generator().manual_seed(0))
    results = {}
    for name, model in census_backbones().items():
        with fused_launches_skipped():
            first, steady = first_and_steady(model, image)
        results[name] = dict(first=first.summary(), steady=dict(steady.summary(),
                                                                **steady.details()))
        for forward, census in (('first', first), ('steady', steady)):
            counts = census.summary()
            print(f"{name:8} {forward:6}: {counts['non_view_ops']} ops, "
                  f"{counts['weight_casts']} weight casts, "
                  f"{counts['activation_casts']} activation casts, "
                  f"{counts['mixed_layout_elementwise']} mixed-layout, "
                  f"{counts['mixed_dtype_elementwise']} mixed-dtype, "
                  f"{counts['bytes_moved'] / 1e6:.1f} MB moved")
    mavit, swin = (results[name]['steady'] for name in ('MAViT-T', 'Swin-T'))
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    report = dict(benchmark='op_census', input=[1, 3, *args.size], autocast='cpu bf16',
                  rule='devtools/op_census.py (module docstring)',
                  backbones=CENSUS_BACKBONES,
                  steady_ratios=dict(
                      non_view_ops=round(mavit['non_view_ops'] / swin['non_view_ops'], 4),
                      bytes_moved=round(mavit['bytes_moved'] / swin['bytes_moved'], 4)),
                  torch=torch.__version__, commit=git_commit(),
                  date=utc_timestamp(), results=results)
    print(f"MAViT-T / Swin-T, steady: {report['steady_ratios']}")
    if args.out:
        write_json(args.out, report)
        print(f'wrote {args.out}')
    return report


if __name__ == '__main__':
    main()
