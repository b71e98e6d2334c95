"""Where a backbone forward's GPU time goes (``model-profile``, eager;
``compiled-profile``, compiled): its kernels under the profiler, by
category (``kernel_category``) and count; and its host time: what issuing a
forward costs the CPU, and whose Python spends it (``host_time``)."""
from __future__ import annotations

import ast
import functools
import re
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from benchmarks.gpu_check_lib.children import REPO_ROOT, write_results
from benchmarks.gpu_check_lib.models import (
    BACKBONE_SIZE,
    MAVIT_T_LABEL,
    SWIN_T_LABEL,
    backbone_step,
    empty_cache,
    mavit_t,
    synchronize,
)
from benchmarks.gpu_check_lib.plan import STEP_FILES
from devtools.baseline import swin_t

MODEL_PROFILE_WARMUP = 10
HOST_PROFILE_CALLS = 10
# Whose code a host's Python time is spent in, by the file's path (tried in
# order); 'C' is cProfile's builtins: the ops' own C++ (dispatch, launches,
# a CPU's compute) and Python's built-in functions. A tensor operator on a
# line (``a * b``) is no call to cProfile: its time is its line's function's.
HOST_SOURCES = (('mavit_mm', r'[/\\]mavit_mm[/\\]'), ('triton', r'[/\\]triton[/\\]'),
                ('openmmlab', r'[/\\](mmseg|mmdet|mmcv|mmengine)[/\\]'),
                ('torch', r'[/\\]torch[/\\]'))
# compiled-profile compiles without reduce-overhead's CUDA graph: the profiler
# then sees each kernel launch, and the graph would replay the same kernels.
PROFILE_COMPILE_MODE = 'default'

MALA_KERNELS_FILE = REPO_ROOT / 'mavit_mm' / 'ops' / 'mala' / 'kernels.py'
# Categories of CUDA kernel names, tried in this order after the MALA kernels'
# own names (case-insensitive): inductor's generated Triton kernels first
# (pointwise, reductions, persistent reductions, foreach, templates: each
# fuses several ops, and their names carry the ops' names, "convolution" or
# "_to_copy" among them), SDPA before GEMM (cutlass attention kernels),
# convolution before GEMM (cuDNN's implicit GEMMs), copies before elementwise
# (a cast is a direct_copy_kernel inside an elementwise kernel).
KERNEL_CATEGORIES = (
    ('inductor', r'\btriton_(poi|red|per|for|tem)_'),
    ('sdpa', r'flash_fwd|flash_bwd|flash::|pytorch_flash|fmha|attentionkernel|native_sdpa'
             r'|efficient_attention'),
    ('conv', r'conv(?!ert)|fprop|dgrad|wgrad|winograd|implicit_gemm|depthwise|im2col'),
    ('gemm', r'gemm|gemv|nvjet|cublas|xmma|wgmma|tensorop|matmul|splitkreduce|cutlass'),
    ('norm', r'layer_?norm|batch_?norm|group_?norm|rms_?norm|instance_?norm|bn_fw|bn_bw'
             r'|rowwisemoments|welford'),
    ('copy', r'copy|memcpy|memset|catarray|nchwtonhwc|nhwctonchw|transpose'),
    ('elementwise', r'elementwise'),
)
CATEGORY_ORDER = ('mala', *(name for name, _ in KERNEL_CATEGORIES), 'other')


@functools.cache
def mala_kernel_names() -> frozenset[str]:
    """The fused op's GPU kernels, as a profiler names them: the
    ``@triton.jit`` functions of ``ops/mala/kernels.py`` named ``*_kernel``
    (the others are helpers inlined into them). Read from the source, so no
    triton import."""
    tree = ast.parse(MALA_KERNELS_FILE.read_text())
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef) and node.name.endswith('_kernel')
                     and any('jit' in ast.unparse(d) for d in node.decorator_list))


