"""The GPU benchmark scripts, checked without a GPU: imports, plans, arguments."""
import functools
import json
import os
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip('triton')

from helpers.paths import REPO_ROOT  # noqa: E402

from benchmarks import gpu_targets  # noqa: E402
from benchmarks.gpu_check_lib import (  # noqa: E402
    children,
    correctness,
    model_steps,
    models,
    op_steps,
    plan,
    profiling,
    runner,
    upernet_fps,
)
from mavit_mm.tooling.run_script import run_script as run_repository_script  # noqa: E402

# The benchmarks run from the repository root, as the README runs them.
run_script = functools.partial(run_repository_script, cwd=REPO_ROOT, timeout=600)


def test_gpu_check_dry_run_checks_the_plan(tmp_path):
    result = run_script('benchmarks/gpu_check.py', '--dry-run', '--out', str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'plan: env, kernel-tests, model-tests' in result.stdout
    assert 'layout channels_last' in result.stdout
    assert 'part 1: env kernel-tests model-tests (at most 4.95 min, 5 files)' in result.stdout
    assert 'part 2: env backbones ablations (at most 4.65 min, 5 files)' in result.stdout
    assert ('part 3: env upernet-fps upernet-fps-compile (at most 6.10 min, 5 files)'
            in result.stdout)
    assert ('part 4: env upernet-fps-1024 model-profile sweep (at most 5.80 min, 6 files)'
            in result.stdout)
    assert ('part 5: env compiled-profile profile bench sdpa (at most 3.25 min, 7 files)'
            in result.stdout)
    assert ('part 6: env tune-bh16 tune-bh1 tune-depthwise (at most 5.00 min, 6 files)'
            in result.stdout)
    assert 'part 7: env ablations-compile (at most 5.40 min, 4 files)' in result.stdout
    assert 'part 8' not in result.stdout
    assert ('whole check: 7 parts in priority order, one GPU command of at most 8 min each '
            '(35.15 min of budgets; the longest part 6.10, planned to at most 7.00)'
            ) in result.stdout
    # The op's calls in MAViT-T at 512x2048, from the preset.
    assert ('stage 1 batch 1 heads 1 128x512 d 64; stage 2 batch 1 heads 2 64x256 d 64; '
            'stage 1 batch 8 heads 1 128x512 d 64; stage 2 batch 8 heads 2 64x256 d 64'
            ) in result.stdout
    # The ablations' rows, from the switches' modes (fast_paths.FAST_PATH_MODES).
    assert 'ablations, cuda-graph fwd: all on, then off in turn: cached_weights, ' \
        in result.stdout
    assert 'ablations, cuda-graph fwd+bwd: all on, then off in turn: channel_split\n' \
        in result.stdout
    assert ('ablations-compile, compile fwd+bwd: all on, then off in turn: channel_split'
            in result.stdout)
    assert ('ablations, eager fwd+bwd: all on, then off in turn: folded_residual_conv, '
            'channel_split, joint_qk_rotation, fused_position_norm, fused_lepe_gate, '
            'fused_ffn_middle, tap_major_weights, matmul_1x1\n') in result.stdout
    # Each target with the step and file that measure it.
    from benchmarks.readme_tables import target_now
    first = gpu_targets.GPU_TARGETS[0]
    assert (f'target of the lean forward: backbone time, 512x2048, CUDA graph ≤ 0.75 (now '
            f'{target_now(first)}): part-2/backbones.json') in result.stdout
    # No problem: the child processes (bench_mala, tune_mala, benchmark_fps --modes)
    # take the arguments the steps give them, Swin-T builds from its config, and
    # MAViT takes the fast-path switches.
    assert 'problem:' not in result.stdout
    # The tuning candidates it would time: the query kernel's only; the depthwise
    # stages' at MAViT-T's shapes (tune_depthwise.py's dry run, as the step runs it).
    assert 'd=64 query: 24 candidates' in result.stdout and 'd=64 output:' not in result.stdout
    assert 'ffn_middle    stage 1 C=224  128x512 k=3: forward 7, backward 7' in result.stdout
    assert '12 shapes: 172 candidate timings, about 69 kernel compiles' in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason='a CUDA GPU is present')
def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path, capsys):
    # In this process (the command line itself: the dry run above).
    assert runner.main(['--out', str(tmp_path), '--steps', 'env']) == 2
    assert '--dry-run' in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


def test_bench_mala_compile_report_takes_another_tile(monkeypatch):
    """--tile KERNEL=N,W,S compiles that kernel with the tile instead of the
    plan's (sm_90, ahead of time, no GPU); a malformed tile or a kernel the
    plan lacks is refused, naming it."""
    from benchmarks import bench_mala
    assert bench_mala.parse_args(['--tile', 'query=16,8,1', '--tile', 'key=32,4,2']).tiles == \
        {'query': (16, 8, 1), 'key': (32, 4, 2)}
    for bad in ('query=16,8', 'query=16,x,1', '=16,8,1', 'query'):
        with pytest.raises(SystemExit):
            bench_mala.parse_args(['--tile', bad])
    result = run_script('benchmarks/bench_mala.py', '--compile-report', '90', '--dtypes', 'fp32',
                        '--head-dims', '64', '--tile', 'query=16,8,1')
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'sm_90 fp32 d=64 layout=channels_last pair_loads=auto query=16,8,1' in result.stdout
    query = next(line for line in result.stdout.splitlines() if '_backward_query_kernel' in line)
    assert 'BLOCK_N=16' in query and "'num_warps': 8," in query, query
    # In this process (the command line itself: the run above), which keeps its
    # TRITON_INTERPRET: the report sets it for the kernels it compiles. The
    # kernels are imported first as the process has them (interpreted under
    # the tests): imported by the report, they would be compiled-mode kernels
    # for every later test of this process, and fail without a GPU driver.
    import mavit_mm.ops.mala.function  # noqa: F401
    monkeypatch.setenv('TRITON_INTERPRET', os.environ.get('TRITON_INTERPRET', '0'))
    with pytest.raises(SystemExit, match='no kernel querry in the launch plan'):
        bench_mala.main(['--compile-report', '90', '--tile', 'querry=16,8,1'])


def test_bench_mala_times_the_torch_path_on_cpu(tmp_path):
    # In this process (the command line itself: the compile report above).
    from benchmarks import bench_mala
    output = tmp_path / 'bench.json'
    assert bench_mala.main(['--device', 'cpu', '--dtypes', 'fp32', '--batch-heads', '2',
                            '--tokens', '256', '--head-dims', '32', '--layout', 'contiguous',
                            '--output', str(output)]) == 0
    report = json.loads(output.read_text())
    assert report['environment']['device_type'] == 'cpu'
    rows = report['results']
    assert rows and all(row['impl'] == 'torch' for row in rows)
    assert {row['layout'] for row in rows} == {'contiguous'}    # --layout, by name
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


def test_backbone_ab_compares_another_commit_in_one_process(tmp_path):
    """Against the commit the checkout is on: the same model, so the same
    outputs, each pair timed, and the other commit's package imported
    without registering anything twice."""
    output = tmp_path / 'ab.json'
    result = run_script('benchmarks/backbone_ab.py', '--base', 'HEAD', '--size', '32', '48',
                        '--pairs', '2', '--out', str(output))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report['same_outputs'] is True and report['input'] == [1, 3, 32, 48]
    for task in ('forward', 'train'):
        row = report['results'][task]
        assert [len(times) for times in row['times_ms'].values()] == [2, 2]
        assert row['ratio_min'] <= row['ratio_median'] <= row['ratio_max']
    assert 'about' in result.stdout and 's left' in result.stdout
    from benchmarks import backbone_ab  # in this process: the command line ran above
    with pytest.raises(SystemExit, match='git archive no-such-rev'):
        backbone_ab.main(['--base', 'no-such-rev', '--pairs', '1'])


