"""The README's measured figures come from the newest committed results files."""
import json
import re
import statistics
import subprocess

import pytest
from helpers.paths import REPO_ROOT

import benchmarks.readme_tables as readme_tables

README_TEXT = (REPO_ROOT / 'README.md').read_text()
# Blocks whose newest results file was recorded on an uncommitted tree, so
# readme_tables refuses them. Strict: once a clean re-run is
# committed and --write has rendered the block, its tests fail here until the
# name is taken out of this set.
STILL_UNCOMMITTED = set()
BLOCK_NAMES = [
    pytest.param(name, marks=pytest.mark.xfail(
        raises=readme_tables.UncommittedTreeError, strict=True,
        reason='its newest results file names an uncommitted tree: re-run on a clean commit'))
    if name in STILL_UNCOMMITTED else name for name in sorted(readme_tables.BLOCKS)]


def target_text(name: str) -> str:
    return readme_tables.TARGET_FILES[readme_tables.BLOCKS[name].target].read_text()


def table_rows(block: str) -> list[list[str]]:
    """The cells of a Markdown table's body rows."""
    lines = [line for line in block.splitlines() if line.startswith('| ') and
             not line.startswith('| ---')]
    return [[cell.strip() for cell in line.strip('|').split('|')] for line in lines[1:]]


@pytest.mark.parametrize('name', BLOCK_NAMES)
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


@pytest.mark.parametrize('name', BLOCK_NAMES)
def test_check_fails_when_a_figure_is_edited(name, tmp_path, monkeypatch):
    readme = tmp_path / 'page.md'
    text = target_text(name)
    block = readme_tables.block_for(name)
    # A table's first decimal, else (the checks' list) the first count of tests.
    number = re.search(r'\| \**(\d+\.\d+)', block) or re.search(r'\b(\d+) passed', block)
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
    # Each test step names its files, e.g. ``(tests/a.py, tests/b.py)``.
    paths = [path for group in re.findall(r'\((tests/[^)]+\.py)\)', block)
             for path in group.split(', ')]
    assert len(paths) >= 2 and all((REPO_ROOT / path).is_file() for path in paths), paths


def test_gpu_blocks_read_the_files_of_the_run_s_other_parts(tmp_path):
    """gpu_check.py's parts split the steps: the tests, the profile of MAViT-T's
    op calls and the byte model (bench_mala.json) come from part 1's folder,
    SDPA's rows from part 2's (the checks' block is the tests', with SDPA's
    rows where the run has them)."""
    env = dict(device='GPU', driver='1', cuda='13', torch='2', triton='3', date='2026-12-01',
               copy_bandwidth_tbps=3.0)
    run = tmp_path / 'gpu-test-2026-12-01'
    for part in ('part1', 'part2'):
        (run / part).mkdir(parents=True)
        (run / part / 'env.json').write_text(json.dumps(env))
    (run / 'part1' / 'kernel-tests.json').write_text(json.dumps(dict(
        command='-m pytest tests/test_mala_cuda.py', passed=3, failed=0, skipped=1,
        failures=[])))
    (run / 'part1' / 'bench_mala.json').write_text(json.dumps(dict(
        byte_model={'fwd': 'read q, k, v; write out: 4 * BH * N * d * bytes'}, results=[])))
    (run / 'part1' / 'profile.json').write_text(json.dumps(dict(
        dtype='bfloat16', impl='triton', layout='channels_last', results=[
            dict(stage=2, batch=8, heads=2, head_dim=64, height=64, width=256, tokens=16384,
                 batch_heads=16, pass_name='fwd', wall_us=12.34, kernel_us=5.0,
                 host_issue_us=7.0, kernels={'_forward_partials_kernel': 4.0}),
            dict(stage=2, batch=1, heads=2, head_dim=64, height=64, width=256, tokens=16384,
                 batch_heads=2, pass_name='fwd+bwd', wall_us=50.0, kernel_us=40.0,
                 host_issue_us=70.0),
            dict(stage=1, batch=1, heads=1, head_dim=64, height=128, width=512,
                 pass_name='fwd', skipped='time budget spent')])))
    (run / 'part2' / 'sdpa.json').write_text(json.dumps(dict(results=[dict(
        height=512, width=2048, precision='bf16', allowed='flash', ok=True,
        sdpa_ops=['aten::_scaled_dot_product_cudnn_attention'])])))
    tests = json.loads((run / 'part1' / 'kernel-tests.json').read_text())
    block = readme_tables.render_gpu_checks(tests, str(run / 'part1' / 'kernel-tests.json'))
    assert '- `kernel-tests` (tests/test_ops/test_mala/test_mala_cuda.py): 3 passed' in block
    assert 'only flash allowed: ran; unrestricted, the forward picks ' \
           '`_scaled_dot_product_cudnn_attention`' in block
    profile = json.loads((run / 'part1' / 'profile.json').read_text())
    block = readme_tables.render_gpu_op_calls(profile, str(run / 'part1' / 'profile.json'))
    assert '| call | GPU kernels µs (target) | partial sums µs | at copy speed µs | wall µs | ' \
           'host µs |' in block
    # 4 * 16 * 16384 * 64 bf16 elements (2 bytes each) at 3 TB/s: 44.7 µs.
    assert '| stage 2, batch 8, 2 head(s) of d = 64 over 64x256, fwd | 5.0 | 4.0 | 44.7 | 12.3 | ' \
           '7.0 |' in block
    # A batch-1 call has its target; no byte model for fwd+bwd, no partials: n/a.
    assert '| stage 2, batch 1, 2 head(s) of d = 64 over 64x256, fwd+bwd | 40.0 (≤ 60: met) | ' \
           'n/a | n/a | 50.0 | 70.0 |' in block
    assert 'stage 1' not in block   # a row the budget cut has no figures