def kernel_category(name: str) -> str:
    """The category of a CUDA kernel (or GPU memory operation) by its name:
    one of ``CATEGORY_ORDER``."""
    if re.search(r'\b(' + '|'.join(sorted(mala_kernel_names())) + r')\b', name):
        return 'mala'
    for category, pattern in KERNEL_CATEGORIES:
        if re.search(pattern, name, re.IGNORECASE):
            return category
    return 'other'


def gpu_time_by_category(kernels: Iterable[tuple[str, float, int]], top: int = 25) -> dict:
    """GPU time, share and launches per category of ``(name, GPU µs,
    launches)`` rows, the total, the kernel count, and the ``top`` kernels by
    time with their category (to check the categorisation against real names)."""
    kernels = list(kernels)
    total_us = sum(us for _, us, _ in kernels)
    categories = {name: dict(time_us=0.0, kernels=0, share=0.0) for name in CATEGORY_ORDER}
    category_of = {name: kernel_category(name) for name, _, _ in kernels}
    for name, us, count in kernels:
        entry = categories[category_of[name]]
        entry['time_us'] += us
        entry['kernels'] += count
    for entry in categories.values():
        entry['time_us'] = round(entry['time_us'], 2)
        entry['share'] = round(entry['time_us'] / total_us, 4) if total_us else 0.0
    ranked = sorted(kernels, key=lambda row: -row[1])[:top]
    return dict(gpu_time_us=round(total_us, 2), kernel_count=sum(c for _, _, c in kernels),
                categories=categories,
                top_kernels=[dict(name=name[:300], category=category_of[name],
                                  time_us=round(us, 2), launches=count)
                             for name, us, count in ranked])


def profiled_kernels(prof) -> list[tuple[str, float, int]]:
    """(name, GPU µs, launches) of each GPU kernel and memory operation a
    ``torch.profiler`` profile holds."""
    return [(event.key, _device_time_us(event), event.count) for event in prof.key_averages()
            if 'CUDA' in str(getattr(event, 'device_type', ''))]


def host_issue_us(step, device, calls: int) -> float:
    """Host time per call over ``calls`` un-synchronised calls."""
    synchronize(device)
    started = time.perf_counter()
    for _ in range(calls):
        step()
    host_us = (time.perf_counter() - started) / calls * 1e6
    synchronize(device)
    return host_us


def _cprofile_stats(step, device, calls: int) -> tuple[dict, float]:
    """cProfile's stats over ``calls`` un-synchronised calls of ``step``, and
    the wall seconds they took under it."""
    import cProfile
    import pstats
    synchronize(device)   # outside the profile: a CUDA sync's wait is not host work
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for _ in range(calls):
        step()
    profiler.disable()
    wall_s = time.perf_counter() - started
    synchronize(device)
    return pstats.Stats(profiler).stats, wall_s


def own_seconds(stats: dict) -> tuple[dict, float]:
    """Each function's own time in ``stats`` (``pstats.Stats.stats``), mended
    where cProfile counted its callees' time as its own too; and the seconds
    so removed.

    Why: on Python 3.12 a call through Dynamo's disable wrapper (torch wraps
    every ``torch.library.custom_op`` kernel in one) loses cProfile's track of
    the calling frame, and torch's ``backend_impl`` then shows its whole time
    as its own, although its callees (the op's Python, Triton's launches) list
    the same time as theirs (``tests/test_benchmarks``: seen with torch
    2.11). The plain formula, own = cumulative - the callees' cumulative on
    the edges from it, holds for a function that never recursed (cProfile
    adds an edge's time only while the pair is not already on the stack); a
    function whose own time exceeds it takes it. A recursing function
    (``Module._call_impl``) keeps cProfile's figure."""
    callee_seconds: dict = {}
    for (_, _, _, _, callers) in stats.values():
        for caller, edge in callers.items():
            callee_seconds[caller] = callee_seconds.get(caller, 0.0) + edge[3]
    own, removed = {}, 0.0
    for function, (primitive, count, own_s, cumulative, _) in stats.items():
        formula = cumulative - callee_seconds.get(function, 0.0)
        if primitive == count and own_s > formula + 1e-6:
            removed += own_s - max(formula, 0.0)
            own_s = max(formula, 0.0)
        own[function] = own_s
    return own, removed