def test_gpu_check_parts_fit_a_gpu_command(monkeypatch):
    """A GPU command runs for at most 8 minutes and returns at most 8 files:
    every step but env is in exactly one part (env in each), each step's
    budget is at most 5 minutes, each part's budgets stay under 7 (a GPU
    session has 15 minutes, the machine's start included) and its files (one
    per step, summary, log) under 8. The parts run in priority order:
    correctness first (the kernel and model tests alone in part 1), then what
    each switch is worth (part 2), every target before what measures none."""
    assert sorted(plan.PARTS) == list(range(1, len(plan.PARTS) + 1))
    assert plan.plan_problems() == []
    assert all(steps[0] == 'env' for steps in plan.PARTS.values())
    # The GPU machine's limits: options whose defaults are today's machine.
    assert plan.STEP_LIMIT_MIN == 5
    assert runner.parse_args([]).limits == plan.MACHINE_LIMITS == plan.MachineLimits(
        command_limit_min=8, part_aim_min=7, command_files=8)
    for part, steps in plan.PARTS.items():
        minutes = sum(plan.STEP_BUDGET_MIN[step] for step in steps)
        assert minutes <= plan.MACHINE_LIMITS.part_aim_min + 1e-9
        assert plan.part_minutes(part) == round(minutes, 2)
    assert plan.PARTS[1] == ['env', 'kernel-tests', 'model-tests']
    assert plan.PARTS[2] == ['env', 'backbones', 'ablations']
    assert plan.PARTS[6] == ['env', 'tune-bh16', 'tune-bh1', 'tune-depthwise']
    # The check fails a plan that breaks any of these: budgets, parts, files ...
    parts = {part: list(steps) for part, steps in plan.PARTS.items()}
    monkeypatch.setitem(plan.PARTS, 8, ['env', 'tune-bh16'])
    monkeypatch.setitem(plan.PARTS, 4, parts[4] + ['profile', 'bench', 'compiled-profile'])
    monkeypatch.setitem(plan.PARTS, 6, ['env', 'tune-bh1', 'tune-bh16', 'tune-depthwise'])
    monkeypatch.setitem(plan.STEP_BUDGET_MIN, 'upernet-fps-1024', 6.0)
    assert plan.plan_problems() == [
        'step upernet-fps-1024 has a budget of 6.0 min (limit 5.0)',
        'step compiled-profile is in parts 4, 5', 'step profile is in parts 4, 5',
        'step bench is in parts 4, 5', 'step tune-bh16 is in parts 6, 8',
        'part 4 needs 10.15 min (limit 7.0)', 'part 4 writes 9 files (a GPU command returns 8)',
        'part 6 runs tune-bh1 without tune-bh16 before it']
    # ... and against the limits the command line gives.
    monkeypatch.undo()
    limits = runner.parse_args(['--part-minutes', '6', '--command-files', '6',
                                '--command-minutes', '5.5']).limits
    assert plan.plan_problems(limits) == [
        'a part is planned to 6 min, more than the 5.5 min a GPU command may take',
        'part 3 needs 6.1 min (limit 6.0)',
        'part 5 writes 7 files (a GPU command returns 6)']
    # ... and the priority order: correctness, then the switches, the targets before the rest.
    monkeypatch.undo()
    monkeypatch.setitem(plan.PARTS, 1, ['env', 'kernel-tests', 'sdpa'])
    monkeypatch.setitem(plan.PARTS, 2, ['env', 'backbones', 'ablations', 'model-tests'])
    monkeypatch.setitem(plan.PARTS, 5, [step for step in parts[5] if step != 'sdpa'])
    monkeypatch.setattr(gpu_targets, 'GPU_TARGETS', gpu_targets.GPU_TARGETS + (
        gpu_targets.Target('MALA op', 'something', '≤', 1, '', '.1f', 'no-such-step',
                           (gpu_targets.Figure('time_ms'),)),))
    assert plan.plan_problems() == [
        'the target "something" of the MALA op names no step \'no-such-step\'',
        'step model-tests is correctness but is in part 2, not 1',
        'part 1 is correctness but runs sdpa',
        'part 2 is what each switch is worth but runs model-tests',
        *(f'step {step} measures a target but runs after sdpa, which measures none'
          for step in ('backbones', 'ablations', 'model-tests', 'upernet-fps',
                       'upernet-fps-compile', 'upernet-fps-1024', 'model-profile', 'sweep',
                       'compiled-profile', 'profile', 'bench'))]


def test_gpu_check_budget_option_fits_a_step_to_what_is_left(capsys):
    args = runner.parse_args(['--part', '2', '--budget', 'ablations=3.5'])
    assert args.budgets['ablations'] == 3.5
    assert args.budgets['backbones'] == plan.STEP_BUDGET_MIN['backbones']
    for bad, why in (('nothing=1', "no step 'nothing'"), ('ablations=x', 'not a number'),
                     ('ablations=9', 'at most 5')):
        with pytest.raises(SystemExit):
            runner.parse_args(['--budget', bad])
        assert why in capsys.readouterr().err


def test_gpu_md_target_map_is_gpu_targets():
    """docs/gpu.md's map names every GPU target (the lean forward, the fused
    block, the MALA op) with its threshold, its figure now (from the newest
    results file of its step), the step and the file that measure it, as
    gpu_targets.py and the plan have them."""
    from benchmarks.readme_tables import target_now
    text = (REPO_ROOT / 'docs' / 'gpu.md').read_text()
    table = text[text.index('| goal | measurement | target | now | step | file |'):]
    rows = [tuple(cell.strip().strip('`') for cell in line.strip('|').split('|'))
            for line in table.split('\n\n')[0].split('\n<!--')[0].splitlines()[2:]]
    assert rows == [(t.goal, t.measurement, t.text, target_now(t).replace('`', ''), t.step,
                     plan.target_file(t)) for t in gpu_targets.GPU_TARGETS]
    assert [*dict.fromkeys(t.goal for t in gpu_targets.GPU_TARGETS)] == list(gpu_targets.GOALS)


def test_gpu_targets_name_steps_and_the_fields_their_files_hold():
    """Every target is measured by a step of the check and judged from
    figures its step's JSON holds: each figure is in a committed results file
    of the step, but for the steps no GPU run has written yet, whose figures
    the CPU runs of the steps below find."""
    from benchmarks.readme_tables import target_now
    assert {t.step for t in gpu_targets.GPU_TARGETS} <= set(plan.STEPS)
    assert all(t.comparison in gpu_targets.COMPARISONS and t.figures
               for t in gpu_targets.GPU_TARGETS)
    unmeasured = {t.step for t in gpu_targets.GPU_TARGETS if target_now(t) == 'not measured'}
    assert unmeasured <= set(upernet_fps.FPS_STEPS)    # test_gpu_check_upernet_fps_* below


def _assert_targets_read(step: str, report: dict) -> None:
    """Every figure of the step's targets is in what the step wrote."""
    targets = [t for t in gpu_targets.GPU_TARGETS if t.step == step]
    assert targets
    for target in targets:
        assert None not in [gpu_targets.figure_value(f, report) for f in target.figures], target


def test_gpu_check_measures_the_training_step_at_512x2048_batch_2():
    """The backbone step is gone: the sweep's training step (forward, backward,
    AdamW, peak memory) is MAViT-T against Swin-T at 512x2048, batch 2, and the
    sweep is in a part."""
    import inspect

    assert 'backbone' not in plan.STEPS and not hasattr(model_steps, 'step_backbone')
    defaults = inspect.signature(model_steps.step_sweep).parameters
    assert defaults['train_size'].default == (512, 2048) and defaults['train_batch'].default == 2
    assert any('sweep' in steps for steps in plan.PARTS.values())


