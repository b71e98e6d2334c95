"""make test's own schedule: the durations it records and the order it hands
work to its workers (tests/helpers/durations.py)."""
import json
import types

import pytest
from helpers.durations import DurationRecorder, heaviest_first, recorded_durations


def item(nodeid, group=None):
    marker = pytest.mark.xdist_group(group).mark if group else None
    return types.SimpleNamespace(nodeid=nodeid,
                                 get_closest_marker=lambda name: marker)


def test_units_go_out_longest_first_and_unrecorded_groups_before_single_tests():
    items = [item('a.py::quick'), item('b.py::one', 'deploy'), item('c.py::slow'),
             item('b.py::two', 'deploy'), item('e.py::new'), item('d.py::new', 'new-group')]
    durations = {'a.py::quick': 1.0, 'b.py::one': 30.0, 'b.py::two': 40.0, 'c.py::slow': 50.0}
    heaviest_first(items, durations)
    assert [i.nodeid for i in items] == ['b.py::one', 'b.py::two', 'c.py::slow', 'a.py::quick',
                                         'd.py::new', 'e.py::new']


def test_the_recorder_sums_phases_per_test_and_busy_time_per_worker(tmp_path, monkeypatch):
    def report(nodeid, when, seconds, worker, failure=None):
        node = types.SimpleNamespace(gateway=types.SimpleNamespace(id=worker))
        return types.SimpleNamespace(nodeid=nodeid, when=when, duration=seconds, node=node,
                                     failed=failure is not None, longreprtext=failure or '')
    recorder = DurationRecorder()
    long_failure = 'Traceback ...\n' + 'x' * 5000 + '\nE   assert 1.5 == 2.0'
    for args in [('t.py::a@grp', 'setup', 2.0, 'gw0'), ('t.py::a@grp', 'call', 3.0, 'gw0'),
                 ('t.py::b', 'call', 1.5, 'gw1', long_failure), ('t.py::c', 'call', 4.0, 'gw1')]:
        recorder.add(report(*args))
    record = recorder.write(tmp_path / 'durations.json')
    assert record['worker_busy_s'] == {'gw0': 5.0, 'gw1': 5.5}
    assert record['tests'][0] == dict(test='t.py::a', seconds=5.0, worker='gw0')
    # A failure names its test, phase and worker, and keeps the end of its report.
    [failure] = record['failed']
    assert {k: failure[k] for k in ('test', 'when', 'worker')} == dict(
        test='t.py::b', when='call', worker='gw1')
    assert failure['report'].endswith('E   assert 1.5 == 2.0')
    assert len(failure['report']) < len(long_failure)
    # As benchmarks/newcomer_path.py commits it, and the schedule reads it back.
    (tmp_path / 'benchmarks' / 'results').mkdir(parents=True)
    for date, seconds in (('2026-01-01', 99.0), ('2026-02-01', 5.0)):
        (tmp_path / 'benchmarks' / 'results' / f'newcomer-{date}.json').write_text(json.dumps(
            dict(date=date, test_durations=dict(record, tests=[dict(test='t.py::a',
                                                                    seconds=seconds)]))))
    assert recorded_durations(tmp_path) == {'t.py::a': 5.0}
    # A newer run with another interpreter (newcomer_path.py --python) is not
    # the README's path: the schedule keeps the README's.
    (tmp_path / 'benchmarks' / 'results' / 'newcomer-python3.12-x.json').write_text(json.dumps(
        dict(date='2026-02-15', python_option='python3.12',
             test_durations=dict(record, tests=[dict(test='t.py::a', seconds=7.0)]))))
    assert recorded_durations(tmp_path) == {'t.py::a': 5.0}
    (tmp_path / 'benchmarks' / 'results' / 'test-durations-x.json').write_text(json.dumps(
        dict(record, date='2026-03-01')))
    assert recorded_durations(tmp_path) == {'t.py::a': 5.0, 't.py::b': 1.5, 't.py::c': 4.0}
    # The newest by its date, not by its file's name.
    (tmp_path / 'benchmarks' / 'results' / 'test-durations-z.json').write_text(json.dumps(
        dict(record, date='2025-01-01', tests=[dict(test='t.py::a', seconds=99.0)])))
    assert recorded_durations(tmp_path) == {'t.py::a': 5.0, 't.py::b': 1.5, 't.py::c': 4.0}
