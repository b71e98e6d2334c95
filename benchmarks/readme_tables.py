"""The measured figures of README.md and docs/, generated from committed
results files.

Each block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in
its file; nothing between the markers is typed by hand. Each is rendered from
the newest file (by its ``date``) of its kind in ``benchmarks/results/``:

  speed-table        README.md           speed-vs-swin-*.json (CPU)   make bench
  main-job           README.md           main-job-*.json              tools/main_job.py --record
  demo-train-step    README.md           demo-train-step-*.json       benchmarks/demo_train_step.py
  onnxruntime-speed  docs/deployment.md  onnxruntime-speed-*.json     benchmarks/onnxruntime_speed.py

  python benchmarks/readme_tables.py            # print the blocks
  python benchmarks/readme_tables.py --write    # put them into their files
  python benchmarks/readme_tables.py --check    # exit 1 if a file differs

``tests/test_readme_tables.py`` runs the check, so a page whose figures
differ from the newest results files fails the tests.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable, Dict, NamedTuple, Optional

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / 'benchmarks' / 'results'
README = REPO_ROOT / 'README.md'
# The files the blocks live in, by name (tests point these elsewhere).
TARGET_FILES = {'README.md': README, 'docs/deployment.md': REPO_ROOT / 'docs' / 'deployment.md'}
TASK_NAMES = {'backbone-forward': 'backbone forward',
              'backbone-train': 'backbone training step (fwd + bwd + AdamW)',
              'upernet-forward': 'UperNet forward'}
MODEL_NAMES = {'mask_rcnn': 'Mask R-CNN + MAViT-T', 'upernet': 'UperNet + MAViT-T',
               'retinanet': 'RetinaNet + MAViT-T', 'sem_fpn': 'Semantic FPN + MAViT-T',
               'cascade_mask_rcnn': 'Cascade Mask R-CNN + MAViT-T'}


class Block(NamedTuple):
    pattern: str                       # results files of this kind
    render: Callable[[dict, str], str]
    device_type: Optional[str] = None  # only files of this device type
    target: str = 'README.md'          # a key of TARGET_FILES


def markers(name: str):
    return f'<!-- {name}:begin -->', f'<!-- {name}:end -->'


def _source_line(report: dict, source: str, what: str) -> str:
    versions = report.get('versions') or {}
    torch_version = versions.get('torch') or report.get('torch')
    return (f"{what} on {report['device']} ({report['cpu_threads']} threads"
            f"{', CUDA ' + report['cuda'] if report.get('cuda') else ''}), torch "
            f"{torch_version}, commit {report.get('commit')}, {report['date'][:10]}; raw: "
            f"`{source}`.")


def render_speed(report: dict, source: str) -> str:
    """One row per task and size: MAViT-T against Swin-T."""
    lines = [_source_line(report, source, 'Measured') +
             f" {report['dtype']}, batch {report['batch_size']}, median of "
             f"{report['repeats']} interleaved runs after {report['warmup']} warm-up.",
             '',
             '| measurement | size | MAViT-T ms | Swin-T ms | MAViT-T / Swin-T |',
             '| --- | --- | ---: | ---: | ---: |']
    for row in report['results']:
        size = f"{row['shape'][0]}x{row['shape'][1]}"
        lines.append(f"| {TASK_NAMES.get(row['task'], row['task'])} | {size} | "
                     f"{row['median_ms']['MAViT-T']:.0f} | {row['median_ms']['Swin-T']:.0f} | "
                     f"{row['ratio']:.2f} |")
    return '\n'.join(lines)


def render_main_job(report: dict, source: str) -> str:
    """The main job's metrics (untrained against trained, the bars) and times."""
    summary = report['summary']
    bars = {(bar['model'], bar['metric']): bar['minimum'] for bar in summary['bars']}
    lines = [_source_line(report, source, 'One run of `make demo`') +
             f" Exit status {'0 (passed)' if summary['passed'] else '1 (failed)'}.",
             '',
             '| model | metric | untrained | trained | bar |',
             '| --- | --- | ---: | ---: | --- |']
    for name, result in summary['results'].items():
        label = f"{MODEL_NAMES.get(name, name)} ({result['max_iters']} iterations)"
        for metric in result['headline_metrics']:
            bar = bars.get((name, metric))
            lines.append(f"| {label} | {metric} | {_metric(result['untrained'].get(metric))} | "
                         f"{_metric(result['trained'].get(metric))} | "
                         f"{'' if bar is None else f'>= {bar:g}'} |")
            label = ''
    lines += ['', '| model | training (with its evaluations) | test | pictures |',
              '| --- | ---: | ---: | ---: |']
    for name, result in summary['results'].items():
        lines.append(f"| {MODEL_NAMES.get(name, name)} | {result['train_seconds'] / 60:.1f} min | "
                     f"{result['test_seconds']:.0f} s | {result['picture_seconds']:.0f} s |")
    lines.append(f"| **whole job** | **{summary['wall_seconds'] / 60:.1f} min** | | |")
    return '\n'.join(lines)


