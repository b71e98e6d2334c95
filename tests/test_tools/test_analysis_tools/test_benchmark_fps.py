"""tools/analysis_tools/benchmark_fps.py: frames per second and latency of
configs on a CPU, one shape or a sweep, eager or compiled, written as JSON
(and a plot)."""
import json
from pathlib import Path

import pytest
import torch
from helpers.paths import CONFIG_DIR, REPO_ROOT
from helpers.tools import load_tool, run_tool, tool_in_process

from mavit_mm.tooling import cli

BENCHMARK_FPS = 'analysis_tools/benchmark_fps.py'   # under tools/
UPERNET_T = str(CONFIG_DIR / 'upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py')


def test_benchmark_fps_writes_json(tmp_path, capsys):
    """By default under ./work_dirs/benchmark_fps/, where train.py and test.py
    keep their runs: the folder the tool runs in, not the checkout."""
    # In this process (the command line itself: the compile test below).
    tool_in_process(BENCHMARK_FPS, UPERNET_T,
                    '--shape', '64', '128', '--iters', '2', '--warmup', '1', '--device', 'cpu',
                    cwd=tmp_path)
    stdout = capsys.readouterr().out
    (out,) = (tmp_path / 'work_dirs' / 'benchmark_fps').glob('fps-cpu-*.json')
    report = json.loads(out.read_text())
    assert report['device_type'] == 'cpu' and report['iters'] == 2
    assert report['versions']['torch'] == torch.__version__
    (record,) = report['results']
    assert record['shape'] == [64, 128] and record['fps_median'] > 0
    # Eager by default, one config: no compile time, no ratio.
    assert report['modes'] == ['eager'] and report['fps_ratios'] == []
    assert (record['mode'], record['compile_s'], record['error']) == ('eager', None, None)
    assert (record['height'], record['width'], record['batch_size'], record['dtype']) == (
        64, 128, 1, 'fp32')
    assert record['fps'] == record['fps_median']
    assert 'img/s' in stdout and not list(out.parent.glob('*.png'))


SWIN_UPERNET = 'configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py'


def test_benchmark_fps_sweeps_configs_side_by_side_and_plots(tmp_path, capsys):
    # In this process (the command line itself: the compile test below).
    out = tmp_path / 'sweep.json'
    tool_in_process(
        BENCHMARK_FPS, UPERNET_T, SWIN_UPERNET,
        '--backbone-only', '--shapes', '64x64', '96x128', '--iters', '1', '--warmup', '0',
        '--device', 'cpu', '--out', str(out), cwd=REPO_ROOT)
    stdout = capsys.readouterr().out
    report = json.loads(out.read_text())
    rows = report['results']
    assert [(r['config'], r['shape']) for r in rows] == [
        (UPERNET_T, [64, 64]), (UPERNET_T, [96, 128]),
        (SWIN_UPERNET, [64, 64]), (SWIN_UPERNET, [96, 128])]
    assert 'MAViT' in rows[0]['label'] and 'SwinTransformer' in rows[2]['label']
    assert all(r['latency_ms_median'] > 0 and r['pixels'] == r['shape'][0] * r['shape'][1]
               for r in rows)
    # Peak resident memory of a forward, measured on Linux.
    assert all(r['peak_memory_mib'] is not None and r['peak_memory_mib'] >= 0 for r in rows)
    png = tmp_path / 'sweep.png'
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b'\x89PNG'
    assert str(png) in stdout


def exit_status_in_process(argv: list[str]) -> int:
    """The tool's exit status, run in this process as its __main__ runs it (the
    command line itself: the compile test below)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.run_tool(load_tool(BENCHMARK_FPS.removesuffix('.py')).main, 'benchmark_fps.py', argv)
    return exit_info.value.code


def test_benchmark_fps_rejects_bad_sizes_and_missing_configs(capsys, monkeypatch):
    assert exit_status_in_process([UPERNET_T, '--shapes', '512by512']) == 2
    assert 'HEIGHTxWIDTH' in capsys.readouterr().err
    monkeypatch.chdir(REPO_ROOT)
    assert exit_status_in_process(['configs/nope.py']) == 2
    assert 'config not found: configs/nope.py' in capsys.readouterr().err


def table_rows(stdout: str) -> list[list[str]]:
    """The printed results table's rows, split on whitespace."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines)
                  if line.split()[:3] == ['model', 'mode', 'size'] and 'compile s' in line)
    rows = []
    for line in lines[header + 2:]:
        if not line.startswith('upernet_'):
            break
        rows.append(line.split())
    return rows


# The demo's UperNet has the published MAViT-T backbone: its compilation is
# mostly served from inductor's cache of the first one's (a cold compile of a
# backbone takes most of a minute on two cores, in gcc).
UPERNET_T_DEMO = 'configs/demo/upernet_mavit-t_demo-shapes.py'


