"""The GPU check: prove the fused MALA correct on a GPU and measure its speed,
in commands of under 10 minutes each (a lent GPU runs one command for at most
10 minutes), writing every result as JSON the moment it exists.

    python benchmarks/gpu_check.py --part 1 --out gpu_results/part1   # about 9 min
    python benchmarks/gpu_check.py --part 2 --out gpu_results/part2   # about 9 min
    python benchmarks/gpu_check.py --part 3 --out gpu_results/part3   # about 6 min

Parts 1 and 2 are the op (correctness, speed, tuning); part 3 is the model
(SDPA kernels, the resolution sweep against Swin-T, a training step) and the
op's host / kernel time split.

Each step has a time budget of at most 5 minutes, enforced: the tests and the
sweeps run as child processes killed at their budget, the backbone timing
stops between rows, and each writes its JSON as it goes, so a step cut short
still leaves what it measured. ``summary.json`` is rewritten after every step.
A part writes six files (a GPU command returns at most eight): ``env.json``,
one JSON per step, ``summary.json`` and ``logs.txt``.

Steps (``--steps`` runs any of them in any order):

``env``           device, driver, library versions and the measured
                  device-to-device copy bandwidth (the yardstick of the kernel
                  targets: ``bench_mala.copy_bandwidth_tbps``).
``kernel-tests``  ``tests/test_ops/test_mala/test_mala_cuda.py``: every dtype,
                  head dims 16-128, both layouts, default and small plans,
                  B*heads 1-64, gradients against fp64; the 512x2048 bf16
                  backbone.
``model-tests``   ``tests/test_ops/test_mala/test_mala_triton.py`` on CUDA:
                  dispatch, fallbacks, MAViT-T parity with the golden data
                  with ``mala_impl='triton'``.
``bench``         the ``bench_mala.py`` sweep (both paths, every dtype, fwd and
                  fwd+bwd, N 16384 / 65536, d 64 / 96, B*heads 1 / 16).
``backbone``      MAViT-T (``triton`` and ``torch`` MALA, fp32 and bf16
                  autocast) against Swin-T at 512x2048, batch 1 and 2, forward
                  and forward+backward.
``tune-bh16``,    ``tune_mala.py`` on the op's target shapes (bf16, N 65536,
``tune-bh1``      d 64) at B*heads 16 and 1.
``sdpa``          MAViT-T forward+backward at 512x2048 and 1024x2048 (fp32 and
                  bf16 autocast) with SDPA restricted to its flash and
                  memory-efficient kernels, and the SDPA kernels a profiled
                  forward ran (the softmax stages must not take the math path).
``sweep``         MAViT-T (both MALA paths) against Swin-T over resolutions
                  512x512 to 1024x2048, fp32 and bf16, batch 1 forward; then
                  a training step (forward, backward, AdamW) at 512x512,
                  batch 8, with its peak memory.
``profile``       the op at the target shapes (bf16, N 65536, d 64, B*heads 1
                  and 16) under the profiler: GPU kernel time per call against
                  the wall time per call, the host's launch time per call
                  (with direct launches and through Triton's launch path), and
                  where the host's time goes (cProfile).

The machine needs Python with torch (CUDA), triton, numpy and pytest; mmengine
and its small pure-Python needs travel as wheels (``scripts/gpu_wheels.sh``
downloads them into ``wheels/``, which git ignores, so it must be named when the
tree is copied to the GPU machine; see the README's "On a GPU" section). mmcv,
mmdet and mmseg are not needed.

``--dry-run`` (no GPU) checks the imports, the parts' budgets and prints the
plan; CI runs it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

# Time budget per step in minutes (enforced), each at most STEP_LIMIT_MIN.
STEP_BUDGET_MIN = {'env': 0.5, 'kernel-tests': 4.0, 'model-tests': 1.5, 'bench': 3.0,
                   'backbone': 2.5, 'tune-bh16': 3.0, 'tune-bh1': 3.0,
                   'sdpa': 1.5, 'sweep': 3.5, 'profile': 1.0}
STEPS = tuple(STEP_BUDGET_MIN)
STEP_LIMIT_MIN = 5.0
# The two commands of the README; each must fit a 10-minute GPU command.
PARTS = {1: ['env', 'kernel-tests', 'model-tests', 'bench'],
         2: ['env', 'backbone', 'tune-bh16', 'tune-bh1'],
         3: ['env', 'sdpa', 'sweep', 'profile']}
PART_LIMIT_MIN = 9.5     # budgets, plus start-up, stay under 10 minutes
TEST_FILES = {'kernel-tests': 'tests/test_ops/test_mala/test_mala_cuda.py',
              'model-tests': 'tests/test_ops/test_mala/test_mala_triton.py'}
BENCH_ARGS = ['--tokens', '65536', '16384', '--head-dims', '64', '96',
              '--batch-heads', '1', '16', '--dtypes', 'bf16', 'fp16', 'fp32']
TUNE_ARGS = ['--dtypes', 'bf16', '--head-dims', '64', '--tokens', '65536']
TUNE_BATCH_HEADS = {'tune-bh16': 16, 'tune-bh1': 1}
BACKBONE_SIZE = (512, 2048)
# The child processes' output, all steps in one file.
LOG_NAME = 'logs.txt'
BACKBONE_BATCHES = (1, 2)
SDPA_SIZES = ((512, 2048), (1024, 2048))
SWEEP_SIZES = ((512, 512), (512, 1024), (1024, 1024), (512, 2048), (1024, 2048))
TRAIN_SIZE, TRAIN_BATCH = (512, 512), 8
PROFILE_SHAPES = (dict(batch_heads=1, tokens=65536, head_dim=64),
                  dict(batch_heads=16, tokens=65536, head_dim=64))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, default=Path('gpu_results'),
                        help='folder for the JSON files, logs and summary.json '
                             '(default gpu_results)')
    which = parser.add_mutually_exclusive_group()
    which.add_argument('--part', type=int, choices=sorted(PARTS),
                       help='one of the two commands: ' + '; '.join(
                           f'{number}: {" ".join(steps)}' for number, steps in PARTS.items()))
    which.add_argument('--steps', nargs='+', choices=STEPS,
                       help='these steps, in this order')
    parser.add_argument('--sweep-batch', type=int, default=1,
                        help='batch of the sweep step\'s forward rows (default 1; at batch 1 '
                             'a small backbone is bound by the host\'s kernel launches)')
    parser.add_argument('--cuda-graphs', action='store_true',
                        help='the sweep step times CUDA-graph replays of each forward '
                             '(no training rows); writes sweep[-bN]-graphs.json')
    parser.add_argument('--dry-run', action='store_true',
                        help='no GPU needed: check imports and budgets, print the plan')
    parser.add_argument('--pytest-workers', type=int, default=8,
                        help='pytest-xdist workers for the test steps (kernel compiles run in '
                             'parallel); 0 runs in one process')
    args = parser.parse_args(argv)
    args.steps = PARTS[args.part] if args.part else (args.steps or PARTS[1])
    return args


# --------------------------------------------------------------------------
# Steps: each gets its budget in seconds and writes its results at once
# --------------------------------------------------------------------------
def step_env(out: Path, budget_s: float) -> dict:
    import triton

    from benchmarks.bench_mala import COPY_METHOD, copy_bandwidth_tbps
    device = torch.device('cuda')
    props = torch.cuda.get_device_properties(device)
    driver = _command_output(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'])
    env = dict(device=torch.cuda.get_device_name(device), driver=driver,
               capability='.'.join(map(str, torch.cuda.get_device_capability(device))),
               multiprocessors=props.multi_processor_count,
               memory_gib=round(props.total_memory / 2 ** 30, 1),
               l2_cache_mib=round(getattr(props, 'L2_cache_size', 0) / 2 ** 20, 1),
               torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__,
               python=platform.python_version(),
               copy_bandwidth_tbps=round(copy_bandwidth_tbps(device), 3),
               copy_bandwidth_method=COPY_METHOD,
               date=datetime.datetime.now().isoformat(timespec='seconds'))
    _write(out / 'env.json', env)
    return env


def step_tests(name: str, out: Path, budget_s: float, workers: int) -> dict:
    junit = Path(tempfile.mkdtemp()) / f'{name}.xml'   # summarised into {name}.json
    command = [sys.executable, '-m', 'pytest', '-q', '-rfE', '-p', 'no:cacheprovider',
               f'--junitxml={junit}', TEST_FILES[name]]
    if workers > 0 and _has_module('xdist'):
        command[3:3] = ['-n', str(workers)]
    run = _run_child(command, budget_s, out / LOG_NAME)
    summary = _junit_summary(junit) if not run['timed_out'] else _log_summary(run['output'])
    summary.update(command=' '.join(command[1:]), **{k: v for k, v in run.items()
                                                      if k != 'output'})
    print(run['output'][-3000:])
    _write(out / f'{name}.json', summary)
    return summary


def step_bench(out: Path, budget_s: float) -> dict:
    output = out / 'bench_mala.json'
    run = _run_child([sys.executable, 'benchmarks/bench_mala.py', *BENCH_ARGS,
                      '--output', str(output)], budget_s, out / LOG_NAME)
    return {'file': output.name, **{k: v for k, v in run.items() if k != 'output'}}


def step_tune(name: str, out: Path, budget_s: float) -> dict:
    output = out / f'{name}.json'
    # The sweep stops itself at 90% of the budget (keeping its JSON); the kill
    # at the budget is the backstop.
    run = _run_child([sys.executable, 'benchmarks/tune_mala.py', *TUNE_ARGS,
                      '--batch-heads', str(TUNE_BATCH_HEADS[name]),
                      '--budget-s', str(round(0.9 * budget_s)), '--output', str(output)],
                     budget_s, out / LOG_NAME)
    return {'file': output.name, **{k: v for k, v in run.items() if k != 'output'}}


def step_backbone(out: Path, budget_s: float) -> dict:
    device = torch.device('cuda')
    rows = []
    swin_builder, swin_source = swin_tiny_builder()
    models = [('MAViT-T triton', lambda: _mavit('triton')),
              ('MAViT-T torch', lambda: _mavit('torch')),
              (f'Swin-T ({swin_source})', swin_builder)]
    height, width = BACKBONE_SIZE
    deadline = time.time() + budget_s
    report = dict(input_size=list(BACKBONE_SIZE), swin_source=swin_source,
                  note='backbones alone (no neck or head); bf16 means torch.autocast bf16; '
                       'fwd in eval mode under no_grad, fwd+bwd in train mode with the '
                       'sum of the four outputs\' means as the loss',
                  complete=False, results=rows)
    for name, build in models:
        model = build().to(device)
        for precision in ('fp32', 'bf16'):
            for batch in BACKBONE_BATCHES:
                for pass_name in ('fwd', 'fwd+bwd'):
                    if time.time() > deadline:
                        rows.append(dict(model=name, precision=precision, batch=batch,
                                         pass_name=pass_name, skipped='time budget spent'))
                        continue
                    images = torch.randn(batch, 3, height, width, device=device)
                    step = _backbone_step(model, images, precision, pass_name)
                    try:
                        timing = _time_backbone_step(step, batch, device, warmup=50, rep=300)
                        error = None
                    except Exception as exc:  # e.g. out of memory: record it
                        timing = dict(time_ms=None, images_per_s=None, peak_memory_mib=None)
                        error = f'{type(exc).__name__}: {str(exc)[:200]}'
                    ms = timing['time_ms']
                    row = dict(model=name, precision=precision, batch=batch, pass_name=pass_name,
                               height=height, width=width, **timing, error=error)
                    rows.append(row)
                    _write(out / 'backbone.json', report)
                    print(f'  {name:24} {precision:4} batch {batch} {pass_name:8} '
                          f'{"failed " + error if error else f"{ms:8.2f} ms"}', flush=True)
                    torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()
    report['complete'] = not any('skipped' in row for row in rows)
    _write(out / 'backbone.json', report)
    return {'rows': len(rows), 'complete': report['complete']}


def step_sdpa(out: Path, budget_s: float, device: str = 'cuda',
              sizes=SDPA_SIZES) -> dict:
    """The softmax stages on SDPA's fast kernels: forward+backward with only
    flash / memory-efficient allowed (the math fallback would raise), and the
    SDPA ops a profiled forward ran."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    device = torch.device(device)
    fast = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    rows = []
    report = dict(note='MAViT-T (mala_impl triton where CUDA, else torch), train mode, batch 1; '
                       'allowed: the SDPA backends the forward+backward ran under '
                       '(sdpa_kernel); sdpa_ops: the aten SDPA ops a profiled forward ran',
                  complete=False, results=rows)
    deadline = time.time() + budget_s
    model = _mavit('triton' if device.type == 'cuda' else 'torch').to(device).train()
    for height, width in sizes:
        for precision in ('fp32', 'bf16'):
            for name, backends in (('flash+efficient', fast), ('flash', fast[:1])):
                if precision == 'fp32' and name == 'flash':
                    continue    # flash has no fp32 kernel on CUDA
                row = dict(height=height, width=width, precision=precision, allowed=name)
                if time.time() > deadline:
                    rows.append(dict(row, skipped='time budget spent'))
                    continue
                images = torch.randn(1, 3, height, width, device=device)
                step = _backbone_step(model, images, precision, 'fwd+bwd', device.type)
                try:
                    with sdpa_kernel(backends):
                        step()
                    row.update(ok=True, sdpa_ops=_sdpa_ops(model, images, precision, device))
                except Exception as exc:
                    row.update(ok=False, error=f'{type(exc).__name__}: {str(exc)[:300]}')
                rows.append(row)
                _write(out / 'sdpa.json', report)
                print(f'  {height}x{width} {precision} {name:16} '
                      f'{"ok " + str(row.get("sdpa_ops")) if row.get("ok") else row.get("error", "")}',
                      flush=True)
                _empty_cache(device)
    report['complete'] = not any('skipped' in row for row in rows)
    report['math_path_seen'] = any('math' in op for row in rows for op in row.get('sdpa_ops', []))
    _write(out / 'sdpa.json', report)
    return {'rows': len(rows), 'failed': sum(not row.get('ok', True) for row in rows),
            'math_path_seen': report['math_path_seen'], 'complete': report['complete']}


