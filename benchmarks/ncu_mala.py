"""One forward and one forward+backward of the fused MALA, bracketed for
Nsight Compute: the kernels are compiled and warmed first, and only the timed
calls run between ``cudaProfilerStart`` and ``cudaProfilerStop``.

    ncu --profile-from-start off --clock-control none \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section Occupancy --section LaunchStats --section WarpStateStats \\
        python benchmarks/ncu_mala.py --batch-heads 16

Shapes as ``bench_mala.py`` makes them (``mala_case_inputs``: B*heads images of
one head over a square map), q, k, v in ``--layout`` (default
``channels_last``, what the model passes). Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_mala import DTYPES, make_step, mala_case_inputs  # noqa: E402
from devtools.mala_inputs import DEFAULT_LAYOUT, MALA_LAYOUTS  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--batch-heads', type=int, default=16)
    parser.add_argument('--tokens', type=int, default=65536, help='a square feature map')
    parser.add_argument('--head-dim', type=int, default=64)
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='bf16')
    parser.add_argument('--passes', nargs='+', choices=('fwd', 'fwd+bwd'),
                        default=['fwd', 'fwd+bwd'])
    parser.add_argument('--layout', choices=MALA_LAYOUTS, default=DEFAULT_LAYOUT,
                        help='memory layout of q, k, v (devtools/mala_inputs.py; '
                             f'default {DEFAULT_LAYOUT}, what the model passes)')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print('ncu_mala.py needs a CUDA GPU')
        return 2
    device = torch.device('cuda')
    steps = []
    for pass_name in args.passes:
        views, rope = mala_case_inputs(args.batch_heads, args.tokens, args.head_dim,
                                       DTYPES[args.dtype], device,
                                       requires_grad=pass_name != 'fwd', layout=args.layout)
        step = make_step('triton', pass_name, views, rope)
        for _ in range(3):      # compile and warm up outside the profiled range
            step()
        steps.append(step)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for step in steps:
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f'profiled {", ".join(args.passes)}: B*heads {args.batch_heads}, N {args.tokens}, '
          f'd {args.head_dim}, {args.dtype}, layout {args.layout}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
