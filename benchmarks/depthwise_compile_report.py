#!/usr/bin/env python
"""The fused depthwise stages' Triton kernels compiled ahead of time for an
NVIDIA GPU, without one: registers, spills (stack), shared memory, and the
global load / store sites, all and vectorised, of every kernel variant the
model launches (``mavit_mm/ops/depthwise/``), at MAViT-T's channel widths.

Each variant is compiled as Triton's JIT specialises the model's case: the
maps channels_last (channel stride 1, which the kernels assume), their pixel,
row and batch strides and the sizes multiples of 16 where they are, the
weights fp32 (the model's), the maps in ``--dtypes``.

Example (the committed reports; Triton 3.6, the GPU machine's release, from a
separate install put first on PYTHONPATH):
  python benchmarks/depthwise_compile_report.py --capability 90 \\
      > benchmarks/results/compile-report-sm90-depthwise-triton3.9-<date>-<commit>.txt
  PYTHONPATH=/tmp/triton36 python benchmarks/depthwise_compile_report.py --capability 90 \\
      --dtypes bf16 > benchmarks/results/compile-report-sm90-depthwise-triton3.6-<date>-<commit>.txt
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

# MAViT-T's block widths and its FFN's hidden widths (mlp ratio 3.5).
CHANNELS = (64, 128, 256, 512)
HIDDEN = (224, 448, 896, 1792)
# The kernels' pointers to maps (in the maps' dtype); every other pointer is fp32.
MAP_POINTERS = {'X', 'A', 'G', 'Y', 'S', 'DZ', 'DX', 'DY', 'DS'}
FLOAT_ARGS = {'eps'}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--capability', type=int, default=90,
                        help='the compute capability to compile for (default 90: H100/H200)')
    parser.add_argument('--dtypes', nargs='+', choices=['bf16', 'fp16', 'fp32'],
                        default=['bf16', 'fp32'], help='dtypes of the maps (default bf16 fp32)')
    return parser.parse_args(argv)


def variants():
    """(name, kernel, constexprs, channels) of every launch the stages make,
    with the tiles of ``function.launch_tile`` (``num_warps`` among the constexprs)."""
    from mavit_mm.ops.depthwise import function, kernels
    forward, backward, norm_backward = (kernels._depthwise_forward_kernel,
                                        kernels._depthwise_backward_kernel,
                                        kernels._norm_backward_kernel)
    # The weight read tap-major (switch tap_major_weights): a channel stride of 1,
    # which Triton's JIT specialises as the constant it is.
    flags = dict(PRE_GELU=False, ADD_INPUT=False, GATE=False, STORE_SUM=False, NORM=False,
                 swc=1)

    def tile(launch, channels, ksize):
        block_w, block_c, num_warps = function.launch_tile(launch, channels, ksize)
        return dict(BLOCK_W=block_w, BLOCK_C=block_c, num_warps=num_warps)

    for c in CHANNELS:
        yield ('position_norm fwd', forward, dict(flags, K=3, ADD_INPUT=True, NORM=True,
                                                  **tile('position_norm.forward', c, 3)), c)
        yield ('gated_lepe fwd (inference)', forward,
               dict(flags, K=5, GATE=True, **tile('gated_lepe.forward', c, 5)), c)
        yield ('gated_lepe fwd (training)', forward,
               dict(flags, K=5, GATE=True, STORE_SUM=True, **tile('gated_lepe.forward', c, 5)), c)
        yield ('position_norm bwd: norm', norm_backward,
               dict(HAS_DS=True, **tile('position_norm.norm_backward', c, 3)), c)
        yield ('position_norm bwd: conv', backward, dict(K=3, PRE_GELU=False, ADD_INPUT=True, swc=1,
                                                         **tile('position_norm.backward', c, 3)), c)
        yield ('gated_lepe bwd: conv', backward, dict(K=5, PRE_GELU=False, ADD_INPUT=False, swc=1,
                                                      **tile('gated_lepe.backward', c, 5)), c)
    for c in HIDDEN:
        yield ('ffn_middle fwd', forward, dict(flags, K=3, PRE_GELU=True, ADD_INPUT=True,
                                               **tile('ffn_middle.forward', c, 3)), c)
        yield ('ffn_middle bwd: conv', backward, dict(K=3, PRE_GELU=True, ADD_INPUT=True, swc=1,
                                                      **tile('ffn_middle.backward', c, 3)), c)


def compile_for(kernel, constexprs: dict, map_type: str, capability: int,
                channels: int) -> dict:
    from devtools.gpu_compile_report import compile_for_gpu
    signature, constants, attrs = {}, dict(constexprs), {}
    num_warps = constants.pop('num_warps')
    for index, arg in enumerate(kernel.arg_names):
        if arg in constants:
            signature[arg] = 'constexpr'
        elif arg[0].isupper() and arg not in ('H', 'W', 'C', 'K'):   # the pointers
            signature[arg] = '*' + (map_type if arg in MAP_POINTERS else 'fp32')
            attrs[(index,)] = [['tt.divisibility', 16]]
        elif arg in FLOAT_ARGS:
            signature[arg] = 'fp32'
        else:
            # strides and sizes; the JIT marks those divisible by 16 (every
            # stride of a channels_last map of MAViT-T's widths, and C)
            signature[arg] = 'i32'
            if arg.startswith('s') or (arg == 'C' and channels % 16 == 0):
                attrs[(index,)] = [['tt.divisibility', 16]]
    return compile_for_gpu(kernel, signature, constants, attrs, capability,
                           dict(num_warps=num_warps, num_stages=3))[1]


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ['TRITON_INTERPRET'] = '0'     # compile, do not interpret
    import triton
    print(f'# depthwise stages, sm_{args.capability}, Triton {triton.__version__}, '
          'the tiles of function.launch_tile, channels_last maps, fp32 weights')
    plan = list(variants())
    failures = 0
    for dtype in args.dtypes:
        for i, (name, kernel, constexprs, channels) in enumerate(plan, 1):
            try:
                usage = compile_for(kernel, constexprs, dtype, args.capability, channels)
            except Exception as exc:   # report it and go on with the other variants
                failures += 1
                usage = f'FAILED: {type(exc).__name__}: {str(exc)[:300]}'
            tiles = (f"BLOCK_W={constexprs['BLOCK_W']} BLOCK_C={constexprs['BLOCK_C']} "
                     f"num_warps={constexprs['num_warps']}")
            print(f'{dtype:5} C={channels:<5} {name:28} {tiles:22} {usage}', flush=True)
            print(f'[{dtype} {i}/{len(plan)}]', file=sys.stderr, flush=True)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
