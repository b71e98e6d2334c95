"""The measured figures of README.md and docs/, generated from committed
results files.

Each block sits between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in
its file; nothing between the markers is typed by hand. Each is rendered from
the newest file (by its ``date``) of its kind in ``benchmarks/results/``:

  gpu-upernet-fps   README.md          gpu-*/**/*fps*.json        gpu_check.py --steps upernet-fps,
                                                                  benchmark_fps.py --out gpu-*/fps-*.json
  speed-table       README.md          speed-vs-swin-*.json (CPU) make bench
  main-job          README.md          main-job-*.json            tools/main_job.py --record
  newcomer          README.md          newcomer-*.json            benchmarks/newcomer_path.py
  newcomer-python3.10, newcomer-python3.12
                    docs/installation.md newcomer-*.json          benchmarks/newcomer_path.py --python
  model-zoo         README.md          model-complexity-*.json    benchmarks/model_complexity.py
  backbone-sizes    docs/backbone.md   model-complexity-*.json    benchmarks/model_complexity.py
  flops             docs/speed.md      model-complexity-*.json    benchmarks/model_complexity.py
  demo-train-step   docs/speed.md      demo-train-step-*.json     benchmarks/demo_train_step.py
  onnxruntime-speed docs/deployment.md onnxruntime-speed-*.json   benchmarks/onnxruntime_speed.py
  gpu-targets       docs/gpu.md        gpu-*/*/env.json           benchmarks/gpu_targets.py; each
                                                                  target's step's newest file
  gpu-checks        docs/gpu.md        gpu-*/*/kernel-tests.json  gpu_check.py (the test steps, sdpa)
  gpu-backbones     docs/gpu.md        gpu-*/*/backbones.json     gpu_check.py --steps backbones
  gpu-ablations     docs/gpu.md        gpu-*/*/ablations.json     gpu_check.py --steps ablations; the
                                                                  run's ablations-compile.json beside
  gpu-op-calls      docs/gpu.md        gpu-*/*/profile.json       gpu_check.py --steps profile
  gpu-op            docs/gpu.md        gpu-*/*/bench_mala.json    gpu_check.py --steps bench
  gpu-model-profile docs/gpu.md        gpu-*/*/model-profile.json gpu_check.py --steps model-profile
  gpu-model         docs/gpu.md        gpu-*/*/sweep.json         gpu_check.py --steps sweep
  gpu-model-graphs  docs/gpu.md        gpu-*/*/sweep-graphs.json  gpu_check.py --steps sweep --cuda-graphs
  host-calls        docs/speed.md      host-calls-*.json          benchmarks/host_calls.py

The paper's published figures (``PAPER``) are typed here, labelled as the
paper's; everything else in a block comes from a results file.

A GPU run is one folder ``benchmarks/results/gpu-<device>-<date>/``, one
subfolder per ``gpu_check.py`` command (its ``--out``), each with the
``env.json`` that names the GPU, driver and versions of the files beside it
(a command folder without one, or a file at the run's top, takes the run's
other ``env.json``). That ``env.json`` records the commit measured
(``gpu_check.py --commit``); runs from before it name the commit in the
run's ``README.md``, on a line ``Commit: `<sha>```. ``gpu-upernet-fps``
shows each size and mode from the newest run that measured it
(``benchmark_fps.py``'s JSON, or ``gpu_check.py``'s ``upernet-fps.json``),
a section per run: a mode and size measured more than once in a run shows
each run and their median.
``benchmarks/results/README.md`` says what produced each results file.

A block never names an uncommitted tree: a results file whose commit ends in
``+changes`` (``devtools.checkout.git_commit``: tracked files differed
from the commit) is refused (``UncommittedTreeError``, naming the file and
the block). Re-run its benchmark on a clean checkout, commit the new file,
then ``--write`` the block.

  python benchmarks/readme_tables.py            # print the blocks
  python benchmarks/readme_tables.py --write    # put them into their files
  python benchmarks/readme_tables.py --check    # exit 1 if a file differs

``tests/test_benchmarks/test_readme_tables.py`` runs the check, so a page whose figures
differ from the newest results files fails the tests. ``--check`` and
``--write`` exit 1 when a block is refused; ``--write`` still writes the others.
"""
from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.gpu_check_lib.plan import STEP_FILES, target_file  # noqa: E402
from benchmarks.gpu_targets import (  # noqa: E402
    GPU_TARGETS,
    Target,
    figure_value,
    figures_of,
    met,
    target_of,
)

RESULTS_DIR = REPO_ROOT / 'benchmarks' / 'results'
README = REPO_ROOT / 'README.md'
# The files the blocks live in, by name (tests point these elsewhere).
TARGET_FILES = {'README.md': README,
                **{f'docs/{name}.md': REPO_ROOT / 'docs' / f'{name}.md'
                   for name in ('backbone', 'speed', 'deployment', 'gpu', 'installation')}}
# What each bench row is, where it is one of the model's calls (batch 8) or a target's shape.
OP_BENCH_CALLS = {(8, 65536): 'stage 1, batch 8', (16, 16384): 'stage 2, batch 8',
                  (1, 65536): 'stage 1, batch 1'}
# The forward's split-N reduction (k^T v and the key sums per chunk): the
# kernel the op-calls block names apart.
PARTIALS_KERNEL = '_forward_partials_kernel'
TASK_NAMES = {'backbone-forward': 'backbone forward',
              'backbone-train': 'backbone training step (fwd + bwd + AdamW)',
              'upernet-forward': 'UperNet forward'}
MODEL_NAMES = {'mask_rcnn': 'Mask R-CNN + MAViT-T', 'upernet': 'UperNet + MAViT-T',
               'retinanet': 'RetinaNet + MAViT-T', 'sem_fpn': 'Semantic FPN + MAViT-T',
               'cascade_mask_rcnn': 'Cascade Mask R-CNN + MAViT-T'}
# How ``devtools.checkout.git_commit`` marks a tree whose tracked files
# differ from its commit (a test ties the two).
UNCOMMITTED_MARK = '+changes'
# A GPU run's folder, and the line of its README.md that names its commit.
GPU_RUN_PREFIX = 'gpu-'
GPU_RUN_COMMIT = re.compile(r'^Commit: `([^`]+)`', re.MULTILINE)
# A GPU run's UperNet FPS files: benchmark_fps.py's JSON (at the run's top,
# ``fps-*.json``) and gpu_check.py's ``upernet-fps.json`` (in a command folder).
GPU_FPS_FILES = '**/*fps*.json'
# The two models of the GPU table, by the start of their config's file name.
UPERNET_MODELS = {'MAViT-T': 'upernet_mavit-t_', 'Swin-T': 'upernet_swin-t_'}
# benchmark_fps.py's modes, in its order, as the table names them.
FPS_MODES = {'eager': 'eager', 'cuda-graph': 'CUDA graph', 'compile': 'compile'}