def _sdpa_ops(model, images, precision: str, device: torch.device) -> list[str]:
    from torch.profiler import ProfilerActivity, profile
    step = _backbone_step(model, images, precision, 'fwd', device.type)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    model.train()
    return sorted({event.key for event in prof.key_averages()
                   if 'scaled_dot_product' in event.key})


def step_sweep(out: Path, budget_s: float, device: str = 'cuda', sizes=SWEEP_SIZES,
               train_size=TRAIN_SIZE, train_batch=TRAIN_BATCH, rep: int = 200,
               batch: int = 1, name: str = 'sweep', cuda_graphs: bool = False) -> dict:
    """MAViT-T against Swin-T over resolutions (forward at ``batch``), then one
    training step (forward, backward, AdamW) at train_size x train_batch (none
    when train_batch is 0). Writes ``<name>.json``. ``cuda_graphs``: each
    forward is captured once in a CUDA graph and the replays are timed (what
    a host-bound small batch gets from graphs; no training rows)."""
    device = torch.device(device)
    if cuda_graphs and device.type != 'cuda':
        raise ValueError(f'CUDA graphs need a CUDA device, got {device}')
    if cuda_graphs:
        train_batch = 0
    rows = []
    report = dict(cuda_graphs=cuda_graphs,
                  note=f'backbones alone (no neck or head), batch {batch} forward in eval mode under '
                       'no_grad; bf16 = torch.autocast bf16; training step: train mode, loss = '
                       'sum of the four outputs\' means, backward, AdamW step; '
                       'peak_memory_mib = peak allocated beyond the model and optimizer state',
                  complete=False, forward=rows, training=[])
    deadline = time.time() + budget_s
    impls = ('triton', 'torch') if device.type == 'cuda' else ('torch',)
    # Each builds (model, its name) for an input size: timm's Swin fixes its size.
    builders = [lambda size, impl=impl: (_mavit(impl), f'MAViT-T {impl}') for impl in impls]
    builders.append(_swin_tiny_for)

    def measure(rows_out, size, precision, batch, pass_name, build):
        row = dict(model=None, height=size[0], width=size[1], precision=precision, batch=batch,
                   pass_name=pass_name)
        if time.time() > deadline:
            rows_out.append(dict(row, skipped='time budget spent'))
            return
        try:
            model, row['model'] = build(size)
            images = torch.randn(batch, 3, *size, device=device)
            step = _backbone_step(model.to(device), images, precision, pass_name, device.type,
                                  optimizer=pass_name == 'train step')
            if cuda_graphs:
                step = _cuda_graph_replay(step)
            row.update(_time_backbone_step(step, batch, device, warmup=25, rep=rep))
        except Exception as exc:   # e.g. out of memory, a size Swin cannot tile: record it
            row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
        rows_out.append(row)
        _write(out / f'{name}.json', report)
        print(f'  {str(row["model"])[:28]:28} {size[0]}x{size[1]} {precision} batch {batch} '
              f'{pass_name:10} ' + (f'{row["time_ms"]:8.2f} ms' if 'time_ms' in row
                                    else row['error']), flush=True)
        _empty_cache(device)

    for size in sizes:
        for precision in ('fp32', 'bf16'):
            for build in builders:
                measure(rows, size, precision, batch, 'fwd', build)
    for precision in ('fp32', 'bf16') if train_batch else ():
        for build in builders:
            measure(report['training'], train_size, precision, train_batch, 'train step', build)
    _add_ratios(rows + report['training'])
    report['complete'] = not any('skipped' in row for row in rows + report['training'])
    _write(out / f'{name}.json', report)
    return {'rows': len(rows) + len(report['training']), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in rows + report['training'])}


