"""The compiled graph's census, MAViT-T against Swin-T: what inductor compiles
each backbone's forward into on the CPU, counted in its output code by the
rule in ``devtools/compiled_census.py`` (its module docstring).

Each backbone (``census_backbones``: MAViT-T with the fused MALA op, which
launches no kernel here (``fused_launches_skipped``: the counts do not read
values); mmseg's Swin-T, the backbone of the UperNet
baseline the GPU numbers compare against) runs one eager call, then
``torch.compile`` (inductor, default mode), fp32, without gradients, one image
of ``--size`` (default 128x512). Writes JSON: per backbone the graphs, the
launches (fused C++ kernels and extern calls by kind: convolution, GEMM,
SDPA, custom ops such as ``mavit_mm::mala``), inductor's bytes accessed, each
extern callee and fused kernel with its launches, and the seconds the eager
call and the compile took. ``tests/test_models/test_compiled_census.py``
holds the contract; this records the numbers.

Example:
  python benchmarks/compiled_census.py --out benchmarks/results/compiled-census-cpu-2026-11-26.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault('TRITON_INTERPRET', '1')   # before triton is imported

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from devtools.compiled_census import COMPILED_CENSUS_SIZE  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', type=int, nargs=2, default=COMPILED_CENSUS_SIZE,
                        metavar=('H', 'W'), help='input size (default %(default)s)')
    parser.add_argument('--code-dir', type=Path,
                        help="also write each backbone's output code here (<name>.py)")
    parser.add_argument('--out', type=Path, help='JSON to write (default: print only)')
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    from devtools.checkout import git_commit
    from devtools.compiled_census import compiled_census
    from devtools.op_census import (
        CENSUS_BACKBONES,
        census_backbones,
        fused_launches_skipped,
    )
    from mavit_mm.tooling.device import cpu_model
    torch.set_num_threads(1)
    image = torch.randn(1, 3, *args.size, generator=torch.Generator().manual_seed(0))
    results = {}
    for name, model in census_backbones().items():
        start = time.perf_counter()
        with fused_launches_skipped():
            census = compiled_census(model, image, run=True)
        seconds = time.perf_counter() - start
        if args.code_dir:
            args.code_dir.mkdir(parents=True, exist_ok=True)
            (args.code_dir / f'{name}.py').write_text('\n\n# next graph\n\n'.join(census.codes))
        results[name] = dict(census.summary(), **census.details(),
                             seconds_eager_call_and_compile=round(seconds, 1))
        counts = census.summary()
        print(f"{name:8}: {counts['graphs']} graph(s), {counts['launches']} launches = "
              f"{counts['fused_kernels']} fused + {counts['extern_calls']}, "
              f"{counts['bytes_accessed']} bytes accessed ({seconds:.0f} s)")
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    report = dict(benchmark='compiled_census', input=[1, 3, *args.size], dtype='float32',
                  rule='devtools/compiled_census.py (module docstring)',
                  backbones=CENSUS_BACKBONES,
                  cpu=cpu_model(), threads=torch.get_num_threads(), torch=torch.__version__,
                  commit=git_commit(), date=utc_timestamp(),
                  results=results)
    if args.out:
        write_json(args.out, report)
        print(f'wrote {args.out}')
    return report


if __name__ == '__main__':
    main()
