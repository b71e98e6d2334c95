"""The check's backbone steps: ``backbones`` (MAViT-T against Swin-T in
benchmark_fps.py's modes), ``ablations`` (each fast-path switch off in
turn) and ``sweep`` (over sizes, and the training step), each timed by
``benchmarks/timing.py``."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from benchmarks.gpu_check_lib.children import write_results
from benchmarks.gpu_check_lib.models import (
    BACKBONE_SIZE,
    CPU_TIMING,
    MAVIT_T_LABEL,
    SWIN_T_LABEL,
    backbone_step,
    empty_cache,
    mavit_t,
)
from benchmarks.gpu_check_lib.plan import STEP_FILES
from benchmarks.timing import in_mode, interleaved_ms, median_ms, pair_ratios
from devtools.baseline import swin_t

SWEEP_SIZES = ((512, 512), (512, 1024), (1024, 1024), (512, 2048), (1024, 2048))
# The sweep's training step (forward, backward, AdamW; peak memory).
TRAIN_SIZE, TRAIN_BATCH = BACKBONE_SIZE, 2
# The backbones step's modes (benchmark_fps.py's), in order: the lean forward's
# target first, the compile (the longest) last.
BACKBONE_MODES = ('cuda-graph', 'eager', 'compile')
# The ablations steps' modes, in order: under a CUDA graph the GPU work shows
# (an eager forward at batch 1 is the host's launches, docs/gpu.md); eager is
# how users train. Compiled, a cold compile a row (284 s of the 331 s that 38
# rows took in gpu-h100-2026-11-27b/part-2, 8 of them compiled), they are a
# step of their own, ablations-compile. Each step's modes by its name.
ABLATION_MODES = ('cuda-graph', 'eager')
COMPILE_ABLATION_MODES = ('compile',)
ABLATION_STEP_MODES = {'ablations': ABLATION_MODES, 'ablations-compile': COMPILE_ABLATION_MODES}
# Modes where a training step is ablated switch by switch: eager, how users
# train. Elsewhere only the switches that change nothing but a training step.
TRAINING_ABLATION_MODES = ('eager',)
# An eager call at batch 1 goes at the host's pace, and the host's pace moves
# while a step runs (the all-on forward of gpu-h100-2026-11-27b's eager
# ablations went from 35 to 19 ms): eager rows are timed against their
# reference in the same rounds (Swin-T, or the all-on model;
# ``benchmarks/timing.py``'s ``interleaved_ms``), their ratio the median of
# the rounds' ratios. Rounds per pass, and warm-up calls of each model.
EAGER_ROUNDS = {'fwd': 20, 'fwd+bwd': 10}
EAGER_WARMUP = 3


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
    # Each builds (model, its name).
    builders = [lambda impl=impl: (mavit_t(impl), f'MAViT-T {impl}') for impl in impls]
    builders.append(lambda: (swin_t(), SWIN_T_LABEL))

    def measure(rows_out, size, precision, batch, pass_name, build):
        row = dict(model=None, height=size[0], width=size[1], precision=precision, batch=batch,
                   pass_name=pass_name)
        if time.time() > deadline:
            rows_out.append(dict(row, skipped='time budget spent'))
            return
        try:
            model, row['model'] = build()
            images = torch.randn(batch, 3, *size, device=device)
            step = backbone_step(model.to(device), images, precision, pass_name, device.type,
                                  optimizer=pass_name == 'train step')
            row.update(time_in_mode(step, 'cuda-graph' if cuda_graphs else 'eager', device,
                                     batch=batch, rep=rep))
        except Exception as exc:   # e.g. out of memory, a size Swin cannot tile: record it
            row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
        rows_out.append(row)
        write_results(out / f'{name}.json', report)
        print(f'  {str(row["model"])[:28]:28} {size[0]}x{size[1]} {precision} batch {batch} '
              f'{pass_name:10} ' + (f'{row["time_ms"]:8.2f} ms' if 'time_ms' in row
                                    else row['error']), flush=True)
        empty_cache(device)

    for size in sizes:
        for precision in ('fp32', 'bf16'):
            for build in builders:
                measure(rows, size, precision, batch, 'fwd', build)
    for precision in ('fp32', 'bf16') if train_batch else ():
        for build in builders:
            measure(report['training'], train_size, precision, train_batch, 'train step', build)
    _add_ratios(rows + report['training'])
    report['complete'] = not any('skipped' in row for row in rows + report['training'])
    write_results(out / f'{name}.json', report)
    return {'rows': len(rows) + len(report['training']), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in rows + report['training'])}


def _add_ratios(rows: list[dict]) -> None:
    """time / Swin-T's time at the same size, precision, batch, pass and mode."""
    def key(row):
        return (row['height'], row['width'], row['precision'], row['batch'], row['pass_name'],
                row.get('mode'))
    swin = {key(row): row.get('time_ms') for row in rows if row['model'].startswith('Swin-T')}
    for row in rows:
        base = swin.get(key(row))
        if (row.get('time_ms') and base and not row['model'].startswith('Swin-T')
                and 'ratio_min' not in row):      # (interleaved rows keep their rounds' ratio)
            row['time_vs_swin'] = row['time_ms'] / base