class UncommittedTreeError(ValueError):
    """A results file recorded on a tree with changes no commit holds: a block
    would name a tree nobody can check out."""

    def __init__(self, path: Path, commit: str, block: str | None = None):
        super().__init__(path, commit, block)
        self.path, self.commit, self.block = path, commit, block

    def __str__(self) -> str:
        block = self.block or 'NAME'
        return (f'block {block} refuses {repo_path(self.path)}: it was recorded on an uncommitted '
                f'tree (commit {self.commit}), and a generated block never names one. Re-run what '
                'produced it (benchmarks/results/README.md) on a clean checkout (git status: no '
                'changes to tracked files), commit the new results file, then run: python '
                f'benchmarks/readme_tables.py --write --blocks {block}')


class Block(NamedTuple):
    pattern: str                       # results files of this kind
    render: Callable[[dict, str], str]
    device_type: str | None = None  # only files of this device type
    target: str = 'README.md'          # a key of TARGET_FILES
    # Whether a file measured anything (a step cut at its budget may not have).
    measured: Callable[[dict], bool] = lambda report: True


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
    plot = Path(source).with_suffix('.png')
    if (REPO_ROOT / plot).exists():
        lines += ['', f'![MAViT-T / Swin-T time against pixels, {report["device"]}]'
                      f'({plot.as_posix()})']
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


def render_newcomer(report: dict, source: str) -> str:
    """The README's set-up and test commands on a fresh clone, empty caches;
    with each step's disk where the report measured it."""
    steps = report['steps']
    minutes = {name: step['seconds'] / 60 for name, step in steps.items()}
    failed = [name for name, step in steps.items() if step['returncode'] != 0]
    disk = all('peak_disk_gb' in step for step in steps.values())
    # A step whose disk others changed meanwhile (the report says why): no figures.
    disturbed = report.get('disk_disturbed') or {}
    rows = [f"| `{name}` | {minutes[name]:.1f} |" + (
        (' - | - |' if name in disturbed else
         f" {step['peak_disk_gb']:.1f} | {step['left_on_disk_gb']:.1f} |") if disk else '')
        for name, step in steps.items()]
    versions = report.get('versions') or {}
    interpreter = (f" Python {versions.get('python')} making the venv (`--python`), which "
                   f"installed torch {versions.get('torch')} and Triton {versions.get('triton')};"
                   if report.get('python_option') else '')
    return '\n'.join([
        f"Timed by `benchmarks/newcomer_path.py` on {report['machine']}, commit "
        f"{report['commit']}, {report['date'][:10]}:{interpreter} a fresh clone, every cache empty "
        f'(the mmcv build, pip, Triton, inductor); raw: `{source}`.'
        + (f" Failed: {', '.join(failed)}." if failed else ''),
        '',
        '| step | minutes |' + (' disk at its peak, GB | disk left after it, GB |' if disk else ''),
        '| --- | ---: |' + (' ---: | ---: |' if disk else ''),
        *rows,
        f"| **both** | **{sum(minutes.values()):.1f}** |" + (' | |' if disk else ''),
        '',
        f"Tests: {report['test_summary']}." + _worker_busy(report)
        + ''.join(f' No disk figures for `{name}`: {why}.' for name, why in disturbed.items())])


# The interpreters besides the README's (python3, 3.11) whose newcomer path
# docs/installation.md shows.
OTHER_PYTHONS = ('3.10', '3.12')


def _made_by_python(minor: str, report: dict) -> bool:
    """A newcomer run whose venv another interpreter (``--python``), of
    version ``minor``, made."""
    version = (report.get('versions') or {}).get('python') or ''
    return bool(report.get('python_option')) and version.split('.')[:2] == minor.split('.')


def _worker_busy(report: dict) -> str:
    busy = (report.get('test_durations') or {}).get('worker_busy_s')
    if not busy:
        return ''
    return (' Each worker busy (s): ' + ', '.join(f'{worker} {seconds:.0f}'
                                                 for worker, seconds in busy.items()) + '.')


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


PASS_NAMES = {'forward': 'forward', 'train': 'training step'}


def render_host_calls(report: dict, source: str) -> str:
    """The Python calls of one eager pass, MAViT-T's CUDA host path against
    Swin-T; the baseline checkout's beside them where the file has one."""
    lines = [f"Counted with Python {report['python']}, torch {report['torch']}, commit "
             f"{report['commit']}, {report['date'][:10]}; raw: `{source}`. Batch 1, "
             f"{report['input'][2]}x{report['input'][3]}, {report['autocast']} autocast; "
             f"MAViT-T: {report['backbones']['mavit']}.",
             '',
             '| pass | tree | MAViT-T Python calls | issued by mavit_mm | Swin-T Python calls '
             '| MAViT-T / Swin-T | MAViT-T aten ops | Swin-T aten ops |',
             '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |']
    trees = [(report['commit'], report['results'])]
    if report.get('baseline'):
        trees.append((report['baseline']['commit'], report['baseline']['results']))
    for which, name in PASS_NAMES.items():
        for commit, results in trees:
            if which not in results['MAViT-T']:
                continue
            mavit, swin = results['MAViT-T'][which], results['Swin-T'][which]
            lines.append(f"| {name} | {commit} | {mavit['python_calls']} | "
                         f"{mavit['issued_by_mavit_mm']} | {swin['python_calls']} | "
                         f"{mavit['python_calls'] / swin['python_calls']:.2f} | "
                         f"{mavit['aten_ops']} | {swin['aten_ops']} |")
    if report.get('ablations'):
        passes = [which for which in PASS_NAMES if which in report['ablations']['none']]
        lines += ['', 'MAViT-T with every fast-path switch on (`fast_paths.ALL_ON`), then each '
                  'switch that acts in eager mode off in turn (`--ablate`): Python calls and '
                  'aten ops with the switch off, less with every one on.', '',
                  '| switch off | '
                  + ' | '.join(f'{PASS_NAMES[which]}: {what}' for which in passes
                               for what in ('Python calls', 'aten ops')) + ' |',
                  '| --- |' + ' ---: |' * (2 * len(passes))]
        all_on = report['ablations']['none']
        for switch, row in report['ablations'].items():
            cells = [f"{row[which][count]:d}" if switch == 'none'
                     else f"{row[which][count] - all_on[which][count]:+d}"
                     for which in passes for count in ('python_calls', 'aten_ops')]
            lines.append(f"| {'none (counts)' if switch == 'none' else f'`{switch}`'} | "
                         + ' | '.join(cells) + ' |')
    return '\n'.join(lines)


def repo_path(path: Path) -> str:
    """``path`` as the pages name it: from the repository root where it is inside."""
    path = Path(path).resolve()
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)


def gpu_run_dir(path: Path) -> Path | None:
    """The GPU run (``gpu-<device>-<date>/``) that ``path`` is part of, if any."""
    return next((folder for folder in (Path(path), *Path(path).parents)
                 if folder.name.startswith(GPU_RUN_PREFIX)), None)


