"""The check's op steps: ``bench`` and ``tune-*`` (bench_mala.py and
tune_mala.py as children at the op targets' shapes, tune_depthwise.py at
MAViT-T's), ``profile`` (the op at MAViT-T's own calls: GPU kernel time
against the host's) and ``sdpa`` (the softmax stages on SDPA's fast kernels)."""
from __future__ import annotations

import inspect
import sys
import time
from pathlib import Path

import torch

from benchmarks.gpu_check_lib.children import run_child, write_results
from benchmarks.gpu_check_lib.models import (
    BACKBONE_SIZE,
    CPU_TIMING,
    backbone_step,
    empty_cache,
    mavit_t,
    synchronize,
)
from benchmarks.gpu_check_lib.plan import LOG_NAME, STEP_FILES
from benchmarks.gpu_check_lib.profiling import host_issue_us, profiled_kernels, python_profile
from benchmarks.timing import median_ms
from devtools.mala_inputs import DEFAULT_LAYOUT

# The op targets' shapes (bench_mala.py's JSON as ever; the fp16 and d 96 rows of
# its full sweep are for tune_mala.py / bench_mala.py by hand): B*heads 16 at
# N 65536 (the MALA op's bandwidth targets), and MAViT-T's calls at batch 8
# (stage 1: 8 maps of 1 head, N 65536; stage 2: 8 of 2 heads, N 16384, the
# bytes of B*heads 16 there).
BENCH_ARGS = ['--tokens', '65536', '16384', '--head-dims', '64',
              '--batch-heads', '1', '8', '16', '--dtypes', 'bf16', 'fp32']
# The backward's query kernel only: 59% of a fwd+bwd at B*heads 16 with the
# tuned tiles (key 17%, output 14%, partials 10%, combine under 1%) and the
# committed tuning's largest change (2.08 -> 1.14 ms); 24 candidates, not 111.
TUNE_ARGS = ['--dtypes', 'bf16', '--head-dims', '64', '--tokens', '65536', '--kernels', 'query']
TUNE_BATCH_HEADS = {'tune-bh16': 16, 'tune-bh1': 1}
SDPA_SIZES = ((512, 2048), (1024, 2048))
# The batches of the profile step's op calls at MAViT-T's shapes.
PROFILE_BATCHES = (1, 8)


def bench_command(output: Path, layout: str = DEFAULT_LAYOUT) -> list[str]:
    return ['benchmarks/bench_mala.py', *BENCH_ARGS, '--layout', layout, '--output', str(output)]


def step_bench(out: Path, budget_s: float, layout: str = DEFAULT_LAYOUT) -> dict:
    output = out / STEP_FILES['bench']
    run = run_child([sys.executable, *bench_command(output, layout)], budget_s, out / LOG_NAME)
    return {'file': output.name, 'layout': layout,
            **{k: v for k, v in run.items() if k != 'output'}}


def tune_command(name: str, output: Path, budget_s: float,
                 layout: str = DEFAULT_LAYOUT) -> list[str]:
    # The sweep stops itself at 90% of the budget (keeping its JSON); the kill
    # at the budget is the backstop.
    stop = ['--budget-s', str(round(0.9 * budget_s)), '--output', str(output)]
    if name == 'tune-depthwise':    # its maps are channels_last, as the model passes them
        return ['benchmarks/tune_depthwise.py', *stop]
    return ['benchmarks/tune_mala.py', *TUNE_ARGS, '--batch-heads', str(TUNE_BATCH_HEADS[name]),
            '--layout', layout, *stop]


def step_tune(name: str, out: Path, budget_s: float, layout: str = DEFAULT_LAYOUT) -> dict:
    output = out / STEP_FILES[name]
    run = run_child([sys.executable, *tune_command(name, output, budget_s, layout)],
                     budget_s, out / LOG_NAME)
    return {'file': output.name, 'layout': layout if name in TUNE_BATCH_HEADS else 'channels_last',
            **{k: v for k, v in run.items() if k != 'output'}}


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
    model = mavit_t('triton' if device.type == 'cuda' else 'torch').to(device).train()
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
                step = backbone_step(model, images, precision, 'fwd+bwd', device.type)
                try:
                    with sdpa_kernel(backends):
                        step()
                    row.update(ok=True, sdpa_ops=_sdpa_ops(model, images, precision, device))
                except Exception as exc:
                    row.update(ok=False, error=f'{type(exc).__name__}: {str(exc)[:300]}')
                rows.append(row)
                write_results(out / 'sdpa.json', report)
                print(f'  {height}x{width} {precision} {name:16} '
                      f'{"ok " + str(row.get("sdpa_ops")) if row.get("ok") else row.get("error", "")}',
                      flush=True)
                empty_cache(device)
    report['complete'] = not any('skipped' in row for row in rows)
    report['math_path_seen'] = any('math' in op for row in rows for op in row.get('sdpa_ops', []))
    write_results(out / 'sdpa.json', report)
    return {'rows': len(rows), 'failed': sum(not row.get('ok', True) for row in rows),
            'math_path_seen': report['math_path_seen'], 'complete': report['complete']}