def step_backbones(out: Path, budget_s: float, device: str = 'cuda', size=BACKBONE_SIZE,
                   modes=BACKBONE_MODES, rep: int = 200) -> dict:
    """MAViT-T (``mala_impl`` auto) against Swin-T (``swin_t``), bf16
    autocast, batch 1, eval mode under no_grad, in each of ``modes``
    (``time_in_mode``): median ms and MAViT-T's time over Swin-T's per mode."""
    from tools.analysis_tools.benchmark_fps import COMPILE_MODE
    device = torch.device(device)
    path = out / STEP_FILES['backbones']
    rows = []
    report = dict(note='backbones alone, batch 1, eval mode under no_grad, torch.autocast bf16; '
                       'time_ms: median of triton.testing.do_bench (CUDA) of a forward: eager, '
                       'replayed from a CUDA graph (benchmark_fps.capture_cuda_graph), or '
                       'compiled (benchmark_fps.compiled: compile_mode, compile_s apart); '
                       "time_vs_swin: MAViT-T's time over Swin-T's in the same mode; "
                       'eager: both models timed in the same interleaved rounds (a call '
                       'synchronised around, timing), time_vs_swin the median of the '
                       "rounds' ratios (ratio_min, ratio_max)",
                  height=size[0], width=size[1], compile_mode=COMPILE_MODE,
                  complete=False, results=rows, time_vs_swin={})
    deadline = time.time() + budget_s
    torch.manual_seed(0)
    models = [(MAVIT_T_LABEL, mavit_t('auto').to(device)), (SWIN_T_LABEL, swin_t().to(device))]
    images = torch.randn(1, 3, *size, device=device)

    def record(new_rows):
        rows.extend(new_rows)
        _add_ratios(rows)
        report['time_vs_swin'] = {row['mode']: round(row['time_vs_swin'], 4)
                                  for row in rows if 'time_vs_swin' in row}
        write_results(path, report)
        for row in new_rows:
            print(f'  {row["mode"]:10} {row["model"][:45]:45} '
                  + (f'{row["time_ms"]:8.3f} ms' if 'time_ms' in row
                     else row.get('error') or row.get('skipped')), flush=True)
        empty_cache(device)

    for mode in modes:
        new_rows = [dict(model=name, mode=mode, height=size[0], width=size[1], precision='bf16',
                         batch=1, pass_name='fwd') for name, _ in models]
        if mode == 'eager':     # both models in the same rounds (EAGER_ROUNDS)
            if time.time() > deadline:
                record([dict(row, skipped='time budget spent') for row in new_rows])
                continue
            try:
                steps = {name: backbone_step(model, images, 'bf16', 'fwd', device.type)
                         for name, model in models}
                timed, times = time_interleaved(steps, device, EAGER_ROUNDS['fwd'])
                for row in new_rows:
                    row.update(timed[row['model']])
                new_rows[0].update(ratio_fields(pair_ratios(times, MAVIT_T_LABEL, SWIN_T_LABEL),
                                                'time_vs_swin'))
            except Exception as exc:   # e.g. out of memory: record it
                for row in new_rows:
                    row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
            steps = None
            record(new_rows)
            continue
        for (_, model), row in zip(models, new_rows):
            if time.time() > deadline:
                record([dict(row, skipped='time budget spent')])
                continue
            try:
                step = backbone_step(model, images, 'bf16', 'fwd', device.type)
                row.update(time_in_mode(step, mode, device, rep=rep))
            except Exception as exc:   # e.g. a capture or a compile that fails: record it
                row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
            record([row])
    report['complete'] = not any('skipped' in row for row in rows)
    write_results(path, report)
    return {'rows': len(rows), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in rows),
            'time_vs_swin': report['time_vs_swin']}