def test_gpu_check_kills_a_step_at_its_budget_and_keeps_its_output(tmp_path):
    log = tmp_path / 'step.log'
    # A budget the child's start and print fit in many times over (tens of ms):
    # the test waits it out.
    run = children.run_child(
        [sys.executable, '-c', "print('measured so far', flush=True); import time; time.sleep(60)"],
        budget_s=2, log=log)
    assert run['timed_out'] and run['returncode'] is None and run['seconds'] < 30
    assert 'measured so far' in log.read_text() and 'killed at its budget' in log.read_text()
    counts = correctness.log_summary('..F.s [ 50%]\n.. [100%]\nFAILED tests/x.py::t - boom\n')
    assert (counts['passed'], counts['failed'], counts['skipped']) == (5, 1, 1)
    assert counts['failures'] == ['FAILED tests/x.py::t - boom']
    _assert_targets_read('kernel-tests', counts)
    _assert_targets_read('model-tests', counts)


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
    monkeypatch.setattr(case, 'launches', lambda plan: {
        name: (lambda: None) for name in ('partials', 'combine', 'output', 'query',
                                          'chunk_sum', 'key')})
    monkeypatch.setattr(case, 'pass_step', lambda plan, backward: (lambda: None))
    monkeypatch.setattr(tune_mala, '_timing', 'cuda-graph')
    monkeypatch.setattr(triton.testing, 'do_bench_cudagraph',
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


def test_gpu_check_model_steps_run_on_cpu_and_write_their_json(tmp_path, monkeypatch):
    """The model steps (SDPA kernels, the sweep against Swin-T with its training
    step, the host/kernel split), run on the CPU at small sizes: what they
    write a GPU run writes."""
    # One timed call a row, no warm-up: what is asserted is what each row holds.
    monkeypatch.setitem(models.CPU_TIMING, 'cpu_warmup', 0)
    monkeypatch.setitem(models.CPU_TIMING, 'cpu_calls', 1)
    result = op_steps.step_sdpa(tmp_path, 600, device='cpu', sizes=((64, 96),))
    sdpa = json.loads((tmp_path / 'sdpa.json').read_text())
    assert result['failed'] == 0 and sdpa['complete'] and not sdpa['math_path_seen']
    assert [(row['precision'], row['allowed']) for row in sdpa['results']] == [
        ('fp32', 'flash+efficient'), ('bf16', 'flash+efficient'), ('bf16', 'flash')]
    # Each forward ran SDPA's flash op (the CPU's fast kernel), never the math one.
    assert all(row['ok'] and any('flash' in op for op in row['sdpa_ops'])
               for row in sdpa['results'])

    model_steps.step_sweep(tmp_path, 600, device='cpu', sizes=((64, 96),), train_size=(64, 64),
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
    # The training step in both precisions, MAViT-T against Swin-T, with peak memory
    # (None on a CPU) and MAViT-T's time over Swin-T's.
    assert [(row['model'][:7], row['precision'], row['pass_name'])
            for row in sweep['training']] == [
        ('MAViT-T', 'fp32', 'train step'), ('Swin-T ', 'fp32', 'train step'),
        ('MAViT-T', 'bf16', 'train step'), ('Swin-T ', 'bf16', 'train step')]
    assert all('peak_memory_mib' in row for row in sweep['training'])

    # MAViT-T's two MALA stages at 64x128 (16x32 and 8x16 maps, 1 and 2 heads).
    shapes = op_steps.mala_model_shapes(size=(64, 128), batches=(1,))
    op_steps.step_profile(tmp_path, 600, device='cpu', shapes=shapes, layout='nchw')
    profile = json.loads((tmp_path / 'profile.json').read_text())
    assert profile['complete'] and profile['impl'] == 'torch' and profile['layout'] == 'nchw'
    assert [(row['stage'], row['heads'], row['pass_name']) for row in profile['results']] == [
        (1, 1, 'fwd'), (1, 1, 'fwd+bwd'), (2, 2, 'fwd'), (2, 2, 'fwd+bwd')]
    # The layout each row names is the one of the tensors it timed (layout_of).
    assert {row['layout'] for row in profile['results']} == {'nchw'}
    assert all(row['wall_us'] > 0 and row['host_issue_us'] > 0 for row in profile['results'])
    _assert_targets_read('profile', profile)
    for row in profile['results']:
        functions = [entry['function'] for entry in row['host_python']]
        assert len(functions) == 15 and all(entry['own_us'] >= 0 for entry in row['host_python'])


def test_gpu_check_sdpa_step_reports_a_math_fallback(tmp_path, monkeypatch):
    # Break the layout the flash kernel needs (the bug of the layout issue):
    # the restricted forward+backward must then fail, and the step say so.
    from mavit_mm.models import mavit
    original = mavit.GatedAttention.split_heads

    def strided_heads(self, x):
        heads = original(self, x)
        return heads.transpose(-1, -2).contiguous().transpose(-1, -2)   # last stride != 1
    monkeypatch.setattr(mavit.GatedAttention, 'split_heads', strided_heads)
    result = op_steps.step_sdpa(tmp_path, 600, device='cpu', sizes=((64, 96),))
    assert result['failed'] == 3
    rows = json.loads((tmp_path / 'sdpa.json').read_text())['results']
    assert all(not row['ok'] and 'No available kernel' in row['error'] for row in rows)


def test_ncu_mala_needs_a_gpu_and_says_so(capsys):
    result = run_script('benchmarks/ncu_mala.py', '--batch-heads', '1')
    if result.returncode == 0:
        pytest.skip('a CUDA GPU is present')
    assert result.returncode == 2 and 'needs a CUDA GPU' in result.stdout
    from benchmarks import ncu_mala  # --help in this process
    with pytest.raises(SystemExit) as exit_info:
        ncu_mala.parse_args(['--help'])
    assert exit_info.value.code == 0 and 'cudaProfilerStart' in capsys.readouterr().out


def test_gpu_check_cuda_graphs_need_cuda(tmp_path):
    with pytest.raises(ValueError, match='CUDA graphs need a CUDA device'):
        model_steps.step_sweep(tmp_path, 60, device='cpu', sizes=((64, 96),), cuda_graphs=True)


# Representative CUDA kernel names (as torch.profiler reports them on H100s).
KERNEL_NAMES = {
    '_forward_partials_kernel': 'mala',
    '_backward_query_kernel': 'mala',
    'void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, '
    'cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t> >, false, '
    'false, false, false, true, true, false, false>(FLASH_NAMESPACE::Flash_fwd_params)': 'sdpa',
    'fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, '
    'cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)': 'sdpa',
    'cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0':
        'sdpa',
    'sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_'
    'warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn': 'conv',
    'void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, false, false, int, '
    '__nv_bfloat16, __nv_bfloat16, float, float>(cudnn::cnn::GroupedDirectFpropParams, '
    '__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, float, float)': 'conv',
    'void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, '
    'int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, '
    'int, float, float, int, float const*, float const*, bool, int, int)': 'conv',
    'void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>('
    'at::GenericPackedTensorAccessor<float const, 4ul>)': 'conv',
    'nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT': 'gemm',
    'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_'
    'segment_k_off_kernel__5x_cublas': 'gemm',
    'void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>('
    'cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)': 'gemm',
    'ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn': 'gemm',
    'void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, '
    'false>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, '
    'float*, float*, c10::BFloat16*)': 'norm',
    'void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float, float, '
    'cudnnTensorStruct, float const*, float const*, float*, float const*)': 'norm',
    'void at::native::batch_norm_transform_input_channels_last_kernel<float, float, float, 4>('
    'float const*, float const*, float const*, float const*, float const*, float*, int, int, bool)':
        'norm',
    'void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda('
    'at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() '
    'const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned '
    'int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, '
    'at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda('
    'at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() '
    'const::{lambda(float)#1}, std::array<char*, 2ul>)': 'copy',
    'void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<'
    'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
    'const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, '
    'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
    'const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>('
    'int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda>)': 'copy',
    'Memcpy DtoD (Device -> Device)': 'copy',
    'void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<at::native::(anonymous '
    'namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::'
    'OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::'
    '(anonymous namespace)::OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous '
    'namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)': 'copy',
    'void cudnn::ops::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, '
    '(cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, '
    '__nv_bfloat16*)': 'copy',
    'void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, '
    'std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)':
        'elementwise',
    'void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl('
    'at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()'
    '#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, '
    'at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}'
    '::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, '
    'std::array<char*, 2ul>)': 'elementwise',
    'void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t'
    '<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::'
    '{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, '
    'at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()('
    'at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)': 'other',
    'void at::native::(anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, '
    'float, 7, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, '
    'int, bool)': 'other',
    # Inductor's kernels (torch.compile): named after the ops they fuse.
    'triton_poi_fused__to_copy_add_convolution_mul_0': 'inductor',
    'triton_red_fused__to_copy_native_layer_norm_1': 'inductor',
    'triton_per_fused_add_native_layer_norm_2': 'inductor',
    'triton_tem_fused_addmm_3': 'inductor',
}


@pytest.mark.parametrize('name, category', KERNEL_NAMES.items(),
                         ids=[f'{category}-{index}' for index, category in
                              enumerate(KERNEL_NAMES.values())])
def test_kernel_category_of_real_cuda_kernel_names(name, category):
    assert profiling.kernel_category(name) == category


def test_mala_kernels_are_the_kernels_the_op_launches():
    """The names the profile looks for are the kernels of ops/mala's launch table."""
    from mavit_mm.ops.mala.function import launch_table, make_launch_plan
    plan = make_launch_plan(4096, 2, 64, torch.bfloat16, torch.device('cpu'))
    launched = {kernel.__name__ for kernel, _ in launch_table(plan).values()}
    assert profiling.mala_kernel_names() == launched and len(launched) == 5


def test_gpu_time_by_category_adds_up():
    kernels = [(name, 10.0 * (index + 1), index % 3 + 1)
               for index, name in enumerate(KERNEL_NAMES)]
    summary = profiling.gpu_time_by_category(kernels, top=3)
    categories = summary['categories']
    assert list(categories) == list(profiling.CATEGORY_ORDER)
    assert summary['gpu_time_us'] == pytest.approx(sum(us for _, us, _ in kernels))
    assert summary['kernel_count'] == sum(count for _, _, count in kernels)
    for category in categories:
        expected = [(us, count) for name, us, count in kernels if KERNEL_NAMES[name] == category]
        assert categories[category]['time_us'] == pytest.approx(sum(us for us, _ in expected))
        assert categories[category]['kernels'] == sum(count for _, count in expected)
    assert sum(entry['share'] for entry in categories.values()) == pytest.approx(1, abs=1e-3)
    assert [row['time_us'] for row in summary['top_kernels']] == [
        10.0 * len(kernels), 10.0 * (len(kernels) - 1), 10.0 * (len(kernels) - 2)]


def test_own_seconds_takes_off_what_cprofile_counted_twice():
    """cProfile's stats as Python 3.12 left them for a custom op whose kernel
    spends 20.8 ms in a helper (torch 2.11, 100 calls): torch's backend_impl
    shows its whole 21 ms as its own though its callee lists 20.9 ms, and its
    caller edges are lost. Its own time becomes cumulative - callees; every
    other function keeps cProfile's, the recursing one included (its callees'
    edge times nest, so the formula does not hold for it)."""
    op = ('~', 0, '<built-in method torch._ops.probe.op>')
    backend = ('custom_ops.py', 346, 'backend_impl')
    wrapper = ('_compile.py', 42, 'inner')
    helper = ('probe.py', 5, 'helper')
    clock = ('~', 0, '<built-in method time.perf_counter>')
    call_impl = ('module.py', 1773, '_call_impl')
    forward = ('block.py', 10, 'forward')
    stats = {
        op: (100, 100, 0.0001, 0.0211, {}),
        backend: (100, 100, 0.0210, 0.0210, {op: (0, 0, 0.0, 0.0)}),
        wrapper: (100, 100, 0.0001, 0.0209, {backend: (100, 100, 0.0001, 0.0209)}),
        helper: (100, 100, 0.0090, 0.0208, {wrapper: (100, 100, 0.0090, 0.0208)}),
        clock: (5000, 5000, 0.0118, 0.0118, {helper: (5000, 5000, 0.0118, 0.0118)}),
        # A module calling a submodule: _call_impl -> forward -> _call_impl.
        call_impl: (10, 20, 0.0030, 0.0500, {forward: (10, 10, 0.0015, 0.0200)}),
        forward: (20, 20, 0.0100, 0.0650, {call_impl: (20, 20, 0.0100, 0.0650)}),
    }
    own, removed = profiling.own_seconds(stats)
    assert own[backend] == pytest.approx(0.0001) and removed == pytest.approx(0.0209)
    for function in (op, wrapper, helper, clock, call_impl):
        assert own[function] == stats[function][2], function
    # forward's formula (0.0650 - 0.0200) exceeds cProfile's own: kept.
    assert own[forward] == 0.0100


def test_host_time_adds_up_to_the_profiled_wall_time_through_a_custom_op():
    """Through a real custom op whose kernel waits 1 ms: the callee owns the
    wait, torch's wrapper does not, and the own times add up to the wall time
    under cProfile (on Python 3.12, cProfile's own figures add up to twice it).
    (The wait is long against the wrapper's own time under cProfile, about
    90 µs a call on Python 3.10, 40-60 on 3.11.)"""
    import time

    @torch.library.custom_op('mavit_mm_test::busy_clone', mutates_args=(), device_types='cpu')
    def busy_clone(x: torch.Tensor) -> torch.Tensor:
        return wait_then_clone(x)

    def wait_then_clone(x):
        started = time.perf_counter()
        while time.perf_counter() - started < 1e-3:
            pass
        return x.clone()

    x = torch.randn(4)
    busy_clone(x)
    # A preemption outside every profiled function (in host_time's own loop)
    # only lowers 'attributed', and counting twice only raises it: so the
    # best of up to three profiles is the one to hold to the tolerance.
    attempts = []
    for _ in range(3):
        host = profiling.host_time(lambda: busy_clone(x), torch.device('cpu'), calls=20, top=40)
        attempts.append(host['attributed'])
        if host['attributed'] == pytest.approx(1, abs=0.02):
            break
    assert host['attributed'] == pytest.approx(1, abs=0.02), (attempts, host)
    own = {row['function'].split('(')[-1].rstrip(')'): row['own_us']
           for row in host['top_functions']}
    waiting = own['wait_then_clone'] + own['<built-in method time.perf_counter>']
    assert waiting >= 1000 and waiting > 0.8 * host['profiled_ms'] * 1e3, host
    assert own.get('backend_impl', 0) < 0.1 * waiting, host


def test_gpu_check_model_profile_writes_categories_per_model(tmp_path, monkeypatch):
    """The model-profile step's plumbing on the CPU (whose profile has no GPU
    kernels): each backbone's forward is profiled after warm-up, and what the
    profile holds is categorised into model-profile.json."""
    profiled = []

    def kernels(prof):
        profiled.append(sum(event.count for event in prof.key_averages()
                            if event.key == 'aten::conv2d'))
        return [('nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT', 30.0, 2),
                ('_forward_output_kernel', 10.0, 1)]
    monkeypatch.setattr(profiling, 'profiled_kernels', kernels)
    result = profiling.step_model_profile(tmp_path, 600, device='cpu', size=(64, 96), warmup=2)
    report = json.loads((tmp_path / 'model-profile.json').read_text())
    assert result == {'rows': 2, 'complete': True, 'errors_recorded': 0} and report['complete']
    assert [row['model'][:7] for row in report['results']] == ['MAViT-T', 'Swin-T ']
    # One forward each was profiled (MAViT-T's stem alone has four convolutions).
    assert len(profiled) == 2 and profiled[0] >= 4
    for row in report['results']:
        assert row['forward_ms'] > 0 and row['kernel_count'] == 3
        assert row['categories']['gemm'] == dict(time_us=30.0, kernels=2, share=0.75)
        assert row['categories']['mala']['kernels'] == 1
        # The host's time: whose Python issues each forward, shares adding up.
        host = row['host']
        assert host['issue_ms'] > 0 and host['python_calls'] > 100 and host['top_functions']
        assert sum(entry['share'] for entry in host['by_source'].values()) == pytest.approx(
            1, abs=1e-3)
        # The own times add up to the profiled wall time, and nothing here
        # (no custom op on a CPU forward) was counted twice.
        assert host['attributed'] == pytest.approx(1, abs=0.02), host
        assert host['double_counted_ms'] == 0 and host['profiled_ms'] > 0
    mavit, swin = (row['host']['by_source'] for row in report['results'])
    assert mavit['mavit_mm']['calls'] > 0 and swin['mavit_mm']['calls'] == 0
    assert swin['openmmlab']['calls'] > 0 and mavit['torch']['calls'] > 0
    # docs/gpu.md's block says it, per model.
    from benchmarks import readme_tables
    monkeypatch.setattr(readme_tables, '_gpu_source_line', lambda *args: 'Measured.')
    block = readme_tables.render_gpu_model_profile(report, 'model-profile.json')
    host_line = block.splitlines()[-1]
    assert host_line.startswith('The host, per eager forward: MAViT-T issued in ')
    assert 'mavit_mm ' in host_line.split('; Swin-T')[0] and 'mavit_mm ' not in host_line.split('; Swin-T')[1]
    assert sorted(tmp_path.iterdir()) == [tmp_path / 'model-profile.json']
    _assert_targets_read('model-profile', report)


def test_gpu_check_compiled_profile_compiles_each_backbone_first(tmp_path, monkeypatch):
    """The compiled-profile step's plumbing on the CPU: each backbone compiled
    by benchmark_fps.py's recipe (stood in for: a compile takes minutes here)
    without reduce-overhead's CUDA graph, then profiled; inductor's kernels
    and the MALA kernels keep categories of their own."""
    from tools.analysis_tools import benchmark_fps
    compiles = []

    def compiled(forward, device, mode=benchmark_fps.COMPILE_MODE):
        compiles.append(mode)
        return forward, 12.34, None
    monkeypatch.setattr(benchmark_fps, 'compiled', compiled)
    monkeypatch.setattr(profiling, 'profiled_kernels', lambda prof: [
        ('triton_poi_fused__to_copy_add_convolution_mul_0', 30.0, 3),
        ('_forward_partials_kernel', 10.0, 1)])
    result = profiling.step_model_profile(tmp_path, 600, device='cpu', size=(64, 96), warmup=2,
                                          compiled=True)
    report = json.loads((tmp_path / 'compiled-profile.json').read_text())
    assert result == {'rows': 2, 'complete': True, 'errors_recorded': 0}
    assert compiles == ['default', 'default'] and report['compile_mode'] == 'default'
    assert [row['model'][:7] for row in report['results']] == ['MAViT-T', 'Swin-T ']
    for row in report['results']:
        assert row['compile_s'] == 12.3 and row['kernel_count'] == 4
        assert row['categories']['inductor'] == dict(time_us=30.0, kernels=3, share=0.75)
        assert row['categories']['mala']['kernels'] == 1
    assert sorted(tmp_path.iterdir()) == [tmp_path / 'compiled-profile.json']


def test_swin_t_is_the_upernet_baselines_backbone():
    """Every row's Swin-T is mmseg's SwinTransformer as the UperNet baseline
    config builds it: Swin-T's depths, widths and windows of 7."""
    from mmseg.models.backbones import SwinTransformer

    from devtools.baseline import SWIN_T_CONFIG, swin_t
    from mavit_mm.tooling.config import load_config
    assert SWIN_T_CONFIG in models.UPERNET_CONFIGS
    assert load_config(REPO_ROOT / SWIN_T_CONFIG).model.backbone.type == 'SwinTransformer'
    model = swin_t()
    assert type(model) is SwinTransformer
    assert [len(stage.blocks) for stage in model.stages] == [2, 2, 6, 2]
    assert [stage.blocks[0].attn.w_msa.num_heads for stage in model.stages] == [3, 6, 12, 24]
    assert {stage.blocks[0].attn.w_msa.window_size for stage in model.stages} == {(7, 7)}
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(27.5e6, rel=0.01)


def _stand_in_modes(monkeypatch) -> list:
    """benchmark_fps.py's CUDA-graph capture and compile, stood in for by
    recorders that return the step as it is (a CPU has no CUDA graph, and a
    compile takes minutes here)."""
    from tools.analysis_tools import benchmark_fps
    made = []

    def capture(step, device, warmup):
        made.append(('cuda-graph', warmup))
        return step, None

    def compiled(step, device, mode=benchmark_fps.COMPILE_MODE):
        made.append(('compile', mode))
        return step, 1.25, None
    monkeypatch.setattr(benchmark_fps, 'capture_cuda_graph', capture)
    monkeypatch.setattr(benchmark_fps, 'compiled', compiled)
    return made


def _made_up_times(monkeypatch) -> None:
    """The check's backbone timer stood in for: each step runs once (its model really
    runs, in its mode), its time is 10 ms, 11 ms, ... in the order of the rows
    (the real timer's rows are the sweep's, above)."""
    times = iter(range(10, 100))

    def time_step(step, batch, device, warmup, rep):
        step()
        return dict(time_ms=float(next(times)))
    monkeypatch.setattr(model_steps, 'time_backbone_step', time_step)


def test_gpu_check_backbones_step_times_each_mode_through_benchmark_fps(tmp_path, monkeypatch):
    """The backbones step on the CPU at a small size: MAViT-T and Swin-T in
    each mode, the graph and the compile made by benchmark_fps.py's own code,
    MAViT-T's time over Swin-T's per mode."""
    made = _stand_in_modes(monkeypatch)
    _made_up_times(monkeypatch)
    rounds, _ = _made_up_rounds(monkeypatch)
    result = model_steps.step_backbones(tmp_path, 600, device='cpu', size=(64, 96))
    report = json.loads((tmp_path / 'backbones.json').read_text())
    assert report['complete'] and result['errors_recorded'] == 0
    modes = ('cuda-graph', 'eager', 'compile')
    assert [(row['mode'], row['model']) for row in report['results']] == [
        (mode, model) for mode in modes
        for model in (models.MAVIT_T_LABEL, models.SWIN_T_LABEL)]
    assert made == [('cuda-graph', 3)] * 2 + [('compile', 'reduce-overhead')] * 2
    assert report['compile_mode'] == 'reduce-overhead'
    # Eager: both models in the same rounds; their ratio the rounds' median
    # (1.0 for rounds of 10/10, 30/10, 12/20 ms), not the medians' (1.2).
    assert rounds == [[models.MAVIT_T_LABEL, models.SWIN_T_LABEL]]
    eager = report['results'][2]
    assert (eager['time_ms'], eager['ratio_min'], eager['ratio_max']) == (12.0, 0.6, 3.0)
    # Else times 10, 11, 12, 13 ms in row order: MAViT-T's over Swin-T's per mode.
    assert report['time_vs_swin'] == result['time_vs_swin'] == {
        'cuda-graph': round(10 / 11, 4), 'eager': 1.0, 'compile': round(12 / 13, 4)}
    assert all('time_vs_swin' not in row for row in report['results'][1::2])
    assert [row.get('compile_s') for row in report['results']] == [None] * 4 + [1.2] * 2
    _assert_targets_read('backbones', report)


def test_ablation_rows_switch_each_fast_path_off_where_it_acts():
    """Per mode (CUDA graph, then eager; compiled in a step of its own) and
    pass: the all-on row first, then each switch that acts there off alone.
    A forward for every switch but those that only change a training step; a
    training step (fwd+bwd) eager, how users train, for every switch that
    acts where gradients flow, and elsewhere for those that change nothing
    else."""
    from mavit_mm.ops.fast_paths import FAST_PATH_MODES, INFERENCE_ONLY, TRAINING_ONLY
    rows = model_steps.ablation_rows()
    compiled = model_steps.ablation_rows(model_steps.COMPILE_ABLATION_MODES)
    assert {row['mode'] for row in rows} == {'cuda-graph', 'eager'}
    assert {row['mode'] for row in compiled} == {'compile'}
    every = rows + compiled
    assert [row['mode'] for row in every] == sorted(
        (row['mode'] for row in every), key=('cuda-graph', 'eager', 'compile').index)
    assert all(len(row['switches_off']) <= 1 for row in every)
    cases = list(dict.fromkeys((row['mode'], row['pass_name']) for row in every))
    for case in cases:
        group = [row for row in every if (row['mode'], row['pass_name']) == case]
        # All on, each off in turn, all on again (the drift) but where that is a compile.
        closes = case[0] != 'compile'
        assert group[0]['switches_off'] == [] and 'repeat' not in group[0]
        assert all(row['switches_off'] for row in group[1:len(group) - closes])
        assert (group[-1] == dict(mode=case[0], pass_name=case[1], switches_off=[],
                                  repeat=True)) == closes
    off = {(row['switches_off'][0], row['mode'], row['pass_name'])
           for row in every if row['switches_off']}
    expected = {(name, mode, 'fwd') for name, modes in FAST_PATH_MODES.items() for mode in modes
                if name not in TRAINING_ONLY}
    expected |= {(name, mode, 'fwd+bwd') for name, modes in FAST_PATH_MODES.items()
                 for mode in modes
                 if (name not in INFERENCE_ONLY if mode == 'eager' else name in TRAINING_ONLY)}
    assert off == expected
    assert [mode for mode, _ in cases] == ['cuda-graph'] * 2 + ['eager'] * 2 + ['compile'] * 2
    assert (len(rows), len(compiled)) == (37, 8)
    assert ('channel_split', 'cuda-graph', 'fwd+bwd') in off
    assert ('matmul_1x1', 'eager', 'fwd+bwd') in off
    assert not any(name in INFERENCE_ONLY for name, mode, pass_name in off
                   if pass_name == 'fwd+bwd')
    assert not any(name == 'cached_weights' for name, mode, _ in off if mode == 'compile')


def _made_up_rounds(monkeypatch) -> tuple[list, list]:
    """The check's interleaved timer stood in for: each step runs once (its
    model really runs), and the rounds' times are made up: a step named
    'off' takes 10, 30, 12 ms against 'all on''s 10, 10, 20 (ratios 1, 3,
    0.6: their median 1.0, where the medians' ratio would be 1.2); any other
    step 5, 7, 6 ms (MAViT-T and Swin-T as 'off' and 'all on'). Returns the
    steps' names of each call, and their ids."""
    identities = []
    made_up = {'off': [10.0, 30.0, 12.0], 'all on': [10.0, 10.0, 20.0],
               models.MAVIT_T_LABEL: [10.0, 30.0, 12.0], models.SWIN_T_LABEL: [10.0, 10.0, 20.0]}
    asked = []

    def rounds(steps, device, count, warmup, progress=None):
        asked.append(list(steps))
        identities.append({name: id(step) for name, step in steps.items()})
        for step in steps.values():
            step()
        return {name: list(made_up.get(name, [5.0, 7.0, 6.0])) for name in steps}
    monkeypatch.setattr(model_steps, 'interleaved_ms', rounds)
    return asked, identities


@pytest.mark.parametrize('step_name', ['ablations', 'ablations-compile'])
def test_gpu_check_ablations_step_builds_each_row_with_its_switches(tmp_path, monkeypatch,
                                                                    step_name):
    """The ablations steps on the CPU at a small size, every planned row: each
    model built with its switches off and the same weights, run in its mode
    through benchmark_fps.py's code, against the all-on row of its mode and
    pass; an eager row in the same rounds as its case's opening all-on model,
    its ratio the rounds' median; a row whose model fails is recorded and the
    rest still run."""
    from mavit_mm.models.mavit import MAViT
    from mavit_mm.ops.fast_paths import FAST_PATHS
    made = _stand_in_modes(monkeypatch)
    _made_up_times(monkeypatch)
    rounds, identities = _made_up_rounds(monkeypatch)
    built = []

    def mavit(impl, fast_paths=None):
        # Records the switches asked for; the model is the plain one (the switches'
        # own effects are the model's tests'), one block a stage. One switch fails
        # to build.
        if fast_paths and fast_paths['fused_lepe_gate'] is False:
            raise TypeError("unexpected keyword argument 'fast_paths'")
        built.append((fast_paths, MAViT(arch='tiny', depths=[1, 1, 1, 1], mala_impl=impl)))
        return built[-1][1]
    monkeypatch.setattr(model_steps, 'mavit_t', mavit)
    plan = model_steps.ablation_rows(model_steps.ABLATION_MODES if step_name == 'ablations'
                                     else model_steps.COMPILE_ABLATION_MODES)
    result = model_steps.step_ablations(tmp_path, 600, device='cpu', size=(32, 64),
                                        step_name=step_name)
    report = json.loads((tmp_path / f'{step_name}.json').read_text())
    rows = report['results']
    failing = sum('fused_lepe_gate' in row['switches_off'] for row in plan)
    assert report['complete'] and result['errors_recorded'] == failing >= 1
    assert [(row['mode'], row['pass_name'], row['switches_off']) for row in rows] == [
        (row['mode'], row['pass_name'], row['switches_off']) for row in plan]
    # The weights' model first, then each row's: every switch on but the row's.
    ran = [row for row in plan if 'fused_lepe_gate' not in row['switches_off']]
    assert [asked for asked, _ in built] == [None] + [
        {name: name not in row['switches_off'] for name in FAST_PATHS} for row in ran]
    # (Parameters: a training row's step moves the norms' running statistics.)
    weights = dict(built[0][1].named_parameters())
    for _, model in built[1:]:
        assert all(torch.equal(weights[name], value) for name, value in model.named_parameters())
    # CUDA graph and compile through benchmark_fps.py's code; an eager row's step
    # as it is, in rounds: the all-on rows alone, each other one with its all-on model.
    assert made == [(row['mode'], 3 if row['mode'] == 'cuda-graph' else 'reduce-overhead')
                    for row in ran if row['mode'] != 'eager']
    assert rounds == [['alone'] if not row['switches_off'] else ['off', 'all on']
                      for row in ran if row['mode'] == 'eager']
    # Each eager row's reference is the step its case's opening all-on row timed
    # (a forward's for a forward, a training step's for a training step), kept
    # alive for the case (so no other step takes its id); the repeat is its own.
    eager = [row for row in ran if row['mode'] == 'eager']
    assert {row['pass_name'] for row in eager} == (
        {'fwd', 'fwd+bwd'} if step_name == 'ablations' else set())
    for case in {(row['mode'], row['pass_name']) for row in eager}:
        ids = [call for row, call in zip(eager, identities)
               if (row['mode'], row['pass_name']) == case]
        opening, *offs, repeat = ids
        assert offs and all(call['all on'] == opening['alone'] for call in offs), case
        assert repeat['alone'] != opening['alone']
    all_on = {}
    for row in rows:
        if not row['switches_off']:
            all_on.setdefault((row['mode'], row['pass_name']), []).append(row['time_ms'])
    assert len(all_on) == 2 * len({row['mode'] for row in plan})  # forward and training step
    for row in rows:
        if 'fused_lepe_gate' in row['switches_off']:
            assert 'fast_paths' in row['error'] and 'time_ms' not in row
        elif row['mode'] == 'eager' and row['switches_off']:
            assert row['time_vs_all_on'] == 1.0 and (row['ratio_min'], row['ratio_max']) == (
                0.6, 3.0)
            assert (row['time_ms'], row['all_on_ms']) == (12.0, 10.0)
            assert row['timing'] == f"interleaved, {model_steps.EAGER_ROUNDS[row['pass_name']]} " \
                                    'rounds'
        else:
            times = all_on[row['mode'], row['pass_name']]
            assert row['time_vs_all_on'] == pytest.approx(row['time_ms'] / (sum(times) /
                                                                           len(times)))
    # The drift of each case its all-on rows close: all but the compiled ones.
    assert report['drift'] == {f'{mode} {pass_name}': pytest.approx(times[-1] / times[0], abs=1e-4)
                               for (mode, pass_name), times in all_on.items() if mode != 'compile'}


def test_mala_model_shapes_are_the_calls_mavit_t_makes(monkeypatch):
    """The op's shapes the profile step times are the ones a MAViT-T forward
    passes to it (stages 1 and 2, channels_last head views)."""
    from devtools.mala_inputs import layout_of
    from mavit_mm.models import mavit
    calls = []
    original = mavit.attention

    def recording(q, k, v, attn_type, *args, **kwargs):
        if attn_type == 'mala':
            calls.append((*q.shape, layout_of(q)))
        return original(q, k, v, attn_type, *args, **kwargs)
    monkeypatch.setattr(mavit, 'attention', recording)
    model = mavit.MAViT(arch='tiny', mala_impl='torch').eval()
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 160))
    shapes = op_steps.mala_model_shapes(size=(64, 160), batches=(2,))
    # Each stage's two blocks call the op with the same shape.
    assert calls == [(s['batch'], s['heads'], s['tokens'], s['head_dim'], 'channels_last')
                     for s in shapes for _ in range(2)]
    assert [(s['stage'], s['heads'], s['height'], s['width'], s['batch_heads'])
            for s in shapes] == [(1, 1, 16, 40, 2), (2, 2, 8, 20, 4)]
    # At 512x2048: 128x512 and 64x256 maps; B*heads 1 and 2 at batch 1, 8 and 16 at batch 8.
    full = op_steps.mala_model_shapes()
    assert [(s['height'], s['width'], s['tokens'], s['batch_heads']) for s in full] == [
        (128, 512, 65536, 1), (64, 256, 16384, 2), (128, 512, 65536, 8), (64, 256, 16384, 16)]


