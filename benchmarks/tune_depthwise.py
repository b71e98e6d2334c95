"""Tune the fused depthwise stages' launch tiles on a GPU: time each launch of
``position_norm``, ``gated_lepe`` and ``ffn_middle`` (``mavit_mm/ops/depthwise/``)
at MAViT-T's shapes with candidate ``(block_w, block_c, num_warps)`` tiles
against the current ones, then each stage's forward and forward+backward with
the winners against the current tiles, with ``benchmarks/timing.median_ms``:
the calls replayed from a CUDA graph (``--timing``), the GPU's time alone.

The shapes are a MAViT's calls at ``--size`` (default MAViT-T at 512x2048:
maps of 128x512, 64x256, 32x128 and 16x64; the position and LePE stages at
the block widths 64-512, the FFN's middle at its hidden widths 224-1792),
batch 1, built as the model passes them: channels_last maps in ``--dtype``
(v and the gate as channel slices of one qkvo map), fp32 weights tap-major.
A forward launch is timed in the stage's forward (no gradient), a backward
launch in the stage's backward op alone (its weight-gradient sums included).

Candidates: the current tile first, then, unless ``--block-w``, ``--block-c`` or
``--warps`` give the values to cross, its halves and doubles, one value at a
time (a norm's ``block_c`` stays: it holds every channel). The FFN's middle
first (its fused pass lost to the plain formula under a CUDA graph: docs/gpu.md,
"What each switch is worth"), the norm launches last (a compile per width).

The JSON keeps every candidate's time, and ``table_lines``: the winners at least
``MIN_SPEEDUP`` faster than the current tile, to paste into ``TUNED_TILES``
(``mavit_mm/ops/depthwise/function.py``) by hand with the JSON committed under
``benchmarks/results/`` as the evidence (``apply`` in the file says so).

Example (the GPU check's ``tune-depthwise`` step runs it so, with a budget)::

    python benchmarks/tune_depthwise.py --output tune-depthwise.json
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

from benchmarks import tune_mala  # noqa: E402
from benchmarks.bench_mala import DTYPES, environment  # noqa: E402
from benchmarks.tune_mala import BudgetSpent, Results, bench, format_us  # noqa: E402
from mavit_mm.models import ARCH_SETTINGS  # noqa: E402
from mavit_mm.ops.depthwise import (  # noqa: E402
    function,
    fused_ffn_middle,
    fused_gated_lepe,
    fused_position_norm,
    tap_major,
)
from mavit_mm.ops.depthwise.function import (  # noqa: E402
    LAUNCHES,
    DepthwiseTile,
    check_tile,
    launch_tile,
    launch_tiles,
)

STAGES = ('ffn_middle', 'gated_lepe', 'position_norm')     # in the order tuned
# The block's depthwise kernels: MAViTBlock.pos, GatedAttention.lepe, ConvFFN.dwconv.
KERNEL_SIZES = {'position_norm': 3, 'gated_lepe': 5, 'ffn_middle': 3}
# A winner less than this much faster than the current tile is within noise.
MIN_SPEEDUP = 1.03
CUDA = torch.device('cuda')
APPLY = ('Paste table_lines (the winners at least MIN_SPEEDUP faster than the current tile) '
         'into TUNED_TILES in mavit_mm/ops/depthwise/function.py, keeping those whose case '
         'gains in forward_speedup / forward_backward_speedup too; commit this JSON under '
         'benchmarks/results/ beside them, and run tests/test_benchmarks (the sm_90 compile '
         'of every launch, spills included, reads the table).')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--arch', choices=sorted(ARCH_SETTINGS), default='tiny')
    parser.add_argument('--size', type=int, nargs=2, default=[512, 2048], metavar=('H', 'W'),
                        help='input image size (default 512 2048)')
    parser.add_argument('--batch', type=int, default=1)
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='bf16',
                        help='dtype of the maps (default bf16; the weights are fp32)')
    parser.add_argument('--stages', nargs='+', choices=STAGES, default=list(STAGES),
                        help='stages to tune, in this order (default: all)')
    for name, what in (('block-w', 'pixels of a row'), ('block-c', 'channels'),
                       ('warps', 'warps')):
        parser.add_argument(f'--{name}', type=int, nargs='+', default=None,
                            help=f'{what} a program: cross these values (with the current '
                                 'tile\'s for the others) instead of the halves and doubles')
    tune_mala.add_sweep_options(parser, 'the shapes and the candidates per launch')
    return parser.parse_args(argv)


def model_shapes(arch: str = 'tiny', size=(512, 2048), stages=STAGES) -> list[dict]:
    """The stages' calls in a MAViT-``arch`` at input ``size``: per stage (in
    the order given), one per model stage, whose map is the input over 4 (the
    stem) times 2 per stage before it; the FFN's middle at ``mlp_ratio`` times
    the block's width, as ``MAViTBlock`` builds it."""
    preset = ARCH_SETTINGS[arch]
    shapes = []
    for stage in stages:
        for index, (dims, ratio) in enumerate(zip(preset['embed_dims'], preset['mlp_ratios'])):
            stride = 4 * 2 ** index
            shapes.append(dict(stage=stage, model_stage=index + 1,
                               channels=int(ratio * dims) if stage == 'ffn_middle' else dims,
                               height=size[0] // stride, width=size[1] // stride,
                               kernel_size=KERNEL_SIZES[stage]))
    return shapes


