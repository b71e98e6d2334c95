"""MAViT-T against Swin-T, side by side in one process: the speed contract.

Three measurements, each at every size (default 512x512, 512x2048, 1024x2048),
batch 1, the two models interleaved (MAViT, Swin, Swin, MAViT, ...) so that a
machine's drift hits both alike:

  backbone-forward   the backbone's forward, no grad, eval mode
  backbone-train     one training step of the backbone: forward, backward of
                     the mean of its outputs, AdamW step (train mode)
  upernet-forward    the whole UperNet (backbone, neck, heads) in tensor mode

The backbones are those of the UperNet configs (``configs/upernet/
upernet_mavit-t_...`` and ``configs/baselines/upernet_swin-t_...``, mmseg's
SwinTransformer). Each entry records every timed run, the median of each model
and the ratio MAViT-T / Swin-T of the medians (below 1: MAViT-T is faster).
Ratios are comparable within one run only: machines differ.

Writes JSON (device, versions, shapes, times, medians, ratios) and a PNG of the
ratio against input pixels; ``benchmarks/readme_tables.py`` turns the newest
committed JSON into the README's speed table.

Examples:
  make bench                                            # the CPU defaults
  python benchmarks/speed_vs_swin.py --sizes 512x2048 --tasks backbone-forward
  python benchmarks/speed_vs_swin.py --device cuda --dtype bf16 --repeats 10
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

# HEIGHTxWIDTH sizes, checked; one timed call, synchronised around on CUDA
from mavit_mm.tooling.cli import image_size, resolve_device  # noqa: E402  (HEIGHTxWIDTH, checked)
from tools.analysis_tools.benchmark_fps import timed  # noqa: E402

MAVIT_CONFIG = 'configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py'
SWIN_CONFIG = 'configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py'
TASKS = ('backbone-forward', 'backbone-train', 'upernet-forward')
DEFAULT_SIZES = ('512x512', '512x2048', '1024x2048')
# The speed targets (MAViT-T / Swin-T of one run), by task, at 512x2048.
TARGETS = {'backbone-forward': 0.80, 'backbone-train': 1.0, 'upernet-forward': 0.9}
TARGET_SIZE = (512, 2048)
DTYPES = {'fp32': 'float32', 'bf16': 'bfloat16', 'fp16': 'float16'}
# Relative cost of one run of each task, for the time estimate only.
TASK_COST = {'backbone-forward': 1.0, 'backbone-train': 3.0, 'upernet-forward': 5.0}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', type=image_size, nargs='+',
                        default=[image_size(s) for s in DEFAULT_SIZES], metavar='HxW',
                        help=f'input sizes (default: {" ".join(DEFAULT_SIZES)})')
    parser.add_argument('--tasks', nargs='+', choices=TASKS, default=list(TASKS),
                        help='what to time (default: all three)')
    parser.add_argument('--repeats', type=int, default=3,
                        help='timed runs of each model per task and size (default: 3)')
    parser.add_argument('--warmup', type=int, default=1,
                        help='untimed runs of each model first (default: 1)')
    parser.add_argument('--device', default=None, help='cpu or cuda (default: cuda if present)')
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='fp32',
                        help='autocast precision on CUDA (default: fp32, no autocast)')
    parser.add_argument('--mala-impl', choices=['auto', 'torch', 'triton'], default='auto',
                        help="MAViT's MALA implementation (default: auto)")
    parser.add_argument('--out', metavar='JSON',
                        help='default: benchmarks/results/speed-vs-swin-<device>-<date>-<HHMM>.json')
    parser.add_argument('--plot', metavar='PNG', help='default: the JSON path with .png')
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error('--repeats must be at least 1 and --warmup at least 0')
    return args


class Contender:
    """One side of the comparison: a whole UperNet and its backbone."""

    def __init__(self, name: str, config: str, device, mala_impl: str):
        from mavit_mm.tooling.config import load_config
        from mavit_mm.tooling.model_builder import build_model
        self.name = name
        self.cfg = load_config(str(REPO_ROOT / config))
        if self.cfg.model.backbone.type == 'MAViT':
            self.cfg.model.backbone.mala_impl = mala_impl
        self.model = build_model(self.cfg).to(device).eval()
        self.device = device

    def step(self, task: str, height: int, width: int, autocast) -> Callable[[], None]:
        """A callable that runs ``task`` once at this size."""
        import torch

        from mavit_mm.tooling.model_builder import dummy_forward_inputs
        inputs, samples = dummy_forward_inputs(self.cfg, height, width, 1, str(self.device))
        model, backbone = self.model, self.model.backbone
        if task == 'backbone-forward':
            def run():
                with torch.no_grad(), autocast:
                    backbone(inputs)
        elif task == 'upernet-forward':
            def run():
                with torch.no_grad(), autocast:
                    model(inputs, samples, mode='tensor')
        else:
            optimizer = torch.optim.AdamW(backbone.parameters(), lr=1e-6)

            def run():
                backbone.train()
                with autocast:
                    loss = sum(out.float().mean() for out in backbone(inputs))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                backbone.eval()
        return run


def measure(args) -> dict:
    import torch

    from devtools.checkout import git_commit
    from mavit_mm.tooling.device import device_name, library_versions
    from mavit_mm.tooling.results_file import utc_timestamp

    device = resolve_device(args.device)
    if args.dtype != 'fp32' and device.type != 'cuda':
        raise SystemExit(f'--dtype {args.dtype} needs a CUDA device (got {device})')
    autocast = torch.autocast(device.type, dtype=getattr(torch, DTYPES[args.dtype]),
                              enabled=args.dtype != 'fp32')
    torch.manual_seed(0)
    contenders = [Contender('MAViT-T', MAVIT_CONFIG, device, args.mala_impl),
                  Contender('Swin-T', SWIN_CONFIG, device, args.mala_impl)]
    runs_each = args.warmup + args.repeats
    work = {(task, size): TASK_COST[task] * size[0] * size[1]
            for size in args.sizes for task in args.tasks}
    total_work, done_work = sum(work.values()) * 2 * runs_each, 0.0
    started = time.time()
    rows = []
    for size in args.sizes:
        for task in args.tasks:
            steps = {c.name: c.step(task, *size, autocast) for c in contenders}
            times: dict[str, list[float]] = {c.name: [] for c in contenders}
            for repeat in range(runs_each):
                # Alternate who goes first, so neither always runs on a warm cache.
                order = contenders if repeat % 2 == 0 else contenders[::-1]
                for contender in order:
                    seconds = timed(steps[contender.name], device)
                    if repeat >= args.warmup:
                        times[contender.name].append(seconds * 1e3)
                    done_work += work[(task, size)]
                elapsed = time.time() - started
                left = elapsed / done_work * (total_work - done_work)
                print(f'[{task} {size[0]}x{size[1]} run {repeat + 1}/{runs_each}] '
                      + ', '.join(f'{name} {t[-1]:.0f} ms' for name, t in times.items() if t)
                      + f'; {elapsed:.0f} s so far, about {left:.0f} s left', flush=True)
            medians = {name: statistics.median(t) for name, t in times.items()}
            rows.append(dict(task=task, shape=list(size), pixels=size[0] * size[1],
                             times_ms={name: [round(t, 2) for t in ts]
                                       for name, ts in times.items()},
                             median_ms={name: round(m, 2) for name, m in medians.items()},
                             ratio=round(medians['MAViT-T'] / medians['Swin-T'], 4)))
            del steps
            if device.type == 'cuda':
                torch.cuda.empty_cache()
    return dict(benchmark='speed-vs-swin', device=device_name(device), device_type=device.type,
                cuda=torch.version.cuda if device.type == 'cuda' else None,
                cpu_threads=torch.get_num_threads(), dtype=args.dtype,
                mala_impl=args.mala_impl, batch_size=1, warmup=args.warmup,
                repeats=args.repeats, configs=dict(mavit=MAVIT_CONFIG, swin=SWIN_CONFIG),
                commit=git_commit(), versions=library_versions(),
                date=utc_timestamp(),
                targets=dict(size=list(TARGET_SIZE), ratio_at_most=TARGETS),
                results=rows)


def target_verdicts(report: dict) -> list[str]:
    """'met' / 'missed' per target whose size was measured."""
    lines = []
    for row in report['results']:
        limit = report['targets']['ratio_at_most'].get(row['task'])
        if limit is not None and row['shape'] == report['targets']['size']:
            verdict = 'met' if row['ratio'] <= limit else 'MISSED'
            lines.append(f"target {row['task']} at {row['shape'][0]}x{row['shape'][1]}: "
                         f"ratio {row['ratio']:.2f} <= {limit}: {verdict}")
    return lines


def plot(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for task in dict.fromkeys(r['task'] for r in report['results']):
        rows = sorted((r for r in report['results'] if r['task'] == task),
                      key=lambda r: r['pixels'])
        pixels = [r['pixels'] / 1e6 for r in rows]
        line, = ax.plot(pixels, [r['ratio'] for r in rows], 'o-', label=task)
        for r in rows:
            ax.annotate(f"{r['shape'][0]}x{r['shape'][1]}", (r['pixels'] / 1e6, r['ratio']),
                        textcoords='offset points', xytext=(4, 4), fontsize=7)
        target = report['targets']['ratio_at_most'].get(task)
        size = report['targets']['size']
        if target is not None:
            ax.plot([size[0] * size[1] / 1e6], [target], 'x', color=line.get_color(),
                    markersize=9)
    ax.axhline(1.0, color='grey', linewidth=1, linestyle='--')
    ax.set(xlabel='input pixels (millions)', ylabel='time MAViT-T / Swin-T (median)',
           title=f"{report['device']}, batch 1, {report['dtype']} (x: targets)")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse_args(argv)
    report = measure(args)
    out = Path(args.out) if args.out else (
        REPO_ROOT / 'benchmarks' / 'results' /
        f"speed-vs-swin-{report['device_type']}-{datetime.now():%Y-%m-%d-%H%M}.json")
    from mavit_mm.tooling.results_file import write_json
    write_json(out, report)
    png = Path(args.plot) if args.plot else out.with_suffix('.png')
    plot(report, png)
    for row in report['results']:
        print(f"{row['task']:17} {row['shape'][0]:>5}x{row['shape'][1]:<5} "
              + '  '.join(f'{name} {ms:9.1f} ms' for name, ms in row['median_ms'].items())
              + f"  ratio {row['ratio']:.3f}")
    print('\n'.join(target_verdicts(report)))
    print(f'JSON: {out}\nratio against pixels: {png}')
    return report


if __name__ == '__main__':
    main()
