"""The GPU benchmark scripts, checked without a GPU: imports, plans, arguments."""
import json
import subprocess
import sys

import pytest

pytest.importorskip('triton')

from conftest import REPO_ROOT  # noqa: E402


def run_script(*args, timeout=600):
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_gpu_check_dry_run_checks_the_plan(tmp_path):
    result = run_script('benchmarks/gpu_check.py', '--dry-run', '--out', str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'plan: env, tests, bench, backbone, tune' in result.stdout
    assert 'problem:' not in result.stdout
    # The tuning candidates it would time, per kernel.
    assert 'd=64 output:' in result.stdout


def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path):
    result = run_script('benchmarks/gpu_check.py', '--out', str(tmp_path),
                        '--steps', 'env')
    if result.returncode == 0:
        pytest.skip('a CUDA GPU is present')
    assert result.returncode == 2
    assert '--dry-run' in result.stdout


def test_bench_mala_times_the_torch_path_on_cpu(tmp_path):
    output = tmp_path / 'bench.json'
    result = run_script('benchmarks/bench_mala.py', '--device', 'cpu', '--dtypes', 'fp32',
                        '--batch-heads', '2', '--tokens', '256', '--head-dims', '32',
                        '--output', str(output))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report['environment']['device_type'] == 'cpu'
    rows = report['results']
    assert rows and all(row['impl'] == 'torch' for row in rows)
    assert all(row['time_ms'] > 0 and row['bandwidth_gbps'] > 0 for row in rows)


def test_speed_vs_swin_writes_json_and_plot(tmp_path):
    output = tmp_path / 'speed.json'
    result = run_script('benchmarks/speed_vs_swin.py', '--device', 'cpu', '--sizes', '64x96',
                        '--tasks', 'backbone-forward', 'backbone-train', '--repeats', '2',
                        '--warmup', '0', '--out', str(output))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report['device_type'] == 'cpu' and report['versions']['torch']
    assert [row['task'] for row in report['results']] == ['backbone-forward', 'backbone-train']
    for row in report['results']:
        assert row['shape'] == [64, 96]
        assert len(row['times_ms']['MAViT-T']) == len(row['times_ms']['Swin-T']) == 2
        assert row['ratio'] > 0
    assert output.with_suffix('.png').stat().st_size > 10_000
    assert 'about' in result.stdout and 's left' in result.stdout   # progress with an estimate