def recorded_commit(path: Path, report: dict) -> str | None:
    """The commit results file ``path`` (read as ``report``) was measured on:
    its own ``commit`` (or its environment's); for a file of a GPU run, the
    commit its ``env.json`` records (``gpu_check.py --commit``), else the
    ``Commit:`` line of the run's README.md (runs before the GPU check
    recorded one)."""
    commit = report.get('commit') or (report.get('environment') or {}).get('commit')
    run = gpu_run_dir(path)
    if commit is None and run is not None:
        env = _same_run_file(Path(path).parent, 'env.json')
        commit = json.loads(env.read_text()).get('commit') if env is not None else None
    if commit is None and run is not None and (run / 'README.md').exists():
        found = GPU_RUN_COMMIT.search((run / 'README.md').read_text())
        commit = found.group(1) if found else None
    return commit


def is_uncommitted(commit: str | None) -> bool:
    """Whether ``commit`` is a tree whose tracked files differed from it."""
    return commit is not None and commit.endswith(UNCOMMITTED_MARK)


def committed(path: Path, report: dict) -> str | None:
    """``recorded_commit``; ``UncommittedTreeError`` where it names an uncommitted tree."""
    commit = recorded_commit(path, report)
    if is_uncommitted(commit):
        raise UncommittedTreeError(path, commit)
    return commit


def _gpu_env(source: str) -> dict:
    """The env.json of a GPU result (device, driver, versions): the one beside
    it, else the run's other one."""
    path = _same_run_file((REPO_ROOT / source).parent, 'env.json')
    if path is None:
        raise FileNotFoundError(f'no env.json in the GPU run of {source}')
    return json.loads(path.read_text())


def _gpu_source_line(source: str, what: str, report: dict | None = None) -> str:
    """Where a GPU block's figures come from: the run's GPU and versions (its
    env.json), the commit it measured (``recorded_commit``), the copy
    bandwidth and the folder of the raw files."""
    env = _gpu_env(source)
    commit = recorded_commit(REPO_ROOT / source, report or {})
    return (f"{what} on an {env['device']} (driver {env['driver']}, CUDA {env['cuda']}), torch "
            f"{env['torch']}, Triton {env['triton']}, "
            f"{f'commit {commit}, ' if commit else ''}{env['date'][:10]}; device-to-device copy "
            f"measured in the same run: {env['copy_bandwidth_tbps']:.2f} TB/s; raw: "
            f"`{Path(source).parent.as_posix()}/`.")


def _against_target(value: float, fmt: str, target: Target | None, unit: str = '') -> str:
    """``value`` with its target (``benchmarks/gpu_targets.py``) and verdict,
    e.g. ``35.8 (≥ 70: **missed**)`` (``unit`` after both numbers); the bare
    value where there is no target."""
    if target is None:
        return f'{value:{fmt}}{unit}'
    verdict = 'met' if met(target, [value]) else '**missed**'
    return f"{value:{fmt}}{unit} ({target.comparison} {target.threshold:g}{unit}: {verdict})"


def render_gpu_op(report: dict, source: str) -> str:
    """The op at the bandwidth targets' shapes and at MAViT-T's calls at batch
    8, fused against PyTorch, d = 64: every row of the file, the copy-bandwidth
    targets (``benchmarks/gpu_targets.py``, bf16) beside theirs; a target's
    shape the run did not time is a row that says so."""
    rows = {(row['dtype'], row['batch_heads'], row['tokens'], row['pass'], row['impl']): row
            for row in report['results'] if row['head_dim'] == 64}
    wanted = [figure.match for figure in figures_of('bench', 'percent_of_copy')]
    cases = {key[:4] for key in rows} | {
        (match['dtype'], match['batch_heads'], match['tokens'], match['pass'])
        for match in wanted if match.get('head_dim') == 64}
    dtypes, passes = ('bf16', 'fp16', 'fp32'), ('fwd', 'fwd+bwd')
    layouts = ', '.join(f'`{name}`' for name in sorted({row['layout'] for row in rows.values()}))
    byte_model = '; '.join(f'{name}: {text}' for name, text in report['byte_model'].items())
    lines = [_gpu_source_line(source, 'Measured', report) + f' d = 64, q, k, v in the layout '
             f'{layouts}, median of `triton.testing.do_bench`. "% copy": the bytes moved '
             f'(`benchmarks/bench_mala.py`\'s model, {byte_model}) over the time, against the '
             'copy bandwidth; the targets are for bf16.',
             '',
             '| dtype | B·heads | N | MAViT-T call | pass | fused ms | PyTorch ms | % copy (target) '
             '| speed-up | memory vs PyTorch |',
             '| --- | ---: | ---: | --- | --- | ---: | ---: | --- | ---: | ---: |']

    def order(case):
        dtype, batch_heads, tokens, pass_name = case
        return (dtypes.index(dtype) if dtype in dtypes else len(dtypes), -tokens, -batch_heads,
                passes.index(pass_name) if pass_name in passes else len(passes))
    for case in sorted(cases, key=order):
        dtype, batch_heads, tokens, pass_name = case
        target = target_of('bench', 'percent_of_copy', dict(
            impl='triton', dtype=dtype, head_dim=64, batch_heads=batch_heads, tokens=tokens,
            **{'pass': pass_name}))
        fused, torch_row = rows.get((*case, 'triton')), rows.get((*case, 'torch'))
        head = (f'| {dtype} | {batch_heads} | {tokens:,} | '
                f'{OP_BENCH_CALLS.get((batch_heads, tokens), "")} | {pass_name} | ')
        if fused is None:
            lines.append(head + f'not measured | | not measured ({target.comparison} '
                         f'{target.threshold:g}) | | |'
                         if target else head + 'not measured | | | | |')
            continue
        lines.append(
            head + f"{fused['time_ms']:.3f} | "
            + (f"{torch_row['time_ms']:.3f}" if torch_row else 'n/a')
            + f" | {_against_target(fused['percent_of_copy'], '.1f', target)} | "
            + (f"{fused['speedup_vs_torch']:.2f}" if fused.get('speedup_vs_torch') else 'n/a')
            + ' | '
            + (f"{fused['memory_vs_torch']:.3f}" if fused.get('memory_vs_torch') else 'n/a')
            + ' |')
    return '\n'.join(lines)


def target_now(target: Target, results_dir: Path | None = None) -> str:
    """A target's figures now: from the newest committed results file of its
    step (the file the step writes, in a GPU run's folders) that has any of
    them, with the verdict and the run; ``not measured`` where none has."""
    found = []
    for date, path, report in _committed_gpu_files(STEP_FILES[target.step], results_dir):
        values = [figure_value(figure, report) for figure in target.figures]
        if any(value is not None for value in values):
            found.append((date, path, values))
    if not found:
        return 'not measured'
    _, path, values = max(found)
    verdict = {True: 'met', False: 'missed', None: 'not all measured'}[met(target, values)]
    figures = '; '.join(
        (f'{figure.label} ' if figure.label else '')
        + ('not measured' if value is None else f'{value:{target.fmt}}{target.unit}')
        for figure, value in zip(target.figures, values))
    return f'{figures}: {verdict} ({gpu_run_dir(path).name})'


