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


def test_gpu_checks_block_names_test_files_where_they_are_now():
    block = readme_tables.readme_block(target_text('gpu-checks'), 'gpu-checks')
    paths = re.findall(r'\((tests/\S+\.py)\)', block)
    assert len(paths) == 2 and all((REPO_ROOT / path).is_file() for path in paths)


def test_gpu_checks_block_reads_the_files_of_the_run_s_other_parts(tmp_path):
    """gpu_check.py's parts split the steps: the tests and the profile of MAViT-T's
    op calls come from part 1's folder, SDPA's rows from part 2's."""
    env = dict(device='GPU', driver='1', cuda='13', torch='2', triton='3', date='2026-12-01',
               copy_bandwidth_tbps=3.0)
    for part in ('part1', 'part2'):
        (tmp_path / part).mkdir()
        (tmp_path / part / 'env.json').write_text(json.dumps(env))
    (tmp_path / 'part1' / 'kernel-tests.json').write_text(json.dumps(dict(
        command='-m pytest tests/test_mala_cuda.py', passed=3, failed=0, skipped=1,
        failures=[])))
    (tmp_path / 'part1' / 'profile.json').write_text(json.dumps(dict(
        dtype='bfloat16', layout='channels_last', results=[
            dict(stage=2, batch=8, heads=2, head_dim=64, height=64, width=256,
                 pass_name='fwd', wall_us=12.34, kernel_us=5.0, host_issue_us=7.0),
            dict(stage=1, batch=1, heads=1, head_dim=64, height=128, width=512,
                 pass_name='fwd', skipped='time budget spent')])))
    report = dict(results=[dict(height=512, width=2048, precision='bf16', allowed='flash',
                                ok=True, sdpa_ops=['aten::_scaled_dot_product_cudnn_attention'])])
    block = readme_tables.render_gpu_checks(report, str(tmp_path / 'part2' / 'sdpa.json'))
    assert '- `kernel-tests` (tests/test_ops/test_mala/test_mala_cuda.py): 3 passed' in block
    assert 'only flash allowed: ran; unrestricted, the forward picks ' \
           '`_scaled_dot_product_cudnn_attention`' in block
    assert '| op call in MAViT-T (bfloat16, channels_last) | wall µs |' in block
    assert '| stage 2, batch 8, 2 head(s) of d = 64 over 64x256, fwd | 12.3 | 5.0 | 7.0 |' \
        in block
    assert 'stage 1' not in block   # a row the budget cut has no figures
