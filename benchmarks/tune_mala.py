"""Tune the fused MALA's launch table on a GPU: time every kernel on its own
with candidate tiles (tokens per tile, warps, pipeline stages), then the split-N
chunking and the tokens per program: the calls replayed from a CUDA graph
(``benchmarks/timing.py``, ``--timing``), so that the GPU's time is compared,
not the host's.

For each shape it prints, per kernel, the fastest candidate against the current
table, then the whole forward and forward+backward with the winners against the
defaults, and writes everything as JSON. The chosen values go into
``KERNEL_TILES`` (``mavit_mm/ops/mala/function.py``) by hand, with the JSON
committed under ``benchmarks/results/`` as the evidence.

q, k, v come from ``devtools.mala_inputs`` in ``--layout`` (default
``channels_last``, what the model passes); each record names its layout.

Example (the targets of the GPU issue)::

    python benchmarks/tune_mala.py --dtypes bf16 --head-dims 64 96 \\
        --batch-heads 16 1 --tokens 65536 --output tune.json
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.bench_mala import DTYPES, environment, mala_case_inputs  # noqa: E402
from benchmarks.timing import median_ms  # noqa: E402
from devtools.mala_inputs import DEFAULT_LAYOUT, MALA_LAYOUTS  # noqa: E402
from mavit_mm.tooling.results_file import write_json  # noqa: E402

TOKEN_KERNELS = ('partials', 'output', 'query', 'key')
BLOCK_NS = (16, 32, 64, 128)
WARPS = (4, 8)
# Heads over 64 channels try 16 warps too: for fp32 at d = 96-128 the only
# key tiles whose sm_90 compile spills with none of Triton 3.6, 3.7 and 3.9
# (compile-sweep-sm90-wide-*.txt in benchmarks/results/).
WIDE_WARPS = (4, 8, 16)
STAGES = (1, 2, 3)
COMBINE_CANDIDATES = [(rows, warps, 1) for rows in (2, 4, 8, 16, 32) for warps in (1, 2, 4)]
CHUNK_COUNTS = (8, 16, 32, 64, 128, 256, 512)
TILES_PER_PROGRAM = (1, 2, 4, 8, 16, 32)
CUDA = torch.device('cuda')   # the kernels tuned are Triton's: CUDA only
TIMINGS = ('cuda-graph', 'eager')   # --timing, the default first


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--dtypes', nargs='+', choices=sorted(DTYPES), default=['bf16'])
    parser.add_argument('--head-dims', type=int, nargs='+', default=[64, 96])
    parser.add_argument('--batch-heads', type=int, nargs='+', default=[16, 1])
    parser.add_argument('--tokens', type=int, nargs='+', default=[65536],
                        help='tokens per image, a square feature map')
    parser.add_argument('--layout', choices=MALA_LAYOUTS, default=DEFAULT_LAYOUT,
                        help='memory layout of q, k, v (devtools/mala_inputs.py; '
                             f'default {DEFAULT_LAYOUT}, what the model passes)')
    parser.add_argument('--kernels', nargs='+', default=list(TOKEN_KERNELS) + ['combine'],
                        help='kernels whose tiles to tune')
    add_sweep_options(parser, 'the candidates per kernel')
    return parser.parse_args(argv)


def add_sweep_options(parser: argparse.ArgumentParser, listed: str) -> None:
    """The options of a tile sweep (this one, ``tune_depthwise.py``):
    ``--rep``, ``--timing``, ``--output``, ``--budget-s`` and ``--dry-run``,
    which lists ``listed``."""
    parser.add_argument('--rep', type=int, default=25, help='measuring time in ms per timing')
    parser.add_argument('--timing', choices=TIMINGS, default=TIMINGS[0],
                        help='cuda-graph (default): the calls replayed from one CUDA graph, '
                             'the GPU\'s time alone (at batch 1 the host\'s cost of a call '
                             'exceeds its kernels\' and hid them: '
                             'benchmarks/results/gpu-h200-2026-11-27/README.md); eager: '
                             'do_bench, the host\'s cost of each call included')
    parser.add_argument('--output', type=Path, required=False,
                        help='JSON file to write (default: print only)')
    parser.add_argument('--budget-s', type=float, default=None,
                        help='stop timing candidates once this many seconds have passed; what '
                             'was measured stays in the JSON, marked incomplete')
    parser.add_argument('--dry-run', action='store_true',
                        help=f'list {listed} and exit (no GPU needed)')


def tile_candidates(kernel: str, head_dim: int):
    if kernel == 'combine':
        return COMBINE_CANDIDATES
    wide = head_dim > 64
    block_ns = [n for n in BLOCK_NS if not (wide and n > 64)]
    return list(itertools.product(block_ns, WIDE_WARPS if wide else WARPS, STAGES))


class Case:
    """Inputs of one shape and launches built from plan overrides."""

    def __init__(self, dtype, batch_heads, num_tokens, head_dim, device,
                 layout: str = DEFAULT_LAYOUT):
        from mavit_mm.ops.mala import function
        self.function = function
        self.views, rope = mala_case_inputs(batch_heads, num_tokens, head_dim, dtype, device,
                                            requires_grad=False, layout=layout)
        self.layout = layout
        self.angle = rope.angle.float().contiguous()
        self.width = rope.width
        self.shape = (batch_heads, num_tokens, head_dim)
        self.dtype = dtype
        self.device = device
        self.dout = torch.randn_like(self.views[0])

    def plan(self, **overrides):
        batch_heads, num_tokens, head_dim = self.shape
        return self.function.make_launch_plan(num_tokens, batch_heads, head_dim, self.dtype,
                                              self.device, **overrides)

    def launches(self, plan) -> dict[str, Callable]:
        """Every launch of a forward and a backward with ``plan``, by name
        (``partials``, ``combine``, ``output``, ``query``, ``chunk_sum``,
        ``key``), on buffers that each has filled once (in order: a launch
        may be timed alone)."""
        q, k, v = self.views
        _, stats, forward = self.function.forward_launches(q, k, v, self.angle, self.width,
                                                           plan)
        *_, backward = self.function.backward_launches(self.dout, q, k, v, self.angle, stats,
                                                       self.width, plan)
        steps = dict(forward + backward)
        for launch in steps.values():
            launch()
        return steps

    def kernel_step(self, kernel: str, plan) -> Callable:
        return self.launches(plan)[kernel]

    def pass_step(self, plan, with_backward: bool) -> Callable:
        q, k, v = self.views
        function = self.function

        def step():
            _, stats = function.mala_forward(q, k, v, self.angle, self.width, plan)
            if with_backward:
                function.mala_backward(self.dout, q, k, v, self.angle, stats, self.width, plan)
        return step


class BudgetSpent(Exception):
    """The ``--budget-s`` time is up."""


_deadline: float | None = None
_timing = TIMINGS[0]


def start_sweep(budget_s: float | None, timing: str = TIMINGS[0]) -> None:
    """Start the ``--budget-s`` clock (``None``: no budget) that :func:`bench`
    keeps, and set how it times (``--timing``)."""
    global _deadline, _timing
    if timing not in TIMINGS:
        raise ValueError(f'unknown timing {timing!r}: one of {TIMINGS}')
    _deadline = None if budget_s is None else time.time() + budget_s
    _timing = timing


def bench(make_step: Callable[[], Callable], rep: int) -> float | None:
    """Median ms of the step that ``make_step`` builds; ``None`` when building,
    compiling or running it fails (a tile that does not fit, say): the failure
    is printed and the sweep goes on. Raises :class:`BudgetSpent` once the
    ``--budget-s`` time has passed."""
    if _deadline is not None and time.time() > _deadline:
        raise BudgetSpent()
    try:
        return median_ms(make_step(), CUDA, warmup_ms=10, rep_ms=rep,
                         cuda_graph=_timing == 'cuda-graph')
    except Exception as exc:  # out of resources, compile failure: record and go on
        print(f'      failed: {type(exc).__name__}: {str(exc)[:160]}')
        return None


class Results:
    """The JSON file, rewritten after every measurement: a crash or a time-out
    keeps everything measured before it."""

    def __init__(self, path: Path | None, environment: dict):
        self.path = path
        self.document = {'environment': environment, 'complete': False, 'results': []}

    def start(self, record: dict) -> dict:
        self.document['results'].append(record)
        self.save()
        return record

    def save(self, complete: bool = False) -> None:
        if self.path is None:
            return
        self.document['complete'] = complete
        write_json(self.path, self.document)


def tune_shape(case: Case, kernels: list[str], rep: int, record: dict,
               save: Callable[[], None]) -> dict:
    batch_heads, num_tokens, head_dim = case.shape
    default = case.plan()
    record.update(default_plan=_plan_dict(default), kernels={})
    best_tiles = {}
    for kernel in kernels:
        default_tile = getattr(default, kernel)
        default_tuple = (default_tile.block_n, default_tile.num_warps, default_tile.num_stages)
        timings = []
        started = time.time()
        record['kernels'][kernel] = {'timings': timings}
        for tile in tile_candidates(kernel, head_dim):
            ms = bench(lambda: case.kernel_step(kernel, case.plan(tiles={kernel: tile})), rep)
            timings.append({'tile': list(tile), 'ms': ms})
            save()
        valid = [t for t in timings if t['ms'] is not None]
        if not valid:
            print(f'    {kernel:9} every candidate failed; keeping the default tile')
            record['kernels'][kernel]['best'] = None
            continue
        best = min(valid, key=lambda t: t['ms'])
        default_ms = next((t['ms'] for t in timings if tuple(t['tile']) == default_tuple), None)
        best_tiles[kernel] = tuple(best['tile'])
        record['kernels'][kernel] = {'timings': timings, 'best': best,
                                     'default': list(default_tuple), 'default_ms': default_ms}
        print(f'    {kernel:9} best {best["tile"]} {best["ms"] * 1e3:8.1f} us; '
              f'default {list(default_tuple)} '
              f'{"n/a" if default_ms is None else f"{default_ms * 1e3:8.1f} us"} '
              f'({len(timings)} candidates, {time.time() - started:.0f} s)')

    # Split-N chunking: the reduction passes with the winning tiles.
    chunk_timings = []
    reduce_block = max(best_tiles.get('partials', (default.partials.block_n,))[0],
                       best_tiles.get('query', (default.query.block_n,))[0])
    for chunks in CHUNK_COUNTS:
        tokens_per_chunk = -(-num_tokens // chunks)
        tokens_per_chunk = -(-tokens_per_chunk // reduce_block) * reduce_block
        if tokens_per_chunk < reduce_block:
            continue
        plan = case.plan(tiles=best_tiles, tokens_per_chunk=tokens_per_chunk)
        fwd_ms = bench(lambda: _reduce_step(case, plan, 'forward'), rep)
        bwd_ms = bench(lambda: _reduce_step(case, plan, 'backward'), rep)
        chunk_timings.append({'chunks': plan.num_chunks, 'tokens_per_chunk': tokens_per_chunk,
                              'forward_reduce_ms': fwd_ms, 'backward_reduce_ms': bwd_ms})
        record['chunking'] = chunk_timings
        save()
        print(f'    chunks {plan.num_chunks:4} ({tokens_per_chunk:6} tokens): forward reduce '
              f'{format_us(fwd_ms)}, backward reduce {format_us(bwd_ms)}')

    program_timings = []
    for tiles_per_program in TILES_PER_PROGRAM:
        block = best_tiles.get('output', (default.output.block_n,))[0]
        plan = case.plan(tiles=best_tiles, tokens_per_program=tiles_per_program * block)
        out_ms = bench(lambda: case.kernel_step('output', plan), rep)
        key_ms = bench(lambda: case.kernel_step('key', plan), rep)
        program_timings.append({'tiles_per_program': tiles_per_program, 'output_ms': out_ms,
                                'key_ms': key_ms})
        record['tokens_per_program'] = program_timings
        save()
        print(f'    {tiles_per_program:3} tiles per program: output {format_us(out_ms)}, '
              f'key {format_us(key_ms)}')

    record['best_tiles'] = {name: list(tile) for name, tile in best_tiles.items()}
    tuned = case.plan(tiles=best_tiles)
    for name, plan in (('default', default), ('tuned_tiles', tuned)):
        record[f'{name}_fwd_ms'] = bench(lambda: case.pass_step(plan, False), rep)
        record[f'{name}_fwd_bwd_ms'] = bench(lambda: case.pass_step(plan, True), rep)
        save()
        print(f'    {name:11} plan: fwd {format_us(record[f"{name}_fwd_ms"])}, '
              f'fwd+bwd {format_us(record[f"{name}_fwd_bwd_ms"])}')
    return record


def _reduce_step(case: Case, plan, direction: str) -> Callable:
    """The split-N reduction of one pass: the forward's partial sums and their
    combine, or the backward's query pass and its sum over chunks."""
    launches = case.launches(plan)
    first, second = ('partials', 'combine') if direction == 'forward' else ('query', 'chunk_sum')
    return lambda: (launches[first](), launches[second]())