def render_gpu_targets(report: dict, source: str) -> str:
    """Every GPU target (``benchmarks/gpu_targets.py``), the step that
    measures it and the file it writes, and its figure now (``target_now``:
    each step's newest file, whichever GPU run that is)."""
    lines = ['| goal | measurement | target | now | step | file |',
             '| --- | --- | --- | --- | --- | --- |']
    lines += [f'| {target.goal} | {target.measurement} | {target.text} | {target_now(target)} | '
              f'`{target.step}` | `{target_file(target)}` |' for target in GPU_TARGETS]
    return '\n'.join(lines)


# Bytes per element of the dtypes the GPU check names.
ELEMENT_BYTES = {'bfloat16': 2, 'float16': 2, 'float32': 4, 'bf16': 2, 'fp16': 2, 'fp32': 4}


def _byte_factors(folder: Path) -> dict[str, int]:
    """The elements moved per (B*heads * N * d), by pass, from the byte model
    that the same GPU run's ``bench_mala.json`` records ({} without one)."""
    path = _same_run_file(folder, 'bench_mala.json')
    model = json.loads(path.read_text()).get('byte_model', {}) if path else {}
    found = {name: re.search(r'(\d+) \* BH \* N \* d \* bytes', text)
             for name, text in model.items()}
    return {name: int(match.group(1)) for name, match in found.items() if match}


def render_gpu_op_calls(report: dict, source: str) -> str:
    """The op at MAViT-T's own calls (``gpu_check.py``'s ``profile`` step): GPU
    kernel time against the batch-1 targets (``benchmarks/gpu_targets.py``), the
    split-N partial sums apart, the bytes at copy speed, the wall time and
    the host's time per call."""
    folder = (REPO_ROOT / source).parent
    env = _gpu_env(source)
    factors = _byte_factors(folder)
    rows = [row for row in report['results'] if 'wall_us' in row]
    # Runs of commits that launched compiled kernels directly timed the host
    # both ways; the second is the launch path the op takes now.
    both_paths = any('host_issue_us_tritons_launch_path' in row for row in rows)
    host = (['host µs, direct launches', "host µs, Triton's `JITFunction.run`"] if both_paths
            else ['host µs'])
    lines = [_gpu_source_line(source, 'Measured', report) +
             f" {report['dtype']}, `{report['impl']}`, q, k, v in the layout `{report['layout']}`."
             ' GPU kernels: their time per call under `torch.profiler` (target: each call at '
             'batch 1); partial sums: the forward\'s split-N reduction of k^T v and the key sums '
             f'(`{PARTIALS_KERNEL}`); copy speed: the bytes of `benchmarks/bench_mala.py`\'s model '
             'at the copy bandwidth; wall: median of synchronised calls; host: the CPU\'s time per '
             'call over unsynchronised calls (host-bound where it exceeds the GPU kernels\' time).',
             '',
             '| call | GPU kernels µs (target) | partial sums µs | at copy speed µs | wall µs | '
             + ' | '.join(host) + ' |',
             '| --- | --- | ---: | ---: | ---: | ' + ' | '.join('---:' for _ in host) + ' |']
    for row in rows:
        target = target_of('profile', 'kernel_us', row)
        partials = (row.get('kernels') or {}).get(PARTIALS_KERNEL)
        factor = factors.get(row['pass_name'])
        copy_us = (factor * row['batch_heads'] * row['tokens'] * row['head_dim']
                   * ELEMENT_BYTES[report['dtype']] / (env['copy_bandwidth_tbps'] * 1e6)
                   if factor and 'tokens' in row else None)
        cells = [row['host_issue_us'], row.get('host_issue_us_tritons_launch_path')][:len(host)]
        lines.append(
            f"| stage {row['stage']}, batch {row['batch']}, {row['heads']} head(s) of "
            f"d = {row['head_dim']} over {row['height']}x{row['width']}, {row['pass_name']} | "
            f"{_against_target(row['kernel_us'], '.1f', target)} | "
            + ' | '.join('n/a' if value is None else f'{value:.1f}'
                         for value in (partials, copy_us, row['wall_us'], *cells)) + ' |')
    return '\n'.join(lines)


def render_gpu_model_profile(report: dict, source: str) -> str:
    """Where an eager backbone forward's GPU time goes (``gpu_check.py``'s
    ``model-profile`` step), by kernel category, MAViT-T beside Swin-T, with
    MAViT-T's targets: the op's GPU time and the forward's kernel count."""
    models = report['results']
    mavit = next(row for row in models if row['model'].startswith('MAViT'))
    names = [row['model'].split(' ')[0] for row in models]
    lines = [_gpu_source_line(source, 'Measured', report) +
             f" {report['height']}x{report['width']}; models: "
             + ', '.join(f"`{row['model']}`" for row in models) + f"; {report['note']}. "
             "Categories: `benchmarks/gpu_check_lib/profiling.py`'s `kernel_category` (`mala`: "
             "the op's kernels).",
             '',
             '| category | ' + ' | '.join(f'{name} µs | {name} kernels | {name} share'
                                         for name in names) + ' |',
             '| --- | ' + ' | '.join('---: | ---: | ---:' for _ in names) + ' |']
    for category in report['categories']:
        cells = [row['categories'].get(category, {}) for row in models]
        if not any(cell.get('kernels') for cell in cells):
            continue
        lines.append(f'| {category} | ' + ' | '.join(
            f"{cell.get('time_us', 0):.1f} | {cell.get('kernels', 0)} | "
            f"{100 * cell.get('share', 0):.1f}%" for cell in cells) + ' |')
    lines.append('| **all** | ' + ' | '.join(
        f"**{row['gpu_time_us']:.1f}** | **{row['kernel_count']}** | " for row in models) + ' |')
    mala = mavit['categories']['mala']
    mala_target = target_of('model-profile', 'categories.mala.time_us', mavit)
    kernels_target = target_of('model-profile', 'kernel_count', mavit)
    lines += ['', "MAViT-T's targets: the op's GPU time per forward "
              f"{_against_target(mala['time_us'], '.1f', mala_target, unit=' µs')}"
              f" in {mala['kernels']} kernels; GPU kernels per forward "
              f"{_against_target(mavit['kernel_count'], 'd', kernels_target)}. "
              'Eager forward, wall time: ' + ', '.join(
                  f"{name} {row['forward_ms']:.1f} ms" for name, row in zip(names, models)) + '.']
    if all('host' in row for row in models):   # runs before 2026-11-27c did not time the host
        # Runs before profiling.own_seconds kept cProfile's own times as they
        # were, which on Python 3.12 count each custom op's callees twice.
        mended = all('double_counted_ms' in row['host'] for row in models)
        lines += ['', 'The host, per eager forward: ' + '; '.join(
            f"{name} issued in {row['host']['issue_ms']:.1f} ms, {row['host']['python_calls']} "
            'Python calls, own time under cProfile ' + ', '.join(
                f"{source} {100 * entry['share']:.0f}%"
                for source, entry in row['host']['by_source'].items() if entry['calls'])
            + (f" ({row['host']['double_counted_ms']:.1f} ms counted twice by cProfile taken off)"
               if mended and row['host']['double_counted_ms'] else '')
            for name, row in zip(names, models)) + ' (`C`: the ops\' C++ and the launches).'
            + ('' if mended else " These shares are cProfile's own times as recorded: on "
               "Python 3.12 they count the time under each custom op's call twice, once as "
               "torch's `backend_impl` (`profiling.own_seconds` mends that since).")]
    return '\n'.join(lines)