def _cuda_graph_replay(step: Callable) -> Callable:
    """``step`` captured once in a CUDA graph (after warm-up calls on a side
    stream, as torch's docs do it); returns the graph's replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def _add_ratios(rows: list[dict]) -> None:
    """time / Swin-T's time at the same size, precision, batch and pass."""
    def key(row):
        return row['height'], row['width'], row['precision'], row['batch'], row['pass_name']
    swin = {key(row): row.get('time_ms') for row in rows if row['model'].startswith('Swin-T')}
    for row in rows:
        base = swin.get(key(row))
        if row.get('time_ms') and base and not row['model'].startswith('Swin-T'):
            row['time_vs_swin'] = row['time_ms'] / base


def _host_issue_us(step, device, calls: int) -> float:
    """Host time per call over ``calls`` un-synchronised calls."""
    _synchronize(device)
    started = time.perf_counter()
    for _ in range(calls):
        step()
    host_us = (time.perf_counter() - started) / calls * 1e6
    _synchronize(device)
    return host_us


def _python_profile(step, device, calls: int, top: int = 15) -> list[dict]:
    """Where a call's host time goes: cProfile over ``calls`` un-synchronised
    calls, the ``top`` functions by own time, per call (cProfile slows every
    Python call, so read the shares, not the totals)."""
    import cProfile
    import pstats
    _synchronize(device)   # outside the profile: a CUDA sync's wait is not host work
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    _synchronize(device)
    stats = pstats.Stats(profiler).stats
    rows = sorted(stats.items(), key=lambda item: -item[1][2])[:top]
    return [dict(function=f'{Path(file).name}:{line}({name})', calls_per_call=count / calls,
                 own_us=round(own / calls * 1e6, 2), cumulative_us=round(cumulative / calls * 1e6, 2))
            for (file, line, name), (_, count, own, cumulative, _) in rows]


