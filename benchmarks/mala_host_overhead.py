"""Host (Python) time per fused-MALA call, with the kernel launches stubbed out.

What one ``mala_attention(q, k, v, rope, impl='triton')`` call costs the CPU
before any GPU work is queued: the dispatch checks, the ``mavit_mm::mala``
custom op (and, for training, autograd and ``mavit_mm::mala_backward``), the
launch plan, the output and workspace allocations and the kernel launches. It
runs on the CPU with Triton's interpreter *off*, so nothing is computed and the
results are uninitialised memory. Where the launches stop, ``--launch``:

* ``stub-kernels`` (default): the five ``@triton.jit`` kernels are replaced by
  stubs whose ``kernel[grid](*args, **meta)`` only counts the launch. Triton's
  own launch path is not measured.
* ``stub-driver``: the kernels stay Triton's; they are compiled for an H100
  (sm_90, by Triton's ptxas, on the CPU) and launched through Triton's host
  code down to the CUDA driver's launcher, which a stub driver
  (``mavit_mm.tooling.triton_stub_driver``) replaces. Measured twice in one
  process: with the case's compiled kernels launched directly
  (``launches.DIRECT_LAUNCH``, the default) and through Triton's
  ``JITFunction.run`` on every launch; the JSON has both and the ratio.

Not measured either way: on a GPU, the CUDA-only part of planning (the
compiled kernel's occupancy; once per case), the ``torch.cuda.device`` switch
and the driver's C launch itself.

The dispatch refuses CPU tensors without the interpreter, so the check of the
interpreter is patched to say yes; everything else in the dispatch runs as is.

Shapes: the MALA layers of MAViT-T (head dim 64; 1, 2, 4, 8 heads at strides
4, 8, 16, 32) at ``--batch`` and ``--image`` size, q, k, v as the backbone
passes them (channel-contiguous views of a channels_last qkv map). Each case is
called ``--calls`` times per round, ``--rounds`` rounds after ``--warmup``
calls; the median over rounds of the time per call is reported, plus the sum
over one MAViT-T forward (2 + 2 + 6 + 2 layers).

To compare against another version of the Triton host code, pass it as one
file with ``--function-module`` (loaded in place of the package's
``mavit_mm/ops/mala/function.py`` and ``plan.py``, so it defines what both
define: ``fused_mala``, ``plan_for``, ``resource_shortfall``, ``OutOfResources``
and ``kernels``; one version per process) or as ``--baseline`` (measured first
in a subprocess, both written to one JSON with the ratios).

Examples::

    python benchmarks/mala_host_overhead.py
    python benchmarks/mala_host_overhead.py --launch stub-driver \\
        --output benchmarks/results/mala-host-overhead-stub-driver-cpu-DATE.json
    # --baseline: one file that stands in for ops/mala/function.py and plan.py
    python benchmarks/mala_host_overhead.py --baseline /tmp/old_function.py \\
        --output benchmarks/results/mala-host-overhead-cpu-DATE.json
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The kernels must be compiled-mode JITFunctions (then stubbed), not the
# interpreter's: decided when kernels.py is imported.
os.environ['TRITON_INTERPRET'] = '0'

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from mavit_mm.tooling.mala_inputs import DEFAULT_LAYOUT, MALA_LAYOUTS  # noqa: E402
from mavit_mm.tooling.results_file import write_json  # noqa: E402

# (heads, stride, depth) of the MALA stages of MAViT-T (head dim 64).
TINY_STAGES = ((1, 4, 2), (2, 8, 2), (4, 16, 6), (8, 32, 2))
HEAD_DIM = 64
DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}
LAUNCHES = ('stub-kernels', 'stub-driver')
# launches per call, by mode
EXPECTED_LAUNCHES = {'forward': 3, 'train': 5, 'plan': 0}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description="Host time per fused-MALA call (mala_attention(impl='triton') on the "
                    'CPU, Triton interpreter off, kernel launches stubbed): dispatch, custom '
                    'op, plan, buffers and launch arguments, without any kernel work.')
    parser.add_argument('--batch', type=int, default=1, help='batch size (default 1)')
    parser.add_argument('--image', type=int, nargs=2, default=(512, 512),
                        metavar=('H', 'W'), help='input image size (default 512 512)')
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='bf16',
                        help='q, k, v dtype (default bf16)')
    parser.add_argument('--layout', choices=MALA_LAYOUTS, default=DEFAULT_LAYOUT,
                        help="q, k, v memory layout (mavit_mm/tooling/mala_inputs.py; default "
                             "channels_last, what the model passes)")
    parser.add_argument('--modes', nargs='+', choices=('forward', 'train', 'plan'),
                        default=['forward', 'train', 'plan'],
                        help="forward: inference call under no_grad; train: forward + "
                             "torch.autograd.grad (both ops); plan: plan_for alone")
    parser.add_argument('--launch', choices=LAUNCHES, default='stub-kernels',
                        help="where launches stop: 'stub-kernels' replaces the kernels "
                             "(Triton's launch path not measured); 'stub-driver' runs "
                             "Triton's launch path down to a stub CUDA driver and measures "
                             'direct launches against Triton\'s path (default stub-kernels)')
    parser.add_argument('--calls', type=int, default=200, help='calls per round (default 200)')
    parser.add_argument('--rounds', type=int, default=15, help='rounds (default 15)')
    parser.add_argument('--warmup', type=int, default=50, help='warm-up calls (default 50)')
    parser.add_argument('--function-module', type=Path, default=None,
                        help='load this file as mavit_mm.ops.mala.function (and in place of '
                             "its plan module) instead of the package's own (to measure "
                             'another version)')
    parser.add_argument('--baseline', type=Path, default=None,
                        help='also measure this version of function.py (in a subprocess, '
                             'first) and report both with the ratios')
    parser.add_argument('--label', default=None,
                        help='a name for this run in the JSON (default: the module path)')
    parser.add_argument('--output', type=Path, default=None,
                        help='write the results as JSON here (default: print only)')
    return parser.parse_args(argv)


class StubKernel:
    """Stands in for a ``@triton.jit`` kernel: ``kernel[grid](*args, **meta)``
    counts the launch and does nothing else."""

    def __init__(self, name: str):
        self.name = name
        self.launches = 0

    def __getitem__(self, grid):
        return self._launch

    def _launch(self, *args, **meta):
        self.launches += 1


def load_function_module(path):
    """The op package and the Triton op and plan modules: the package's own,
    or ``path`` in place of both."""
    from mavit_mm.ops import mala as mala_ops
    if path is not None:
        name = 'mavit_mm.ops.mala.function'
        if name in sys.modules:
            raise RuntimeError(f'{name} is already imported; one version per process')
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        mala_ops._function = mala_ops._plan = module
        mala_ops._triton_import_tried = True
    error = mala_ops._triton_unavailable()
    if error is not None:
        raise SystemExit(f'the Triton path is unavailable: {error}')
    return mala_ops, mala_ops._function, mala_ops._plan


def install_stubs(kernels_module):
    import triton
    stubs = {}
    for name, value in list(vars(kernels_module).items()):
        if name.endswith('_kernel') and isinstance(value, triton.runtime.jit.JITFunction):
            stubs[name] = StubKernel(name)
            setattr(kernels_module, name, stubs[name])
    interpreted = [name for name, value in vars(kernels_module).items()
                   if name.endswith('_kernel') and type(value).__name__ == 'InterpretedFunction']
    if interpreted or not stubs:
        raise SystemExit(f'expected compiled-mode kernels to stub, found {interpreted or "none"}')
    return stubs


def time_per_call(call, calls, rounds, warmup):
    for _ in range(warmup):
        call()
    per_call = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(calls):
            call()
        per_call.append((time.perf_counter_ns() - start) / calls / 1e3)
    return dict(median_us=statistics.median(per_call), min_us=min(per_call),
                max_us=max(per_call))


def make_call(mode, mala_ops, plan, q, k, v, rope):
    if mode == 'forward':
        def call():
            with torch.no_grad():
                mala_ops.mala_attention(q, k, v, rope, impl='triton')
    elif mode == 'train':
        dout = torch.randn(q.shape, dtype=q.dtype)

        def call():
            out = mala_ops.mala_attention(q, k, v, rope, impl='triton')
            torch.autograd.grad(out, (q, k, v), dout)
    else:
        angle = rope.angle.float().contiguous()

        def call():
            plan.plan_for(q, k, v, angle, rope.width)
    return call


def measure_baseline(args):
    """The same measurement of ``args.baseline``, in a fresh process (one
    version of the module per process)."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / 'baseline.json'
        command = [sys.executable, str(Path(__file__).resolve()), '--function-module',
                   str(args.baseline), '--label', 'baseline', '--output', str(output),
                   '--batch', str(args.batch), '--image', *map(str, args.image),
                   '--dtype', args.dtype, '--layout', args.layout, '--modes', *args.modes,
                   '--launch', args.launch,
                   '--calls', str(args.calls),
                   '--rounds', str(args.rounds), '--warmup', str(args.warmup)]
        subprocess.run(command, check=True)
        return json.loads(output.read_text())