def test_benchmark_fps_times_eager_and_compile_side_by_side(tmp_path):
    """Eager and torch.compile (inductor's C++ kernels on the CPU) of two
    configs in one run: one JSON, one table, the compile time on its own,
    the first config's img/s over the second's per mode."""
    out, png = tmp_path / 'modes.json', tmp_path / 'modes.png'
    result = run_tool(
        BENCHMARK_FPS, UPERNET_T, UPERNET_T_DEMO, '--modes', 'eager', 'compile',
        '--compile-mode', 'default',
        '--backbone-only', '--shape', '32', '32', '--iters', '1', '--warmup', '0',
        '--device', 'cpu', '--out', str(out), '--plot', str(png),
        # One block, in stage 1, and stage 1's output alone (later stages do
        # not run: MAViT's out_indices): the smallest graph of MAViT to compile
        # cold, 13 C++ kernels against 16 with stages 2-4's downsampling and
        # norms, and 35-45 s in gcc with a block a stage.
        '--cfg-options', 'model.backbone.depths=[1,0,0,0]', 'model.backbone.out_indices=[0]',
        timeout=600, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    # mmengine imports pkg_resources to resolve the configs' mmseg:: bases; the
    # deprecation warnings it would print above every tool's output are off.
    assert 'pkg_resources is deprecated' not in result.stderr, result.stderr[:2000]
    report = json.loads(out.read_text())
    assert report['modes'] == ['eager', 'compile']
    assert report['compile_mode'] == 'default'
    rows = report['results']
    assert [(r['config'], r['mode']) for r in rows] == [
        (UPERNET_T, 'eager'), (UPERNET_T, 'compile'),
        (UPERNET_T_DEMO, 'eager'), (UPERNET_T_DEMO, 'compile')]
    for r in rows:
        assert (r['height'], r['width'], r['batch_size'], r['dtype']) == (32, 32, 1, 'fp32')
        assert r['error'] is None and r['fps'] > 0 and r['peak_memory_mib'] >= 0
        assert r['ms_per_image'] == pytest.approx(1e3 / r['fps'])
        # The compile time is its own field, not in the per-image time.
        if r['mode'] == 'compile':
            assert r['compile_s'] > 0 and r['compile_s'] * 1e3 > r['ms_per_image']
        else:
            assert r['compile_s'] is None
    fps = {(r['config'], r['mode']): r['fps'] for r in rows}
    ratios = report['fps_ratios']
    assert [(q['config'], q['relative_to'], q['mode'], q['shape']) for q in ratios] == [
        (UPERNET_T, UPERNET_T_DEMO, 'eager', [32, 32]),
        (UPERNET_T, UPERNET_T_DEMO, 'compile', [32, 32])]
    for q in ratios:
        assert q['fps_ratio'] == pytest.approx(
            fps[UPERNET_T, q['mode']] / fps[UPERNET_T_DEMO, q['mode']])

    # The table names each row's mode, and the compile time where there is one.
    table = table_rows(result.stdout)
    assert [(row[0], row[-6]) for row in table] == [
        (Path(r['config']).stem, r['mode']) for r in rows]
    assert [row[-1] for row in table] == [
        '-' if r['compile_s'] is None else f"{r['compile_s']:.1f}" for r in rows]
    ratio_lines = result.stdout[result.stdout.index('img/s ratio'):].splitlines()
    assert Path(UPERNET_T).stem in ratio_lines[0] and Path(UPERNET_T_DEMO).stem in ratio_lines[0]
    assert [line.split() for line in ratio_lines[2:4]] == [
        [q['mode'], '32x32', f"{q['fps_ratio']:.2f}"] for q in ratios]
    # The plot draws a line per config and mode.
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b'\x89PNG'


def test_benchmark_fps_refuses_cuda_graph_on_a_cpu(tmp_path, capsys):
    """A CUDA graph needs CUDA: the tool says so before building any model."""
    out = tmp_path / 'fps.json'
    status = exit_status_in_process([UPERNET_T, '--modes', 'eager', 'cuda-graph',
                                     '--device', 'cpu', '--out', str(out)])
    assert status == 2    # a user's mistake; 1: runs that failed
    stderr = capsys.readouterr().err
    assert stderr.strip().startswith('benchmark_fps.py: error: --modes cuda-graph needs '
                                     'a CUDA device'), stderr
    assert 'Traceback' not in stderr and not out.exists()


def test_the_median_of_an_even_count_of_times_is_the_mean_of_the_middle_two(monkeypatch):
    """Not the upper middle time: two runs 1 and 3 s apart have a median of 2 s."""
    import argparse
    tool = load_tool(BENCHMARK_FPS.removesuffix('.py'))
    times = iter([9.0, 1.0, 4.0, 3.0])      # a warm-up, then the timed runs
    monkeypatch.setattr(tool, 'timed', lambda run, device: next(times))
    monkeypatch.setattr(tool, 'peak_extra_mib', lambda run, device: None)
    args = argparse.Namespace(dtype='fp32', warmup=1, iters=3, batch_size=2)
    row = tool.time_model(lambda: None, 'eager', args, torch.device('cpu'), lambda pixels: None, 1)
    assert row['latency_ms_median'] == pytest.approx(3000.0)
    times = iter([1.0, 3.0])
    args.warmup, args.iters = 0, 2
    row = tool.time_model(lambda: None, 'eager', args, torch.device('cpu'), lambda pixels: None, 1)
    assert row['latency_ms_median'] == pytest.approx(2000.0) and row['fps'] == pytest.approx(1.0)
