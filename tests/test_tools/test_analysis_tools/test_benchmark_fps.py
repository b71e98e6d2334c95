"""tools/analysis_tools/benchmark_fps.py: frames per second and latency of
configs on a CPU, one shape or a sweep, written as JSON (and a plot)."""
import json
import subprocess
import sys

import torch
from helpers.paths import CONFIG_DIR, REPO_ROOT, TOOLS_DIR

BENCHMARK_FPS = TOOLS_DIR / 'analysis_tools' / 'benchmark_fps.py'
UPERNET_T = str(CONFIG_DIR / 'upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py')


def test_benchmark_fps_writes_json(tmp_path):
    out = tmp_path / 'fps.json'
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), UPERNET_T,
         '--shape', '64', '128', '--iters', '2', '--warmup', '1', '--device', 'cpu',
         '--out', str(out)], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report['device_type'] == 'cpu' and report['iters'] == 2
    assert report['versions']['torch'] == torch.__version__
    (record,) = report['results']
    assert record['shape'] == [64, 128] and record['fps_median'] > 0
    assert 'img/s' in result.stdout and not (tmp_path / 'fps.png').exists()


SWIN_UPERNET = 'configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py'


def test_benchmark_fps_sweeps_configs_side_by_side_and_plots(tmp_path):
    out = tmp_path / 'sweep.json'
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), UPERNET_T, SWIN_UPERNET,
         '--backbone-only', '--shapes', '64x64', '96x128', '--iters', '1', '--warmup', '0',
         '--device', 'cpu', '--out', str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
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
    assert str(png) in result.stdout


def test_benchmark_fps_rejects_bad_sizes_and_missing_configs():
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), UPERNET_T,
         '--shapes', '512by512'], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 2 and 'HEIGHTxWIDTH' in result.stderr
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), 'configs/nope.py'],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 2 and 'config not found: configs/nope.py' in result.stderr