def test_ablations_block_adds_the_run_s_compiled_rows_and_the_rounds_spread(tmp_path,
                                                                            monkeypatch):
    """The ablations block: a column per mode and pass; the compiled rows from
    the same run's ablations-compile.json (another part's folder); an eager
    row timed in rounds against the all-on model with its rounds' spread."""
    monkeypatch.setattr(readme_tables, '_gpu_source_line', lambda *args: 'Measured.')
    run = tmp_path / 'gpu-test-2026-12-01'
    for part in ('part-2', 'part-7'):
        (run / part).mkdir(parents=True)

    def row(mode, pass_name, off, ratio, **more):
        return dict(mode=mode, pass_name=pass_name, switches_off=off, time_ms=2.0,
                    time_vs_all_on=ratio, **more)
    report = dict(height=512, width=2048, note='a note', drift={'eager fwd': 0.99}, results=[
        row('cuda-graph', 'fwd', [], 1.0), row('cuda-graph', 'fwd', ['dense_rope'], 1.006),
        row('eager', 'fwd', [], 1.0), row('eager', 'fwd', ['dense_rope'], 0.95, all_on_ms=2.1,
                                          ratio_min=0.91, ratio_max=1.02),
        row('eager', 'fwd+bwd', [], 1.0),
        row('eager', 'fwd+bwd', ['channel_split'], 1.04, all_on_ms=2.0, ratio_min=1.01,
            ratio_max=1.08)])
    (run / 'part-2' / 'ablations.json').write_text(json.dumps(report))
    (run / 'part-7' / 'ablations-compile.json').write_text(json.dumps(dict(report, results=[
        row('compile', 'fwd', [], 1.0), row('compile', 'fwd', ['matmul_1x1'], 1.076)])))
    block = readme_tables.render_gpu_ablations(report, str(run / 'part-2' / 'ablations.json'))
    assert '| switch off | cuda-graph fwd | eager fwd | eager fwd+bwd | compile fwd |' in block
    assert '| `dense_rope` | 1.006 | 0.950 (0.91-1.02) |  |  |' in block
    assert '| `channel_split` |  |  | 1.040 (1.01-1.08) |  |' in block
    assert '| `matmul_1x1` |  |  |  | 1.076 |' in block
    assert 'eager fwd 2.00 (drift 0.990)' in block and 'compile fwd 2.00' in block
    assert 'Compiled rows: `part-7/ablations-compile.json` of the same run.' in block