def render_demo_train_step(report: dict, source: str) -> str:
    """The demo Mask R-CNN's training step, MAViT-T against ResNet-18."""
    medians = report['median_ms']
    return '\n'.join([
        _source_line(report, source, 'Measured') +
        f" Batch {report['batch_size']} of the demo data, median of {report['steps']} "
        f"alternating steps after {report['warmup']} warm-up.",
        '',
        '| Mask R-CNN demo config, backbone | training step ms | against ResNet-18 |',
        '| --- | ---: | ---: |',
        f"| MAViT-T | {medians['MAViT-T']:.0f} | {report['ratio_mavit_over_resnet18']:.2f} |",
        f"| ResNet-18 | {medians['ResNet-18']:.0f} | 1.00 |"])


def render_onnxruntime_speed(report: dict, source: str) -> str:
    """ONNX Runtime against PyTorch eager, per input size."""
    lines = [_source_line(report, source, 'Measured') +
             f" {report['model']}, {report['dtype']}, batch {report['batch_size']}, median of "
             f"{report['repeats']} alternating runs after {report['warmup']} warm-up; "
             f"{report['exported_with']}.",
             '',
             '| size | PyTorch ms | ONNX Runtime ms | speed-up | labels agree |',
             '| --- | ---: | ---: | ---: | ---: |']
    for row in report['results']:
        lines.append(f"| {row['shape'][0]}x{row['shape'][1]} | "
                     f"{row['median_ms']['PyTorch']:.0f} | {row['median_ms']['ONNX Runtime']:.0f} | "
                     f"{row['speedup']:.2f} | {100 * row['label_agreement']:.2f}% |")
    return '\n'.join(lines)


def _metric(value) -> str:
    return 'n/a' if value is None else f'{value:.3f}' if abs(value) < 2 else f'{value:.2f}'


BLOCKS: Dict[str, Block] = {
    'speed-table': Block('speed-vs-swin-*.json', render_speed, device_type='cpu'),
    'main-job': Block('main-job-*.json', render_main_job),
    'demo-train-step': Block('demo-train-step-*.json', render_demo_train_step),
    'onnxruntime-speed': Block('onnxruntime-speed-*.json', render_onnxruntime_speed,
                               target='docs/deployment.md'),
}


def newest_results(name: str, results_dir: Path = RESULTS_DIR) -> Path:
    """The results file of block ``name`` with the latest ``date``."""
    block = BLOCKS[name]
    reports = []
    for path in results_dir.glob(block.pattern):
        report = json.loads(path.read_text())
        if block.device_type is None or report.get('device_type', 'cpu') == block.device_type:
            reports.append((report['date'], path))
    if not reports:
        raise FileNotFoundError(f'no {block.pattern} in {results_dir}')
    return max(reports)[1]


def block_for(name: str, path: Optional[Path] = None) -> str:
    path = path or newest_results(name)
    return BLOCKS[name].render(json.loads(path.read_text()),
                               path.resolve().relative_to(REPO_ROOT).as_posix())


def readme_block(readme_text: str, name: str) -> str:
    begin, end = markers(name)
    if begin not in readme_text or end not in readme_text:
        raise ValueError(f'README.md has no {begin} ... {end} block')
    return readme_text.split(begin, 1)[1].split(end, 1)[0].strip('\n')


def with_block(readme_text: str, name: str, block: str) -> str:
    begin, end = markers(name)
    head, rest = readme_text.split(begin, 1)
    return f'{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}'


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--blocks', nargs='+', choices=sorted(BLOCKS), default=list(BLOCKS),
                        help='which blocks (default: all)')
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument('--write', action='store_true', help='write the blocks into README.md')
    mode.add_argument('--check', action='store_true',
                      help='exit 1 when README.md does not hold the newest blocks')
    args = parser.parse_args(argv)
    texts = {}
    stale = []
    for name in args.blocks:
        target = BLOCKS[name].target
        text = texts.setdefault(target, TARGET_FILES[target].read_text())
        path = newest_results(name)
        block = block_for(name, path)
        if args.write:
            texts[target] = with_block(text, name, block)
            print(f'{target}: {name} from {path.name}')
        elif args.check:
            if readme_block(text, name) != block:
                stale.append(f'{name} in {target} (newest: {path.name})')
        else:
            print(f'--- {name} ({path.name}, for {target})\n{block}\n')
    if args.write:
        for target, text in texts.items():
            TARGET_FILES[target].write_text(text)
    if stale:
        print('Blocks differ from the newest results: ' + ', '.join(stale) +
              '; run python benchmarks/readme_tables.py --write', file=sys.stderr)
        return 1
    if args.check:
        print('every block matches the newest results files')
    return 0


if __name__ == '__main__':
    sys.exit(main())
