#!/usr/bin/env python
"""The main job: train and evaluate MAViT-T detection and segmentation on the
bundled synthetic data, on whatever machine this is (a CPU is enough).

    python tools/main_job.py                 # ~15 minutes on a 2-core CPU

Steps, for Mask R-CNN + MAViT-T (COCO-format shapes) and UperNet + MAViT-T
(ADE20K-format shapes):

1. generate the datasets into data/demo/ (once; tools/make_demo_data.py);
2. ``tools/train.py`` on the demo config, which first evaluates the freshly
   initialised model (the untrained baseline) and then trains from scratch;
3. ``tools/test.py`` on the final checkpoint (COCO bbox/segm AP with
   pycocotools, mIoU);
4. print a table of untrained vs trained metrics and write it to
   ``<work-dir>/summary.json``.

Exit status 0 only if every trained model beats its untrained baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from mavit_mm.data.synthetic import (dataset_complete, make_ade20k_dataset,  # noqa: E402
                                     make_coco_dataset)
from mavit_mm.engine.config_tools import set_iterations  # noqa: E402
from mavit_mm.engine.json_logs import (latest_test_metrics,  # noqa: E402
                                       validation_metrics_by_step)

DATA_ROOT = Path('data/demo')  # what the demo configs read, relative to the repo root
DATA_SETTINGS = dict(num_train=64, num_val=16, image_size=(160, 160), num_classes=4,
                     max_objects=3, seed=0)

# (name, demo config, dataset kind, headline metrics shown in the table)
JOBS = (
    ('mask_rcnn', 'configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py', 'coco',
     ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50')),
    ('upernet', 'configs/demo/upernet_mavit-t_demo-shapes.py', 'ade20k',
     ('mIoU', 'mAcc', 'aAcc')),
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Train Mask R-CNN + MAViT-T and UperNet + MAViT-T from scratch on the '
                    'bundled synthetic data with tools/train.py, evaluate them with '
                    'tools/test.py, and compare with the untrained models.')
    parser.add_argument('--work-dir', type=Path, default=Path('work_dirs/main_job'),
                        help='folder for logs, checkpoints and summary.json '
                             '(default: work_dirs/main_job, relative to the repo root)')
    parser.add_argument('--only', choices=[name for name, *_ in JOBS], action='append',
                        help='run only this model (repeatable; default: all)')
    parser.add_argument('--max-iters', type=int, default=None,
                        help="training iterations per model (default: the demo config's); "
                             'the lr schedule is stretched to match')
    parser.add_argument('--regenerate-data', action='store_true',
                        help='write the synthetic datasets again even if present')
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(f'[main_job {time.strftime("%H:%M:%S")}] {message}', flush=True)


def ensure_data(kinds, regenerate: bool) -> None:
    makers = {'coco': make_coco_dataset, 'ade20k': make_ade20k_dataset}
    for kind in kinds:
        root = DATA_ROOT / kind
        if not regenerate and dataset_complete(root, kind, **DATA_SETTINGS):
            log(f'{kind} data present in {root}')
            continue
        start = time.time()
        makers[kind](root, **DATA_SETTINGS)
        log(f'{kind} data written to {root} ({time.time() - start:.1f}s)')


def write_job_config(config: str, work_dir: Path, max_iters) -> Path:
    """The demo config plus: evaluate before training (the untrained baseline),
    no validation at the end (tools/test.py evaluates the trained model)."""
    from mmengine.config import Config
    cfg = Config.fromfile(str(REPO_ROOT / config))
    if max_iters:
        set_iterations(cfg, max_iters)
    imports = list(cfg.get('custom_imports', {}).get('imports', []))
    cfg.custom_imports = dict(imports=imports + ['mavit_mm.engine.hooks'],
                              allow_failed_imports=False)
    cfg.custom_hooks = list(cfg.get('custom_hooks', [])) + [
        dict(type='EvaluateBeforeTrainingHook')]
    cfg.train_cfg.val_begin = cfg.train_cfg.max_iters + 1
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f'{Path(config).stem}_main-job.py'
    cfg.dump(str(path))
    return path


def run_tool(args, log_name: str, work_dir: Path) -> float:
    """Run a tool with its output on the console (and in <work_dir>/<log_name>)."""
    command = [sys.executable, *map(str, args)]
    log('$ ' + ' '.join(str(a) for a in args))
    start = time.time()
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    with open(work_dir / log_name, 'w') as transcript:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, cwd=REPO_ROOT)
        for line in process.stdout:  # progress stays visible while it runs
            sys.stdout.write(line)
            sys.stdout.flush()
            transcript.write(line)
            transcript.flush()
        process.wait()
    if process.returncode != 0:
        raise RuntimeError(f'{args[0]} failed (exit {process.returncode}); see '
                           f'{work_dir / log_name}')
    return time.time() - start


def run_job(name: str, config: str, headline, work_root: Path, max_iters) -> dict:
    work_dir = work_root / name
    job_config = write_job_config(config, work_dir, max_iters)
    from mmengine.config import Config
    iters = Config.fromfile(str(job_config)).train_cfg.max_iters

    train_seconds = run_tool(['tools/train.py', job_config, '--work-dir', work_dir],
                             'train_console.log', work_dir)
    untrained = validation_metrics_by_step(work_dir).get(0)
    if untrained is None:
        raise RuntimeError(f'no baseline evaluation (step 0) in the logs of {work_dir}')
    checkpoint = work_dir / f'iter_{iters}.pth'
    test_seconds = run_tool(['tools/test.py', job_config, checkpoint, '--work-dir', work_dir],
                            'test_console.log', work_dir)
    trained = latest_test_metrics(work_dir)
    if trained is None:
        raise RuntimeError(f'no test metrics in the logs of {work_dir}')
    improved = all(trained[k] > untrained[k] for k in headline)
    return dict(config=config, checkpoint=str(checkpoint), max_iters=iters,
                headline_metrics=list(headline), untrained=untrained, trained=trained,
                improved=improved, train_seconds=round(train_seconds, 1),
                test_seconds=round(test_seconds, 1))


def summary_table(results: dict) -> str:
    rows = [('model', 'metric', 'untrained', 'trained')]
    for name, result in results.items():
        for metric in result['headline_metrics']:
            rows.append((name, metric, f"{result['untrained'][metric]:.3f}",
                         f"{result['trained'][metric]:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ['  '.join(cell.ljust(w) if i < 2 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.chdir(REPO_ROOT)  # the demo configs' data paths are relative to the repo root
    start = time.time()
    jobs = [job for job in JOBS if not args.only or job[0] in args.only]
    ensure_data(sorted({kind for _, _, kind, _ in jobs}), args.regenerate_data)
    results = {}
    for name, config, _, headline in jobs:
        log(f'=== {name}: {config} ===')
        results[name] = run_job(name, config, headline, args.work_dir, args.max_iters)
        log(f'{name}: trained {results[name]["train_seconds"]:.0f}s, '
            f'tested {results[name]["test_seconds"]:.0f}s')
    wall = time.time() - start
    table = summary_table(results)
    summary = dict(results=results, wall_seconds=round(wall, 1),
                   all_improved=all(r['improved'] for r in results.values()),
                   data=dict(root=str(DATA_ROOT), **DATA_SETTINGS))
    args.work_dir.mkdir(parents=True, exist_ok=True)
    (args.work_dir / 'summary.json').write_text(json.dumps(summary, indent=2) + '\n')
    print('\nMAViT-T on the synthetic shapes data: untrained (freshly initialised) vs '
          'trained from scratch\n' + table)
    print(f'\nwall time {wall / 60:.1f} min; summary written to {args.work_dir / "summary.json"}')
    if not summary['all_improved']:
        print('FAILED: a trained model is not better than its untrained baseline on every '
              'headline metric', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