def test_gpu_check_upernet_fps_gathers_its_runs_within_the_budget(tmp_path, monkeypatch):
    """benchmark_fps.py children (stood in for by a script writing rows as its
    JSON): three runs of both models, --iters 50, their rows gathered with
    each run's MAViT-T / Swin-T ratio and the median of the runs; runs past
    the budget recorded as cut."""
    fake = (
        "import json, sys, time; run = json.loads(sys.argv[1]); time.sleep(run['sleep'])\n"
        "rows = [dict(config=config, mode=mode, dtype=run['dtype'], height=run['height'], "
        "width=run['width'], fps=run['fps'] if 'mavit' in config else 20.0) "
        "for config in run['configs'] for mode in run['modes']]\n"
        "open(sys.argv[2], 'w').write(json.dumps(dict(results=rows)))\n")
    commands = []
    # MAViT-T's fps per run: ratios 1.5, 1.2, then a run killed at the budget.
    fps = {1: 30.0, 2: 24.0, 3: 36.0}

    def fps_command(run, output):
        commands.append(run)
        sleep = 60 if run['run'] == 3 else 0
        return ['-c', fake, json.dumps(dict(run, sleep=sleep, fps=fps[run['run']])), str(output)]
    monkeypatch.setattr(upernet_fps, 'fps_command', fps_command)
    monkeypatch.setattr(upernet_fps, 'FPS_MIN_RUN_S', 2)
    # Runs 1 and 2 take tens of ms, leaving run 3 about 2 s, killed at the
    # budget: the test waits out what is left.
    result = upernet_fps.step_upernet_fps(tmp_path, 4, 'upernet-fps')
    report = json.loads((tmp_path / 'upernet-fps.json').read_text())
    runs = report['runs']
    assert [(run['run'], run['modes'], run['dtype'], run['height'], run['width'],
             [Path(config).stem for config in run['configs']]) for run in runs] == [
        (number, ['eager', 'cuda-graph'], 'bf16', 512, 2048,
         [Path(config).stem for config in models.UPERNET_CONFIGS]) for number in (1, 2, 3)]
    assert runs[0]['returncode'] == runs[1]['returncode'] == 0 and runs[2]['timed_out']
    assert not report['complete'] and result['runs_cut_or_skipped'] == 1
    assert report['iters'] == 50    # the targets' --iters 50
    rows = report['results']
    assert [(row['run'], row['mode'], row.get('fps_vs_swin')) for row in rows] == [
        (1, 'eager', 1.5), (1, 'cuda-graph', 1.5), (1, 'eager', None), (1, 'cuda-graph', None),
        (2, 'eager', 1.2), (2, 'cuda-graph', 1.2), (2, 'eager', None), (2, 'cuda-graph', None)]
    # The median of the runs that finished, per mode.
    assert report['medians'] == [
        dict(mode=mode, dtype='bf16', height=512, width=2048, fps_vs_swin_per_run=[1.5, 1.2],
             fps_vs_swin_median=pytest.approx(1.35)) for mode in ('eager', 'cuda-graph')]
    assert result['fps_vs_swin_median'] == {'eager 512x2048': 1.35, 'cuda-graph 512x2048': 1.35}
    assert sorted(tmp_path.iterdir()) == [tmp_path / 'logs.txt', tmp_path / 'upernet-fps.json']
    _assert_targets_read('upernet-fps', report)
    # The other UperNet steps: compiled at 512x2048, every mode at 1024x2048.
    assert [(run['modes'], run['height']) for run in upernet_fps.upernet_fps_runs(
        'upernet-fps-compile')] == [(['compile'], 512)] * 3
    assert [(run['modes'], run['height']) for run in upernet_fps.upernet_fps_runs(
        'upernet-fps-1024')] == [(['eager', 'cuda-graph', 'compile'], 1024)] * 3


