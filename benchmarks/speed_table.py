"""The README's speed table, generated from the newest committed
``benchmarks/results/speed-vs-swin-*.json`` (written by ``speed_vs_swin.py``).

The table sits in README.md between the markers ``<!-- speed-table:begin -->``
and ``<!-- speed-table:end -->``; nothing between them is typed by hand.

  python benchmarks/speed_table.py            # print the table
  python benchmarks/speed_table.py --write    # put it into README.md
  python benchmarks/speed_table.py --check    # exit 1 if README.md differs

``tests/test_speed_table.py`` runs the check, so a README whose figures
differ from the newest results file fails the tests.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / 'benchmarks' / 'results'
README = REPO_ROOT / 'README.md'
BEGIN, END = '<!-- speed-table:begin -->', '<!-- speed-table:end -->'
TASK_NAMES = {'backbone-forward': 'backbone forward',
              'backbone-train': 'backbone training step (fwd + bwd + AdamW)',
              'upernet-forward': 'UperNet forward'}


def newest_results(results_dir: Path = RESULTS_DIR, device_type: Optional[str] = None) -> Path:
    """The speed-vs-swin JSON with the latest ``date`` (of one device type)."""
    reports = []
    for path in results_dir.glob('speed-vs-swin-*.json'):
        report = json.loads(path.read_text())
        if device_type is None or report['device_type'] == device_type:
            reports.append((report['date'], path))
    if not reports:
        raise FileNotFoundError(f'no speed-vs-swin-*.json in {results_dir}: run '
                                'benchmarks/speed_vs_swin.py first')
    return max(reports)[1]


def render(report: dict, source: str) -> str:
    """Markdown: where it ran, then one row per task and size."""
    lines = [f"Measured on {report['device']} ({report['cpu_threads']} threads"
             f"{', CUDA ' + report['cuda'] if report.get('cuda') else ''}), "
             f"{report['dtype']}, batch {report['batch_size']}, median of "
             f"{report['repeats']} interleaved runs after {report['warmup']} warm-up, "
             f"torch {report['versions'].get('torch')}, commit {report['commit']}, "
             f"{report['date'][:10]}; raw: `{source}`.",
             '',
             '| measurement | size | MAViT-T ms | Swin-T ms | MAViT-T / Swin-T |',
             '| --- | --- | ---: | ---: | ---: |']
    for row in report['results']:
        size = f"{row['shape'][0]}x{row['shape'][1]}"
        lines.append(f"| {TASK_NAMES.get(row['task'], row['task'])} | {size} | "
                     f"{row['median_ms']['MAViT-T']:.0f} | {row['median_ms']['Swin-T']:.0f} | "
                     f"{row['ratio']:.2f} |")
    return '\n'.join(lines)


def table_for(path: Path) -> str:
    return render(json.loads(path.read_text()), path.relative_to(REPO_ROOT).as_posix())


def readme_table(readme_text: str) -> str:
    if BEGIN not in readme_text or END not in readme_text:
        raise ValueError(f'README.md has no {BEGIN} ... {END} block')
    return readme_text.split(BEGIN, 1)[1].split(END, 1)[0].strip('\n')


def with_table(readme_text: str, table: str) -> str:
    head, rest = readme_text.split(BEGIN, 1)
    return f'{head}{BEGIN}\n{table}\n{END}{rest.split(END, 1)[1]}'


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--results', type=Path,
                        help='a speed-vs-swin JSON (default: the newest CPU one)')
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument('--write', action='store_true', help='write the table into README.md')
    mode.add_argument('--check', action='store_true',
                      help='exit 1 when README.md does not hold the newest table')
    args = parser.parse_args(argv)
    path = args.results.resolve() if args.results else newest_results(device_type='cpu')
    table = table_for(path)
    text = README.read_text()
    if args.write:
        README.write_text(with_table(text, table))
        print(f'README.md: speed table from {path.name}')
    elif args.check:
        if readme_table(text) != table:
            print(f'README.md speed table differs from {path.name}; run '
                  'python benchmarks/speed_table.py --write', file=sys.stderr)
            return 1
        print(f'README.md speed table matches {path.name}')
    else:
        print(table)
    return 0


if __name__ == '__main__':
    sys.exit(main())