def step_profile(out: Path, budget_s: float, device: str = 'cuda',
                 shapes=PROFILE_SHAPES) -> dict:
    """Kernel time against host time per call of the fused op (bf16 where
    CUDA): the profiler's GPU kernel time, the wall time of a synchronised call,
    and the host's time to issue a call (un-synchronised calls)."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.bench_mala import backbone_inputs, make_step
    device = torch.device(device)
    on_cuda = device.type == 'cuda'
    dtype = torch.bfloat16 if on_cuda else torch.float32
    impl = 'triton' if on_cuda else 'torch'
    rows = []
    report = dict(note='kernel_us: the GPU kernels\' time per call from torch.profiler; '
                       'wall_us: median of synchronised calls (triton.testing.do_bench); '
                       'host_issue_us: host time per call over un-synchronised calls, i.e. what '
                       'the CPU spends launching; host-bound when host_issue_us > kernel_us; '
                       'host_issue_us_tritons_launch_path: the same with every kernel launched '
                       "through Triton's JITFunction.run (launches.DIRECT_LAUNCH = False); "
                       'host_python: cProfile of the calls, the functions with the most own '
                       'time, per call (inflated by cProfile: read the shares)',
                  dtype=str(dtype).replace('torch.', ''), impl=impl, complete=False,
                  results=rows)
    deadline = time.time() + budget_s
    calls = 20
    for shape in shapes:
        for pass_name in ('fwd', 'fwd+bwd'):
            row = dict(shape, pass_name=pass_name)
            if time.time() > deadline:
                rows.append(dict(row, skipped='time budget spent'))
                continue
            views, rope = backbone_inputs(shape['batch_heads'], shape['tokens'],
                                          shape['head_dim'], dtype, device,
                                          requires_grad=pass_name != 'fwd')
            step = make_step(impl, pass_name, views, rope)
            step()
            _synchronize(device)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    step()
                _synchronize(device)
            kernels = {}
            for event in prof.key_averages():
                device_us = _device_time_us(event)
                if on_cuda and device_us and getattr(event, 'device_type', None) is not None \
                        and 'CUDA' in str(event.device_type):
                    kernels[event.key] = round(device_us / calls, 2)
            wall_us = _median_ms(step, device, 25, 100) * 1e3
            host_us = _host_issue_us(step, device, calls)
            from mavit_mm.ops.mala.launches import direct_launches
            with direct_launches(False):   # every launch through Triton's JITFunction.run
                host_triton_us = _host_issue_us(step, device, calls)
            kernel_us = sum(kernels.values())
            row.update(wall_us=round(wall_us, 2), kernel_us=round(kernel_us, 2),
                       host_issue_us=round(host_us, 2),
                       host_issue_us_tritons_launch_path=round(host_triton_us, 2),
                       kernels=kernels, host_bound=bool(on_cuda and host_us > kernel_us),
                       host_python=_python_profile(step, device, calls))
            rows.append(row)
            _write(out / 'profile.json', report)
            print(f'  BH={shape["batch_heads"]:3} N={shape["tokens"]} d={shape["head_dim"]} '
                  f'{pass_name:8} wall {wall_us:8.1f} us, kernels {kernel_us:8.1f} us, '
                  f'host issue {host_us:8.1f} us ({host_triton_us:.1f} through Triton\'s '
                  f'launch path)', flush=True)
    report['complete'] = not any('skipped' in row for row in rows)
    _write(out / 'profile.json', report)
    return {'rows': len(rows), 'complete': report['complete']}


def _device_time_us(event) -> float:
    """The event's own device time (renamed from ``self_cuda_time_total``)."""
    for name in ('self_device_time_total', 'self_cuda_time_total'):
        value = getattr(event, name, None)
        if value:
            return float(value)
    return 0.0