@pytest.mark.parametrize('step', ['upernet-fps-compile', 'upernet-fps-1024'])
def test_gpu_check_upernet_fps_steps_write_what_their_targets_read(tmp_path, monkeypatch, step):
    """The other UperNet steps, with benchmark_fps.py stood in for by a script
    writing rows of both models in the step's modes and size: their targets'
    figures are the medians the step writes."""
    fake = ("import json, sys; run = json.loads(sys.argv[1])\n"
            "rows = [dict(config=config, mode=mode, dtype=run['dtype'], height=run['height'], "
            "width=run['width'], fps=30.0 if 'mavit' in config else 20.0) "
            "for config in run['configs'] for mode in run['modes']]\n"
            "open(sys.argv[2], 'w').write(json.dumps(dict(results=rows)))\n")
    monkeypatch.setattr(upernet_fps, 'fps_command',
                        lambda run, output: ['-c', fake, json.dumps(run), str(output)])
    upernet_fps.step_upernet_fps(tmp_path, 60, step)
    report = json.loads((tmp_path / plan.STEP_FILES[step]).read_text())
    assert report['complete']
    _assert_targets_read(step, report)


def test_gpu_check_passes_the_layout_to_the_op_steps(tmp_path, monkeypatch):
    """--layout reaches bench_mala.py and tune_mala.py, which take it;
    tune_depthwise.py times the model's channels_last maps, within its budget."""
    from benchmarks import bench_mala, tune_depthwise, tune_mala
    commands = []

    def run_child(command, budget_s, log):
        commands.append((command, budget_s))
        return dict(returncode=0, timed_out=False, output='', seconds=0)
    monkeypatch.setattr(op_steps, 'run_child', run_child)
    args = runner.parse_args(['--layout', 'nchw', '--steps', 'bench', 'tune-bh1'])
    assert runner.parse_args([]).layout == 'channels_last'
    assert runner.run_step('bench', tmp_path, args)['layout'] == 'nchw'
    assert runner.run_step('tune-bh1', tmp_path, args)['layout'] == 'nchw'
    depthwise = runner.run_step('tune-depthwise', tmp_path, args)
    assert depthwise['layout'] == 'channels_last' and depthwise['file'] == 'tune-depthwise.json'
    (bench, _), (tune, _), (tune_dw, budget_s) = commands
    assert bench_mala.parse_args(bench[2:]).layout == 'nchw'
    assert tune_mala.parse_args(tune[2:]).layout == 'nchw'
    assert tune_mala.parse_args(tune[2:]).batch_heads == [1]
    assert tune_dw[1] == 'benchmarks/tune_depthwise.py'
    tune_dw = tune_depthwise.parse_args(tune_dw[2:])
    assert budget_s == 60 * plan.STEP_BUDGET_MIN['tune-depthwise']
    assert tune_dw.budget_s == round(0.9 * budget_s)
    assert tune_dw.output == tmp_path / 'tune-depthwise.json'
    assert (tune_dw.dtype, tune_dw.size, tune_dw.batch) == ('bf16', [512, 2048], 1)