def ablation_rows(modes=ABLATION_MODES) -> list[dict]:
    """The ablations step's rows in the order they run, the most wanted first:
    per mode, all switches on, then each switch that acts in that mode
    (``FAST_PATH_MODES``) off in turn, then all on again (``repeat``) but
    where that costs a compile: the two all-on rows bound how far the timings
    drifted while the rows ran (the eager rows of the first GPU run fell by
    half, whatever was switched off). Per mode a forward with every switch
    but those that only change a training step (``TRAINING_ONLY``), then a
    training step with those; in eager mode, how users train
    (``TRAINING_ABLATION_MODES``), the training step with every switch that
    acts where gradients flow (all but ``INFERENCE_ONLY``)."""
    from mavit_mm.ops.fast_paths import (
        FAST_PATH_MODES,
        FAST_PATHS,
        INFERENCE_ONLY,
        TRAINING_ONLY,
    )

    def ablated(name: str, mode: str, pass_name: str) -> bool:
        if pass_name == 'fwd':
            return name not in TRAINING_ONLY
        if mode in TRAINING_ABLATION_MODES:
            return name not in INFERENCE_ONLY
        return name in TRAINING_ONLY

    rows = []
    for mode in modes:
        for pass_name in ('fwd', 'fwd+bwd'):
            switches = [name for name in FAST_PATHS if mode in FAST_PATH_MODES[name]
                        and ablated(name, mode, pass_name)]
            if switches:
                rows += [dict(mode=mode, pass_name=pass_name, switches_off=off)
                         for off in ([], *([name] for name in switches))]
                if mode != 'compile':
                    rows.append(dict(mode=mode, pass_name=pass_name, switches_off=[],
                                     repeat=True))
    return rows


def step_ablations(out: Path, budget_s: float, device: str = 'cuda', size=BACKBONE_SIZE,
                   rows=None, rep: int = 200, step_name: str = 'ablations') -> dict:
    """MAViT-T (``mala_impl`` auto) with each fast-path switch off in turn
    against all switches on (``rows``, or ``ablation_rows`` of the step's
    modes: ``ablations`` under a CUDA graph and eager, ``ablations-compile``
    compiled), bf16 autocast, batch 1: a forward in eval mode under no_grad,
    or a training step (forward and backward, train mode). One set of
    weights: each row's model is built with its switches and loads the same
    state dict. An eager row is timed in the same rounds as the opening
    all-on model of its case (``EAGER_ROUNDS``), which is kept for them."""
    from mavit_mm.ops.fast_paths import FAST_PATH_MODES, FAST_PATHS, INFERENCE_ONLY, TRAINING_ONLY
    from tools.analysis_tools.benchmark_fps import COMPILE_MODE
    device = torch.device(device)
    path = out / STEP_FILES[step_name]
    if rows is None:
        rows = ablation_rows(ABLATION_STEP_MODES[step_name])
    results = []
    report = dict(note='MAViT-T backbone, batch 1, torch.autocast bf16; fwd: eval mode under '
                       'no_grad; fwd+bwd: train mode, loss = sum of the outputs\' means, '
                       'backward; switches_off: the fast_paths switches off in the row '
                       '(mavit_mm/ops/fast_paths.py), every other one on (ALL_ON, whatever '
                       'the defaults); time_ms: median of '
                       'triton.testing.do_bench (CUDA), replayed from a CUDA graph or compiled '
                       '(compile_mode); time_vs_all_on: over the mean of the all-on rows of '
                       'the same mode and pass (the second, repeat, closes the case); drift: '
                       'the closing all-on time over the opening one; eager rows (timing): '
                       'each call synchronised around, the row\'s model and the opening '
                       'all-on one in the same interleaved rounds, time_vs_all_on the median '
                       'of the rounds\' ratios (ratio_min, ratio_max; all_on_ms: the all-on '
                       'model\'s median in them), an all-on row timed alone; every row loads '
                       'the same weights',
                  height=size[0], width=size[1], compile_mode=COMPILE_MODE,
                  switch_modes=FAST_PATH_MODES, training_only=list(TRAINING_ONLY),
                  inference_only=list(INFERENCE_ONLY), complete=False, results=results)
    deadline = time.time() + budget_s
    torch.manual_seed(0)
    weights = mavit_t('auto').state_dict()
    images = torch.randn(1, 3, *size, device=device)
    references = {}     # (mode, pass): the opening all-on step of an eager case
    for planned in rows:
        row = dict(planned, switches_off=list(planned['switches_off']))
        if time.time() > deadline:
            results.append(dict(row, skipped='time budget spent'))
            continue
        case = (row['mode'], row['pass_name'])
        try:
            model = mavit_t('auto', {name: name not in row['switches_off'] for name in FAST_PATHS})
            model.load_state_dict(weights)
            step = backbone_step(model.to(device), images, 'bf16', row['pass_name'],
                                  device.type)
            if row['mode'] != 'eager':
                row.update(time_in_mode(step, row['mode'], device, rep=rep))
            elif row['switches_off'] and case in references:
                timed, times = time_interleaved({'off': step, 'all on': references[case]},
                                                device, EAGER_ROUNDS[row['pass_name']],
                                                memory_of=('off',))
                row.update(timed['off'], all_on_ms=timed['all on']['time_ms'],
                           **ratio_fields(pair_ratios(times, 'off', 'all on'),
                                          'time_vs_all_on'))
            else:
                timed, _ = time_interleaved({'alone': step}, device,
                                            EAGER_ROUNDS[row['pass_name']])
                row.update(timed['alone'])
                if not row['switches_off'] and not row.get('repeat'):
                    references[case] = step
        except Exception as exc:   # e.g. a switch the model does not take: record it
            row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
        model = step = None
        results.append(row)
        report['drift'] = _add_ablation_ratios(results)
        write_results(path, report)
        print(f'  {row["mode"]:10} {row["pass_name"]:7} off: '
              f'{", ".join(row["switches_off"]) or "none":22} '
              + (f'{row["time_ms"]:8.3f} ms' + (f' ({row["time_vs_all_on"]:.3f} of all on)'
                                                if 'time_vs_all_on' in row else '')
                 if 'time_ms' in row else row['error']), flush=True)
        empty_cache(device)
    report['complete'] = not any('skipped' in row for row in results)
    write_results(path, report)
    return {'rows': len(results), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in results)}


