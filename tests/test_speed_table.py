"""The README's speed figures come from the newest committed speed results."""
import json
import re

import pytest

from conftest import REPO_ROOT

import benchmarks.speed_table as speed_table


def test_readme_speed_table_is_the_newest_results_file():
    path = speed_table.newest_results(device_type='cpu')
    assert speed_table.readme_table((REPO_ROOT / 'README.md').read_text()) == \
        speed_table.table_for(path), 'run: python benchmarks/speed_table.py --write'


def test_readme_quotes_the_ratios_of_that_file():
    report = json.loads(speed_table.newest_results(device_type='cpu').read_text())
    table = speed_table.readme_table((REPO_ROOT / 'README.md').read_text())
    quoted = [float(row.rsplit('|', 2)[1]) for row in table.splitlines()
              if re.match(r'\| (backbone|UperNet)', row)]
    assert quoted == [round(row['ratio'], 2) for row in report['results']]


def test_check_fails_when_a_figure_is_edited(tmp_path, monkeypatch):
    readme = tmp_path / 'README.md'
    text = (REPO_ROOT / 'README.md').read_text()
    table = speed_table.readme_table(text)
    first_ratio = re.search(r'\| (\d+\.\d\d) \|\n', table + '\n')
    assert first_ratio, table
    edited = table.replace(first_ratio.group(0), '| 0.01 |\n', 1)
    readme.write_text(speed_table.with_table(text, edited.rstrip('\n')))
    monkeypatch.setattr(speed_table, 'README', readme)
    assert speed_table.main(['--check']) == 1
    assert speed_table.main(['--write']) == 0
    assert speed_table.main(['--check']) == 0


def test_results_record_what_a_reader_needs():
    report = json.loads(speed_table.newest_results(device_type='cpu').read_text())
    for key in ('device', 'versions', 'date', 'dtype', 'repeats', 'commit'):
        assert report[key], key
    assert {row['task'] for row in report['results']} == set(speed_table.TASK_NAMES)
    for row in report['results']:
        assert len(row['times_ms']['MAViT-T']) == report['repeats']
        assert row['ratio'] == pytest.approx(
            row['median_ms']['MAViT-T'] / row['median_ms']['Swin-T'], rel=1e-3)