@pytest.mark.parametrize('layout', ['channels_last', 'nchw', 'contiguous'])
def test_tune_mala_cases_are_built_in_their_layout(layout):
    from benchmarks import tune_mala
    from devtools.mala_inputs import layout_of
    assert tune_mala.parse_args([]).layout == 'channels_last'
    assert tune_mala.parse_args(['--layout', layout]).layout == layout
    case = tune_mala.Case(torch.float32, 2, 256, 32, torch.device('cpu'), layout)
    assert case.layout == layout and {layout_of(t) for t in case.views} == {layout}


def test_tune_depthwise_dry_run_lists_mavit_t_shapes_and_candidates(capsys):
    """The shapes are MAViT-T's calls at 512x2048, with the block's own kernel
    sizes and FFN width; the candidates are the current tile and its halves
    and doubles that the launch runs (a norm's block_c holds every channel),
    or the values given; --dry-run lists them without a GPU."""
    from benchmarks import tune_depthwise
    from mavit_mm.models.mavit import MAViTBlock
    block = MAViTBlock(dim=64, num_heads=1, mlp_ratio=3.5)
    assert tune_depthwise.KERNEL_SIZES == {
        'position_norm': block.pos.weight.shape[-1], 'gated_lepe': block.attn.lepe.weight.shape[-1],
        'ffn_middle': block.ffn.dwconv.weight.shape[-1]}
    assert block.ffn.dwconv.weight.shape[0] == 224
    maps = [(128, 512), (64, 256), (32, 128), (16, 64)]
    assert [(s['stage'], s['channels'], (s['height'], s['width']))
            for s in tune_depthwise.model_shapes()] == [
        *(('ffn_middle', c, m) for c, m in zip((224, 448, 896, 1792), maps)),
        *(('gated_lepe', c, m) for c, m in zip((64, 128, 256, 512), maps)),
        *(('position_norm', c, m) for c, m in zip((64, 128, 256, 512), maps))]
    assert tune_depthwise.candidates('position_norm.forward', 512, 3) == [
        (4, 512, 4), (2, 512, 4), (4, 512, 2), (4, 512, 8)]
    assert tune_depthwise.candidates('gated_lepe.backward', 64, 5) == [
        (16, 32, 4), (8, 32, 4), (32, 32, 4), (16, 16, 4), (16, 64, 4), (16, 32, 2), (16, 32, 8)]
    assert tune_depthwise.candidates('ffn_middle.forward', 224, 3, block_ws=[8, 16],
                                     warps=[4, 8]) == [(16, 64, 4), (8, 64, 4), (8, 64, 8),
                                                       (16, 64, 8)]
    assert tune_depthwise.main(['--dry-run']) == 0
    printed = capsys.readouterr().out
    for line in ('ffn_middle    stage 4 C=1792 16x64 k=3: forward 7, backward 7',
                 'gated_lepe    stage 1 C=64   128x512 k=5: forward 6, backward 7',
                 'position_norm stage 4 C=512  16x64 k=3: forward 4, norm_backward 4, backward 7',
                 '12 shapes: 172 candidate timings, about 69 kernel compiles; then 48 timings'):
        assert line in printed, printed
    with pytest.raises(SystemExit) as help_exit:
        tune_depthwise.parse_args(['--help'])
    assert help_exit.value.code == 0