def _add_ablation_ratios(rows: list[dict]) -> dict:
    """time / the mean of the all-on rows of the same mode and pass (but where
    a row was timed in rounds with the all-on model: its rounds' ratio);
    returns each case's drift (the closing all-on row over the opening one)."""
    all_on = {}
    for row in rows:
        if not row['switches_off'] and row.get('time_ms'):
            all_on.setdefault((row['mode'], row['pass_name']), []).append(row['time_ms'])
    for row in rows:
        times = all_on.get((row['mode'], row['pass_name']))
        if row.get('time_ms') and times and 'all_on_ms' not in row:
            row['time_vs_all_on'] = row['time_ms'] / statistics.mean(times)
    return {f'{mode} {pass_name}': round(times[-1] / times[0], 4)
            for (mode, pass_name), times in all_on.items() if len(times) > 1}


def time_interleaved(steps: dict[str, Callable], device: torch.device, rounds: int,
                     batch: int = 1, memory_of=None) -> tuple[dict[str, dict],
                                                            dict[str, list[float]]]:
    """The steps timed in the same ``rounds`` (``interleaved_ms``, after
    ``EAGER_WARMUP`` calls of each): per step its row's figures (median ms,
    throughput, CUDA peak extra memory of the steps named in ``memory_of``,
    default all, the timing), and every call's ms."""
    from mavit_mm.tooling.device import cuda_peak_extra_bytes
    times = interleaved_ms(steps, device, rounds, warmup=EAGER_WARMUP)
    timed = {}
    for name, step in steps.items():
        ms = statistics.median(times[name])
        memory = (cuda_peak_extra_bytes(step, device) / 2 ** 20
                  if device.type == 'cuda' and (memory_of is None or name in memory_of) else None)
        timed[name] = dict(time_ms=ms, images_per_s=batch / (ms * 1e-3), peak_memory_mib=memory,
                           timing=f'interleaved, {rounds} rounds')
    return timed, times


def ratio_fields(ratios: dict, name: str) -> dict:
    """``pair_ratios``' median as ``name``, with its least and most."""
    return {name: ratios['ratio_median'], 'ratio_min': ratios['ratio_min'],
            'ratio_max': ratios['ratio_max']}


def time_in_mode(step: Callable, mode: str, device: torch.device, batch: int = 1,
                 rep: int = 200) -> dict:
    """``step`` timed as benchmark_fps.py's ``mode`` runs a forward, through its
    own code (``benchmarks/timing.py``'s ``in_mode``: the compile's seconds
    as ``compile_s``): ``time_backbone_step``'s median ms, throughput and
    peak memory."""
    with in_mode(step, mode, device) as (call, made):
        return dict(time_backbone_step(call, batch, device, warmup=25, rep=rep), **made)


def time_backbone_step(step: Callable, batch: int, device: torch.device, warmup: int,
                       rep: int) -> dict:
    """One backbone step's median time (``warmup`` and ``rep`` in ms on CUDA),
    throughput and (CUDA) peak extra memory."""
    from mavit_mm.tooling.device import cuda_peak_extra_bytes
    step()
    ms = median_ms(step, device, warmup, rep, **CPU_TIMING)
    memory = cuda_peak_extra_bytes(step, device) / 2 ** 20 if device.type == 'cuda' else None
    return dict(time_ms=ms, images_per_s=batch / (ms * 1e-3), peak_memory_mib=memory)