def stage_launches(stage: str) -> list[str]:
    return [launch for launch in LAUNCHES if launch.startswith(stage + '.')]


def candidates(launch: str, channels: int, ksize: int, block_ws=None, block_cs=None,
               warps=None) -> list[DepthwiseTile]:
    """The tiles to time, the current one first; only those ``launch`` can run
    at ``channels``, with no more channels than their power of two."""
    current = launch_tile(launch, channels, ksize)
    if block_ws or block_cs or warps:
        tiles = itertools.product(block_ws or [current.block_w],
                                  [current.block_c] if LAUNCHES[launch] else
                                  block_cs or [current.block_c],
                                  warps or [current.num_warps])
    else:
        tiles = [current._replace(**{field: value})
                 for field, now in current._asdict().items()
                 if not (field == 'block_c' and LAUNCHES[launch])
                 for value in (now // 2, now * 2)]
    kept = [current]
    for tile in map(DepthwiseTile._make, tiles):
        try:
            check_tile(launch, tile, channels)
        except ValueError:
            continue
        if tile not in kept and tile.block_c <= 1 << (channels - 1).bit_length():
            kept.append(tile)
    return kept


class Case:
    """One stage at one shape: its inputs as the model passes them, and the
    steps to time (``forward``, ``backward``: the backward op alone on a
    forward's saved tensors, ``forward_backward``)."""

    def __init__(self, shape: dict, batch: int, dtype: torch.dtype, device: torch.device):
        self.shape = shape
        self.stage, channels = shape['stage'], shape['channels']
        ksize = shape['kernel_size']
        torch.manual_seed(0)

        def new_map(width):
            return torch.randn(batch, width, shape['height'], shape['width'], device=device,
                               dtype=dtype).contiguous(memory_format=torch.channels_last)
        weight = torch.randn(channels, 1, ksize, ksize, device=device) * 0.2
        self.taps, self.bias = tap_major(weight), torch.randn(channels, device=device) * 0.1
        if self.stage == 'position_norm':
            self.maps = (new_map(channels),)
            self.norm = (torch.randn(channels, device=device) * 0.1 + 1,
                         torch.randn(channels, device=device) * 0.1)
        elif self.stage == 'gated_lepe':
            self.qkvo = new_map(4 * channels)       # v and the gate: slices of it
            self.maps = (new_map(channels),)        # the attention's output
        else:
            self.maps = (new_map(channels),)
        self.upstream = [torch.randn_like(out) for out in self._outputs()]
        self.backward = self._backward_step()

    def _call(self, maps, taps, bias):
        """The stage's fused op through its public entry, outputs as a tuple."""
        if self.stage == 'position_norm':
            return fused_position_norm(*maps, taps, bias, *self.norm, 1e-6)
        if self.stage == 'gated_lepe':
            qkvo, attention = maps
            c = self.shape['channels']
            return (fused_gated_lepe(qkvo[:, 2 * c:3 * c], taps, bias, attention, qkvo[:, 3 * c:]),)
        return (fused_ffn_middle(*maps, taps, bias),)

    def _inputs(self):
        return ((self.qkvo,) if self.stage == 'gated_lepe' else ()) + self.maps

    def _outputs(self):
        with torch.no_grad():
            return self._call(self._inputs(), self.taps, self.bias)

    def forward(self):
        with torch.no_grad():
            self._call(self._inputs(), self.taps, self.bias)

    def forward_backward(self):
        leaves = [t.detach().requires_grad_() for t in (*self._inputs(), self.taps, self.bias)]
        outputs = self._call(leaves[:-2], *leaves[-2:])
        torch.autograd.backward(outputs, self.upstream)

    def _backward_step(self) -> Callable:
        taps, bias, c = self.taps, self.bias, self.shape['channels']
        if self.stage == 'position_norm':
            x, = self.maps
            stream, _, mean, rstd = function.position_norm_op(x, taps, bias, *self.norm, 1e-6)
            return lambda: function.position_norm_backward_op(
                *self.upstream, x, stream, mean, rstd, taps, bias, self.norm[0])
        if self.stage == 'gated_lepe':
            v, gate = self.qkvo[:, 2 * c:3 * c], self.qkvo[:, 3 * c:]
            _, total = function.gated_lepe_op(v, taps, bias, *self.maps, gate, True)
            return lambda: function.gated_lepe_backward_op(self.upstream[0], v, taps, bias, gate,
                                                           total)
        return lambda: function.ffn_middle_backward_op(self.upstream[0], *self.maps, taps, bias)


class Progress:
    """Timings done of those planned, and the time left at the pace so far."""

    def __init__(self, total: int):
        self.total, self.done, self.started = total, 0, time.time()

    def __str__(self) -> str:
        spent = time.time() - self.started
        left = spent / self.done * (self.total - self.done) if self.done else 0.0
        return f'{self.done}/{self.total} timings, {spent:.0f} s, about {left / 60:.1f} min left'


def tune_case(case: Case, plan: dict, rep: int, record: dict, save: Callable[[], None],
              progress: Progress) -> dict:
    """Time ``plan``'s candidates (launch -> tiles) of ``case``'s launches,
    then the stage's passes with the current tiles and the winners."""
    shape, winners = case.shape, {}
    record['launches'] = {}
    for launch, tiles in plan.items():
        timed = 'forward' if launch.endswith('.forward') else 'backward'
        step = case.forward if timed == 'forward' else case.backward
        timings = []
        entry = record['launches'][launch] = dict(timed=timed, current=list(tiles[0]),
                                                  timings=timings)
        for tile in tiles:
            with launch_tiles({launch: tile}):
                timings.append(dict(tile=list(tile), ms=bench(lambda: step, rep)))
            progress.done += 1
            save()
        valid = [t for t in timings if t['ms'] is not None]
        if not valid:
            print(f'  {launch:28} every candidate failed; keeping the current tile')
            continue
        best = min(valid, key=lambda t: t['ms'])
        current_ms = timings[0]['ms']
        entry.update(current_ms=current_ms, best=best['tile'], best_ms=best['ms'],
                     speedup=None if current_ms is None else round(current_ms / best['ms'], 4))
        winners[launch] = DepthwiseTile(*best['tile'])
        print(f'  {launch:28} C={shape["channels"]:<4} best {best["tile"]} {format_us(best["ms"], 0)}, '
              f'current {entry["current"]} {format_us(current_ms, 0)} ({len(tiles)} candidates; '
              f'{progress})', flush=True)
    record['tuned_tiles'] = {launch: list(tile) for launch, tile in winners.items()}
    for name, tiles in (('current', {}), ('tuned', winners)):
        with launch_tiles(tiles):
            record[f'{name}_forward_ms'] = bench(lambda: case.forward, rep)
            record[f'{name}_forward_backward_ms'] = bench(lambda: case.forward_backward, rep)
        progress.done += 2
        save()
    for key in ('forward', 'forward_backward'):
        current, tuned = record[f'current_{key}_ms'], record[f'tuned_{key}_ms']
        record[f'{key}_speedup'] = round(current / tuned, 4) if current and tuned else None
    print(f'  {case.stage} C={shape["channels"]}: forward x{record["forward_speedup"]}, '
          f'forward+backward x{record["forward_backward_speedup"]} with the winners', flush=True)
    return record


def table_lines(records: list[dict]) -> list[str]:
    """``TUNED_TILES`` entries of the winners at least ``MIN_SPEEDUP`` faster."""
    return [f"('{launch}', {record['channels']}): DepthwiseTile({', '.join(map(str, e['best']))}),"
            f"  # x{e['speedup']:.2f}"
            for record in records for launch, e in record.get('launches', {}).items()
            if e.get('speedup') and e['speedup'] >= MIN_SPEEDUP and e['best'] != e['current']]


def main(argv=None) -> int:
    args = parse_args(argv)
    grid = dict(block_ws=args.block_w, block_cs=args.block_c, warps=args.warps)
    plans = [(shape, {launch: candidates(launch, shape['channels'], shape['kernel_size'], **grid)
                      for launch in stage_launches(shape['stage'])})
             for shape in model_shapes(args.arch, args.size, args.stages)]
    print(f'MAViT-{args.arch} at {args.size[0]}x{args.size[1]}, batch {args.batch}, {args.dtype} '
          'channels_last maps; candidates: ' + ('the values given' if any(grid.values()) else
                                              'the current tile, its halves and doubles'))
    for shape, plan in plans:
        print(f'{shape["stage"]:13} stage {shape["model_stage"]} C={shape["channels"]:<4} '
              f'{shape["height"]}x{shape["width"]} k={shape["kernel_size"]}: ' + ', '.join(
                  f'{launch.split(".")[1]} {len(tiles)}' for launch, tiles in plan.items()))
    timings = sum(len(tiles) for _, plan in plans for tiles in plan.values())
    compiles = len({(launch, tile) for _, plan in plans for launch, tiles in plan.items()
                    for tile in tiles})
    print(f'{len(plans)} shapes: {timings} candidate timings, about {compiles} kernel compiles; '
          f'then {4 * len(plans)} timings of the stages (current and tuned)')
    if args.dry_run:
        return 0
    if not torch.cuda.is_available():
        print('tune_depthwise.py needs a CUDA GPU (use --dry-run to list the candidates)')
        return 2
    tune_mala.start_sweep(args.budget_s, args.timing)
    results = Results(args.output, environment(torch.cuda.get_device_name(CUDA), CUDA, None))
    results.document.update(apply=APPLY, min_speedup=MIN_SPEEDUP, table_lines=[],
                            settings=dict(arch=args.arch, size=args.size, batch=args.batch,
                                          dtype=args.dtype, grid=grid, rep=args.rep,
                                          timing=args.timing))
    progress = Progress(timings + 4 * len(plans))
    for shape, plan in plans:
        print(f'{shape["stage"]} stage {shape["model_stage"]} C={shape["channels"]} '
              f'{shape["height"]}x{shape["width"]}', flush=True)
        record = results.start(dict(shape, batch=args.batch, dtype=args.dtype))
        try:
            tune_case(Case(shape, args.batch, DTYPES[args.dtype], CUDA), plan, args.rep, record,
                      results.save, progress)
        except BudgetSpent:
            record['stopped'] = f'time budget of {args.budget_s:.0f} s spent'
            print(f'  stopped: {record["stopped"]}; the JSON keeps what was measured')
            break
        except Exception as exc:  # keep the other shapes (and what this one measured)
            record['error'] = f'{type(exc).__name__}: {str(exc)[:300]}'
            print(f'  failed: {record["error"]}')
        finally:
            results.document['table_lines'] = table_lines(results.document['results'])
            results.save()
            torch.cuda.empty_cache()
    results.save(complete=len(results.document['results']) == len(plans) and not any(
        'stopped' in r or 'error' in r for r in results.document['results']))
    print('\n'.join(['TUNED_TILES entries:', *results.document['table_lines']]))
    if args.output:
        print(f'wrote {args.output}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
