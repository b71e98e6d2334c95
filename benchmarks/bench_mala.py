"""Benchmark MALA: the fused Triton kernels against the PyTorch path.

Measures, per shape / dtype / pass, the median time, the peak extra memory of
the op and the achieved memory bandwidth, and writes everything to JSON.

Byte model (the traffic of the big tensors an ideal implementation cannot
avoid; ``s`` = bytes per element, ``BH`` = batch x heads):

* forward: read q, k, v and write out                     -> 4 * BH * N * d * s
* forward + backward: the forward, then read q, k, v and
  dout and write dq, dk, dv                                -> 11 * BH * N * d * s

The per-(batch, head) statistics and split-N workspaces (O(d^2) floats per
chunk) are left out. The fused kernels move exactly these bytes (each big
tensor once per pass, recomputing rather than storing intermediates); for the
PyTorch path the same model gives an *effective* bandwidth, it really moves
several times more. "% copy" compares with the device-to-device copy bandwidth
measured in the same run (what a kernel that only streams memory reaches: about
3.0 TB/s on an H100 SXM against a nominal 3.35); the nominal figure is kept in
the JSON beside it.

On CUDA both paths are timed with ``triton.testing.do_bench``. On CPU only the
PyTorch path runs (the Triton kernels need a GPU), timed with
``time.perf_counter``; ``--quick`` picks small shapes so that finishes in well
under a minute.

Examples::

    python benchmarks/bench_mala.py                     # full sweep on a GPU
    python benchmarks/bench_mala.py --quick             # CPU smoke run
    python benchmarks/bench_mala.py --dtypes bf16 --tokens 65536 --head-dims 64
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
from collections.abc import Callable
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.timing import median_ms  # noqa: E402
from devtools.mala_inputs import (  # noqa: E402
    DEFAULT_LAYOUT,
    MALA_LAYOUTS,
    mala_inputs,
)
from mavit_mm.ops.mala import mala_attention  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402
from mavit_mm.tooling.device import cuda_peak_extra_bytes, device_name  # noqa: E402
from mavit_mm.tooling.results_file import write_json  # noqa: E402

DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}
# Nominal HBM bandwidth in TB/s, matched against torch.cuda.get_device_name();
# the first matching pattern wins, so the more specific ones come first.
PEAK_BANDWIDTH_TBPS = [
    ('H200', 4.8),
    ('H100 NVL', 3.9),
    ('H100 PCIe', 2.0),
    ('H100', 3.35),            # SXM
    ('A100-SXM4-80GB', 2.039),
    ('A100 80GB PCIe', 1.935),
    ('A100', 1.555),           # 40 GB
    ('L40S', 0.864),
    ('RTX 4090', 1.008),
]
PASS_BYTES_PER_ELEMENT = {'fwd': 4, 'fwd+bwd': 11}
FULL_SWEEP = dict(tokens=[65536, 16384], head_dims=[64, 96], batch_heads=[1, 16])
QUICK_SWEEP = dict(tokens=[4096, 1024], head_dims=[64, 96], batch_heads=[1, 4])


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--quick', action='store_true',
                        help='small default shapes (N 4096/1024, batch x heads 1/4) for a fast '
                             'smoke run, e.g. on CPU; explicit --tokens/--head-dims/'
                             '--batch-heads still override')
    parser.add_argument('--tokens', type=int, nargs='+', metavar='N',
                        help='tokens per image, each a square feature map (N must be a perfect '
                             'square); default 65536 16384')
    parser.add_argument('--head-dims', type=int, nargs='+', metavar='D',
                        help='head dims to run; default 64 96')
    parser.add_argument('--batch-heads', type=int, nargs='+', metavar='BH',
                        help='batch x heads (run as batch=BH, 1 head); default 1 16')
    parser.add_argument('--dtypes', nargs='+', choices=sorted(DTYPES),
                        default=['fp32', 'bf16', 'fp16'], help='input dtypes; default all three')
    parser.add_argument('--impls', nargs='+', choices=['torch', 'triton'],
                        default=['torch', 'triton'],
                        help="MALA implementations to compare; 'triton' is skipped on CPU")
    parser.add_argument('--passes', nargs='+', choices=sorted(PASS_BYTES_PER_ELEMENT),
                        default=['fwd', 'fwd+bwd'],
                        help="'fwd' (forward only) and/or 'fwd+bwd' (forward, then the grads "
                             "of q, k and v)")
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu',
                        help='torch device; default cuda when available, else cpu')
    parser.add_argument('--warmup', type=float, default=None,
                        help='CUDA: warm-up time in ms for do_bench (default 25); '
                             'CPU: warm-up calls (default 2)')
    parser.add_argument('--rep', type=float, default=None,
                        help='CUDA: measuring time in ms for do_bench (default 100); '
                             'CPU: timed calls, the median is reported (default 5)')
    parser.add_argument('--peak-bw', type=float, default=None, metavar='TBPS',
                        help="the device's peak memory bandwidth in TB/s, for devices missing "
                             'from the built-in table (else "%% peak" is n/a)')
    parser.add_argument('--output', type=Path, default=None,
                        help='JSON file to write; default '
                             'benchmarks/results/bench-mala-<device>-<date>.json')
    parser.add_argument('--no-save', action='store_true',
                        help='print the table only, write no JSON')
    parser.add_argument('--compile-report', type=int, nargs='+', metavar='SM',
                        help='instead of timing, compile the Triton kernels ahead of time for '
                             'these NVIDIA compute capabilities (e.g. 80 90; no GPU needed) with '
                             'the launch plan of every --head-dims x --dtypes case and print '
                             'registers, stack (spills), shared memory and global loads / '
                             'stores (all, and vectorised) per kernel')
    parser.add_argument('--layout', choices=MALA_LAYOUTS, default=DEFAULT_LAYOUT,
                        help="memory layout of q, k, v, timed and compiled for: 'channels_last' "
                             "(default: what the model passes, head views of a channels_last "
                             "map, channels contiguous), 'nchw' (head views of an NCHW map, "
                             "tokens contiguous), 'contiguous' (B, heads, N, d); see "
                             'devtools/mala_inputs.py')
    parser.add_argument('--pair-loads', choices=('auto', 'strided'), default='auto',
                        help="--compile-report: RoPE channel pairs read as the launches read "
                             "them ('auto': whole tiles where channels are contiguous) or one "
                             "strided tile per parity ('strided', for comparison)")
    parser.add_argument('--tile', action='append', default=[], metavar='KERNEL=N,W,S',
                        help="--compile-report: compile KERNEL (a name of the launch plan's "
                             'KERNEL_NAMES, mavit_mm/ops/mala/function.py) with this tile '
                             "instead of the plan's: tokens per tile, warps, pipeline stages, "
                             'e.g. query=16,4,1 (repeat for several kernels)')
    args = parser.parse_args(argv)
    args.tiles = {}
    for text in args.tile:
        kernel, _, numbers = text.partition('=')
        fields = numbers.split(',')
        if not kernel or len(fields) != 3 or not all(f.strip().isdigit() for f in fields):
            parser.error(f'--tile {text!r}: expected KERNEL=N,W,S, e.g. query=16,4,1')
        args.tiles[kernel] = tuple(int(f) for f in fields)
    sweep = QUICK_SWEEP if args.quick else FULL_SWEEP
    args.tokens = args.tokens or sweep['tokens']
    args.head_dims = args.head_dims or sweep['head_dims']
    args.batch_heads = args.batch_heads or sweep['batch_heads']
    for num_tokens in args.tokens:
        if round(num_tokens ** 0.5) ** 2 != num_tokens:
            parser.error(f'--tokens {num_tokens} is not a perfect square')
    return args


# --------------------------------------------------------------------------
# Device facts
# --------------------------------------------------------------------------
COPY_BYTES = 2 ** 30
COPY_METHOD = ('torch copy_ of 1 GiB between two CUDA buffers, (read + write) bytes / '
               'median time of triton.testing.do_bench')


def copy_bandwidth_tbps(device: torch.device) -> float:
    """Measured device-to-device copy bandwidth (read + write) in TB/s: the
    yardstick of the kernels' bandwidth targets."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src), device, warmup_ms=25, rep_ms=200)
    src = dst = None  # freed before the cache is emptied
    torch.cuda.empty_cache()
    return 2 * COPY_BYTES / (copy_ms * 1e-3) / 1e12