def render_gpu_model(report: dict, source: str) -> str:
    """MAViT-T (fused and PyTorch MALA) against Swin-T over resolutions."""
    graphs = ' Each forward captured once in a CUDA graph; the replays are timed.' \
        if report.get('cuda_graphs') else ''
    names = sorted({row['model'] for row in report['forward'] + report['training']})
    lines = [_gpu_source_line(source, 'Measured', report) + ' ' + report['note'] + '. Models: '
             + ', '.join(f'`{name}`' for name in names) + ' (fused: `triton`).' + graphs,
             '',
             '| size | precision | batch | MAViT-T fused ms | MAViT-T PyTorch ms | Swin-T ms '
             '| fused / Swin-T | PyTorch / Swin-T |',
             '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |']
    by_key = {}
    for row in report['forward'] + report['training']:
        key = (row['height'], row['width'], row['precision'], row['batch'], row['pass_name'])
        kind = ('swin' if row['model'].startswith('Swin-T') else
                'fused' if row['model'].endswith('triton') else 'torch')
        by_key.setdefault(key, {})[kind] = row
    for (height, width, precision, batch, pass_name), models in by_key.items():
        size = f'{height}x{width}' + ('' if pass_name == 'fwd' else f', {pass_name}')

        def ms(kind):
            row = models.get(kind, {})
            return f"{row['time_ms']:.1f}" if row.get('time_ms') else 'n/a'

        def ratio(kind):
            row = models.get(kind, {})
            return f"{row['time_vs_swin']:.2f}" if row.get('time_vs_swin') else 'n/a'
        lines.append(f'| {size} | {precision} | {batch} | {ms("fused")} | {ms("torch")} | '
                     f'{ms("swin")} | {ratio("fused")} | {ratio("torch")} |')
    return '\n'.join(lines)


def render_gpu_fps(report: dict, source: str) -> str:
    """UperNet + MAViT-T against UperNet + Swin-T, images/s per mode and size:
    each size, precision and mode from the newest GPU run that measured it,
    ``source``'s run (the newest) first, then older runs for what it lacks,
    one section per run (``_fps_section``)."""
    newest = gpu_run_dir(REPO_ROOT / source)
    runs = {gpu_run_dir(path) for path in newest.parent.glob(f'{GPU_RUN_PREFIX}*/{GPU_FPS_FILES}')}
    measured = {run: _fps_measurements(run) for run in runs | {newest}}
    if not measured[newest]['runs']:
        raise ValueError(f'no UperNet FPS of both models in {repo_path(newest)}')
    older = sorted((run for run in measured if run != newest and measured[run]['runs']
                    and measured[run]['date'] < measured[newest]['date']),
                   key=lambda run: measured[run]['date'], reverse=True)
    sections, shown = [], set()
    for run in [newest, *older]:
        keys = set(measured[run]['runs']) - shown
        if keys:
            sections.append(_fps_section(run, measured[run], keys, first=not sections))
            shown |= keys
    return '\n\n'.join(sections)


def _fps_measurements(run: Path) -> dict:
    """Every UperNet FPS file of GPU run ``run``: the pairs of runs by (height,
    width, dtype, mode), the failures by the same key, the commits, configs,
    batches, the run's environment and its newest file's date. Runs: the
    files in date order; within a file, its rows of a model, mode and size in
    order (gpu_check.py gathers several ``benchmark_fps.py`` children into
    one file), the i-th of MAViT-T paired with the i-th of Swin-T."""
    reports = {path: json.loads(path.read_text()) for path in run.glob(GPU_FPS_FILES)}
    dates = {path: _report_date(path, report) for path, report in reports.items()}
    ordered = sorted(reports, key=dates.get)
    env = _gpu_env(repo_path(ordered[0])) if ordered else None
    found = dict(runs={}, failed={}, commits=set(), configs={}, batches=set(), env=env,
                 date=max(dates.values(), default=''))
    for path in ordered:
        data, name = reports[path], path.relative_to(run).as_posix()
        found['commits'].add(committed(path, data))
        _check_run_environment(path, data, env)
        measured = {}
        for row in data.get('results', []):
            model = next((model for model, start in UPERNET_MODELS.items()
                          if Path(row.get('config', '')).name.startswith(start)), None)
            if model is None:
                continue
            key = (row['height'], row['width'], row['dtype'], row['mode'])
            if row.get('error') or not row.get('fps'):
                found['failed'].setdefault(key, []).append(
                    f"{model} {FPS_MODES.get(row['mode'], row['mode'])} {row['dtype']} at "
                    f"{row['height']}x{row['width']} (`{name}`): {row.get('error')}")
                continue
            found['configs'].setdefault(model, set()).add(row['config'])
            found['batches'].add(row['batch_size'])
            measured.setdefault(key, {}).setdefault(model, []).append(row['fps'])
        for key, fps in measured.items():
            if fps.keys() == UPERNET_MODELS.keys():
                pairs = [dict(zip(UPERNET_MODELS, one_run))
                         for one_run in zip(*(fps[model] for model in UPERNET_MODELS))]
                found['runs'].setdefault(key, []).append((name, data['iters'], pairs))
    return found


