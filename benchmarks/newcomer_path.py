"""The newcomer's path, timed: a fresh clone, empty caches, then the README's
two set-up-and-test steps (``make setup``, ``make test``), as a new user or a
CI machine runs them.

The clone is of this checkout's HEAD (commit first), alone in a new
temporary folder, as on a user's machine: nothing of this workspace beside
it. Every cache starts empty: the set-up's
(``MAVIT_CACHE_DIR``: the mmcv build), pip's (``PIP_CACHE_DIR``), and those
the tests fill on their first run (``HOME``: Triton's kernel cache,
matplotlib's; ``TORCHINDUCTOR_CACHE_DIR``). ``make test`` runs with
``MAVIT_TEST_DURATIONS`` set, so its command stays the README's while the
tests record every test's seconds and the worker that ran it
(tests/helpers/durations.py); ``make test`` hands out its work heaviest
first by the newest such record.

Each step's disk is measured too: the free space of the file systems it
writes to (the clone's and the temporary folder's, where pytest's
``tmp_path`` lies), sampled every few seconds; its peak use is the most free
space it took, and what it left is the difference after it. Anything else
writing to those disks meanwhile counts too.

Writes JSON (machine, commit, each step's exit status, seconds and disk, the
test summary line, every test's seconds and worker and each worker's busy
time, every failure with the end of its report, the slowest tests with what
each trains or builds) and a Markdown table beside it, the failures under it;
``benchmarks/readme_tables.py`` puts the times into the README.
``--python`` makes the venv with another interpreter (``scripts/setup.sh``'s
``PYTHON``); such a run goes into ``docs/installation.md`` instead.

Example (about 25 minutes on 2 cores):
  python benchmarks/newcomer_path.py --out benchmarks/results/newcomer-cpu-2026-11-26.json
  python benchmarks/newcomer_path.py --python python3.12 \
      --out benchmarks/results/newcomer-python3.12-cpu-2026-11-27.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# The end of each failure's report the Markdown shows (the JSON keeps more).
FAILURE_LINES = 30

# What the slowest tests spend their time on, by node id (first match).
WHAT_IT_DOES = [
    ('test_deploy.py::test_detector_matches_onnxruntime', 'builds a demo detector with '
     'scoring classifiers (untrained), exports it with mmdeploy, ONNX Runtime against '
     'PyTorch (detections, mAP on its own best detections)'),
    ('test_deploy.py::test_segmentation', 'builds a segmentor, exports it with mmdeploy, '
                                          'ONNX Runtime against PyTorch (labels, mIoU)'),
    ('test_deploy.py', 'ONNX export (mmdeploy or torch.onnx)'),
    ('test_detector_learns.py', "the demo Mask R-CNN run (tools/train.py, 40 iterations): "
                                'iterations 31-40 judged'),
    ('test_e2e.py', 'tools/train.py and tools/test.py on tiny data (subprocesses; '
                    'resume, load_from and some evaluations in-process)'),
    ('test_openmmlab_tools.py', "mmdet's / mmseg's own tools as subprocesses"),
    ('test_distributed_launch.py', 'two-process data-parallel runs (gloo)'),
    ('test_benchmark_fps.py', 'benchmark_fps.py, torch.compile (inductor C++ kernels)'),
    ('test_mala_numerics.py', "the fused kernels in Triton's CPU interpreter"),
    ('test_mala_plans_and_compile.py', "the fused kernels compiled (sm_90) and in Triton's "
                                       'CPU interpreter'),
    ('test_mala_dispatch.py', "the fused kernels in Triton's CPU interpreter"),
    ('test_op_census.py', 'counts a bf16 forward; torch.compile (aot_eager)'),
    ('test_main_job.py', 'the main job on tiny data'),
    ('test_inferencers.py', "mmdet's / mmseg's inferencers on tiny checkpoints"),
    ('test_get_flops.py', 'FLOP counts of whole models'),
    ('test_benchmarks.py', 'benchmark scripts on the CPU (GPU check dry run and steps)'),
    ('test_configs.py', 'builds every published config, a loss and backward'),
]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, required=True, help='JSON to write (and .md)')
    parser.add_argument('--durations', type=int, default=40,
                        help='slowest tests to list in the Markdown table (default 40; the '
                             'JSON holds every test)')
    parser.add_argument('--keep', action='store_true', help='keep the clone and its caches')
    parser.add_argument('--python', metavar='INTERPRETER',
                        help="the Python that makes the clone's .venv (scripts/setup.sh's "
                             'PYTHON), e.g. python3.12; default: python3, the README\'s path. '
                             "A run with it goes into docs/installation.md's block, not the "
                             "README's")
    return parser.parse_args(argv)


def what_it_does(nodeid: str) -> str:
    return next((what for key, what in WHAT_IT_DOES if key in nodeid), '')


def free_bytes(paths: list[Path]) -> int:
    """Free bytes of the file systems that hold ``paths``, each counted once."""
    devices = {path.stat().st_dev: path for path in paths}
    return sum(shutil.disk_usage(path).free for path in devices.values())


def run_step(name: str, command: list[str], cwd: Path, env: dict, log: Path) -> dict:
    print(f'[newcomer] {name}: {" ".join(command)} (log: {log})', flush=True)
    disks = [cwd, Path(tempfile.gettempdir())]
    free_before = lowest_free = free_bytes(disks)
    start = time.monotonic()
    with log.open('w') as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
        while process.poll() is None:   # a progress line a minute
            time.sleep(5)
            lowest_free = min(lowest_free, free_bytes(disks))
            elapsed = time.monotonic() - start
            if int(elapsed) % 60 < 5:
                last = (log.read_text(errors='replace').strip().splitlines() or [''])[-1]
                print(f'[newcomer]   {name}: {elapsed / 60:.0f} min so far; {last[-100:]}',
                      flush=True)
    seconds = time.monotonic() - start
    gb = 1e9
    peak, left = (free_before - lowest_free) / gb, (free_before - free_bytes(disks)) / gb
    print(f'[newcomer] {name}: exit {process.returncode} after {seconds / 60:.1f} min; '
          f'disk: {peak:.1f} GB at its peak, {left:.1f} GB left', flush=True)
    return dict(command=' '.join(command), returncode=process.returncode,
                seconds=round(seconds, 1), peak_disk_gb=round(peak, 2),
                left_on_disk_gb=round(left, 2))


def venv_versions(clone: Path) -> dict:
    """Python's, torch's and Triton's versions in the clone's .venv (empty
    where its set-up did not get that far)."""
    code = ('import json, platform, torch, triton; print(json.dumps(dict('
            'python=platform.python_version(), torch=torch.__version__, '
            'triton=triton.__version__)))')
    python = clone / '.venv' / 'bin' / 'python'
    run = subprocess.run([str(python), '-c', code], capture_output=True, text=True) \
        if python.exists() else None
    return json.loads(run.stdout) if run and run.returncode == 0 else {}


def slowest_tests(durations: dict, count: int) -> list[dict]:
    return [dict(row, what=what_it_does(row['test'])) for row in durations['tests'][:count]]


def markdown(report: dict) -> str:
    steps = report['steps']
    lines = [f"# The newcomer's path, {report['date'][:10]}", '',
             f"`benchmarks/newcomer_path.py` on {report['machine']}, commit {report['commit']}: "
             'a fresh clone, empty caches.', '',
             '| step | exit | minutes | disk at its peak, GB | disk left, GB |',
             '| --- | ---: | ---: | ---: | ---: |']
    lines += [f"| `{name}` | {step['returncode']} | {step['seconds'] / 60:.1f} | "
              f"{step['peak_disk_gb']:.1f} | {step['left_on_disk_gb']:.1f} |"
              for name, step in steps.items()]
    busy = (report.get('test_durations') or {}).get('worker_busy_s', {})
    lines += ['', f"Tests: {report['test_summary']}", '',
              'Busy seconds per worker: ' + ', '.join(f'{worker} {seconds:.0f}'
                                                     for worker, seconds in busy.items()), '',
              '| test | worker | seconds (setup, call, teardown) | what it trains or builds |',
              '| --- | --- | ---: | --- |']
    lines += [f"| `{row['test']}` | {row['worker']} | {row['seconds']:.1f} | {row['what']} |"
              for row in report['slowest_tests']]
    for failure in (report.get('test_durations') or {}).get('failed', []):
        lines += ['', f"## Failed: `{failure['test']}` ({failure['when']}, {failure['worker']})",
                  '', '```', *failure['report'].splitlines()[-FAILURE_LINES:], '```']
    return '\n'.join(lines) + '\n'


def main(argv=None) -> dict:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    from devtools.checkout import git_commit
    from mavit_mm.tooling.device import cpu_model
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    here = git_commit()
    if here is None or here.endswith('+changes'):
        print('note: uncommitted changes are not in the clone; HEAD is timed', flush=True)
    work = Path(tempfile.mkdtemp(prefix='newcomer-'))
    clone = work / 'clone' / 'mavit-mm'
    subprocess.run(['git', 'clone', '-q', str(REPO_ROOT), str(clone)], check=True)
    commit = git_commit(clone)   # what is timed: HEAD, whatever this checkout holds besides
    caches = {name: work / 'caches' / name for name in ('home', 'mavit', 'pip', 'inductor')}
    for folder in caches.values():
        folder.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(('PYTEST', 'TRITON_', 'TORCHINDUCTOR_', 'VIRTUAL_ENV'))}
    env.update(HOME=str(caches['home']), MAVIT_CACHE_DIR=str(caches['mavit']),
               PIP_CACHE_DIR=str(caches['pip']), TORCHINDUCTOR_CACHE_DIR=str(caches['inductor']),
               MAVIT_TEST_DURATIONS=str(work / 'durations.json'), PYTHONUNBUFFERED='1')
    if args.python:
        env['PYTHON'] = args.python
    steps = {'make setup': run_step('make setup', ['make', 'setup'], clone, env,
                                    work / 'setup.log')}
    if steps['make setup']['returncode'] == 0:
        steps['make test'] = run_step('make test', ['make', 'test'], clone, env,
                                      work / 'test.log')
    output = (work / 'test.log').read_text(errors='replace') if 'make test' in steps else ''
    summary = re.findall(r'^=+ (.*(?:passed|failed).*) =+$', output, re.MULTILINE)
    versions = venv_versions(clone)
    durations_file = work / 'durations.json'
    durations = json.loads(durations_file.read_text()) if durations_file.exists() else None
    report = dict(benchmark='newcomer_path', commit=commit,
                  machine=f'{cpu_model()}, {os.cpu_count()} cores',
                  python=versions.get('python', platform.python_version()),
                  python_option=args.python, versions=versions,
                  date=utc_timestamp(),
                  steps=steps, total_minutes=round(sum(s['seconds'] for s in steps.values())
                                                   / 60, 1),
                  test_summary=summary[-1] if summary else None,
                  test_durations=durations,
                  slowest_tests=slowest_tests(durations, args.durations) if durations else [],
                  work_dir=str(work) if args.keep else None)
    write_json(args.out, report)
    args.out.with_suffix('.md').write_text(markdown(report))
    print(f'wrote {args.out} and {args.out.with_suffix(".md")}')
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return report


if __name__ == '__main__':
    main()