def peak_bandwidth_tbps(name: str, override: float | None) -> float | None:
    if override is not None:
        return override
    for pattern, tbps in PEAK_BANDWIDTH_TBPS:
        if pattern in name:
            return tbps
    return None


def default_output_path(name: str, device: torch.device) -> Path:
    slug = re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')
    if device.type == 'cpu' and not slug.startswith('cpu'):
        slug = f'cpu-{slug}'
    return (REPO_ROOT / 'benchmarks' / 'results' /
            f'bench-mala-{slug}-{datetime.date.today().isoformat()}.json')


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------
def mala_case_inputs(batch_heads: int, num_tokens: int, head_dim: int, dtype: torch.dtype,
                     device: torch.device, requires_grad: bool, layout: str = DEFAULT_LAYOUT):
    """q, k, v of one case (``batch_heads`` images of one head over a square
    map) in ``layout`` (``devtools.mala_inputs``), and the rotary
    tables."""
    side = round(num_tokens ** 0.5)
    views = mala_inputs(batch_heads, 1, side, side, head_dim, layout=layout, dtype=dtype,
                        device=device, requires_grad=requires_grad)
    return tuple(views), RoPE2d(head_dim).to(device)(side, side)


def make_step(impl: str, pass_name: str, views, rope) -> Callable:
    if pass_name == 'fwd':
        def forward():
            with torch.no_grad():
                return mala_attention(*views, rope, impl=impl)
        return forward

    dout = torch.randn_like(views[0])

    def forward_backward():
        out = mala_attention(*views, rope, impl=impl)
        # Grads of the views themselves: no accumulation into a .grad is timed.
        return torch.autograd.grad(out, views, dout)
    return forward_backward