def test_gpu_blocks_judge_by_the_thresholds_of_gpu_targets(monkeypatch):
    """The GPU blocks judge each figure by benchmarks/gpu_targets.py: a
    threshold changed there changes the verdict on the page."""
    from benchmarks import gpu_targets
    row = dict(stage=2, batch=1, heads=2, head_dim=64, height=64, width=256, pass_name='fwd+bwd',
               kernel_us=40.0)
    target = gpu_targets.target_of('profile', 'kernel_us', row)
    assert (target.comparison, target.threshold) == ('≤', 60)
    assert readme_tables._against_target(40.0, '.1f', target) == '40.0 (≤ 60: met)'
    changed = target._replace(threshold=30)
    monkeypatch.setattr(gpu_targets, 'GPU_TARGETS', tuple(
        changed if t is target else t for t in gpu_targets.GPU_TARGETS))
    assert readme_tables._against_target(
        40.0, '.1f', gpu_targets.target_of('profile', 'kernel_us', row)) == '40.0 (≤ 30: **missed**)'
    # The op block's target shapes are the bench targets' figures: one the run did not
    # time is a row that says so, with its threshold.
    report = dict(byte_model={}, results=[])
    monkeypatch.setattr(readme_tables, '_gpu_source_line', lambda *args: 'Measured.')
    block = readme_tables.render_gpu_op(report, 'gpu-x/part-5/bench_mala.json')
    assert block.count('not measured (≥ ') == len(gpu_targets.figures_of('bench', 'percent_of_copy'))
    assert '| bf16 | 16 | 65,536 |  | fwd | not measured | | not measured (≥ 50) |' in block


def test_target_now_reads_the_newest_committed_file_of_the_step(tmp_path):
    """A target's figure now: from the newest results file of its step that
    has it (by the run's env.json date), not from one of an uncommitted tree;
    "not measured" where none has it."""
    from benchmarks import gpu_targets
    target = gpu_targets.GPU_TARGETS[0]          # backbones, time_vs_swin under a CUDA graph
    assert readme_tables.target_now(target, tmp_path) == 'not measured'
    for run, date, commit, ratio in (('gpu-a-2026-12-01', '2026-12-01', 'abc', 0.7),
                                     ('gpu-b-2026-12-02', '2026-12-02', 'def', 0.5),
                                     ('gpu-c-2026-12-03', '2026-12-03', 'ghi+changes', 0.1)):
        (tmp_path / run / 'part-2').mkdir(parents=True)
        (tmp_path / run / 'part-2' / 'env.json').write_text(json.dumps(dict(date=date,
                                                                             commit=commit)))
        (tmp_path / run / 'part-2' / 'backbones.json').write_text(json.dumps(dict(
            time_vs_swin={'cuda-graph': ratio})))
    (tmp_path / 'gpu-d-2026-12-04' / 'part-2').mkdir(parents=True)
    (tmp_path / 'gpu-d-2026-12-04' / 'part-2' / 'env.json').write_text(json.dumps(dict(
        date='2026-12-04', commit='jkl')))
    (tmp_path / 'gpu-d-2026-12-04' / 'part-2' / 'backbones.json').write_text(json.dumps(dict(
        time_vs_swin={'eager': 1.2})))          # cut before the CUDA-graph rows
    assert readme_tables.target_now(target, tmp_path) == '0.500: met (gpu-b-2026-12-02)'


# --------------------------------------------------------------------------
# The README's GPU table: UperNet FPS of the newest GPU run
# --------------------------------------------------------------------------
def fps_runs(report: dict, size: str, dtype: str, mode: str) -> list[tuple[float, float]]:
    """(MAViT-T images/s, Swin-T images/s) of each run in an FPS file, in
    row order."""
    def fps(start):
        return [row['fps'] for row in report['results']
                if row['config'].split('/')[-1].startswith(start) and row['mode'] == mode
                and row['dtype'] == dtype and f"{row['height']}x{row['width']}" == size]
    return list(zip(fps('upernet_mavit-t_'), fps('upernet_swin-t_')))


def recorded_ratios(report: dict) -> dict:
    """The MAViT-T / Swin-T ratios the tools wrote into an FPS file, by (size,
    precision, mode): benchmark_fps.py's ``fps_ratios``, gpu_check.py's
    ``fps_vs_swin``."""
    found = {}
    for row in report.get('fps_ratios', []):
        found.setdefault((f"{row['height']}x{row['width']}", report['dtype'], row['mode']),
                         []).append(row['fps_ratio'])
    for row in report['results']:
        if 'fps_vs_swin' in row:
            found.setdefault((f"{row['height']}x{row['width']}", row['dtype'], row['mode']),
                             []).append(row['fps_vs_swin'])
    return found