def _median_ms(step: Callable, device: torch.device, warmup: int, rep: int) -> float:
    """``bench_mala.time_ms``: ``triton.testing.do_bench`` (warm-up and rep in
    ms) on CUDA; on the CPU one warm-up call and the median of three."""
    from benchmarks.bench_mala import time_ms
    if device.type == 'cuda':
        return time_ms(step, device, warmup, rep)
    return time_ms(step, device, 1, 3)


def _time_backbone_step(step: Callable, batch: int, device: torch.device, warmup: int,
                        rep: int) -> dict:
    """One backbone step's median time, throughput and (CUDA) peak extra memory."""
    from mavit_mm.tooling.device import cuda_peak_extra_bytes
    step()
    ms = _median_ms(step, device, warmup, rep)
    memory = cuda_peak_extra_bytes(step, device) / 2 ** 20 if device.type == 'cuda' else None
    return dict(time_ms=ms, images_per_s=batch / (ms * 1e-3), peak_memory_mib=memory)


def _synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def _empty_cache(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------
def _mavit(impl: str):
    from mavit_mm import MAViT
    return MAViT(arch='tiny', mala_impl=impl)


def swin_tiny_builder(size=BACKBONE_SIZE):
    """Swin-T as the baseline: mmdet's where it imports, else timm's (built
    for ``size``: timm's Swin fixes its input size)."""
    try:
        from mmdet.models.backbones import SwinTransformer

        def build():
            return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                                   window_size=7, out_indices=(0, 1, 2, 3))
        return build, 'mmdet SwinTransformer, window 7'
    except Exception:
        pass
    import timm

    def build_timm():
        return timm.create_model('swin_tiny_patch4_window7_224', pretrained=False,
                                 features_only=True, img_size=size,
                                 strict_img_size=False)
    try:
        build_timm()
        return build_timm, f'timm {timm.__version__} swin_tiny_patch4_window7_224, window 7'
    except Exception:
        pass

    def build_timm_window8():
        # Older timm cannot pad 128x512 patches to windows of 7: use 8, which tiles
        # every stage; the attention cost per token barely changes.
        return timm.create_model('swin_tiny_patch4_window7_224', pretrained=False,
                                 features_only=True, img_size=size, window_size=8)
    return build_timm_window8, f'timm {timm.__version__} swin_tiny, window 8 (7 cannot tile)'