def format_us(ms: float | None, width: int = 8) -> str:
    """A time in ms as microseconds, or 'n/a' (a candidate that failed)."""
    return 'n/a' if ms is None else f'{ms * 1e3:{width}.1f} us'


def _plan_dict(plan) -> dict:
    import dataclasses
    return dataclasses.asdict(plan)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        print(f'layout: {args.layout}')
        for head_dim in args.head_dims:
            for kernel in args.kernels:
                print(f'd={head_dim} {kernel}: {len(tile_candidates(kernel, head_dim))} '
                      'candidates')
        return 0
    if not torch.cuda.is_available():
        print('tune_mala.py needs a CUDA GPU (use --dry-run to list the candidates)')
        return 2
    start_sweep(args.budget_s, args.timing)
    device = torch.device('cuda')
    name = torch.cuda.get_device_name(device)
    results = Results(args.output, environment(name, device, None))
    results.document['timing'] = args.timing
    for dtype_name, batch_heads, num_tokens, head_dim in itertools.product(
            args.dtypes, args.batch_heads, args.tokens, args.head_dims):
        print(f'{dtype_name} BH={batch_heads} N={num_tokens} d={head_dim} {args.layout}',
              flush=True)
        record = results.start(dict(dtype=dtype_name, layout=args.layout,
                                    batch_heads=batch_heads, tokens=num_tokens,
                                    head_dim=head_dim))
        try:
            case = Case(DTYPES[dtype_name], batch_heads, num_tokens, head_dim, device,
                        args.layout)
            tune_shape(case, args.kernels, args.rep, record, results.save)
            del case
        except BudgetSpent:
            record['stopped'] = f'time budget of {args.budget_s:.0f} s spent'
            print(f'    stopped: {record["stopped"]}; the JSON keeps what was measured')
            results.save()
            break
        except Exception as exc:  # keep the other shapes (and what this one measured)
            record['error'] = f'{type(exc).__name__}: {str(exc)[:300]}'
            print(f'    failed: {record["error"]}')
        results.save()
        torch.cuda.empty_cache()
    results.save(complete=not any('stopped' in r or 'error' in r
                                  for r in results.document['results']))
    if args.output:
        print(f'wrote {args.output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