def _top_functions(stats: dict, own: dict, calls: int, top: int) -> list[dict]:
    rows = sorted(stats.items(), key=lambda item: -own[item[0]])[:top]
    return [dict(function=f'{Path(file).name}:{line}({name})', calls_per_call=count / calls,
                 own_us=round(own[(file, line, name)] / calls * 1e6, 2),
                 cumulative_us=round(cumulative / calls * 1e6, 2))
            for (file, line, name), (_, count, _, cumulative, _) in rows]


def python_profile(step, device, calls: int, top: int = 15) -> list[dict]:
    """Where a call's host time goes: cProfile over ``calls`` un-synchronised
    calls, the ``top`` functions by own time (``own_seconds``), per call
    (cProfile slows every Python call, so read the shares, not the totals)."""
    stats, _ = _cprofile_stats(step, device, calls)
    return _top_functions(stats, own_seconds(stats)[0], calls, top)


def host_source(file: str) -> str:
    """Whose code ``file`` (a cProfile key's file) is: ``HOST_SOURCES``, 'C'
    for builtins, else 'other'."""
    if file == '~':
        return 'C'
    return next((source for source, pattern in HOST_SOURCES if re.search(pattern, file)), 'other')


def host_time(step, device, calls: int = HOST_PROFILE_CALLS, top: int = 10) -> dict:
    """What issuing one ``step`` costs the host (``issue_ms``, un-synchronised
    calls) and, under cProfile, whose Python spends it: own time
    (``own_seconds``) and calls per step by ``host_source`` (with shares) and
    the ``top`` functions. ``profiled_ms``: a step's wall time under cProfile,
    which the own times add up to (``attributed``, their sum over it);
    ``double_counted_ms``: what ``own_seconds`` took off."""
    stats, wall_s = _cprofile_stats(step, device, calls)
    own_of, removed = own_seconds(stats)
    own = {source: [0.0, 0] for source, _ in (*HOST_SOURCES, ('C', ''), ('other', ''))}
    for function, (_, count, _, _, _) in stats.items():
        entry = own[host_source(function[0])]
        entry[0] += own_of[function]
        entry[1] += count
    total = sum(seconds for seconds, _ in own.values()) or 1.0
    return dict(issue_ms=round(host_issue_us(step, device, calls) / 1e3, 3),
                profiled_ms=round(wall_s / calls * 1e3, 3),
                attributed=round(total / wall_s, 3),
                double_counted_ms=round(removed / calls * 1e3, 3),
                python_calls=sum(count for _, count in own.values()) // calls,
                by_source={source: dict(own_us=round(seconds / calls * 1e6, 1),
                                        calls=count // calls, share=round(seconds / total, 4))
                           for source, (seconds, count) in own.items()},
                top_functions=_top_functions(stats, own_of, calls, top))


def step_model_profile(out: Path, budget_s: float, device: str = 'cuda',
                       size=BACKBONE_SIZE, warmup: int = MODEL_PROFILE_WARMUP,
                       compiled: bool = False) -> dict:
    """One bf16 (autocast) forward of each backbone (MAViT-T, ``mala_impl``
    auto; Swin-T, ``swin_t``), batch 1, eval mode, under the profiler after
    ``warmup`` forwards: GPU time and kernel count by category
    (``kernel_category``) and the top kernels. ``compiled``: the
    compiled-profile step, each forward compiled first by benchmark_fps.py's
    ``compiled`` in ``PROFILE_COMPILE_MODE``. On a CPU the profile has no GPU
    kernels (the tests run the plumbing)."""
    from torch.profiler import ProfilerActivity, profile

    from tools.analysis_tools import benchmark_fps
    name = 'compiled-profile' if compiled else 'model-profile'
    device = torch.device(device)
    on_cuda = device.type == 'cuda'
    models = [(MAVIT_T_LABEL, lambda: mavit_t('auto')), (SWIN_T_LABEL, swin_t)]
    rows = []
    report = dict(note='backbones alone, batch 1, eval mode under no_grad, torch.autocast bf16; '
                       'one forward profiled after warm-up; time_us: GPU time of the kernels '
                       'and memory operations of each category; kernels: their launches; '
                       'forward_ms: median wall time of the warm-up forwards after the first; '
                       'host: issue_ms, the host time of a forward over un-synchronised '
                       'forwards; by_source, under cProfile (which slows every Python call: read '
                       'the shares), the own time and calls of a forward by whose code runs '
                       '(C: builtins, i.e. the ops\' C++ and the launches; a tensor operator such as '
                       'a * b counts as its caller\'s own time), the own times mended where cProfile '
                       'counted a callee\'s time twice (profiling.own_seconds; double_counted_ms '
                       'taken off; attributed: their sum over profiled_ms, a forward\'s wall time '
                       'under cProfile)'
                       + ('; compiled by benchmark_fps.compiled in compile_mode (its first calls '
                          'took compile_s), without reduce-overhead\'s CUDA graph, which '
                          'replays the same kernels: the profiler sees each launch; inductor: '
                          "inductor's own Triton kernels" if compiled else ''),
                  height=size[0], width=size[1], categories=list(CATEGORY_ORDER),
                  category_patterns=dict(KERNEL_CATEGORIES), mala_kernels=sorted(mala_kernel_names()),
                  compile_mode=PROFILE_COMPILE_MODE if compiled else None,
                  complete=False, results=rows)
    path = out / STEP_FILES[name]
    deadline = time.time() + budget_s
    for label, build in models:
        if time.time() > deadline:
            rows.append(dict(model=label, skipped='time budget spent'))
            continue
        compile_s = None
        try:
            model = build().to(device)
            images = torch.randn(1, 3, *size, device=device)
            forward = backbone_step(model, images, 'bf16', 'fwd', device.type)
            if compiled:
                forward, compile_s, _ = benchmark_fps.compiled(forward, device,
                                                               PROFILE_COMPILE_MODE)
            times_ms = [benchmark_fps.timed(forward, device) * 1e3 for _ in range(warmup)]
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
            with profile(activities=activities) as prof:
                forward()
                synchronize(device)
            warm_ms = sorted(times_ms[1:] or times_ms)
            row = dict(model=label, forward_ms=round(warm_ms[len(warm_ms) // 2], 3),
                       **({'compile_s': round(compile_s, 1)} if compiled else {}),
                       **gpu_time_by_category(profiled_kernels(prof)),
                       host=host_time(forward, device))
        except Exception as exc:   # e.g. out of memory, a compile that fails: record it
            row = dict(model=label, error=f'{type(exc).__name__}: {str(exc)[:300]}')
        finally:
            if compiled:
                torch._dynamo.reset()   # frees the compiled graphs
        rows.append(row)
        write_results(path, report)
        print(f'  {label[:45]:45} ' + (row['error'] if 'error' in row else
              f'{row["gpu_time_us"] / 1e3:8.2f} ms on the GPU in {row["kernel_count"]} kernels: '
              + ', '.join(f'{category} {entry["share"]:.0%}'
                          for category, entry in row['categories'].items() if entry['kernels'])),
              flush=True)
        model = forward = None
        empty_cache(device)
    report['complete'] = not any('skipped' in row for row in rows)
    write_results(path, report)
    return {'rows': len(rows), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in rows)}


def _device_time_us(event) -> float:
    """The event's own device time (renamed from ``self_cuda_time_total``)."""
    for name in ('self_device_time_total', 'self_cuda_time_total'):
        value = getattr(event, name, None)
        if value:
            return float(value)
    return 0.0