def test_readme_gpu_table_quotes_each_size_and_mode_from_the_newest_gpu_run_measuring_it():
    """Each section of the block is one GPU run (its GPU, versions, commit and
    folder), its rows that run's FPS files; every size and mode measured by
    any committed run is in the block once, from the newest run with it."""
    block = readme_tables.readme_block(README_TEXT, 'gpu-upernet-fps')
    mode_names = {name: mode for mode, name in readme_tables.FPS_MODES.items()}
    results = readme_tables.RESULTS_DIR
    runs = {readme_tables.gpu_run_dir(path) for path in results.glob('gpu-*/**/*fps*.json')}
    reports = {run: {path.relative_to(run).as_posix(): json.loads(path.read_text())
                     for path in run.glob('**/*fps*.json')} for run in runs}

    def run_date(run):
        return max(readme_tables._report_date(path, json.loads(path.read_text()))
                   for path in run.glob('**/*fps*.json'))
    expected = {}
    for run in sorted(runs, key=run_date):        # newer runs overwrite older ones
        for report in reports[run].values():
            for key in recorded_ratios(report):
                expected[key] = run
    quoted = {}
    sections = block.split('\n\nMeasured on ')
    assert block.startswith('Measured on ')
    for section in sections:
        run = REPO_ROOT / re.search(r'Raw: `([^`]+)/`', section).group(1)
        env = json.loads(next(run.glob('*/env.json')).read_text())
        commit = re.search(r'^Commit: `([^`]+)`', (run / 'README.md').read_text(), re.M).group(1)
        assert f"{env['device']} (driver {env['driver']}, CUDA {env['cuda']}), torch " \
               f"{env['torch']}, Triton {env['triton']}, commit {commit}, {env['date'][:10]}" \
            in section
        for size, dtype, mode_name, mavit_fps, swin_fps, ratios, median, files in \
                table_rows(section):
            mode = mode_names[mode_name]
            names = re.findall(r'`([^`]+)`(?: ×\d+)? \((\d+)\)', files)
            found = [fps for name, _ in names
                     for fps in fps_runs(reports[run][name], size, dtype, mode)]
            assert [float(v) for v in mavit_fps.split(', ')] == [round(m, 1) for m, _ in found]
            assert [float(v) for v in swin_fps.split(', ')] == [round(s, 1) for _, s in found]
            assert [float(v) for v in ratios.split(', ')] == [round(m / s, 2) for m, s in found]
            assert float(median.strip('*')) == round(
                statistics.median(m / s for m, s in found), 2)
            assert [int(iters) for _, iters in names] == \
                [reports[run][name]['iters'] for name, _ in names]
            # The tools' own ratios agree.
            assert [round(ratio, 2) for name, _ in names
                    for ratio in recorded_ratios(reports[run][name])[(size, dtype, mode)]] == \
                [round(m / s, 2) for m, s in found]
            assert (size, dtype, mode) not in quoted
            quoted[(size, dtype, mode)] = run
    assert quoted == expected


def test_gpu_table_takes_each_size_and_mode_from_the_newest_run_with_it(tmp_path):
    """A newer run that measured 1024x2048 only: its section first, then the
    older run's 512x2048; a size both measured comes from the newer."""
    def rows(height, mavit, swin, mode='eager'):
        return [dict(fps_row('upernet_mavit-t', mode, mavit), height=height),
                dict(fps_row('upernet_swin-t', mode, swin), height=height)]
    write_gpu_run(tmp_path / 'gpu-a-2026-12-01', '2026-12-01T00:00:00', {
        'part-1/upernet-fps.json': dict(iters=50, results=rows(512, 30.0, 20.0)
                                        + rows(256, 9.0, 10.0))}, commit='aaa1111')
    write_gpu_run(tmp_path / 'gpu-b-2026-12-02', '2026-12-02T00:00:00', {
        'part-1/upernet-fps-1024.json': dict(iters=50, results=rows(1024, 10.0, 20.0)
                                             + rows(256, 12.0, 10.0))}, commit='bbb2222')
    newest = readme_tables.newest_results('gpu-upernet-fps', tmp_path)
    block = readme_tables.block_for('gpu-upernet-fps', newest)
    newer, older = block.split('\n\nMeasured on ')
    assert 'commit bbb2222, 2026-12-02' in newer and 'gpu-b-2026-12-02/`' in newer
    assert [row[:3] + row[5:7] for row in table_rows(newer)] == [
        ['256x2048', 'bf16', 'eager', '1.20', '**1.20**'],
        ['1024x2048', 'bf16', 'eager', '0.50', '**0.50**']]
    assert 'commit aaa1111, 2026-12-01, the sizes and modes the newer run did not measure' in older
    assert [row[:3] + row[5:7] for row in table_rows(older)] == [
        ['512x2048', 'bf16', 'eager', '1.50', '**1.50**']]
    # Rendered from the older run, the block holds it alone.
    only = readme_tables.block_for('gpu-upernet-fps',
                                   tmp_path / 'gpu-a-2026-12-01' / 'part-1' / 'upernet-fps.json')
    assert '\n\nMeasured on ' not in only and len(table_rows(only)) == 2


