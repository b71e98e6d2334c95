"""Reading metrics back from the JSON logs mmengine's LoggerHook writes.

Layout of a work dir after a run (timestamp = ``YYYYmmdd_HHMMSS``)::

    <work_dir>/<timestamp>/vis_data/<timestamp>.json   train + val records (training runs)
    <work_dir>/<timestamp>/<timestamp>.json            the test record (test runs)

Each file holds one JSON object per line.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

_TIMESTAMP = re.compile(r'^\d{8}_\d{6}$')


def run_dirs(work_dir) -> list[Path]:
    """The per-run log folders of ``work_dir``, oldest first."""
    work_dir = Path(work_dir)
    if not work_dir.is_dir():
        return []
    return sorted(p for p in work_dir.iterdir() if p.is_dir() and _TIMESTAMP.match(p.name))


def read_json_lines(path) -> list[dict]:
    """One record per line; a line's first record is taken. In a distributed test
    every process writes its metrics record over the same file from its start
    (mmengine's ``LoggerHook.after_test_epoch`` has no rank guard), leaving the
    tail of a longer one behind a shorter one; they differ only in timings."""
    records, decoder = [], json.JSONDecoder()
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line:
            records.append(decoder.raw_decode(line)[0])
    return records


def training_records(run_dir) -> list[dict]:
    """Train and val records of one training run (``vis_data/<timestamp>.json``)."""
    run_dir = Path(run_dir)
    path = run_dir / 'vis_data' / f'{run_dir.name}.json'
    return read_json_lines(path) if path.is_file() else []


def test_record(run_dir) -> dict | None:
    """The metrics record of one test run (``<timestamp>.json``), if it finished."""
    run_dir = Path(run_dir)
    path = run_dir / f'{run_dir.name}.json'
    records = read_json_lines(path) if path.is_file() else []
    return records[-1] if records else None


def is_metric_record(record: dict, metric_prefixes=('coco/', 'mIoU', 'aAcc', 'mAcc')) -> bool:
    return any(key.startswith(metric_prefixes) for key in record)


def metrics_only(record: dict) -> dict[str, float]:
    """Drop the bookkeeping keys (time, data_time, step, ...) of a metric record."""
    bookkeeping = {'time', 'data_time', 'step', 'iter', 'epoch', 'lr', 'memory'}
    return {k: v for k, v in record.items() if k not in bookkeeping}


def latest_test_metrics(work_dir) -> dict[str, float] | None:
    """Metrics of the newest finished test run in ``work_dir``."""
    for run_dir in reversed(run_dirs(work_dir)):
        record = test_record(run_dir)
        if record is not None:
            return metrics_only(record)
    return None


def validation_metrics_by_step(work_dir, runs=None) -> dict[int, dict[str, float]]:
    """``{iteration (or epoch): metrics}`` of every validation of the training
    runs: each run folder of ``work_dir`` (a resumed run's earlier part
    included), or only those of ``runs`` (a run from scratch, in a work dir
    that earlier runs used too)."""
    found = {}
    for run_dir in run_dirs(work_dir) if runs is None else runs:
        for record in training_records(run_dir):
            if is_metric_record(record):
                found[int(record.get('step', -1))] = metrics_only(record)
    return found