def test_tune_depthwise_times_each_candidate_under_its_tile_and_writes_the_table(
        tmp_path, monkeypatch):
    """In Triton's interpreter at a small shape, the timer stood in for (the
    FFN's forward fastest on 8 warps, its backward on 8 pixels a program): each
    candidate runs under its tile, the winners and their speed-ups land in the
    JSON with the table's lines, saved after every timing; a spent budget stops
    the sweep between candidates."""
    import triton.testing

    from benchmarks import tune_depthwise, tune_mala
    from mavit_mm.ops.depthwise.function import launch_tile
    monkeypatch.setattr(tune_mala, '_deadline', None)
    monkeypatch.setattr(tune_mala, '_timing', 'cuda-graph')
    timed = []

    def do_bench_cudagraph(step, **kwargs):
        step()
        forward, backward = (launch_tile(f'ffn_middle.{p}', 24, 3) for p in ('forward', 'backward'))
        timed.append((forward, backward))
        return 1.0 - 0.2 * (forward.num_warps == 8) - 0.1 * (backward.block_w == 8)
    monkeypatch.setattr(triton.testing, 'do_bench_cudagraph', do_bench_cudagraph)
    shape = dict(stage='ffn_middle', model_stage=1, channels=24, height=3, width=11, kernel_size=3)
    case = tune_depthwise.Case(shape, 1, torch.float32, torch.device('cpu'))
    plan = {launch: tune_depthwise.candidates(launch, 24, 3)
            for launch in tune_depthwise.stage_launches('ffn_middle')}
    forward_tiles, backward_tiles = plan['ffn_middle.forward'], plan['ffn_middle.backward']
    output = tmp_path / 'tune.json'
    results = tune_mala.Results(output, {'device': 'cpu'})
    record = results.start(dict(shape))
    saved = []

    def save():
        results.save()
        saved.append(json.loads(output.read_text()))
    tune_depthwise.tune_case(case, plan, 1, record, save, tune_depthwise.Progress(16))
    current = (16, 32, 4)
    assert timed[:len(forward_tiles) + len(backward_tiles)] == [
        *((tile, current) for tile in forward_tiles), *((current, tile) for tile in backward_tiles)]
    forward, backward = (record['launches'][f'ffn_middle.{p}'] for p in ('forward', 'backward'))
    assert [t['tile'] for t in forward['timings']] == [list(t) for t in forward_tiles]
    assert (forward['timed'], forward['current'], forward['best'], forward['speedup']) == (
        'forward', list(current), [16, 32, 8], 1.25)
    assert (backward['timed'], backward['best'], backward['speedup']) == (
        'backward', [8, 32, 4], pytest.approx(1 / 0.9, abs=1e-4))
    assert record['tuned_tiles'] == {'ffn_middle.forward': [16, 32, 8],
                                     'ffn_middle.backward': [8, 32, 4]}
    assert (record['current_forward_backward_ms'], record['forward_backward_speedup']) == (
        1.0, pytest.approx(1 / 0.7, abs=1e-4))
    assert tune_depthwise.table_lines(results.document['results']) == [
        "('ffn_middle.forward', 24): DepthwiseTile(16, 32, 8),  # x1.25",
        "('ffn_middle.backward', 24): DepthwiseTile(8, 32, 4),  # x1.11"]
    assert len(saved) == len(forward_tiles) + len(backward_tiles) + 2
    assert len(saved[0]['results'][0]['launches']['ffn_middle.forward']['timings']) == 1
    tune_mala.start_sweep(-1)
    with pytest.raises(tune_mala.BudgetSpent):
        tune_depthwise.tune_case(case, plan, 1, {}, lambda: None, tune_depthwise.Progress(1))