def test_readme_leads_its_speed_results_with_the_gpu_table():
    gpu_begin, _ = readme_tables.markers('gpu-upernet-fps')
    cpu_begin, _ = readme_tables.markers('speed-table')
    results = README_TEXT.index('## Results')
    assert results < README_TEXT.index(gpu_begin) < README_TEXT.index(cpu_begin)


def fps_row(config: str, mode: str, fps: float | None, error: str | None = None, **extra) -> dict:
    return dict(config=f'configs/upernet/{config}_8xb2-160k_ade20k-512x512.py', mode=mode,
                height=512, width=2048, dtype='bf16', batch_size=1, device='GPU', fps=fps,
                error=error, **extra)


def write_gpu_run(run, env_date: str, fps_files: dict, commit: str = 'abc1234', env_in='part-1'):
    """A GPU run folder: its env.json in ``env_in``, a README.md naming
    ``commit``, and ``fps_files`` (path in the run: report)."""
    (run / env_in).mkdir(parents=True)
    (run / env_in / 'env.json').write_text(json.dumps(dict(
        device='GPU', driver='1', cuda='13', torch='2.11', triton='3.6', date=env_date)))
    (run / 'README.md').write_text(f'# a run\n\nCommit: `{commit}`\n')
    for name, report in fps_files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(json.dumps(report))


def upernet_fps_json(mavit_fps: float, swin_fps: float, iters: int = 30, **extra) -> dict:
    """gpu_check.py's upernet-fps.json (no date: the run's env.json has it)."""
    return dict(iters=iters, results=[fps_row('upernet_mavit-t', 'eager', mavit_fps),
                                      fps_row('upernet_swin-t', 'eager', swin_fps)], **extra)


def test_gpu_table_comes_from_the_newest_run_with_fps_files(tmp_path):
    results = tmp_path / 'results'
    write_gpu_run(results / 'gpu-old-2026-12-01', '2026-12-01T00:00:00',
                  {'part-1/upernet-fps.json': upernet_fps_json(10.0, 40.0)})
    # The newest run with FPS files: gpu_check.py's in a command folder without
    # an env.json (part-1 has the run's), benchmark_fps.py's at the run's top.
    write_gpu_run(results / 'gpu-new-2026-12-02', '2026-12-02T00:00:00', {
        'part-2/upernet-fps.json': upernet_fps_json(50.0, 40.0),
        'fps-512.json': dict(date='2026-12-02T01:00:00+00:00', dtype='bf16', iters=50,
                             device='GPU', versions=dict(torch='2.11', triton='3.6'), results=[
                                 fps_row('upernet_mavit-t', 'eager', 30.0),
                                 fps_row('upernet_swin-t', 'eager', 40.0),
                                 fps_row('upernet_mavit-t', 'compile', None, error='no graph'),
                                 fps_row('upernet_swin-t', 'compile', 45.0)])})
    # Newer still, but without UperNet FPS.
    write_gpu_run(results / 'gpu-newer-2026-12-03', '2026-12-03T00:00:00', {})
    (results / 'gpu-newer-2026-12-03' / 'part-1' / 'sweep.json').write_text('{}')

    newest = readme_tables.newest_results('gpu-upernet-fps', results)
    assert newest == results / 'gpu-new-2026-12-02' / 'fps-512.json'
    block = readme_tables.block_for('gpu-upernet-fps', newest)
    assert 'commit abc1234, 2026-12-02' in block
    assert table_rows(block) == [['512x2048', 'bf16', 'eager', '50.0, 30.0', '40.0, 40.0',
                                  '1.25, 0.75', '**1.00**',
                                  '`part-2/upernet-fps.json` (30), `fps-512.json` (50)']]
    assert 'Failed: MAViT-T compile bf16 at 512x2048 (`fps-512.json`): no graph.' in block


