"""How long each test takes, and on which ``make test`` worker.

Recorded: with ``MAVIT_TEST_DURATIONS`` naming a file (benchmarks/newcomer_path.py
sets it), the controller writes every test's seconds (setup, call and
teardown together) and the worker that ran it, and each worker's busy time.
Read back: ``make test`` hands its work units (a test, or an ``xdist_group``
of tests that share a fixture) to its workers heaviest first by the newest
recorded run (``benchmarks/results/newcomer-*.json``, or a record of a plain
run kept as ``benchmarks/results/test-durations-*.json``), so that a long unit
starts early instead of leaving one worker busy while the other idles: the
longest-first rule of scheduling, with xdist handing the next unit to
whichever worker runs dry.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

from helpers.paths import REPO_ROOT

DURATIONS_ENV = 'MAVIT_TEST_DURATIONS'
NEWCOMER_RUNS = 'benchmarks/results/newcomer-*.json'     # the record under 'test_durations'
PLAIN_RUNS = 'benchmarks/results/test-durations-*.json'  # the record itself
# The end of a failure's report kept in the record: the assertion or the
# exception and the lines above it, not the whole traceback.
FAILURE_CHARS = 3000


def plain_nodeid(nodeid: str) -> str:
    """The test's id without the ``@group`` suffix xdist adds to grouped tests."""
    return nodeid.split('@', 1)[0]


class DurationRecorder:
    """Collects the reports the controller receives (workers report to it)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.worker: dict[str, str] = {}
        self.failures: list[dict] = []

    @staticmethod
    def wanted() -> str | None:
        """The file to write, on the controller only (or a run without workers)."""
        return None if os.environ.get('PYTEST_XDIST_WORKER') else os.environ.get(DURATIONS_ENV)

    def add(self, report) -> None:
        nodeid = plain_nodeid(report.nodeid)
        self.seconds[nodeid] += report.duration
        node = getattr(report, 'node', None)     # set by xdist on the controller
        self.worker[nodeid] = node.gateway.id if node is not None else 'main'
        if report.failed:
            self.failures.append(dict(test=nodeid, when=report.when, worker=self.worker[nodeid],
                                      report=report.longreprtext[-FAILURE_CHARS:]))

    def write(self, path: str | Path) -> dict:
        busy: dict[str, float] = defaultdict(float)
        for nodeid, seconds in self.seconds.items():
            busy[self.worker[nodeid]] += seconds
        from mavit_mm.tooling.results_file import utc_timestamp
        record = dict(date=utc_timestamp(),
                      worker_busy_s={worker: round(s, 1) for worker, s in sorted(busy.items())},
                      failed=self.failures,
                      tests=[dict(test=nodeid, seconds=round(seconds, 2),
                                  worker=self.worker[nodeid])
                             for nodeid, seconds in sorted(self.seconds.items(),
                                                           key=lambda kv: -kv[1])])
        Path(path).write_text(json.dumps(record, indent=1) + '\n')
        return record


def recorded_durations(results: Path = REPO_ROOT) -> dict[str, float]:
    """Seconds per test of the newest recorded run (by its date); empty
    where none is recorded."""
    runs = []
    for pattern in (NEWCOMER_RUNS, PLAIN_RUNS):
        for path in results.glob(pattern):
            report = json.loads(path.read_text())
            if report.get('python_option'):   # another interpreter's run: not the README's
                continue
            record = report.get('test_durations') if pattern == NEWCOMER_RUNS else report
            if record and record.get('tests'):
                runs.append((report.get('date', ''), path.name, record))
    if not runs:
        return {}
    return {row['test']: row['seconds'] for row in max(runs)[2]['tests']}


def work_unit(item) -> str:
    """What xdist's loadgroup hands to one worker: the group, or the test."""
    marker = item.get_closest_marker('xdist_group')
    return marker.kwargs.get('name', marker.args[0] if marker.args else 'default') \
        if marker else item.nodeid


def heaviest_first(items, durations: dict[str, float]) -> None:
    """Order the work units by their recorded seconds, longest first; units
    without a record after them (grouped before single ones, a group being
    the kind that holds an expensive fixture). Stable within a unit."""
    unit_seconds: dict[str, float] = defaultdict(float)
    for item in items:
        unit_seconds[work_unit(item)] += durations.get(plain_nodeid(item.nodeid), 0.0)
    items.sort(key=lambda item: (-unit_seconds[work_unit(item)],
                                 item.get_closest_marker('xdist_group') is None))
