"""The check's UperNet steps (``upernet-fps``, ``upernet-fps-compile``,
``upernet-fps-1024``): UperNet MAViT-T against UperNet Swin-T through
``tools/analysis_tools/benchmark_fps.py`` children, three runs each, and the
median of MAViT-T's FPS over Swin-T's."""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.gpu_check_lib.children import has_module, run_child, write_results
from benchmarks.gpu_check_lib.models import UPERNET_CONFIGS
from benchmarks.gpu_check_lib.plan import LOG_NAME, STEP_FILES

# The UperNet steps: benchmark_fps.py's modes and input size of each, bf16,
# both models in each child, FPS_RUNS children a step (upernet_fps_runs).
FPS_STEPS = {'upernet-fps': dict(modes=('eager', 'cuda-graph'), size=(512, 2048)),
             'upernet-fps-compile': dict(modes=('compile',), size=(512, 2048)),
             'upernet-fps-1024': dict(modes=('eager', 'cuda-graph', 'compile'), size=(1024, 2048))}
FPS_DTYPE = 'bf16'
# The targets judge each FPS figure by the median of three runs of --iters 50
# (benchmark_fps.py's default warm-up, 10).
FPS_RUNS, FPS_ITERS, FPS_WARMUP = 3, 50, 10
FPS_MIN_RUN_S = 10   # a child given less could not even build its models


def upernet_fps_runs(step: str = 'upernet-fps') -> list[dict]:
    """The ``benchmark_fps.py`` runs of an UperNet step (``FPS_STEPS``): both
    models in each, bf16, the step's modes and size, ``FPS_RUNS`` times (the
    targets' figure is the median of three runs; a compile per model takes a
    minute or more cold, seconds once inductor's caches are warm)."""
    spec = FPS_STEPS[step]
    return [dict(configs=list(UPERNET_CONFIGS), modes=list(spec['modes']), dtype=FPS_DTYPE,
                 height=spec['size'][0], width=spec['size'][1], run=run)
            for run in range(1, FPS_RUNS + 1)]


def fps_command(run: dict, output: Path) -> list[str]:
    return ['tools/analysis_tools/benchmark_fps.py', *run['configs'], '--modes', *run['modes'],
            '--dtype', run['dtype'], '--shape', str(run['height']), str(run['width']),
            '--iters', str(FPS_ITERS), '--warmup', str(FPS_WARMUP), '--out', str(output)]


def step_upernet_fps(out: Path, budget_s: float, name: str = 'upernet-fps') -> dict:
    """Each run of ``upernet_fps_runs(name)`` as a child process, given what
    is left of the budget; their rows gathered into one JSON (a GPU command
    returns few files), each with its run, MAViT-T's FPS over Swin-T's in the
    same run, mode, dtype and size, and the median of those over the runs."""
    path = out / STEP_FILES[name]
    runs, rows = [], []
    report = dict(configs=list(UPERNET_CONFIGS), iters=FPS_ITERS, warmup=FPS_WARMUP,
                  note='tools/analysis_tools/benchmark_fps.py, whole models in tensor mode, '
                       'batch 1, one child process per run; run: which; fps_vs_swin: MAViT-T\'s '
                       'fps over Swin-T\'s in the same run, mode, dtype and size; medians: '
                       'those ratios over the runs and their median, the targets\' figure',
                  complete=False, runs=runs, results=rows, medians=[])
    if not has_module('mmseg'):
        report['error'] = 'mmseg is not importable: install the wheels of scripts/gpu_wheels.sh'
        write_results(path, report)
        return {'rows': 0, 'complete': False, 'failed': 1, 'error': report['error']}
    deadline = time.time() + budget_s
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for index, run in enumerate(upernet_fps_runs(name)):
            left = deadline - time.time()
            if left < FPS_MIN_RUN_S:
                runs.append(dict(run, skipped='time budget spent'))
                continue
            child_json = scratch / f'run{index}.json'
            child = run_child([sys.executable, *fps_command(run, child_json)], left, out / LOG_NAME)
            runs.append(dict(run, **{k: v for k, v in child.items() if k not in ('output', 'log')}))
            if child_json.exists():
                results = json.loads(child_json.read_text())
                rows.extend(dict(row, run=run['run']) for row in results.get('results', []))
            _add_fps_ratios(rows)
            report['medians'] = fps_medians(rows)
            write_results(path, report)
            print(f'  run {run["run"]}: {"+".join(run["modes"]):26} {run["dtype"]} '
                  f'{run["height"]}x{run["width"]}: '
                  f'{"killed at the budget" if child["timed_out"] else "exit " + str(child["returncode"])}'
                  f' after {child["seconds"]:.0f} s', flush=True)
    for median in report['medians']:
        print(f'  {median["mode"]:10} {median["height"]}x{median["width"]}: MAViT-T / Swin-T fps '
              f'{median["fps_vs_swin_median"]:.3f} (median of {median["fps_vs_swin_per_run"]})', flush=True)
    report['complete'] = all(run.get('returncode') == 0 for run in runs)
    write_results(path, report)
    return {'rows': len(rows), 'complete': report['complete'],
            'failed': sum(run.get('returncode') not in (0, None) for run in runs),
            'runs_cut_or_skipped': sum(bool(run.get('timed_out') or run.get('skipped'))
                                       for run in runs),
            'fps_vs_swin_median': {f'{m["mode"]} {m["height"]}x{m["width"]}': round(
                m['fps_vs_swin_median'], 4) for m in report['medians']}}


def _fps_case(row: dict) -> tuple:
    return row.get('mode'), row.get('dtype'), row.get('height'), row.get('width')


def _is_swin(row: dict) -> bool:
    return 'swin' in str(row.get('config', '')).lower()


def _add_fps_ratios(rows: list[dict]) -> None:
    """fps / Swin-T's fps in the same run, mode, dtype and size."""
    swin = {(row.get('run'), *_fps_case(row)): row.get('fps') for row in rows if _is_swin(row)}
    for row in rows:
        base = swin.get((row.get('run'), *_fps_case(row)))
        if not _is_swin(row) and row.get('fps') and base:
            row['fps_vs_swin'] = row['fps'] / base


def fps_medians(rows: list[dict]) -> list[dict]:
    """Per mode, dtype and size: MAViT-T's fps over Swin-T's in each run, and
    their median (the targets judge by the median of three runs)."""
    ratios = {}
    for row in rows:
        if 'fps_vs_swin' in row:
            ratios.setdefault(_fps_case(row), []).append(row['fps_vs_swin'])
    return [dict(mode=mode, dtype=dtype, height=height, width=width,
                 fps_vs_swin_per_run=[round(ratio, 4) for ratio in values],
                 fps_vs_swin_median=statistics.median(values))
            for (mode, dtype, height, width), values in ratios.items()]

