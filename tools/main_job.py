#!/usr/bin/env python
"""The main job: train and evaluate MAViT-T detection and segmentation on the
bundled synthetic data, on whatever machine this is (a CPU is enough).

    python tools/main_job.py                 # minutes on a 2-core CPU: README, Results

Steps, for Mask R-CNN + MAViT-T (COCO-format shapes) and UperNet + MAViT-T
(ADE20K-format shapes):

1. generate the datasets into data/demo/ (once; tools/make_demo_data.py);
2. ``tools/train.py`` on the demo config, which first evaluates the freshly
   initialised model (the untrained baseline), then trains from scratch and
   evaluates on the validation split at a few points on the way (the curve);
3. ``tools/test.py`` on the final checkpoint (COCO bbox/segm AP with
   pycocotools, mIoU);
4. pictures: ground truth beside prediction for a few validation images
   (mmdet's / mmseg's visualisers) and the training curves, in
   ``<work-dir>/<model>/pictures/``;
5. print a table of untrained vs trained metrics and the bars, and write it
   all to ``<work-dir>/summary.json``.

Exit status 0 only if every trained model beats its untrained baseline on
every headline metric and reaches the absolute bars of ``BARS``.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mavit_mm.data.synthetic import (  # noqa: E402
    DEMO_DATA_ROOT,
    DEMO_DATA_SETTINGS,
    dataset_complete,
    make_ade20k_dataset,
    make_coco_dataset,
)
from mavit_mm.tooling.cli import int_at_least  # noqa: E402
from mavit_mm.tooling.config import load_config, set_iterations  # noqa: E402
from mavit_mm.tooling.demo_jobs import DEMO_JOBS  # noqa: E402
from mavit_mm.tooling.json_logs import (  # noqa: E402
    latest_test_metrics,
    run_dirs,
    validation_metrics_by_step,
)
from mavit_mm.tooling.results_file import utc_timestamp, write_json  # noqa: E402
from mavit_mm.tooling.run_script import run_script  # noqa: E402

# The demo models the main job trains (their configs, data and headline
# metrics: DEMO_JOBS), in this order.
JOBS = ('mask_rcnn', 'upernet')
# Absolute quality a trained model must reach on the held-out split, besides
# beating its untrained baseline: (model, metric, minimum). A from-scratch
# ResNet-18 in the same demo config reaches bbox mAP@50 1.0 / mAP 0.77.
BARS = (
    ('mask_rcnn', 'coco/bbox_mAP_50', 0.8),
    ('mask_rcnn', 'coco/bbox_mAP', 0.5),
)
# Validations during training (besides the untrained one): the points of the curve.
VALIDATIONS_DURING_TRAINING = 3
# Validation images drawn (ground truth beside prediction) per model.
PICTURED_IMAGES = 4
# The committed records of `--record` (the README's Results): the estimates printed.
RECORDS = REPO_ROOT / 'benchmarks' / 'results'


@functools.cache
def demo_schedules() -> dict[str, int]:
    """Each model's training iterations in its demo config."""
    return {name: load_config(REPO_ROOT / DEMO_JOBS[name].config).train_cfg.max_iters
            for name in JOBS}


def reference_minutes() -> dict[str, float]:
    """Minutes each model took (training with its validations, test,
    pictures) in the newest committed record of the whole job as shipped
    (every model, its demo config's iterations); none without one."""
    import json
    schedules = demo_schedules()
    full_runs = []
    for path in RECORDS.glob('main-job-cpu-*.json'):
        try:
            record = json.loads(path.read_text())
            jobs = record['summary']['results']
            minutes = {name: (jobs[name]['train_seconds'] + jobs[name]['test_seconds']
                              + jobs[name]['picture_seconds']) / 60 for name in JOBS}
        except (ValueError, KeyError, TypeError):    # not a whole record: no reference
            continue
        if all(jobs[name].get('max_iters') == schedules[name] for name in JOBS):
            full_runs.append((record.get('date', ''), minutes))
    return max(full_runs, key=lambda run: run[0])[1] if full_runs else {}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Train Mask R-CNN + MAViT-T and UperNet + MAViT-T from scratch on the '
                    'bundled synthetic data with tools/train.py, evaluate them with '
                    'tools/test.py, and compare with the untrained models.')
    parser.add_argument('--work-dir', type=Path, default=Path('work_dirs/main_job'),
                        help='folder for logs, checkpoints and summary.json (default: '
                             'work_dirs/main_job); a relative path is taken from the repo '
                             'root, where the job runs')
    parser.add_argument('--only', choices=JOBS, action='append',
                        help='run only this model (repeatable; default: all)')
    parser.add_argument('--max-iters', type=int_at_least(1), default=None,
                        help="training iterations per model (default: the demo config's); "
                             'the lr schedule is stretched to match')
    parser.add_argument('--record', type=Path, default=None, metavar='JSON',
                        help='also write the summary with the machine, versions and commit '
                             'to JSON, a relative path taken from the repo root '
                             '(benchmarks/results/main-job-cpu-DATE.json is what '
                             'benchmarks/readme_tables.py puts into the README)')
    parser.add_argument('--regenerate-data', action='store_true',
                        help='write the synthetic datasets again even if present')
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(f'[main_job {time.strftime("%H:%M:%S")}] {message}', flush=True)