def peak_extra_memory(step: Callable, device: torch.device) -> int | None:
    """Bytes the step allocates at its peak beyond what was allocated before."""
    if device.type != 'cuda':
        return None
    return cuda_peak_extra_bytes(step, device)


def run_case(impl, pass_name, dtype_name, batch_heads, num_tokens, head_dim, args, device,
             peak_tbps, copy_tbps=None) -> dict:
    dtype = DTYPES[dtype_name]
    views, rope = mala_case_inputs(batch_heads, num_tokens, head_dim, dtype, device,
                                   requires_grad=pass_name != 'fwd', layout=args.layout)
    step = make_step(impl, pass_name, views, rope)
    # --warmup and --rep: ms on CUDA, calls on a CPU.
    milliseconds = median_ms(step, device, args.warmup, args.rep, cpu_warmup=args.warmup,
                             cpu_calls=args.rep)
    memory = peak_extra_memory(step, device)
    moved = (PASS_BYTES_PER_ELEMENT[pass_name] * batch_heads * num_tokens * head_dim
             * torch.finfo(dtype).bits // 8)
    bandwidth = moved / (milliseconds * 1e-3) / 1e9
    side = round(num_tokens ** 0.5)
    return {'impl': impl, 'pass': pass_name, 'dtype': dtype_name, 'layout': args.layout,
            'batch_heads': batch_heads,
            'tokens': num_tokens, 'height': side, 'width': side, 'head_dim': head_dim,
            'time_ms': milliseconds, 'bytes_moved': moved, 'bandwidth_gbps': bandwidth,
            'percent_of_copy': None if copy_tbps is None else 100 * bandwidth / (copy_tbps * 1e3),
            'percent_of_peak': None if peak_tbps is None else 100 * bandwidth / (peak_tbps * 1e3),
            'peak_extra_memory_bytes': memory}


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------
def _case_key(row: dict) -> tuple:
    return row['pass'], row['dtype'], row['batch_heads'], row['tokens'], row['head_dim']


def add_speedups(results: list[dict]) -> None:
    """Speed-up and peak-memory ratio of each Triton row over its PyTorch row."""
    baseline = {_case_key(row): row for row in results if row['impl'] == 'torch'}
    for row in results:
        row['speedup_vs_torch'] = row['memory_vs_torch'] = None
        torch_row = baseline.get(_case_key(row))
        if row['impl'] == 'torch' or torch_row is None:
            continue
        row['speedup_vs_torch'] = torch_row['time_ms'] / row['time_ms']
        memory, torch_memory = row['peak_extra_memory_bytes'], torch_row['peak_extra_memory_bytes']
        if memory is not None and torch_memory:
            row['memory_vs_torch'] = memory / torch_memory


def format_table(results: list[dict]) -> str:
    def fmt(value, spec):
        return 'n/a' if value is None else format(value, spec)
    header = (f"{'pass':8} {'dtype':5} {'layout':13} {'BH':>3} {'N':>6} {'d':>3} {'impl':6} {'ms':>9} "
              f"{'GB/s':>8} {'%copy':>6} {'peak MiB':>9} {'speedup':>7} {'mem x':>6}")
    lines = [header, '-' * len(header)]
    for r in results:
        memory = r['peak_extra_memory_bytes']
        memory = None if memory is None else memory / 2 ** 20
        lines.append(
            f"{r['pass']:8} {r['dtype']:5} {r.get('layout', 'n/a'):13} {r['batch_heads']:>3} "
            f"{r['tokens']:>6} "
            f"{r['head_dim']:>3} "
            f"{r['impl']:6} {r['time_ms']:>9.3f} {r['bandwidth_gbps']:>8.1f} "
            f"{fmt(r.get('percent_of_copy'), '6.1f'):>6} {fmt(memory, '9.1f'):>9} "
            f"{fmt(r['speedup_vs_torch'], '7.2f'):>7} {fmt(r['memory_vs_torch'], '6.2f'):>6}")
    return '\n'.join(lines)


def environment(name: str, device: torch.device, peak_tbps: float | None,
                copy_tbps: float | None = None) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return dict(device=name, device_type=device.type, peak_bandwidth_tbps=peak_tbps,
                peak_bandwidth_note='nominal, from the table in bench_mala.py (or --peak-bw)',
                copy_bandwidth_tbps=copy_tbps,
                copy_bandwidth_method=COPY_METHOD if copy_tbps is not None else None,
                torch=torch.__version__, triton=triton_version,
                cuda=torch.version.cuda if device.type == 'cuda' else None,
                python=platform.python_version(), platform=platform.platform(),
                cpu_threads=torch.get_num_threads(),
                date=datetime.datetime.now().isoformat(timespec='seconds'))


# --------------------------------------------------------------------------
# Ahead-of-time compile report (no GPU needed)
# --------------------------------------------------------------------------
# Pointer arguments holding the input / output dtype; other pointers are fp32
# buffers and plain float arguments are scales.
_IO_POINTERS = {'q_ptr', 'k_ptr', 'v_ptr', 'out_ptr', 'dout_ptr', 'dq_ptr', 'dk_ptr', 'dv_ptr'}
_FLOAT_ARGS = {'scale', 'kv_scale'}
_TRITON_TYPES = {'fp32': 'fp32', 'bf16': 'bf16', 'fp16': 'fp16'}


def _kernel_launches(plan, layout: str, pair_loads: str):
    """(kernel, its compile-time meta) for every kernel of a plan, with q, k
    (and the gradients) in ``layout``; ``pair_loads`` 'auto' reads RoPE pairs
    as the launches do (whole tiles where channels are contiguous:
    ``function.whole_pairs``), 'strided' one tile per parity whatever the
    layout (the kernels before whole-tile loads)."""
    from devtools.mala_inputs import mala_inputs
    from mavit_mm.ops.mala.function import launch_table, whole_pairs
    q = mala_inputs(1, 2, 2, 2, 2, layout=layout, device='meta')[0]   # its strides only
    whole = pair_loads == 'auto' and whole_pairs(q)
    return list(launch_table(plan, whole_q_pairs=whole, whole_k_pairs=whole).values())


def _compile_for(kernel, meta: dict, io_type: str, capability: int, layout: str) -> dict:
    from devtools.gpu_compile_report import (
        KernelResources,
        compile_for_gpu,
        resident_blocks,
    )
    meta = dict(meta)
    unit_stride = 'n' if layout == 'nchw' else 'd'
    options = dict(num_warps=meta.pop('num_warps'), num_stages=meta.pop('num_stages', 3))
    if 'enable_fp_fusion' in meta:
        options['enable_fp_fusion'] = meta.pop('enable_fp_fusion')
    signature, constants, attrs = {}, dict(meta), {}
    for index, arg in enumerate(kernel.arg_names):
        if arg in constants:
            signature[arg] = 'constexpr'
        elif (arg.startswith('stride_') and arg.endswith(unit_stride)) or arg == 'num_heads':
            # As the JIT specialises the benchmark's case: the unit strides of the
            # layout (tokens: nchw; channels: channels_last, contiguous) and the
            # single head are 1 ...
            signature[arg], constants[arg] = 'constexpr', 1
        elif arg.endswith('_ptr'):
            signature[arg] = '*' + (io_type if arg in _IO_POINTERS else 'fp32')
            attrs[(index,)] = [['tt.divisibility', 16]]
        elif arg in _FLOAT_ARGS:
            signature[arg] = 'fp32'
        else:
            # ... and the other integers (N, W, d, strides) are multiples of 16.
            signature[arg] = 'i32'
            attrs[(index,)] = [['tt.divisibility', 16]]
    _, usage = compile_for_gpu(kernel, signature, constants, attrs, capability, options)
    resident = None
    if usage['registers']:
        # Blocks per SM by the CUDA occupancy rules, with an A100 / H100 SM's
        # budget (the split-N kernel's is RESIDENT_PROGRAMS_PER_SM).
        resident = resident_blocks(KernelResources(usage['registers'], usage['shared_bytes'],
                                                   options['num_warps']))
    return dict(num_warps=options['num_warps'], resident_per_sm=resident, **usage)


def compile_report(args) -> int:
    # Compiled-mode kernels, whatever TRITON_INTERPRET says: the interpreter's
    # have nothing to compile (decided when kernels.py is first imported).
    os.environ['TRITON_INTERPRET'] = '0'
    from mavit_mm.ops.mala.function import KERNEL_NAMES, make_launch_plan
    unknown = sorted(set(args.tiles) - set(KERNEL_NAMES))
    if unknown:
        raise SystemExit(f"--tile: no kernel {', '.join(unknown)} in the launch plan; "
                         f"its kernels: {', '.join(KERNEL_NAMES)}")
    for capability in args.compile_report:
        for dtype_name in args.dtypes:
            for head_dim in args.head_dims:
                plan = make_launch_plan(max(args.tokens), 1, head_dim, DTYPES[dtype_name],
                                        torch.device('cpu'), tokens_per_chunk=1024,
                                        tiles=args.tiles or None)
                print(f'sm_{capability} {dtype_name} d={head_dim} layout={args.layout} '
                      f'pair_loads={args.pair_loads}'
                      + ''.join(f' {name}={",".join(map(str, tile))}'
                                for name, tile in args.tiles.items()))
                for kernel, meta in _kernel_launches(plan, args.layout, args.pair_loads):
                    try:
                        usage = _compile_for(kernel, meta, _TRITON_TYPES[dtype_name], capability,
                                             args.layout)
                    except Exception as exc:  # report and go on with the other kernels
                        usage = f'FAILED: {type(exc).__name__}: {str(exc)[:500]}'
                    block_n = meta.get('BLOCK_N', '-')
                    print(f'    {kernel.__name__:26} BLOCK_N={block_n!s:3} {usage}')
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compile_report:
        return compile_report(args)
    device = torch.device(args.device)
    name = device_name(device)
    peak_tbps = peak_bandwidth_tbps(name, args.peak_bw) if device.type == 'cuda' else args.peak_bw
    impls = [impl for impl in args.impls if impl == 'torch' or device.type == 'cuda']
    if impls != args.impls:
        print('note: the Triton kernels need CUDA; timing the PyTorch path only')
    copy_tbps = copy_bandwidth_tbps(device) if device.type == 'cuda' else None
    print(f'device: {name}; nominal peak bandwidth: '
          f"{'n/a' if peak_tbps is None else f'{peak_tbps} TB/s'}; measured copy bandwidth: "
          f"{'n/a' if copy_tbps is None else f'{copy_tbps:.3f} TB/s'} (the '%copy' yardstick)")

    output = None if args.no_save else (args.output or default_output_path(name, device))
    results = []

    def save(complete: bool) -> None:
        # After every case: a crash or a time-out keeps what was measured.
        if output is None:
            return
        output.parent.mkdir(parents=True, exist_ok=True)
        report = dict(environment=environment(name, device, peak_tbps, copy_tbps),
                      byte_model={'fwd': 'read q, k, v; write out: 4 * BH * N * d * bytes',
                                  'fwd+bwd': 'fwd + read q, k, v, dout; write dq, dk, dv: '
                                             '11 * BH * N * d * bytes'},
                      arguments={key: (str(value) if isinstance(value, Path) else value)
                                 for key, value in vars(args).items()},
                      impls_timed=impls, complete=complete,
                      results=results)
        write_json(output, report)

    for dtype_name in args.dtypes:
        for batch_heads in args.batch_heads:
            for num_tokens in args.tokens:
                for head_dim in args.head_dims:
                    for pass_name in args.passes:
                        for impl in impls:
                            results.append(run_case(impl, pass_name, dtype_name, batch_heads,
                                                    num_tokens, head_dim, args, device, peak_tbps,
                                                    copy_tbps))
                            add_speedups(results)
                            save(complete=False)
                            if device.type == 'cuda':
                                torch.cuda.empty_cache()
    add_speedups(results)
    print(format_table(results))
    save(complete=True)
    if output is not None:
        print(f'wrote {output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
