"""The GPU benchmark scripts, checked without a GPU: imports, plans, arguments."""
import functools
import json
import sys

import pytest
import torch

pytest.importorskip('triton')

from helpers.paths import REPO_ROOT  # noqa: E402

from mavit_mm.tooling.run_script import run_script as run_repository_script  # noqa: E402

# The benchmarks run from the repository root, as the README runs them.
run_script = functools.partial(run_repository_script, cwd=REPO_ROOT, timeout=600)


def test_gpu_check_dry_run_checks_the_plan(tmp_path):
    result = run_script('benchmarks/gpu_check.py', '--dry-run', '--out', str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'plan: env, kernel-tests, model-tests, bench' in result.stdout
    assert 'part 1: env kernel-tests model-tests bench' in result.stdout
    assert 'part 2: env backbone tune-bh16 tune-bh1' in result.stdout
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
    # The yardstick is the copy bandwidth measured in the same run (CUDA only).
    assert report['complete'] and report['environment']['copy_bandwidth_tbps'] is None
    assert all(row['percent_of_copy'] is None for row in rows)


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


def test_gpu_check_parts_fit_a_gpu_command():
    """A lent GPU runs one command for at most 10 minutes: every step's budget is
    at most 5 minutes and each of the two parts stays under 10."""
    from benchmarks import gpu_check
    assert set(sum(gpu_check.PARTS.values(), [])) == set(gpu_check.STEPS)
    assert max(gpu_check.STEP_BUDGET_MIN.values()) <= 5
    for steps in gpu_check.PARTS.values():
        assert sum(gpu_check.STEP_BUDGET_MIN[step] for step in steps) <= 9.5


def test_gpu_check_kills_a_step_at_its_budget_and_keeps_its_output(tmp_path):
    from benchmarks import gpu_check
    log = tmp_path / 'step.log'
    run = gpu_check._run_child(
        [sys.executable, '-c', "print('measured so far', flush=True); import time; time.sleep(60)"],
        budget_s=3, log=log)
    assert run['timed_out'] and run['returncode'] is None and run['seconds'] < 30
    assert 'measured so far' in log.read_text() and 'killed at its budget' in log.read_text()
    counts = gpu_check._log_summary('..F.s [ 50%]\n.. [100%]\nFAILED tests/x.py::t - boom\n')
    assert (counts['passed'], counts['failed'], counts['skipped']) == (5, 1, 1)
    assert counts['failures'] == ['FAILED tests/x.py::t - boom']


def test_tune_mala_survives_failing_candidates_and_saves_as_it_goes(tmp_path, monkeypatch):
    """A tile that does not fit fails while its launches are built: the sweep
    records it and goes on, and the JSON on disk is valid after every candidate."""
    import triton.testing

    from benchmarks import tune_mala
    case = tune_mala.Case(torch.float32, 2, 256, 32, torch.device('cpu'))
    built = []

    def kernel_step(kernel, plan):
        tile = getattr(plan, kernel)
        built.append((kernel, tile.block_n))
        if tile.block_n == 64:
            raise RuntimeError('out of resource: shared memory')
        return lambda: None
    monkeypatch.setattr(case, 'kernel_step', kernel_step)
    monkeypatch.setattr(case, 'launches', lambda plan: (_Stub(), _Stub()))
    monkeypatch.setattr(case, 'pass_step', lambda plan, backward: (lambda: None))
    monkeypatch.setattr(triton.testing, 'do_bench',
                        lambda step, **kwargs: (step(), 0.01 * (1 + len(built) % 3))[1])
    output = tmp_path / 'tune.json'
    results = tune_mala.Results(output, {'device': 'cpu'})
    record = results.start({'dtype': 'fp32'})
    snapshots = []

    def save():
        results.save()
        snapshots.append(json.loads(output.read_text()))
    tune_mala.tune_shape(case, ['partials'], 1, record, save)
    timings = record['kernels']['partials']['timings']
    assert len(timings) == len(tune_mala.tile_candidates('partials', 32))
    assert all((t['ms'] is None) == (t['tile'][0] == 64) for t in timings)
    assert record['kernels']['partials']['best']['tile'][0] != 64
    assert len(snapshots) >= len(timings)
    assert len(snapshots[0]['results'][0]['kernels']['partials']['timings']) == 1
    assert not snapshots[-1]['complete']


class _Stub:
    def __getattr__(self, name):
        return lambda: None


def test_gpu_check_model_steps_run_on_cpu_and_write_their_json(tmp_path):
    """Part 3's steps (SDPA kernels, the sweep against Swin-T, the host/kernel
    split), run on the CPU at small sizes: what they write a GPU run writes."""
    from benchmarks import gpu_check
    result = gpu_check.step_sdpa(tmp_path, 600, device='cpu', sizes=((64, 96),))
    sdpa = json.loads((tmp_path / 'sdpa.json').read_text())
    assert result['failed'] == 0 and sdpa['complete'] and not sdpa['math_path_seen']
    assert [(row['precision'], row['allowed']) for row in sdpa['results']] == [
        ('fp32', 'flash+efficient'), ('bf16', 'flash+efficient'), ('bf16', 'flash')]
    # Each forward ran SDPA's flash op (the CPU's fast kernel), never the math one.
    assert all(row['ok'] and any('flash' in op for op in row['sdpa_ops'])
               for row in sdpa['results'])

    gpu_check.step_sweep(tmp_path, 600, device='cpu', sizes=((64, 96),), train_size=(64, 64),
                         train_batch=2)
    sweep = json.loads((tmp_path / 'sweep.json').read_text())
    assert sweep['complete']
    assert [(row['model'][:7], row['precision']) for row in sweep['forward']] == [
        ('MAViT-T', 'fp32'), ('Swin-T ', 'fp32'), ('MAViT-T', 'bf16'), ('Swin-T ', 'bf16')]
    for row in sweep['forward'] + sweep['training']:
        assert 'error' not in row, row
        assert row['time_ms'] > 0
        if row['model'].startswith('MAViT'):
            assert row['time_vs_swin'] > 0
    assert {row['batch'] for row in sweep['training']} == {2}

    gpu_check.step_profile(tmp_path, 600, device='cpu',
                           shapes=(dict(batch_heads=2, tokens=256, head_dim=32),))
    profile = json.loads((tmp_path / 'profile.json').read_text())
    assert profile['complete'] and profile['impl'] == 'torch'
    assert [row['pass_name'] for row in profile['results']] == ['fwd', 'fwd+bwd']
    assert all(row['wall_us'] > 0 and row['host_issue_us'] > 0
               and row['host_issue_us_tritons_launch_path'] > 0 for row in profile['results'])
    for row in profile['results']:
        functions = [entry['function'] for entry in row['host_python']]
        assert len(functions) == 15 and all(entry['own_us'] >= 0 for entry in row['host_python'])


def test_gpu_check_sdpa_step_reports_a_math_fallback(tmp_path, monkeypatch):
    # Break the layout the flash kernel needs (the bug of the layout issue):
    # the restricted forward+backward must then fail, and the step say so.
    from benchmarks import gpu_check
    from mavit_mm.models import mavit
    original = mavit.GatedAttention.split_heads

    def strided_heads(self, x):
        heads = original(self, x)
        return heads.transpose(-1, -2).contiguous().transpose(-1, -2)   # last stride != 1
    monkeypatch.setattr(mavit.GatedAttention, 'split_heads', strided_heads)
    result = gpu_check.step_sdpa(tmp_path, 600, device='cpu', sizes=((64, 96),))
    assert result['failed'] == 3
    rows = json.loads((tmp_path / 'sdpa.json').read_text())['results']
    assert all(not row['ok'] and 'No available kernel' in row['error'] for row in rows)


def test_ncu_mala_needs_a_gpu_and_says_so():
    result = run_script('benchmarks/ncu_mala.py', '--batch-heads', '1')
    if result.returncode == 0:
        pytest.skip('a CUDA GPU is present')
    assert result.returncode == 2 and 'needs a CUDA GPU' in result.stdout
    assert 'cudaProfilerStart' in run_script('benchmarks/ncu_mala.py', '--help').stdout


def test_gpu_check_cuda_graphs_need_cuda(tmp_path):
    from benchmarks import gpu_check
    with pytest.raises(ValueError, match='CUDA graphs need a CUDA device'):
        gpu_check.step_sweep(tmp_path, 60, device='cpu', sizes=((64, 96),), cuda_graphs=True)
