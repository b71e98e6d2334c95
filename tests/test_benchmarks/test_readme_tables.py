"""The README's measured figures come from the newest committed results files."""
import json
import re

import pytest
from helpers.paths import REPO_ROOT

import benchmarks.readme_tables as readme_tables

README_TEXT = (REPO_ROOT / 'README.md').read_text()


def target_text(name: str) -> str:
    return readme_tables.TARGET_FILES[readme_tables.BLOCKS[name].target].read_text()


@pytest.mark.parametrize('name', sorted(readme_tables.BLOCKS))
def test_block_is_the_newest_results_file(name):
    assert readme_tables.readme_block(target_text(name), name) == readme_tables.block_for(name), \
        'run: python benchmarks/readme_tables.py --write'


def test_readme_quotes_the_ratios_of_the_speed_file():
    report = json.loads(readme_tables.newest_results('speed-table').read_text())
    table = readme_tables.readme_block(README_TEXT, 'speed-table')
    quoted = [float(row.rsplit('|', 2)[1]) for row in table.splitlines()
              if re.match(r'\| (backbone|UperNet)', row)]
    assert quoted == [round(row['ratio'], 2) for row in report['results']]


def test_readme_quotes_the_main_job_of_its_file():
    summary = json.loads(readme_tables.newest_results('main-job').read_text())['summary']
    block = readme_tables.readme_block(README_TEXT, 'main-job')
    assert f"**{summary['wall_seconds'] / 60:.1f} min**" in block
    for result in summary['results'].values():
        for metric in result['headline_metrics']:
            assert f"| {metric} | " in block


@pytest.mark.parametrize('name', sorted(readme_tables.BLOCKS))
def test_check_fails_when_a_figure_is_edited(name, tmp_path, monkeypatch):
    readme = tmp_path / 'page.md'
    text = target_text(name)
    block = readme_tables.readme_block(text, name)
    number = re.search(r'\| \**(\d+\.\d+)', block)
    assert number, block
    edited = block.replace(number.group(1), '0.01' if number.group(1) != '0.01' else '0.02', 1)
    readme.write_text(readme_tables.with_block(text, name, edited))
    monkeypatch.setitem(readme_tables.TARGET_FILES, readme_tables.BLOCKS[name].target, readme)
    assert readme_tables.main(['--check', '--blocks', name]) == 1
    assert readme_tables.main(['--write', '--blocks', name]) == 0
    assert readme_tables.main(['--check', '--blocks', name]) == 0


def test_speed_results_record_what_a_reader_needs():
    report = json.loads(readme_tables.newest_results('speed-table').read_text())
    for key in ('device', 'versions', 'date', 'dtype', 'repeats', 'commit'):
        assert report[key], key
    assert {row['task'] for row in report['results']} == set(readme_tables.TASK_NAMES)
    for row in report['results']:
        assert len(row['times_ms']['MAViT-T']) == report['repeats']
        assert row['ratio'] == pytest.approx(
            row['median_ms']['MAViT-T'] / row['median_ms']['Swin-T'], rel=1e-3)