def _swin_tiny_for(size) -> tuple[torch.nn.Module, str]:
    build, source = swin_tiny_builder(size)
    return build(), f'Swin-T ({source})'


def _backbone_step(model, images, precision: str, pass_name: str,
                   device_type: str = 'cuda', optimizer: bool = False) -> Callable:
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == 'bf16')
    if pass_name == 'fwd':
        model.eval()

        def forward():
            with torch.no_grad(), autocast:
                return model(images)
        return forward
    model.train()
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-4) if optimizer else None

    def forward_backward():
        with autocast:
            outputs = model(images)
        loss = sum(o.float().mean() for o in outputs)
        loss.backward()
        if adamw is not None:
            adamw.step()
        model.zero_grad(set_to_none=True)
    return forward_backward


def _run_child(command: list[str], budget_s: float, log: Path) -> dict:
    """Run ``command`` in the repository, killed at ``budget_s``; its output is
    appended to ``log`` either way."""
    started = time.time()
    try:
        result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                                timeout=budget_s)
        output, returncode, timed_out = result.stdout + result.stderr, result.returncode, False
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        returncode, timed_out = None, True
        output += f'\n[gpu_check] killed at its budget of {budget_s:.0f} s\n'
    with log.open('a') as handle:   # one log for all steps: few files come back from a GPU
        handle.write(f'\n===== {" ".join(command)}\n{output}')
    return dict(returncode=returncode, timed_out=timed_out, output=output,
                seconds=round(time.time() - started, 1), log=log.name)