def _fps_section(run: Path, found: dict, keys: set, first: bool) -> str:
    """The sentence and table of GPU run ``run``'s measurements at ``keys``;
    a mode and size measured more than once shows each run, in the order
    they ran, and the median of the ratios."""
    if None in found['commits']:
        raise ValueError(f'{repo_path(run)}/README.md names no commit (a line Commit: `<sha>`)')
    env, configs, mavit, swin = found['env'], found['configs'], *UPERNET_MODELS
    lead = (f"Measured on an {env['device']} (driver {env['driver']}, CUDA {env['cuda']}), torch "
            f"{env['torch']}, Triton {env['triton']}, commit {', '.join(sorted(found['commits']))}, "
            f"{env['date'][:10]}")
    if first:
        lead += (f': UperNet + {mavit} ('
                 + ', '.join(f'`{config}`' for config in sorted(configs[mavit]))
                 + f') against UperNet + {swin} ('
                 + ', '.join(f'`{config}`' for config in sorted(configs[swin]))
                 + f"), whole models in tensor mode, batch "
                 f"{', '.join(map(str, sorted(found['batches'])))}, images/s of "
                 '`tools/analysis_tools/benchmark_fps.py` (also run by '
                 "`benchmarks/gpu_check.py`'s UperNet FPS steps): eager; captured once in a CUDA "
                 "graph and replayed; `torch.compile(mode='reduce-overhead')`. A mode and size "
                 'that ran more than once lists every run, in the order they ran; their median '
                 'judges. Each size and mode comes from the newest GPU run that measured it')
    else:
        lead += (', the sizes and modes the newer run did not measure, as above (batch '
                 f"{', '.join(map(str, sorted(found['batches'])))})")
    lines = [f'{lead}. Raw: `{repo_path(run)}/` (its README.md says which command wrote each '
             'file).', '',
             f'| size | precision | mode | {mavit} images/s | {swin} images/s | {mavit} / {swin}, '
             'each run | median | runs: file [× runs in it] (iterations) |',
             '| --- | --- | --- | ---: | ---: | ---: | ---: | --- |']
    modes = list(FPS_MODES)

    def order(key):
        height, width, dtype, mode = key
        return height * width, height, dtype, modes.index(mode) if mode in modes else len(modes)
    runs = found['runs']
    for key in sorted(keys, key=order):
        height, width, dtype, mode = key
        every = [fps for _, _, pairs in runs[key] for fps in pairs]
        ratios = [fps[mavit] / fps[swin] for fps in every]
        lines.append(f'| {height}x{width} | {dtype} | {FPS_MODES.get(mode, mode)} | '
                     + ' | '.join(', '.join(f'{fps[model]:.1f}' for fps in every)
                                  for model in UPERNET_MODELS)
                     + f" | {', '.join(f'{ratio:.2f}' for ratio in ratios)} | "
                     f'**{statistics.median(ratios):.2f}** | '
                     + ', '.join(f'`{name}`' + (f' ×{len(pairs)}' if len(pairs) > 1 else '')
                                 + f' ({iters})' for name, iters, pairs in runs[key]) + ' |')
    failed = [text for key, texts in found['failed'].items()
              if key in keys or (first and key not in runs) for text in texts]
    if failed:
        lines += ['', 'Failed: ' + '; '.join(failed) + '.']
    return '\n'.join(lines)


def _check_run_environment(path: Path, report: dict, env: dict) -> None:
    """A results file of a GPU run names the run's GPU and versions (its
    env.json) where it names any: one run, one machine and stack."""
    versions = report.get('versions') or {}
    recorded = [('device', report.get('device')), ('torch', versions.get('torch')),
                ('triton', versions.get('triton')),
                *(('device', row.get('device')) for row in report.get('results', []))]
    wrong = sorted({f'{key} {value} (env.json: {env[key]})' for key, value in recorded
                    if value and value != env[key]})
    if wrong:
        raise ValueError(f"{repo_path(path)} is not of its GPU run's environment: {', '.join(wrong)}")


def render_gpu_checks(report: dict, source: str) -> str:
    """What the GPU run checked: the kernel and model tests (part 1 of the GPU
    check, which every run starts with) and, where the run measured them, the
    SDPA kernels MAViT-T's softmax stages run."""
    folder = (REPO_ROOT / source).parent
    lines = [_gpu_source_line(source, 'Checked', report), '']
    for name in ('kernel-tests', 'model-tests'):
        path = _same_run_file(folder, f'{name}.json')
        if path:
            tests = json.loads(path.read_text())
            files = [now for word in tests['command'].split() if word.startswith('tests/')
                     for now in _test_files_now(word)]
            lines.append(f"- `{name}` ({', '.join(files)}): "
                         f"{tests['passed']} passed, "
                         f"{tests['failed']} failed, {tests['skipped']} skipped"
                         + ''.join(f"; failed: `{failure.split(': ')[0].split('::')[-1]}`"
                                   for failure in tests['failures']) + '.')
    sdpa = _same_run_file(folder, 'sdpa.json')
    if sdpa is None:   # a run that checked only the tests: SDPA's from the newest that did
        sdpa = _newest_gpu_file('sdpa.json')
        if sdpa is not None:
            lines += ['', 'This run did not check SDPA. '
                      + _gpu_source_line(repo_path(sdpa), 'Checked'), '']
    for row in json.loads(sdpa.read_text())['results'] if sdpa else []:
        ops = ', '.join(f'`{op.split("::")[-1]}`' for op in row.get('sdpa_ops', [])
                        if not op.endswith('::scaled_dot_product_attention'))
        lines.append(f"- SDPA, MAViT-T forward+backward at {row['height']}x{row['width']} "
                     f"{row['precision']} with only {row['allowed']} allowed: "
                     + (f'ran; unrestricted, the forward picks {ops}' if row.get('ok')
                        else f"failed: {row.get('error')}") + '.')
    return '\n'.join(lines)


def render_gpu_backbones(report: dict, source: str) -> str:
    """MAViT-T against Swin-T at one size in each of benchmark_fps.py's modes."""
    lines = [_gpu_source_line(source, 'Measured', report) + f" {report['height']}x"
             f"{report['width']}; {report['note']}.", '',
             '| mode | MAViT-T ms | Swin-T ms | MAViT-T / Swin-T |', '| --- | ---: | ---: | ---: |']
    by_mode = {}
    for row in report['results']:
        kind = 'swin' if row['model'].startswith('Swin-T') else 'mavit'
        by_mode.setdefault(row['mode'], {})[kind] = row
    for mode, models in by_mode.items():
        ms = [f"{models[kind]['time_ms']:.2f}" if models.get(kind, {}).get('time_ms') else 'n/a'
              for kind in ('mavit', 'swin')]
        ratio = report['time_vs_swin'].get(mode)
        lines.append(f"| {mode} | {ms[0]} | {ms[1]} | {f'{ratio:.3f}' if ratio else 'n/a'} |")
    return '\n'.join(lines)


def render_gpu_ablations(report: dict, source: str) -> str:
    """Each fast-path switch off against all on, per mode and pass (the
    defaults' evidence: mavit_mm/ops/fast_paths.py), with the same run's
    compiled rows where they are a file of their own (``ablations-compile``);
    rows timed in rounds against the all-on model show the rounds' spread."""
    results, drift = list(report['results']), dict(report.get('drift') or {})
    compiled = _same_run_file((REPO_ROOT / source).parent, 'ablations-compile.json')
    if compiled is not None:
        other = json.loads(compiled.read_text())
        results += other['results']
        drift.update(other.get('drift') or {})
    columns = list(dict.fromkeys((row['mode'], row['pass_name']) for row in results))
    cells = {}
    for row in results:
        if row['switches_off']:
            value = (f"{row['time_vs_all_on']:.3f}" if row.get('time_vs_all_on')
                     else 'skipped' if row.get('skipped') else 'error')
            if row.get('time_vs_all_on') and 'ratio_min' in row:
                value += f" ({row['ratio_min']:.2f}-{row['ratio_max']:.2f})"
            cells.setdefault(row['switches_off'][0], {})[row['mode'], row['pass_name']] = value
    all_on = {}
    for row in results:
        if not row['switches_off'] and row.get('time_ms'):
            all_on.setdefault(f"{row['mode']} {row['pass_name']}", []).append(row['time_ms'])
    run = (REPO_ROOT / source).parent.parent
    lines = [_gpu_source_line(source, 'Measured', report) + (
                 f' Compiled rows: `{compiled.relative_to(run).as_posix()}` of the same run.'
                 if compiled is not None else '')
             + f" {report['height']}x{report['width']}; {report['note']}.", '',
             '| switch off | ' + ' | '.join(f'{mode} {pass_name}' for mode, pass_name in columns)
             + ' |', '| --- |' + ' ---: |' * len(columns)]
    lines += [f'| `{name}` | ' + ' | '.join(by_case.get(case, '') for case in columns) + ' |'
              for name, by_case in cells.items()]
    lines += ['', 'All on, ms: ' + '; '.join(
        f"{case} {', '.join(f'{t:.2f}' for t in times)}"
        + (f' (drift {drift[case]:.3f})' if case in drift else '')
        for case, times in all_on.items()) + '.']
    return '\n'.join(lines)


