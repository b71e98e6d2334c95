"""Ops and casts of one bf16 backbone forward, MAViT-T against Swin-T, counted
without a clock (``mavit_mm.tooling.op_census``).

Each backbone runs its forward twice under ``torch.autocast('cpu', bf16)`` and
``no_grad`` at one input size (default 128x256, batch 1): the first forward
(which also fills the caches later ones reuse: RoPE tables, folded depthwise
kernels) and a steady one. MAViT-T runs the fused MALA op
(``mala_impl='triton'``) in Triton's CPU interpreter, so it counts as one op,
as one launch would on CUDA. Writes JSON: per backbone and forward, the
non-view aten ops, casts, activation casts (casts of what was computed from
the input) and the ops by name. ``tests/test_models/test_op_census.py`` holds
the contract; this records the numbers.

Example:
  python benchmarks/op_census.py --out benchmarks/results/op-census-cpu-2026-11-26.json
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault('TRITON_INTERPRET', '1')   # before triton is imported

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', type=int, nargs=2, default=(128, 256), metavar=('H', 'W'),
                        help='input size (default 128 256)')
    parser.add_argument('--out', type=Path, help='JSON to write (default: print only)')
    return parser.parse_args(argv)


def backbones() -> dict:
    from mmdet.models.backbones import SwinTransformer

    from mavit_mm.models import MAViT
    torch.manual_seed(0)
    mavit = MAViT('tiny', mala_impl='triton')
    swin = SwinTransformer(convert_weights=False)
    for model in (mavit, swin):
        model.eval()   # (mmdet's Swin.train returns None: no chaining)
    return {'MAViT-T (fused MALA op)': mavit, 'Swin-T (mmdet)': swin}


def main(argv=None) -> dict:
    args = parse_args(argv)
    from mavit_mm.tooling.device import git_commit
    from mavit_mm.tooling.op_census import forward_census
    torch.set_num_threads(1)
    image = torch.randn(1, 3, *args.size, generator=torch.Generator().manual_seed(0))
    results = {}
    for name, model in backbones().items():
        counts = {}
        for forward in ('first', 'steady'):
            census = forward_census(model, image)
            counts[forward] = dict(census.summary(), ops=dict(census.ops.most_common()),
                                   activation_cast_sources=[list(cast)
                                                            for cast in census.activation_casts])
            print(f"{name:26} {forward:6}: {census.total} ops, {census.casts} casts, "
                  f'{len(census.activation_casts)} activation casts')
        results[name] = counts
    report = dict(benchmark='op_census', input=[1, 3, *args.size], autocast='cpu bf16',
                  counted='non-view aten ops below autocast (TorchDispatchMode); views, '
                          'lift_fresh and contiguous not counted; the fused MALA op is one op',
                  torch=torch.__version__, commit=git_commit(),
                  date=datetime.now(UTC).isoformat(timespec='seconds'), results=results)
    if args.out:
        from mavit_mm.tooling.results_file import write_json
        write_json(args.out, report)
        print(f'wrote {args.out}')
    return report


if __name__ == '__main__':
    main()