def measure(args, mala_ops, plan, launch_count, paths):
    """Per mode, per launch path (``paths``: name -> a context manager in
    which calls take it): the time per call of each MAViT-T stage's MALA layer, the paths taken
    in turn stage by stage, and each call's launches checked."""
    from mavit_mm.ops.rope2d import RoPE2d
    from mavit_mm.tooling.mala_inputs import mala_inputs

    dtype = DTYPES[args.dtype]
    image_h, image_w = args.image
    results = {path: {} for path in paths}
    for mode in args.modes:
        stages = {path: [] for path in paths}
        for heads, stride, depth in TINY_STAGES:
            height, width = image_h // stride, image_w // stride
            q, k, v = mala_inputs(args.batch, heads, height, width, HEAD_DIM, layout=args.layout,
                                  dtype=dtype, requires_grad=mode == 'train')
            rope = RoPE2d(HEAD_DIM)(height, width)
            call = make_call(mode, mala_ops, plan, q, k, v, rope)
            for path, taken in paths.items():
                with taken():
                    before = launch_count()
                    call()
                    launched = launch_count() - before
                    if launched != EXPECTED_LAUNCHES[mode]:
                        raise SystemExit(f'{mode}: {launched} kernel launches per call, '
                                         f'expected {EXPECTED_LAUNCHES[mode]}')
                    timing = time_per_call(call, args.calls, args.rounds, args.warmup)
                stages[path].append(dict(shape=[args.batch, heads, height * width, HEAD_DIM],
                                         layers=depth, **timing))
                print(f'{mode:8s} {path:7s} B={args.batch} heads={heads} '
                      f'N={height * width:6d} d={HEAD_DIM}: median '
                      f'{timing["median_us"]:7.1f} us/call (min {timing["min_us"]:.1f}, '
                      f'max {timing["max_us"]:.1f})', flush=True)
        for path in paths:
            per_forward = sum(stage['median_us'] * stage['layers'] for stage in stages[path])
            mean = per_forward / sum(stage['layers'] for stage in stages[path])
            print(f'{mode:8s} {path:7s} mean {mean:7.1f} us/call, {per_forward / 1e3:.2f} ms '
                  f'per MAViT-T pass (12 MALA layers)')
            results[path][mode] = dict(stages=stages[path], mean_us_per_call=mean,
                                       ms_per_mavit_t_pass=per_forward / 1e3)
    return results