def test_gpu_table_shows_each_run_of_a_file_that_holds_several(tmp_path):
    """gpu_check.py gathers several benchmark_fps.py children into one file:
    the i-th row of each model, mode and size is its i-th run."""
    run = tmp_path / 'gpu-x-2026-12-01'
    rows = [fps_row('upernet_swin-t', 'eager', 40.0), fps_row('upernet_mavit-t', 'eager', 44.0),
            fps_row('upernet_swin-t', 'eager', 40.0), fps_row('upernet_mavit-t', 'eager', 48.0),
            fps_row('upernet_swin-t', 'eager', 50.0), fps_row('upernet_mavit-t', 'eager', 45.0)]
    write_gpu_run(run, '2026-12-01T00:00:00',
                  {'part-1/upernet-fps.json': dict(iters=50, results=rows)})
    block = readme_tables.block_for('gpu-upernet-fps', run / 'part-1' / 'upernet-fps.json')
    assert table_rows(block) == [['512x2048', 'bf16', 'eager', '44.0, 48.0, 45.0',
                                  '40.0, 40.0, 50.0', '1.10, 1.20, 0.90', '**1.10**',
                                  '`part-1/upernet-fps.json` ×3 (50)']]


def test_gpu_table_refuses_a_file_of_another_machine(tmp_path):
    run = tmp_path / 'gpu-x-2026-12-01'
    write_gpu_run(run, '2026-12-01T00:00:00', {'fps-512.json': dict(
        date='2026-12-01T01:00:00', dtype='bf16', iters=50, device='GPU',
        versions=dict(torch='2.12', triton='3.6'), results=upernet_fps_json(1.0, 1.0)['results'])})
    with pytest.raises(ValueError, match=r"fps-512.json is not of its GPU run's environment: "
                                         r'torch 2.12 \(env.json: 2.11\)'):
        readme_tables.block_for('gpu-upernet-fps', run / 'fps-512.json')


# --------------------------------------------------------------------------
# No block names an uncommitted tree
# --------------------------------------------------------------------------
def test_the_uncommitted_mark_is_the_one_git_commit_writes(tmp_path):
    from devtools.checkout import git_commit

    def git(*args):
        subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@example.com',
                        '-c', 'commit.gpgsign=false', *args], cwd=tmp_path, check=True,
                       capture_output=True)
    (tmp_path / 'tracked.txt').write_text('a')
    git('init', '-q')
    git('add', 'tracked.txt')
    git('commit', '-qm', 'one')
    assert not readme_tables.is_uncommitted(git_commit(tmp_path))
    (tmp_path / 'tracked.txt').write_text('b')
    assert readme_tables.is_uncommitted(git_commit(tmp_path))


def test_a_results_file_of_an_uncommitted_tree_is_refused(tmp_path, monkeypatch, capsys):
    path = tmp_path / 'speed-vs-swin-cpu-2026-12-01-0000.json'
    path.write_text(json.dumps(dict(date='2026-12-01T00:00:00', device_type='cpu',
                                    commit='abc1234+changes')))
    with pytest.raises(readme_tables.UncommittedTreeError) as refused:
        readme_tables.block_for('speed-table', path)
    message = str(refused.value)
    assert message.startswith(f'block speed-table refuses {readme_tables.repo_path(path)}: it was '
                              'recorded on an uncommitted tree (commit abc1234+changes)')
    assert message.endswith('python benchmarks/readme_tables.py --write --blocks speed-table')

    monkeypatch.setattr(readme_tables, 'RESULTS_DIR', tmp_path)
    page = tmp_path / 'README.md'
    page.write_text(README_TEXT)
    monkeypatch.setitem(readme_tables.TARGET_FILES, 'README.md', page)
    assert readme_tables.main(['--check', '--blocks', 'speed-table']) == 1
    assert message in capsys.readouterr().err
    assert readme_tables.main(['--write', '--blocks', 'speed-table']) == 1
    assert message in capsys.readouterr().err
    assert page.read_text() == README_TEXT