def _text(data) -> str:
    if data is None:
        return ''
    return data.decode(errors='replace') if isinstance(data, bytes) else data


def _log_summary(output: str) -> dict:
    """Counts from pytest's progress output, for a run killed before its junit file."""
    lines = [line for line in output.splitlines() if line and set(line.split(' ')[0]) <= set('.FEsx')]
    marks = ''.join(line.split(' ')[0] for line in lines)
    return dict(passed=marks.count('.'), failed=marks.count('F'), errors=marks.count('E'),
                skipped=marks.count('s'), failures=[line for line in output.splitlines()
                                                    if line.startswith(('FAILED', 'ERROR'))],
                note='killed at its budget: counts of the tests that had finished')


def _junit_summary(path: Path) -> dict:
    if not path.exists():
        return dict(passed=0, failed=0, errors=1, skipped=0, failures=['no junit file'])
    root = ET.parse(path).getroot()
    counts = dict(passed=0, failed=0, errors=0, skipped=0)
    failures = []
    for case in root.iter('testcase'):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find('failure') is not None:
            counts['failed'] += 1
            failures.append(name + ': ' + (case.find('failure').get('message') or '')[:300])
        elif case.find('error') is not None:
            counts['errors'] += 1
            failures.append(name + ': ' + (case.find('error').get('message') or '')[:300])
        elif case.find('skipped') is not None:
            counts['skipped'] += 1
        else:
            counts['passed'] += 1
    counts['failures'] = failures
    return counts