def _sdpa_ops(model, images, precision: str, device: torch.device) -> list[str]:
    from torch.profiler import ProfilerActivity, profile
    step = backbone_step(model, images, precision, 'fwd', device.type)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    model.train()
    return sorted({event.key for event in prof.key_averages()
                   if 'scaled_dot_product' in event.key})


def step_profile(out: Path, budget_s: float, device: str = 'cuda', shapes=None,
                 layout: str = DEFAULT_LAYOUT) -> dict:
    """Kernel time against host time per call of the fused op (bf16 where
    CUDA) at MAViT-T's shapes (``mala_model_shapes``; q, k, v in ``layout``):
    the profiler's GPU kernel time, the wall time of a synchronised call, and
    the host's time to issue a call (un-synchronised calls)."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.bench_mala import make_step
    from devtools.mala_inputs import layout_of, mala_inputs
    from mavit_mm.ops.rope2d import RoPE2d
    shapes = mala_model_shapes(batches=PROFILE_BATCHES) if shapes is None else shapes
    device = torch.device(device)
    on_cuda = device.type == 'cuda'
    dtype = torch.bfloat16 if on_cuda else torch.float32
    impl = 'triton' if on_cuda else 'torch'
    rows = []
    report = dict(note='the op\'s calls in MAViT-T (stage, batch, heads, map, head dim); '
                       'kernel_us: the GPU kernels\' time per call from torch.profiler; '
                       'wall_us: median of synchronised calls (triton.testing.do_bench); '
                       'host_issue_us: host time per call over un-synchronised calls, i.e. what '
                       'the CPU spends launching; host-bound when host_issue_us > kernel_us; '
                       'host_python: cProfile of the calls, the functions with the most own '
                       'time, per call (inflated by cProfile: read the shares)',
                  dtype=str(dtype).replace('torch.', ''), impl=impl, layout=layout,
                  complete=False, results=rows)
    deadline = time.time() + budget_s
    calls = 20
    for shape in shapes:
        for pass_name in ('fwd', 'fwd+bwd'):
            row = dict(shape, pass_name=pass_name, layout=layout)
            if time.time() > deadline:
                rows.append(dict(row, skipped='time budget spent'))
                continue
            views = mala_inputs(shape['batch'], shape['heads'], shape['height'], shape['width'],
                                shape['head_dim'], layout=layout, dtype=dtype, device=device,
                                requires_grad=pass_name != 'fwd')
            rope = RoPE2d(shape['head_dim']).to(device)(shape['height'], shape['width'])
            row['layout'] = layout_of(views[0])   # what was built, by name
            step = make_step(impl, pass_name, views, rope)
            step()
            synchronize(device)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    step()
                synchronize(device)
            kernels = {name: round(us / calls, 2) for name, us, _ in profiled_kernels(prof) if us}
            wall_us = median_ms(step, device, 25, 100, **CPU_TIMING) * 1e3
            host_us = host_issue_us(step, device, calls)
            kernel_us = sum(kernels.values())
            row.update(wall_us=round(wall_us, 2), kernel_us=round(kernel_us, 2),
                       host_issue_us=round(host_us, 2), kernels=kernels,
                       host_bound=bool(on_cuda and host_us > kernel_us),
                       host_python=python_profile(step, device, calls))
            rows.append(row)
            write_results(out / STEP_FILES['profile'], report)
            print(f'  stage {shape["stage"]} batch {shape["batch"]} heads {shape["heads"]} '
                  f'{shape["height"]}x{shape["width"]} d={shape["head_dim"]} {layout} '
                  f'{pass_name:8} wall {wall_us:8.1f} us, kernels {kernel_us:8.1f} us, '
                  f'host issue {host_us:8.1f} us', flush=True)
    report['complete'] = not any('skipped' in row for row in rows)
    write_results(out / STEP_FILES['profile'], report)
    return {'rows': len(rows), 'complete': report['complete']}


def mala_model_shapes(arch: str = 'tiny', size=BACKBONE_SIZE, batches=PROFILE_BATCHES) -> list[dict]:
    """The fused op's calls in MAViT-``arch`` at input ``size``: one per
    stage with MALA and batch, from the preset (``ARCH_SETTINGS``) and the
    model's default ``attn_types``. A stage's map is the input over 4 (the
    stem's stride) times 2 per stage before it."""
    from mavit_mm.models import ARCH_SETTINGS, MAViT
    preset = ARCH_SETTINGS[arch]
    attn_types = inspect.signature(MAViT).parameters['attn_types'].default
    shapes = []
    for batch in batches:
        for stage, (dims, heads, attn_type) in enumerate(
                zip(preset['embed_dims'], preset['num_heads'], attn_types)):
            if attn_type != 'mala':
                continue
            stride = 4 * 2 ** stage
            height, width = size[0] // stride, size[1] // stride
            shapes.append(dict(stage=stage + 1, batch=batch, heads=heads, height=height,
                               width=width, head_dim=dims // heads, tokens=height * width,
                               batch_heads=batch * heads))
    return shapes