def main(argv=None):
    args = parse_args(argv)
    baseline = measure_baseline(args) if args.baseline is not None else None
    torch.set_num_threads(1)
    mala_ops, function, plan = load_function_module(args.function_module)
    mala_ops.triton_interpreter_enabled = lambda: True   # CPU tensors pass the dispatch
    triton_path = None
    if args.launch == 'stub-kernels':
        stubs = install_stubs(function.kernels)
        results = measure(args, mala_ops, plan,
                          lambda: sum(stub.launches for stub in stubs.values()),
                          {'stubbed': contextlib.nullcontext})['stubbed']
        measures = ("mala_attention(impl='triton') on the CPU, Triton interpreter off, the "
                    'kernel launches stubbed (kernel[grid](...) only counts); excludes '
                    "Triton's launch path and the CUDA-only planning")
    else:
        from mavit_mm.ops.mala.launches import direct_launches
        from mavit_mm.tooling.triton_stub_driver import stub_cuda_driver
        print('compiling the kernels for sm_90 on first use (Triton caches them)', flush=True)
        with stub_cuda_driver(record=False) as driver:
            by_path = measure(args, mala_ops, plan, lambda: driver.launch_count,
                              {'triton': lambda: direct_launches(False),
                               'direct': lambda: direct_launches(True)})
        results, triton_path = by_path['direct'], by_path['triton']
        measures = ("mala_attention(impl='triton') on the CPU, Triton interpreter off, the "
                    "kernels compiled for sm_90 and launched through Triton's host code down "
                    "to a stub CUDA driver's launcher (mavit_mm.tooling.triton_stub_driver); "
                    "results: the case's compiled kernels launched directly (the default); "
                    "triton_path: every launch through Triton's JITFunction.run; excludes "
                    'the CUDA-only planning and the C launch')

    # after load_function_module: importing mavit_mm loads the op package
    from mavit_mm.tooling.device import git_commit
    report = dict(
        benchmark='mala_host_overhead',
        label=args.label or str(args.function_module or 'mavit_mm/ops/mala/function.py'),
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds'),
        commit=git_commit(),
        function_module=str(args.function_module) if args.function_module else None,
        measures=measures,
        launch=args.launch,
        config=dict(batch=args.batch, image=list(args.image), dtype=args.dtype,
                    layout=args.layout, head_dim=HEAD_DIM, calls=args.calls, rounds=args.rounds,
                    warmup=args.warmup, torch_threads=1),
        environment=dict(python=platform.python_version(), torch=torch.__version__,
                         triton=__import__('triton').__version__,
                         platform=platform.platform(), processor=platform.processor()),
        results=results)
    if triton_path is not None:
        report['triton_path'] = triton_path
        report['direct_launch_speedup'] = {
            mode: triton_path[mode]['mean_us_per_call'] / results[mode]['mean_us_per_call']
            for mode in results}
        for mode, speedup in report['direct_launch_speedup'].items():
            print(f"{mode:8s} Triton's path {triton_path[mode]['mean_us_per_call']:7.1f} us/call "
                  f"-> direct {results[mode]['mean_us_per_call']:7.1f} us/call ({speedup:.2f}x)")
    if baseline is not None:
        report['baseline'] = dict(function_module=str(args.baseline),
                                  results=baseline['results'])
        report['speedup'] = {
            mode: baseline['results'][mode]['mean_us_per_call'] / results[mode][
                'mean_us_per_call'] for mode in results}
        for mode, speedup in report['speedup'].items():
            print(f"{mode:8s} baseline {baseline['results'][mode]['mean_us_per_call']:7.1f} "
                  f"us/call -> {results[mode]['mean_us_per_call']:7.1f} us/call "
                  f'({speedup:.2f}x)')
    if args.output is not None:
        write_json(args.output, report)
        print(f'wrote {args.output}')
    return report


if __name__ == '__main__':
    main()
