"""The check's test steps (part 1, correctness): the kernel tests and the
model tests on CUDA, in a pytest child killed at the budget, summarised
into ``<step>.json`` from its junit file (or, cut short, its progress)."""
from __future__ import annotations

import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from benchmarks.gpu_check_lib.children import has_module, run_child, write_results
from benchmarks.gpu_check_lib.plan import LOG_NAME

TEST_FILES = {'kernel-tests': ('tests/test_ops/test_mala/test_mala_cuda.py',
                              'tests/test_ops/test_depthwise.py',
                              'tests/test_ops/test_fused_ops_under_compile.py'),
              'model-tests': ('tests/test_ops/test_mala/test_mala_numerics.py',
                             'tests/test_ops/test_mala/test_mala_plans_and_compile.py',
                             'tests/test_ops/test_mala/test_mala_dispatch.py',
                             'tests/test_models/test_fused_block.py')}


def step_tests(name: str, out: Path, budget_s: float, workers: int) -> dict:
    junit = Path(tempfile.mkdtemp()) / f'{name}.xml'   # summarised into {name}.json
    command = [sys.executable, '-m', 'pytest', '-q', '-rfE', '-p', 'no:cacheprovider',
               f'--junitxml={junit}', *TEST_FILES[name]]
    if workers > 0 and has_module('xdist'):
        command[3:3] = ['-n', str(workers)]
    run = run_child(command, budget_s, out / LOG_NAME)
    summary = junit_summary(junit) if not run['timed_out'] else log_summary(run['output'])
    summary.update(command=' '.join(command[1:]), **{k: v for k, v in run.items()
                                                      if k != 'output'})
    print(run['output'][-3000:])
    write_results(out / f'{name}.json', summary)
    return summary



def log_summary(output: str) -> dict:
    """Counts from pytest's progress output, for a run killed before its junit file."""
    lines = [line for line in output.splitlines() if line and set(line.split(' ')[0]) <= set('.FEsx')]
    marks = ''.join(line.split(' ')[0] for line in lines)
    return dict(passed=marks.count('.'), failed=marks.count('F'), errors=marks.count('E'),
                skipped=marks.count('s'), failures=[line for line in output.splitlines()
                                                    if line.startswith(('FAILED', 'ERROR'))],
                note='killed at its budget: counts of the tests that had finished')


def junit_summary(path: Path) -> dict:
    if not path.exists():
        return dict(passed=0, failed=0, errors=1, skipped=0, failures=['no junit file'])
    root = ET.parse(path).getroot()
    counts = dict(passed=0, failed=0, errors=0, skipped=0)
    failures = []
    for case in root.iter('testcase'):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find('failure') is not None:
            counts['failed'] += 1
            failures.append(name + ': ' + (case.find('failure').get('message') or '')[:300])
        elif case.find('error') is not None:
            counts['errors'] += 1
            failures.append(name + ': ' + (case.find('error').get('message') or '')[:300])
        elif case.find('skipped') is not None:
            counts['skipped'] += 1
        else:
            counts['passed'] += 1
    counts['failures'] = failures
    return counts