def test_tuners_time_the_gpu_alone_unless_asked(monkeypatch):
    """Both tile sweeps replay their calls from a CUDA graph by default: at
    the model's batch-1 shapes the host's cost of a call exceeded its kernels'
    on the GPU machine and decided which tile won. ``--timing eager`` times
    with do_bench, host included; the JSON says which."""
    import triton.testing

    from benchmarks import tune_depthwise, tune_mala
    assert tune_mala.parse_args([]).timing == tune_depthwise.parse_args([]).timing == 'cuda-graph'
    assert tune_depthwise.parse_args(['--timing', 'eager']).timing == 'eager'
    used = []
    monkeypatch.setattr(triton.testing, 'do_bench_cudagraph',
                        lambda step, **kwargs: used.append(('graph', kwargs)) or 2.0)
    monkeypatch.setattr(triton.testing, 'do_bench',
                        lambda step, **kwargs: used.append(('eager', kwargs)) or 3.0)
    monkeypatch.setattr(tune_mala, '_deadline', None)
    monkeypatch.setattr(tune_mala, '_timing', tune_mala._timing)
    tune_mala.start_sweep(None)
    assert tune_mala.bench(lambda: (lambda: None), 20) == 2.0
    tune_mala.start_sweep(None, 'eager')
    assert tune_mala.bench(lambda: (lambda: None), 20) == 3.0
    assert used == [('graph', dict(rep=20, return_mode='median')),
                    ('eager', dict(warmup=10, rep=20, return_mode='median'))]
    with pytest.raises(ValueError, match='unknown timing'):
        tune_mala.start_sweep(None, 'graphs')


def test_ncu_mala_builds_its_inputs_in_the_layout_asked(monkeypatch):
    from benchmarks import ncu_mala
    assert ncu_mala.parse_args([]).layout == 'channels_last'
    asked = []

    class Built(Exception):
        pass

    def inputs(*args, layout, **kwargs):
        asked.append(layout)
        raise Built
    monkeypatch.setattr(ncu_mala, 'mala_case_inputs', inputs)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    with pytest.raises(Built):
        ncu_mala.main(['--layout', 'contiguous'])
    assert asked == ['contiguous']


@pytest.mark.skipif(torch.cuda.is_available(), reason='compiles for sm_90 ahead of time on a CPU')
def test_depthwise_kernels_compile_for_sm90_without_spills():
    """Every launch variant of the fused depthwise stages compiles for an H100
    / H200 (Triton's own ptxas, no GPU), with its tiles held in registers: a
    tile change that spills shows here first. The weight taps are read as
    vectors (the kernel tap-major): at most 50 scalar global loads a kernel,
    where the taps read one channel a load made 200 in the gated LePE."""
    import ast
    pytest.importorskip('triton')
    result = run_script('benchmarks/depthwise_compile_report.py', '--capability', '90',
                        '--dtypes', 'bf16')
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if not line.startswith('#')]
    assert len(rows) == 32, result.stdout                # 6 variants x 4 widths, 2 x 4 hidden
    for row in rows:
        usage = ast.literal_eval(row[row.index('{'):])
        assert usage['stack_bytes'] == 0 and usage['registers'] <= 255, row
        assert usage['vector_loads'] > 0, row             # channels read as vectors
        assert usage['global_loads'] - usage['vector_loads'] <= 50, row


def test_results_name_the_cpus_vector_isa():
    # One model name ("AMD EPYC") covers CPUs with and without AVX-512, whose
    # speed ratios differ: the results files say which kernels torch ran.
    from mavit_mm.tooling.device import cpu_model, device_name
    capability = torch.backends.cpu.get_cpu_capability()
    assert cpu_model().endswith(f', {capability}')
    assert device_name(torch.device('cpu')) == f'cpu {cpu_model()}'


def test_newcomer_record_shows_each_failure_under_its_table():
    """A failed ``make test`` of the newcomer's path names its tests and why,
    in the Markdown beside the JSON (a run on a clean machine is not rerun
    cheaply to find out)."""
    from benchmarks.newcomer_path import FAILURE_LINES, markdown
    failure = dict(test='tests/t.py::test_x', when='call', worker='gw1',
                   report='\n'.join(f'line {i}' for i in range(100)) + '\nE   assert 1 == 2')
    report = dict(date='2026-11-27T00:00:00+00:00', machine='a CPU, 2 cores', commit='abc1234',
                  steps={'make test': dict(returncode=2, seconds=60.0, peak_disk_gb=1.0,
                                           left_on_disk_gb=0.5)},
                  test_summary='1 failed, 2 passed',
                  test_durations=dict(worker_busy_s={'gw1': 3.0}, tests=[], failed=[failure]),
                  slowest_tests=[])
    text = markdown(report)
    section = text.split('## Failed: `tests/t.py::test_x` (call, gw1)', 1)[1]
    assert section.rstrip().endswith('E   assert 1 == 2\n```')
    assert f'line {100 - FAILURE_LINES + 1}' in section and 'line 0\n' not in section
    # A run without failures (and an older record, without the field) has no such section.
    for durations in (dict(report['test_durations'], failed=[]), dict(worker_busy_s={}, tests=[])):
        assert '## Failed' not in markdown(dict(report, test_durations=durations))