def ensure_data(kinds, regenerate: bool) -> None:
    makers = {'coco': make_coco_dataset, 'ade20k': make_ade20k_dataset}
    for kind in kinds:
        root = Path(DEMO_DATA_ROOT) / kind
        if not regenerate and dataset_complete(root, kind, **DEMO_DATA_SETTINGS):
            log(f'{kind} data present in {root}')
            continue
        start = time.time()
        log(f'writing {kind} data to {root}: {DEMO_DATA_SETTINGS["num_train"]} training + '
            f'{DEMO_DATA_SETTINGS["num_val"]} validation images (about a second) ...')
        makers[kind](root, **DEMO_DATA_SETTINGS)
        log(f'{kind} data written to {root} ({time.time() - start:.1f}s)')


def write_job_config(config: str, work_dir: Path, max_iters) -> Path:
    """The demo config plus: evaluate before training (the untrained baseline),
    validate ``VALIDATIONS_DURING_TRAINING`` times while training (the last at
    the final iteration), show the progress of every evaluation."""
    cfg = load_config(REPO_ROOT / config)
    if max_iters:
        set_iterations(cfg, max_iters)
    imports = list(cfg.get('custom_imports', {}).get('imports', []))
    cfg.custom_imports = dict(imports=imports + ['mavit_mm.engine.hooks'],
                              allow_failed_imports=False)
    cfg.custom_hooks = list(cfg.get('custom_hooks', [])) + [
        dict(type='EvaluateBeforeTrainingHook'), dict(type='EvaluationProgressHook')]
    iters = cfg.train_cfg.max_iters
    cfg.train_cfg.val_interval = max(1, iters // VALIDATIONS_DURING_TRAINING)
    cfg.train_cfg.val_begin = 1
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f'{Path(config).stem}_main-job.py'
    cfg.dump(str(path))
    return path


def run_tool(tool: str, *args, log_name: str, work_dir: Path) -> float:
    """Run ``tools/<tool>`` with its output on the console and in
    ``<work_dir>/<log_name>``; the seconds it took."""
    log(f'$ tools/{tool} ' + ' '.join(str(a) for a in args))
    result = run_script(REPO_ROOT / 'tools' / tool, *args, cwd=REPO_ROOT,
                        transcript=work_dir / log_name)
    if result.returncode != 0:
        raise RuntimeError(f'tools/{tool} failed (exit {result.returncode}); see '
                           f'{work_dir / log_name}')
    return result.seconds


def run_job(name: str, work_root: Path, max_iters) -> dict:
    config, _, headline = DEMO_JOBS[name]
    work_dir = work_root / name
    job_config = write_job_config(config, work_dir, max_iters)
    cfg = load_config(job_config)
    iters, val_interval = cfg.train_cfg.max_iters, cfg.train_cfg.val_interval

    log(f'{name} step 1/3: tools/train.py, {iters} iterations from scratch; evaluates the '
        f'untrained model first and every {val_interval} iterations (mmengine prints the eta '
        f'every {cfg.default_hooks.logger.interval} iterations)')
    earlier_runs = set(run_dirs(work_dir))
    train_seconds = run_tool('train.py', job_config, '--work-dir', work_dir,
                             log_name='train_console.log', work_dir=work_dir)
    # This run's validations only: the work dir keeps the runs of earlier jobs.
    by_step = validation_metrics_by_step(
        work_dir, [run for run in run_dirs(work_dir) if run not in earlier_runs])
    untrained = by_step.get(0)
    if untrained is None:
        raise RuntimeError(f'no baseline evaluation (step 0) in the logs of {work_dir}')
    checkpoint = work_dir / f'iter_{iters}.pth'
    log(f'{name} step 2/3: tools/test.py on the final checkpoint')
    test_seconds = run_tool('test.py', job_config, checkpoint, '--work-dir', work_dir,
                            log_name='test_console.log', work_dir=work_dir)
    trained = latest_test_metrics(work_dir)
    if trained is None:
        raise RuntimeError(f'no test metrics in the logs of {work_dir}')
    improved = all(k in trained and k in untrained and trained[k] > untrained[k]
                   for k in headline)

    log(f'{name} step 3/3: pictures ({PICTURED_IMAGES} validation images, training curves)')
    start = time.time()
    pictures = draw_pictures(name, job_config, checkpoint, work_dir, headline, trained, iters)
    picture_seconds = time.time() - start
    return dict(config=config, checkpoint=str(checkpoint), max_iters=iters,
                headline_metrics=list(headline), untrained=untrained, trained=trained,
                validation_by_iteration={str(step): {k: metrics[k] for k in headline
                                                     if k in metrics}
                                         for step, metrics in sorted(by_step.items())},
                improved=improved, pictures=pictures,
                train_seconds=round(train_seconds, 1), test_seconds=round(test_seconds, 1),
                picture_seconds=round(picture_seconds, 1))


def draw_pictures(name: str, job_config: Path, checkpoint: Path, work_dir: Path, headline,
                  trained: dict, iters: int) -> dict:
    """Ground truth beside prediction for the first validation images (the
    library's visualiser) and the training curves; returns the PNG paths."""
    from mavit_mm.tooling.pictures import draw_validation_samples, plot_training_curves
    out_dir = work_dir / 'pictures'
    drawn = draw_validation_samples(job_config, checkpoint, out_dir,
                                    num_images=PICTURED_IMAGES,
                                    title=f'{name}: validation images after {iters} iterations')
    curves = plot_training_curves(work_dir, out_dir / 'training_curves.png', headline,
                                  final_metrics=trained, final_step=iters,
                                  bars={metric: minimum for model, metric, minimum in BARS
                                        if model == name},
                                  title=f'{name}: training from scratch on the demo data')
    return dict(ground_truth_vs_prediction=str(drawn['sheet']),
                images=[str(path) for path in drawn['images']],
                training_curves=str(curves))


def check_results(results: dict, bars=BARS) -> dict:
    """Everything the exit status depends on.

    Returns ``{'bars': [{model, metric, minimum, value, passed}], 'failures':
    [message], 'passed': bool}``. A model must beat its untrained baseline on
    every headline metric and reach each of its bars; bars of models that were
    not run (``--only``) are left out.
    """
    failures, checked = [], []
    for name, result in results.items():
        for metric in result['headline_metrics']:
            before, after = result['untrained'].get(metric), result['trained'].get(metric)
            if before is None or after is None or not after > before:
                failures.append(f'{name}: trained {metric} {_fmt(after)} is not above the '
                                f'untrained baseline {_fmt(before)}')
    for name, metric, minimum in bars:
        if name not in results:
            continue
        value = results[name]['trained'].get(metric)
        passed = value is not None and value >= minimum
        checked.append(dict(model=name, metric=metric, minimum=minimum, value=value,
                            passed=passed))
        if not passed:
            failures.append(f'{name}: trained {metric} {_fmt(value)} is below the bar '
                            f'{minimum:g}')
    return dict(bars=checked, failures=failures, passed=not failures)


def job_record(summary: dict) -> dict:
    """``summary`` with what a reader of a results file needs: the machine, the
    versions, the commit and the date."""

    import torch

    from devtools.checkout import git_commit  # the demo job runs from its checkout
    from mavit_mm.tooling.device import device_name, library_versions
    return dict(benchmark='main-job', device=device_name(torch.device('cpu')), device_type='cpu',
                cpu_threads=torch.get_num_threads(), versions=library_versions(),
                commit=git_commit(),
                date=utc_timestamp(),
                summary=summary)


def _fmt(value) -> str:
    return 'missing' if value is None else f'{value:.3f}'


def summary_table(results: dict, bars=BARS) -> str:
    minimum = {(name, metric): m for name, metric, m in bars}
    rows = [('model', 'metric', 'untrained', 'trained', 'bar')]
    for name, result in results.items():
        metrics = list(result['headline_metrics'])
        metrics += [m for n, m, _ in bars if n == name and m not in metrics]
        for metric in metrics:
            bar = minimum.get((name, metric))
            trained = result['trained'].get(metric)
            verdict = ''
            if bar is not None:
                verdict = f'>= {bar:g} ' + ('ok' if trained is not None and trained >= bar
                                            else 'FAILED')
            rows.append((name, metric, _fmt(result['untrained'].get(metric)),
                         _fmt(trained), verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ['  '.join(cell.ljust(w) if i in (0, 1, 4) else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def picture_lines(results: dict) -> str:
    lines = []
    for name, result in results.items():
        pictures = result.get('pictures') or {}
        for label, key in (('ground truth | prediction', 'ground_truth_vs_prediction'),
                           ('training curves', 'training_curves')):
            if key in pictures:
                lines.append(f'  {name} {label}: {pictures[key]}')
    return '\n'.join(lines)


def time_left(jobs, done_index: int, elapsed_minutes: float, reference: dict) -> str:
    """'; about N min left': the ``reference`` minutes of the models still to
    run, scaled by how this machine compared on those done so far."""
    done = sum(reference.get(name, 0) for name in jobs[:done_index + 1])
    left = sum(reference.get(name, 0) for name in jobs[done_index + 1:])
    if not left or not done:
        return ''
    return f', about {left * elapsed_minutes / done:.0f} min left'


def main(argv=None) -> int:
    args = parse_args(argv)
    os.chdir(REPO_ROOT)  # the demo configs' data paths are relative to the repo root
    start = time.time()
    jobs = [name for name in JOBS if not args.only or name in args.only]
    reference = {} if args.max_iters else reference_minutes()
    expected = sum(reference.get(name, 0) for name in jobs)
    log(f'models: {", ".join(jobs)}' +
        (f'; about {expected:.0f} minutes on a 2-core CPU to the end' if expected else ''))
    ensure_data(sorted({DEMO_JOBS[name].data_kind for name in jobs}), args.regenerate_data)
    results = {}
    for index, name in enumerate(jobs):
        minutes = reference.get(name)
        log(f'=== model {index + 1}/{len(jobs)}, {name}: {DEMO_JOBS[name].config} ===' +
            (f' (about {minutes:.1f} minutes on a 2-core CPU)' if minutes else ''))
        results[name] = run_job(name, args.work_dir, args.max_iters)
        elapsed = (time.time() - start) / 60
        log(f'{name}: trained {results[name]["train_seconds"]:.0f}s, '
            f'tested {results[name]["test_seconds"]:.0f}s, '
            f'pictures {results[name]["picture_seconds"]:.0f}s; {elapsed:.1f} min elapsed'
            + time_left(jobs, index, elapsed, reference))
    wall = time.time() - start
    verdict = check_results(results)
    table = summary_table(results)
    summary = dict(results=results, wall_seconds=round(wall, 1),
                   all_improved=all(r['improved'] for r in results.values()),
                   bars=verdict['bars'], failures=verdict['failures'],
                   passed=verdict['passed'],
                   data=dict(root=DEMO_DATA_ROOT, **DEMO_DATA_SETTINGS))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    write_json(args.work_dir / 'summary.json', summary)
    if args.record:
        write_json(args.record, job_record(summary))
        log(f'record written to {args.record}')
    print('\nMAViT-T on the synthetic shapes data (validation split): untrained (freshly '
          'initialised) vs trained from scratch\n' + table)
    print('\nPictures (PNG):\n' + picture_lines(results))
    print(f'\nwall time {wall / 60:.1f} min; summary written to {args.work_dir / "summary.json"}')
    if not verdict['passed']:
        print('FAILED:\n' + '\n'.join(f'  {message}' for message in verdict['failures']),
              file=sys.stderr)
        return 1
    print('PASSED: every trained model beats its untrained baseline and reaches its bars')
    return 0


if __name__ == '__main__':
    sys.exit(main())
