#!/usr/bin/env python
"""MAViT-T of this tree against MAViT-T of another commit, in one process.

A/B runs in separate processes (``speed_vs_swin.py`` on a ``git worktree``)
meet a shared machine's drift, which moves a CPU's times by 10-50% between
minutes. Here both models live in one process, load the same weights, check
that they compute the same outputs, and run in interleaved pairs (ABBA...):
each pair's time ratio sees the same machine. The other commit's
``mavit_mm`` is extracted with ``git archive`` into a scratch folder and
imported under another name (its models and ops only; nothing is
registered).

Tasks, batch 1, fp32 unless ``--autocast bf16``:

  forward   the backbone's forward, no grad, eval mode
  train     forward, backward of the mean of the outputs, AdamW step

Writes JSON: both commits, every pair's times, per task the median times and
the median, min and max of the per-pair ratio (this tree over the base).

Example:
  python benchmarks/backbone_ab.py --base 48ab1c3 --size 512 2048 --pairs 12 \\
      --out benchmarks/results/speed-ab-cpu-2026-11-26/in-process-48ab1c3.json
"""
from __future__ import annotations

import argparse
import functools
import importlib
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from benchmarks.timing import interleaved_ms, pair_ratios  # noqa: E402

TASKS = ('forward', 'train')
BASE_PACKAGE = 'mavit_ab_base'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--base', required=True, help='the commit to compare with (any git rev)')
    parser.add_argument('--size', type=int, nargs=2, default=(512, 2048), metavar=('H', 'W'),
                        help='input size (default 512 2048)')
    parser.add_argument('--tasks', nargs='+', choices=TASKS, default=list(TASKS))
    parser.add_argument('--pairs', type=int, default=12,
                        help='timed pairs per task, after one warm-up each (default 12)')
    parser.add_argument('--autocast', choices=['bf16'], default=None,
                        help='run under CPU autocast to this dtype (default: fp32)')
    parser.add_argument('--threads', type=int, default=None,
                        help='torch threads (default: torch\'s own)')
    parser.add_argument('--out', type=Path, help='JSON to write (default: print only)')
    args = parser.parse_args(argv)
    if args.pairs < 1:
        parser.error('--pairs must be at least 1')
    return args


def import_base(rev: str, scratch: Path):
    """``mavit_mm`` of ``rev`` as the package ``BASE_PACKAGE`` (its
    ``__init__`` emptied: importing it registers nothing twice)."""
    try:
        archive = subprocess.run(['git', 'archive', '--format=tar', rev, 'mavit_mm'],
                                 cwd=REPO_ROOT, capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f'git archive {rev}: {exc.stderr.decode().strip()}') from exc
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(scratch, filter='data')
    package = scratch / BASE_PACKAGE
    (scratch / 'mavit_mm').rename(package)
    (package / '__init__.py').write_text('')
    sys.path.insert(0, str(scratch))
    return importlib.import_module(f'{BASE_PACKAGE}.models.mavit')


def run_task(task: str, model: torch.nn.Module, image: torch.Tensor, optimizer, autocast):
    """One call of ``task``."""
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast is not None):
        if task == 'forward':
            with torch.no_grad():
                model(image)
        else:
            sum(out.float().mean() for out in model(image)).backward()
    if task == 'train':
        optimizer.step()
        optimizer.zero_grad()


def main(argv=None) -> dict:
    args = parse_args(argv)
    from devtools.checkout import git_commit
    from mavit_mm.models.mavit import MAViT
    from mavit_mm.tooling.device import cpu_model
    if args.threads:
        torch.set_num_threads(args.threads)
    base_commit = subprocess.run(['git', 'rev-parse', '--short', args.base], cwd=REPO_ROOT,
                                 capture_output=True, text=True).stdout.strip() or args.base
    with tempfile.TemporaryDirectory() as scratch:
        base_mavit = import_base(args.base, Path(scratch)).MAViT
        torch.manual_seed(0)
        models = {'this tree': MAViT('tiny', mala_impl='torch'),
                  'base': base_mavit('tiny', mala_impl='torch')}
        models['base'].load_state_dict(models['this tree'].state_dict())
        image = torch.randn(1, 3, *args.size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16,
                                             enabled=args.autocast is not None):
            outputs = [model.eval()(image) for model in models.values()]
        same = all(torch.equal(a, b) for a, b in zip(*outputs))
        print(f'same outputs (eval forward): {same}')
        results = {}
        for task in args.tasks:
            optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-6)
                          for name, model in models.items()}
            for model in models.values():
                model.train(task == 'train')
            started = time.perf_counter()

            def progress(pair, times, task=task, started=started):
                elapsed = time.perf_counter() - started
                print(f'[{task} pair {pair + 1}/{args.pairs}] this tree '
                      f"{times['this tree'][-1]:.0f} ms, base {times['base'][-1]:.0f} "
                      f'ms; {elapsed:.0f} s so far, about '
                      f'{elapsed / (pair + 1) * (args.pairs - pair - 1):.0f} s left', flush=True)
            times = interleaved_ms(
                {name: functools.partial(run_task, task, model, image, optimizers[name],
                                         args.autocast) for name, model in models.items()},
                torch.device('cpu'), args.pairs, warmup=1, progress=progress)
            ratios = pair_ratios(times, 'this tree', 'base')
            results[task] = dict(
                times_ms={name: [round(t, 2) for t in values] for name, values in times.items()},
                median_ms={name: round(ms, 2) for name, ms in ratios['median_ms'].items()},
                **{key: round(ratios[key], 4) for key in ('ratio_median', 'ratio_min',
                                                          'ratio_max')})
            print(f"{task}: this tree / base, per pair: median {results[task]['ratio_median']}"
                  f" (min {results[task]['ratio_min']}, max {results[task]['ratio_max']})")
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    report = dict(benchmark='backbone_ab', model="MAViT('tiny', mala_impl='torch')",
                  input=[1, 3, *args.size], autocast=args.autocast or 'off (fp32)',
                  pairs=args.pairs, same_outputs=same, commit=git_commit(), base=base_commit,
                  cpu=cpu_model(), threads=torch.get_num_threads(), torch=torch.__version__,
                  date=utc_timestamp(), results=results)
    if args.out:
        write_json(args.out, report)
        print(f'wrote {args.out}')
    return report


if __name__ == '__main__':
    main()