@pytest.mark.parametrize('dirty', ['the run', 'one file'])
def test_a_gpu_run_on_an_uncommitted_tree_is_refused(dirty, tmp_path):
    """The GPU table reads the commit from the run's README.md, or from a file
    that records its own; it refuses either where it names an uncommitted tree."""
    run = tmp_path / 'gpu-x-2026-12-01'
    write_gpu_run(run, '2026-12-01T00:00:00', {
        'part-1/upernet-fps.json': upernet_fps_json(
            1.0, 1.0, **({'commit': 'abc1234+changes'} if dirty == 'one file' else {})),
        'fps-512.json': dict(upernet_fps_json(1.0, 1.0), date='2026-12-01T01:00:00', dtype='bf16')},
        commit='abc1234+changes' if dirty == 'the run' else 'abc1234')
    with pytest.raises(readme_tables.UncommittedTreeError) as refused:
        readme_tables.block_for('gpu-upernet-fps', run / 'fps-512.json')
    assert refused.value.block == 'gpu-upernet-fps'
    assert refused.value.path.name == ('fps-512.json' if dirty == 'the run' else 'upernet-fps.json')


def test_newcomer_blocks_keep_the_readme_path_and_another_python_apart(tmp_path):
    """The README's block is the newest run of its own path (python3), even
    where a run with another interpreter (``newcomer_path.py --python``) is
    newer; that one goes into docs/installation.md, naming its versions."""
    step = dict(command='make setup', returncode=0, seconds=420.0, peak_disk_gb=3.1,
                left_on_disk_gb=3.0)
    record = dict(benchmark='newcomer_path', commit='abc1234', machine='a CPU, 2 cores',
                  steps={'make setup': step, 'make test': dict(step, command='make test')},
                  test_summary='10 passed in 500.00s')
    (tmp_path / 'newcomer-cpu-old.json').write_text(json.dumps(
        dict(record, date='2026-11-27T10:00:00+00:00', python_option=None)))
    (tmp_path / 'newcomer-python3.12-cpu-new.json').write_text(json.dumps(
        dict(record, date='2026-11-27T12:00:00+00:00', python_option='python3.12',
             versions=dict(python='3.12.1', torch='2.13.0+cu130', triton='3.7.1'))))
    (tmp_path / 'newcomer-python3.10-cpu-older.json').write_text(json.dumps(
        dict(record, date='2026-11-27T11:00:00+00:00', python_option='python3.10',
             versions=dict(python='3.10.13', torch='2.13.0+cu130', triton='3.7.1'))))
    assert readme_tables.newest_results('newcomer', tmp_path).name == 'newcomer-cpu-old.json'
    other = readme_tables.newest_results('newcomer-python3.12', tmp_path)
    assert other.name == 'newcomer-python3.12-cpu-new.json'
    # Each other interpreter has its own block: the newer 3.12 run hides no 3.10 one.
    assert readme_tables.newest_results('newcomer-python3.10', tmp_path).name == \
        'newcomer-python3.10-cpu-older.json'
    block = readme_tables.render_newcomer(json.loads(other.read_text()), other.name)
    assert 'Python 3.12.1 making the venv' in block and 'torch 2.13.0+cu130' in block
    assert '| `make setup` | 7.0 |' in block


def test_newcomer_block_gives_no_disk_figures_for_a_disturbed_step():
    """A step whose disk something else changed meanwhile (the report's
    ``disk_disturbed`` says why) shows no disk figures, and the reason; the
    other steps keep theirs."""
    step = dict(command='make setup', returncode=0, seconds=420.0, peak_disk_gb=0.2,
                left_on_disk_gb=-0.0)
    record = dict(benchmark='newcomer_path', commit='abc1234', machine='a CPU, 2 cores',
                  date='2026-11-28T10:00:00+00:00', python_option=None,
                  steps={'make setup': step, 'make test': dict(
                      step, command='make test', peak_disk_gb=4.7, left_on_disk_gb=0.2)},
                  test_summary='10 passed in 500.00s',
                  disk_disturbed={'make setup': 'a folder was deleted meanwhile'})
    block = readme_tables.render_newcomer(record, 'newcomer.json')
    assert '| `make setup` | 7.0 | - | - |' in block
    assert '| `make test` | 7.0 | 4.7 | 0.2 |' in block
    assert 'No disk figures for `make setup`: a folder was deleted meanwhile.' in block
    del record['disk_disturbed']
    assert '| `make setup` | 7.0 | 0.2 | -0.0 |' in readme_tables.render_newcomer(record, 'n.json')