def _committed_gpu_files(name: str, results_dir: Path | None = None):
    """(date, path, report) of each file ``name`` of the GPU runs that
    measured a committed tree (the date: ``_report_date``, '' where none)."""
    for path in (results_dir or RESULTS_DIR).glob(f'{GPU_RUN_PREFIX}*/**/{name}'):
        report = json.loads(path.read_text())
        if not is_uncommitted(recorded_commit(path, report)):
            yield _report_date(path, report) or '', path, report


def _newest_gpu_file(name: str, results_dir: Path | None = None) -> Path | None:
    """The newest (by ``_report_date``) file ``name`` of any committed GPU run."""
    found = [(date, path) for date, path, _ in _committed_gpu_files(name, results_dir)]
    return max(found)[1] if found else None


def _same_run_file(folder: Path, name: str) -> Path | None:
    """``name`` beside a result, else at the top or in another command's
    folder of the same GPU run (the parts of ``gpu_check.py`` split the steps
    between them)."""
    if (folder / name).exists():
        return folder / name
    run = gpu_run_dir(folder)
    found = sorted([*run.glob(name), *run.glob(f'*/{name}')]) if run else []
    return found[-1] if found else None


# Test files split since a GPU run recorded them: the files their tests are in now.
SPLIT_TEST_FILES = {'test_mala_triton.py': ('test_mala_numerics.py',
                                            'test_mala_plans_and_compile.py',
                                            'test_mala_dispatch.py')}


def _test_files_now(recorded: str) -> list[str]:
    """Where the tests of a file a GPU run recorded are now (tests move
    between folders, the file keeping its name, or a file is split); the
    recorded path if it is gone."""
    names = SPLIT_TEST_FILES.get(Path(recorded).name, (Path(recorded).name,))
    now = []
    for name in names:
        found = sorted((REPO_ROOT / 'tests').rglob(name))
        now.append(found[0].relative_to(REPO_ROOT).as_posix() if len(found) == 1 else recorded)
    return now


# The paper's published figures, by config: (parameters in M, box AP / mask AP
# or mIoU); None where the paper has no figure.
PAPER = {
    'configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py': (33, '47.6 / 42.9'),
    'configs/mask_rcnn/mask-rcnn_mavit-s_fpn_1x_coco.py': (44, '50.2 / 44.7'),
    'configs/mask_rcnn/mask-rcnn_mavit-b_fpn_1x_coco.py': (67, '51.7 / 46.1'),
    'configs/mask_rcnn/mask-rcnn_mavit-l_fpn_1x_coco.py': (114, '52.5 / 46.5'),
    'configs/mask_rcnn/mask-rcnn_mavit-t_fpn_ms-3x_coco.py': (None, None),
    'configs/mask_rcnn/mask-rcnn_mavit-s_fpn_ms-3x_coco.py': (44, '51.4 (box)'),
    'configs/mask_rcnn/mask-rcnn_mavit-b_fpn_ms-3x_coco.py': (67, '53.2 (box)'),
    'configs/mask_rcnn/mask-rcnn_mavit-l_fpn_ms-3x_coco.py': (114, '53.6 (box)'),
    'configs/retinanet/retinanet_mavit-t_fpn_1x_coco.py': (24, '45.6'),
    'configs/retinanet/retinanet_mavit-s_fpn_1x_coco.py': (34, '48.3'),
    'configs/retinanet/retinanet_mavit-b_fpn_1x_coco.py': (57, '49.9'),
    'configs/retinanet/retinanet_mavit-l_fpn_1x_coco.py': (104, '50.6'),
    'configs/cascade_rcnn/cascade-mask-rcnn_mavit-t_fpn_ms-3x_coco.py': (None, None),
    'configs/cascade_rcnn/cascade-mask-rcnn_mavit-s_fpn_ms-3x_coco.py': (82, '54.2 / 47.0'),
    'configs/cascade_rcnn/cascade-mask-rcnn_mavit-b_fpn_ms-3x_coco.py': (105, '55.5 / 48.0'),
    'configs/cascade_rcnn/cascade-mask-rcnn_mavit-l_fpn_ms-3x_coco.py': (152, '56.0 / 48.4'),
    'configs/sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py': (18, '47.6'),
    'configs/sem_fpn/fpn_mavit-s_8xb2-80k_ade20k-512x512.py': (28, '50.7'),
    'configs/sem_fpn/fpn_mavit-b_8xb2-80k_ade20k-512x512.py': (51, '51.5'),
    'configs/sem_fpn/fpn_mavit-l_8xb2-80k_ade20k-512x512.py': (98, '52.8'),
    'configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py': (44, '48.4'),
    'configs/upernet/upernet_mavit-s_8xb2-160k_ade20k-512x512.py': (55, '51.0'),
    'configs/upernet/upernet_mavit-b_8xb2-160k_ade20k-512x512.py': (77, '52.8'),
    'configs/upernet/upernet_mavit-l_8xb2-160k_ade20k-512x512.py': (125, '53.6'),
}
# The paper's FLOPs (layer GMACs, its convention), by FLOPs case.
PAPER_GMACS = {'MAViT-T backbone': None, 'Mask R-CNN + MAViT-T': 219, 'UperNet + MAViT-T': 893}
# Config folders in model zoo order, with the metric of the paper's column.
ZOO_ORDER = ('mask_rcnn', 'retinanet', 'cascade_rcnn', 'sem_fpn', 'upernet')
ARCH_ROWS = (('T', 'tiny'), ('S', 'small'), ('B', 'base'), ('L', 'large'))


def _complexity_source(report: dict, source: str) -> str:
    return (f"Counted by `benchmarks/model_complexity.py` (models built from the configs), "
            f"torch {report['versions']['torch']}, commit {report.get('commit')}, "
            f"{report['date'][:10]}; raw: `{source}`.")


def _zoo_key(config: str):
    """Model zoo order: pipeline, then schedule, then size T, S, B, L."""
    folder = config.split('/')[1]
    head, tail = config.split('_mavit-')
    return (ZOO_ORDER.index(folder) if folder in ZOO_ORDER else len(ZOO_ORDER), head,
            tail[1:], 'tsbl'.index(tail[0]))