def _has_module(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _command_output(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _write(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=1, default=str) + '\n')


def dry_run(args) -> int:
    """Check what the GPU run needs, without a GPU."""
    problems = []
    for module in ('triton', 'mmengine', 'pytest', 'numpy'):
        if not _has_module(module):
            problems.append(f'{module} is not importable')
    for name in TEST_FILES.values():
        if not (REPO_ROOT / name).is_file():
            problems.append(f'{name} is missing')
    for step, minutes in STEP_BUDGET_MIN.items():
        if minutes > STEP_LIMIT_MIN:
            problems.append(f'step {step} has a budget of {minutes} min (limit {STEP_LIMIT_MIN})')
    for part, steps in PARTS.items():
        minutes = sum(STEP_BUDGET_MIN[s] for s in steps)
        if minutes > PART_LIMIT_MIN:
            problems.append(f'part {part} needs {minutes} min (limit {PART_LIMIT_MIN})')
    from benchmarks import bench_mala, tune_mala
    bench_mala.parse_args(BENCH_ARGS)
    tune_mala.main(TUNE_ARGS + ['--batch-heads', '16', '--dry-run'])
    import mavit_mm  # noqa: F401  (the backbone and the op import)
    from mavit_mm.ops.mala import function  # noqa: F401  (the Triton launches import)
    total = sum(STEP_BUDGET_MIN[s] for s in args.steps)
    print(f'plan: {", ".join(args.steps)} into {args.out}/ (at most {total:.1f} min)')
    for part, steps in PARTS.items():
        print(f'part {part}: {" ".join(steps)} '
              f'(at most {sum(STEP_BUDGET_MIN[s] for s in steps):.1f} min)')
    for problem in problems:
        print(f'problem: {problem}')
    return 1 if problems else 0


def run_step(name: str, out: Path, args) -> dict:
    budget_s = 60 * STEP_BUDGET_MIN[name]
    if name == 'env':
        return step_env(out, budget_s)
    if name in TEST_FILES:
        return step_tests(name, out, budget_s, args.pytest_workers)
    if name == 'bench':
        return step_bench(out, budget_s)
    if name == 'backbone':
        return step_backbone(out, budget_s)
    if name == 'sdpa':
        return step_sdpa(out, budget_s)
    if name == 'sweep':
        file_name = 'sweep' + ('' if args.sweep_batch == 1 else f'-b{args.sweep_batch}') + \
            ('-graphs' if args.cuda_graphs else '')
        return step_sweep(out, budget_s, batch=args.sweep_batch, name=file_name,
                          cuda_graphs=args.cuda_graphs)
    if name == 'profile':
        return step_profile(out, budget_s)
    return step_tune(name, out, budget_s)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    if not torch.cuda.is_available():
        print('gpu_check.py needs a CUDA GPU; --dry-run checks the plan without one')
        return 2
    os.environ.pop('TRITON_INTERPRET', None)
    args.out.mkdir(parents=True, exist_ok=True)
    total = sum(STEP_BUDGET_MIN[s] for s in args.steps)
    started = time.time()
    summary = {'steps': args.steps, 'started': datetime.datetime.now().isoformat(timespec='seconds')}
    for index, name in enumerate(args.steps):
        elapsed = (time.time() - started) / 60
        left = sum(STEP_BUDGET_MIN[s] for s in args.steps[index:])
        print(f'[gpu_check] step {index + 1}/{len(args.steps)}: {name} '
              f'({elapsed:.1f} min so far, at most {left:.1f} of {total:.1f} min left)',
              flush=True)
        step_started = time.time()
        try:
            result = run_step(name, args.out, args)
            ok = not (result.get('timed_out') or result.get('failed') or result.get('errors')
                      or result.get('returncode') not in (0, None))
            summary[name] = {'ok': ok, 'seconds': round(time.time() - step_started, 1),
                             'result': result}
        except Exception as exc:  # keep going: later steps still produce results
            import traceback
            traceback.print_exc()
            summary[name] = {'ok': False, 'error': f'{type(exc).__name__}: {exc}'}
        _write(args.out / 'summary.json', summary)
    print(json.dumps(summary, indent=1, default=str)[:4000])
    return 0 if all(summary[name].get('ok') for name in args.steps) else 1


if __name__ == '__main__':
    sys.exit(main())