def render_model_zoo(report: dict, source: str) -> str:
    """Every published config: our parameter count beside the paper's figures."""
    lines = [_complexity_source(report, source) + ' Paper: the MALA paper\'s tables '
             '(COCO box / mask AP; ADE20K mIoU).', '',
             '| config | params (ours) | params (paper) | AP / mIoU (paper) |',
             '| --- | ---: | ---: | --- |']
    for config in sorted(report['config_params'], key=_zoo_key):
        paper_params, paper_metric = PAPER.get(config, (None, None))
        lines.append(f"| `{config}` | {report['config_params'][config] / 1e6:.2f}M | "
                     f"{'-' if paper_params is None else f'{paper_params}M'} | "
                     f"{paper_metric or '-'} |")
    return '\n'.join(lines)


def render_backbone_sizes(report: dict, source: str) -> str:
    """The four sizes' backbone parameters."""
    lines = [_complexity_source(report, source), '',
             '| size | `arch` | backbone params |', '| --- | --- | ---: |']
    for short, arch in ARCH_ROWS:
        lines.append(f"| {short} | `'{arch}'` | {report['backbone_params'][arch] / 1e6:.2f}M |")
    return '\n'.join(lines)


def render_flops(report: dict, source: str) -> str:
    """Parameters and MACs in both conventions for the paper's complexity cases."""
    lines = [_complexity_source(report, source), '',
             '| model | input | params | layer GMACs (paper\'s convention) | attention GMACs '
             '| paper GMACs |', '| --- | --- | ---: | ---: | ---: | ---: |']
    for row in report['flops']:
        paper = PAPER_GMACS.get(row['name'])
        lines.append(f"| {row['name']} | {row['shape'][0]}x{row['shape'][1]} | "
                     f"{row['params'] / 1e6:.2f}M | {row['layer_macs'] / 1e9:.1f} | "
                     f"{row['attention_macs'] / 1e9:.1f} | {'-' if paper is None else paper} |")
    return '\n'.join(lines)


def _metric(value) -> str:
    return 'n/a' if value is None else f'{value:.3f}' if abs(value) < 2 else f'{value:.2f}'


BLOCKS: dict[str, Block] = {
    'gpu-upernet-fps': Block(f'gpu-*/{GPU_FPS_FILES}', render_gpu_fps,
                             measured=lambda report: any(row.get('fps') for row in
                                                         report.get('results', []))),
    'speed-table': Block('speed-vs-swin-*.json', render_speed, device_type='cpu'),
    'main-job': Block('main-job-*.json', render_main_job),
    # The README's path (python3) apart from runs with another interpreter.
    'newcomer': Block('newcomer-*.json', render_newcomer,
                      measured=lambda report: not report.get('python_option')),
    # One block per other interpreter (newcomer_path.py --python), by the
    # version that made the venv.
    **{f'newcomer-python{minor}': Block('newcomer-*.json', render_newcomer,
                                        target='docs/installation.md',
                                        measured=functools.partial(_made_by_python, minor))
       for minor in OTHER_PYTHONS},
    'model-zoo': Block('model-complexity-*.json', render_model_zoo),
    'backbone-sizes': Block('model-complexity-*.json', render_backbone_sizes,
                            target='docs/backbone.md'),
    'flops': Block('model-complexity-*.json', render_flops, target='docs/speed.md'),
    'demo-train-step': Block('demo-train-step-*.json', render_demo_train_step,
                             target='docs/speed.md'),
    'onnxruntime-speed': Block('onnxruntime-speed-*.json', render_onnxruntime_speed,
                               target='docs/deployment.md'),
    # Files of this checkout's own package (not a --package-root run of another).
    'host-calls': Block('host-calls-*.json', render_host_calls, target='docs/speed.md',
                        measured=lambda report: report['own_checkout']),
    # The targets' "now" are each step's newest file: the block follows the newest run.
    'gpu-targets': Block('gpu-*/*/env.json', render_gpu_targets, target='docs/gpu.md'),
    'gpu-checks': Block('gpu-*/*/kernel-tests.json', render_gpu_checks, target='docs/gpu.md'),
    'gpu-backbones': Block('gpu-*/*/backbones.json', render_gpu_backbones, target='docs/gpu.md'),
    'gpu-ablations': Block('gpu-*/*/ablations.json', render_gpu_ablations, target='docs/gpu.md'),
    'gpu-op-calls': Block('gpu-*/*/profile.json', render_gpu_op_calls, target='docs/gpu.md'),
    'gpu-op': Block('gpu-*/*/bench_mala.json', render_gpu_op, target='docs/gpu.md'),
    'gpu-model-profile': Block('gpu-*/*/model-profile.json', render_gpu_model_profile,
                               target='docs/gpu.md'),
    'gpu-model': Block('gpu-*/*/sweep.json', render_gpu_model, target='docs/gpu.md'),
    'gpu-model-graphs': Block('gpu-*/*/sweep-graphs.json', render_gpu_model, target='docs/gpu.md'),
}


def _report_date(path: Path, report: dict) -> str:
    """A results file's date: its own, its environment's, or (GPU runs) that
    of the run's env.json (``_gpu_env``)."""
    date = report.get('date') or (report.get('environment') or {}).get('date')
    env = _same_run_file(path.parent, 'env.json') if date is None else None
    return json.loads(env.read_text())['date'] if env else date


def newest_results(name: str, results_dir: Path | None = None) -> Path:
    """The results file of block ``name`` with the latest ``date`` of those
    that measured something (in ``results_dir``, by default ``RESULTS_DIR``)."""
    block = BLOCKS[name]
    results_dir = results_dir or RESULTS_DIR
    reports = []
    for path in results_dir.glob(block.pattern):
        report = json.loads(path.read_text())
        if (block.device_type is None or report.get('device_type', 'cpu') == block.device_type) \
                and block.measured(report):
            reports.append((_report_date(path, report), path))
    if not reports:
        raise FileNotFoundError(f'no {block.pattern} in {results_dir}')
    return max(reports)[1]


def block_for(name: str, path: Path | None = None) -> str:
    """Block ``name`` rendered from ``path`` (by default its newest results
    file); ``UncommittedTreeError`` where a file it reads names an uncommitted tree."""
    path = path or newest_results(name)
    report = json.loads(path.read_text())
    try:
        committed(path, report)
        return BLOCKS[name].render(report, repo_path(path))
    except UncommittedTreeError as error:
        error.block = name
        raise


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
    stale, refused = [], []
    for name in args.blocks:
        target = BLOCKS[name].target
        text = texts.setdefault(target, TARGET_FILES[target].read_text())
        path = newest_results(name)
        try:
            block = block_for(name, path)
        except UncommittedTreeError as error:
            refused.append(str(error))
            continue
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
    for message in refused:
        print(message, file=sys.stderr)
    if stale:
        print('Blocks differ from the newest results: ' + ', '.join(stale) +
              '; run python benchmarks/readme_tables.py --write', file=sys.stderr)
    if stale or refused:
        return 1
    if args.check:
        print('every block matches the newest results files')
    return 0


if __name__ == '__main__':
    sys.exit(main())
