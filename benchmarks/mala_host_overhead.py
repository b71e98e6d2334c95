"""Host (Python) time per fused-MALA call, on a CPU: no GPU, no kernel work.

What one ``mala_attention(q, k, v, rope, impl='triton')`` call costs the CPU
before any GPU work is queued: the dispatch checks, the ``mavit_mm::mala``
custom op (and, for training, autograd and ``mavit_mm::mala_backward``), the
launch plan, the output and workspace allocations and the kernel launches. It
runs with Triton's interpreter *off*, so nothing is computed and the results
are uninitialised memory. Where the launches stop, ``--launch``:

* ``stub-driver`` (default): the kernels are Triton's, compiled for an H100 /
  H200 (sm_90, by Triton's ptxas, on the CPU; once, then from Triton's cache)
  and launched through all of Triton's host code (binder, specialisation,
  cache key, loading checks) down to the CUDA driver's launcher, which a stub
  driver (``benchmarks/triton_stub_driver.py``) replaces.
* ``stub-kernels``: the ``@triton.jit`` kernels are replaced by stubs whose
  ``kernel[grid](*args, **meta)`` only counts the launch
  (``devtools.host_calls.cuda_path_on_cpu``): the op's own host code without
  Triton's launch path.

Not measured either way: what only a GPU does on the host (the
``torch.cuda.device`` switch, the CUDA caching allocator, the driver's C
launch). The dispatch refuses CPU tensors without the interpreter, so its
check of the interpreter is patched to say yes; everything else runs as is.

Shapes: the op's calls in MAViT-T, the 4 MALA layers (stages 1 and 2, two
blocks each; ``gpu_check_lib.op_steps.mala_model_shapes``, the GPU check's profile step's
shapes) at ``--batch`` and ``--image``, q, k, v as the backbone passes them
(``--layout``). Each call is made ``--calls`` times per round, ``--rounds``
rounds after ``--warmup`` calls; per stage the median over rounds of the time
per call, then the mean per call over the 4 layers and their sum, one
MAViT-T forward's worth.

``--baseline REV`` measures another commit as well: its tree (``git archive``)
runs its own copy of this script with the same settings, in subprocesses
interleaved with this tree's (``--repeats`` each, baseline first), so both
see the same machine load; per stage the median over the repeats. For commits
whose op launched compiled kernels directly (e.g. ``d725d40``), that
script measures both launch paths of the old tree: ``direct`` (its default)
and ``triton`` (every launch through ``JITFunction.run``). ``--eager-fps``
(a ``benchmark_fps.py`` JSON) and ``--gpu-profile`` (the GPU check's
``profile.json``, which has the old tree's host time per call on that GPU
with both launch paths) turn the differences into shares of an eager UperNet
forward.

Examples::

    python benchmarks/mala_host_overhead.py                     # this tree only
    python benchmarks/mala_host_overhead.py --baseline d725d40 \\
        --eager-fps benchmarks/results/gpu-h200-2026-11-26/fps-512.json \\
        --gpu-profile benchmarks/results/gpu-h200-2026-11-26/part-b/profile.json \\
        --output benchmarks/results/mala-host-overhead-stub-driver-cpu-DATE.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

# The kernels must be compiled-mode JITFunctions (launched through the stub
# driver, or stubbed), not the interpreter's: decided when kernels.py is imported.
os.environ['TRITON_INTERPRET'] = '0'

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from devtools.host_calls import cuda_path_on_cpu  # noqa: E402
from devtools.mala_inputs import DEFAULT_LAYOUT, MALA_LAYOUTS  # noqa: E402
from mavit_mm.tooling.results_file import utc_timestamp, write_json  # noqa: E402

DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}
LAUNCHES = ('stub-driver', 'stub-kernels')
MODES = ('forward', 'train')
# Kernel launches per call, by mode (the backward's sum over chunks is a torch op).
EXPECTED_LAUNCHES = {'forward': 3, 'train': 5}
# The GPU check's profile rows' pass names, by mode.
PROFILE_PASS = {'forward': 'fwd', 'train': 'fwd+bwd'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--batch', type=int, default=1, help='batch size (default 1)')
    parser.add_argument('--image', type=int, nargs=2, default=(512, 2048),
                        metavar=('H', 'W'), help='input image size (default 512 2048)')
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='bf16',
                        help='q, k, v dtype (default bf16)')
    parser.add_argument('--layout', choices=MALA_LAYOUTS, default=DEFAULT_LAYOUT,
                        help="q, k, v memory layout (devtools/mala_inputs.py; default "
                             "channels_last, what the model passes)")
    parser.add_argument('--modes', nargs='+', choices=MODES, default=list(MODES),
                        help="forward: inference call under no_grad; train: forward + "
                             "torch.autograd.grad (both ops)")
    parser.add_argument('--launch', choices=LAUNCHES, default='stub-driver',
                        help="where launches stop: 'stub-driver' runs Triton's launch path "
                             "down to a stub CUDA driver (default); 'stub-kernels' replaces "
                             "the kernels (Triton's launch path not measured)")
    parser.add_argument('--calls', type=int, default=200, help='calls per round (default 200)')
    parser.add_argument('--rounds', type=int, default=15, help='rounds (default 15)')
    parser.add_argument('--warmup', type=int, default=50, help='warm-up calls (default 50)')
    parser.add_argument('--baseline', metavar='REV', default=None,
                        help='also measure this commit (its own copy of this script), in '
                             'subprocesses interleaved with this tree\'s')
    parser.add_argument('--repeats', type=int, default=3,
                        help='with --baseline: runs of each tree, interleaved (default 3)')
    parser.add_argument('--eager-fps', type=Path, default=None,
                        help="benchmark_fps.py JSON with the eager UperNet MAViT-T row at "
                             "--image: the differences as shares of that forward")
    parser.add_argument('--gpu-profile', type=Path, default=None,
                        help="the GPU check's profile.json (host_issue_us per call with direct "
                             "launches and through Triton's launch path, d725d40's op): the "
                             'same shares from the GPU machine\'s host times')
    parser.add_argument('--output', type=Path, default=None,
                        help='write the results as JSON here (default: print only)')
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error('--repeats must be at least 1')
    if args.gpu_profile is not None and args.eager_fps is None:
        parser.error('--gpu-profile needs --eager-fps (the forward its shares are of)')
    return args


# --------------------------------------------------------------------------
# Measuring this tree, in this process
# --------------------------------------------------------------------------
def check_compiled_kernels(kernels_module) -> None:
    """``kernels_module``'s ``*_kernel``s are compiled-mode (TRITON_INTERPRET
    was off when it was imported), as this script measures them."""
    import triton
    kernels = {name: value for name, value in vars(kernels_module).items()
               if name.endswith('_kernel')}
    interpreted = [name for name, value in kernels.items()
                   if type(value).__name__ == 'InterpretedFunction']
    if interpreted or not any(isinstance(value, triton.runtime.jit.JITFunction)
                              for value in kernels.values()):
        raise SystemExit(f'expected compiled-mode kernels to stub, found {interpreted or "none"}')


def time_per_call(call, calls: int, rounds: int, warmup: int) -> dict:
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


def make_call(mode: str, mala_attention, q, k, v, rope):
    if mode == 'forward':
        def call():
            with torch.no_grad():
                mala_attention(q, k, v, rope, impl='triton')
        return call
    dout = torch.randn(q.shape, dtype=q.dtype)

    def call():
        out = mala_attention(q, k, v, rope, impl='triton')
        torch.autograd.grad(out, (q, k, v), dout)
    return call


def model_calls(args) -> list[dict]:
    """The op's calls in one MAViT-T forward at ``args.image``: per MALA stage
    its shape and its layers (blocks)."""
    from benchmarks.gpu_check_lib.op_steps import mala_model_shapes
    from mavit_mm.models import ARCH_SETTINGS
    depths = ARCH_SETTINGS['tiny']['depths']
    return [dict(shape, layers=depths[shape['stage'] - 1])
            for shape in mala_model_shapes('tiny', tuple(args.image), (args.batch,))]


def summary(stages: list[dict]) -> dict:
    """A mode's stages with the mean time per call over the layers and their
    sum (one MAViT-T forward's worth of calls), of the medians; and the mean
    of the fastest rounds (``best``: the least disturbed by a busy machine)."""
    layers = sum(stage['layers'] for stage in stages)
    per_pass = sum(stage['median_us'] * stage['layers'] for stage in stages)
    best = sum(stage['min_us'] * stage['layers'] for stage in stages) / layers
    return dict(stages=stages, mean_us_per_call=per_pass / layers,
                us_per_mavit_t_pass=per_pass, best_mean_us_per_call=best)


def measure(args) -> dict:
    """Per mode, the time per call of each MALA stage's calls (each call's
    launches checked)."""
    from devtools.mala_inputs import mala_inputs
    from mavit_mm.ops import triton_support
    from mavit_mm.ops.mala import dispatch
    from mavit_mm.ops.rope2d import RoPE2d
    error = dispatch.MALA_DISPATCH.import_error()
    if error is not None:
        raise SystemExit(f'the Triton path is unavailable: {error}')
    triton_support.triton_interpreter_enabled = lambda: True   # CPU tensors pass the dispatch
    from mavit_mm.ops.mala import function

    with contextlib.ExitStack() as stack:
        if args.launch == 'stub-kernels':
            check_compiled_kernels(function.kernels)
            stubbed = stack.enter_context(cuda_path_on_cpu())

            def launch_count():
                return stubbed.count
        else:
            from benchmarks.triton_stub_driver import stub_cuda_driver
            print('compiling the kernels for sm_90 on first use (Triton caches them)',
                  flush=True)
            driver = stack.enter_context(stub_cuda_driver(record=False))

            def launch_count():
                return driver.launch_count

        results = {}
        for mode in args.modes:
            stages = []
            for shape in model_calls(args):
                height, width, head_dim = shape['height'], shape['width'], shape['head_dim']
                q, k, v = mala_inputs(args.batch, shape['heads'], height, width, head_dim,
                                      layout=args.layout, dtype=DTYPES[args.dtype],
                                      requires_grad=mode == 'train')
                rope = RoPE2d(head_dim)(height, width)
                call = make_call(mode, dispatch.mala_attention, q, k, v, rope)
                before = launch_count()
                call()
                launched = launch_count() - before
                if launched != EXPECTED_LAUNCHES[mode]:
                    raise SystemExit(f'{mode}: {launched} kernel launches per call, '
                                     f'expected {EXPECTED_LAUNCHES[mode]}')
                timing = time_per_call(call, args.calls, args.rounds, args.warmup)
                stages.append(dict(stage=shape['stage'],
                                   shape=[args.batch, shape['heads'], height * width, head_dim],
                                   layers=shape['layers'], **timing))
                print(f'{mode:8s} stage {shape["stage"]} B={args.batch} heads={shape["heads"]} '
                      f'N={height * width:6d} d={head_dim}: median {timing["median_us"]:7.1f} '
                      f'us/call (min {timing["min_us"]:.1f}, max {timing["max_us"]:.1f})',
                      flush=True)
            results[mode] = summary(stages)
            print(f'{mode:8s} mean {results[mode]["mean_us_per_call"]:7.1f} us/call, '
                  f'{results[mode]["us_per_mavit_t_pass"]:.1f} us per MAViT-T pass '
                  f'({sum(s["layers"] for s in stages)} MALA layers)', flush=True)
    return results


# --------------------------------------------------------------------------
# Against another commit: interleaved subprocesses
# --------------------------------------------------------------------------
def child_arguments(args, output: Path) -> list[str]:
    return ['--batch', str(args.batch), '--image', *map(str, args.image), '--dtype', args.dtype,
            '--layout', args.layout, '--modes', *args.modes, '--launch', args.launch,
            '--calls', str(args.calls), '--rounds', str(args.rounds),
            '--warmup', str(args.warmup), '--output', str(output)]


def extract_tree(rev: str, scratch: Path) -> str:
    """``rev``'s tree into ``scratch`` (``git archive``); its full commit."""
    try:
        commit = subprocess.run(['git', 'rev-parse', '--verify', f'{rev}^{{commit}}'],
                                cwd=REPO_ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        archive = subprocess.run(['git', 'archive', '--format=tar', commit], cwd=REPO_ROOT,
                                 capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f'git {rev}: {exc.stderr.strip()}') from exc
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(scratch, filter='data')
    return commit


def paths_of(report: dict) -> dict:
    """A run's results by launch path: the old script's stub-driver runs hold
    the direct launches in ``results`` and Triton's path in ``triton_path``."""
    if 'triton_path' in report:
        return {'direct': report['results'], 'triton': report['triton_path']}
    return {'stubbed' if report['launch'] == 'stub-kernels' else 'triton': report['results']}


def combined(runs: list[dict], calls: list[dict], modes) -> dict:
    """Per launch path and mode, the MAViT-T stages' median over the runs of
    each run's median time per call (stages picked by shape: older scripts
    time stages 3 and 4 too)."""
    paths = {}
    for name in paths_of(runs[0]):
        paths[name] = {}
        for mode in modes:
            stages = []
            for call in calls:
                shape = [call['batch'], call['heads'], call['tokens'], call['head_dim']]
                timed = [next(stage for stage in paths_of(run)[name][mode]['stages']
                              if stage['shape'] == shape) for run in runs]
                medians = [stage['median_us'] for stage in timed]
                stages.append(dict(stage=call['stage'], shape=shape, layers=call['layers'],
                                   median_us=statistics.median(medians),
                                   min_us=min(stage['min_us'] for stage in timed),
                                   runs_median_us=medians))
            paths[name][mode] = summary(stages)
    return paths


def measure_interleaved(args) -> tuple[dict, dict]:
    """This tree's and ``args.baseline``'s results, by launch path, from
    ``args.repeats`` subprocess runs of each, interleaved (baseline first)."""
    calls = model_calls(args)
    runs = {'baseline': [], 'this': []}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / 'baseline'
        commit = extract_tree(args.baseline, scratch)
        scripts = {'baseline': scratch / 'benchmarks' / 'mala_host_overhead.py',
                   'this': Path(__file__).resolve()}
        for repeat in range(args.repeats):
            for tree, script in scripts.items():
                output = Path(tmp) / f'{tree}-{repeat}.json'
                print(f'--- run {repeat + 1}/{args.repeats}: {tree} tree', flush=True)
                subprocess.run([sys.executable, str(script), *child_arguments(args, output)],
                               cwd=script.parents[1], check=True)
                runs[tree].append(json.loads(output.read_text()))
    trees = {tree: dict(paths=combined(reports, calls, args.modes),
                        versions=reports[0].get('environment'))
             for tree, reports in runs.items()}
    trees['baseline']['commit'] = commit
    return trees['this'], trees['baseline']


def differences(this: dict, baseline: dict, modes) -> dict:
    """This tree's (one launch path) time per call less each of the
    baseline's launch paths': per stage, per call (mean over the layers; and
    of the fastest rounds) and per MAViT-T pass."""
    (mine,) = this['paths'].values()
    out = {}
    for name, theirs in baseline['paths'].items():
        out[f'this_minus_baseline_{name}'] = {mode: dict(
            per_stage_us=[a['median_us'] - b['median_us']
                          for a, b in zip(mine[mode]['stages'], theirs[mode]['stages'])],
            us_per_call=mine[mode]['mean_us_per_call'] - theirs[mode]['mean_us_per_call'],
            best_us_per_call=mine[mode]['best_mean_us_per_call']
            - theirs[mode]['best_mean_us_per_call'],
            us_per_mavit_t_pass=mine[mode]['us_per_mavit_t_pass']
            - theirs[mode]['us_per_mavit_t_pass']) for mode in modes}
    return out


# --------------------------------------------------------------------------
# Shares of an eager UperNet forward on the GPU machine
# --------------------------------------------------------------------------
def eager_forward_ms(path: Path, image) -> float:
    """The eager UperNet MAViT-T forward's ms per image at ``image`` in a
    ``benchmark_fps.py`` JSON."""
    rows = [row for row in json.loads(path.read_text())['results']
            if row['mode'] == 'eager' and 'mavit' in row['config'].lower()
            and [row['height'], row['width']] == list(image) and not row.get('error')]
    if len(rows) != 1:
        raise SystemExit(f'{path}: {len(rows)} eager MAViT-T rows at {image}, expected 1')
    return rows[0]['ms_per_image']


def gpu_shares(args, forward_ms: float, this: dict, baseline: dict | None) -> dict:
    """The host time the op's calls add to (or save from) one eager UperNet
    forward of ``forward_ms``, in µs and as a share of it: from this CPU's
    differences and, with ``--gpu-profile``, from the GPU machine's host times."""
    calls = model_calls(args)
    shares = dict(eager_upernet_forward_ms=forward_ms,
                  eager_upernet_forward_source=_relative(args.eager_fps),
                  mala_calls_per_forward=sum(call['layers'] for call in calls))

    def share(us: float) -> dict:
        return dict(us_per_forward=round(us, 2), percent_of_eager_forward=round(
            100 * us / (forward_ms * 1e3), 3))

    if baseline is not None and 'forward' in args.modes:
        (mine,) = this['paths'].values()
        shares['cpu'] = {f'this_minus_baseline_{name}': share(
            mine['forward']['us_per_mavit_t_pass'] - theirs['forward']['us_per_mavit_t_pass'])
            for name, theirs in baseline['paths'].items()}
    if args.gpu_profile is not None:
        rows = json.loads(args.gpu_profile.read_text())['results']
        gpu = dict(source=_relative(args.gpu_profile), note=(
            "the GPU check's profile step, batch 1 forwards: host_issue_us, the host time "
            'per call of the op before the rewrite (direct launches, its default), and '
            "host_issue_us_tritons_launch_path (every launch through Triton's "
            'JITFunction.run); this_estimate_us: the latter scaled by this tree over the '
            "baseline's Triton path on this CPU"), stages={})
        per_forward = {'direct': 0.0, 'triton': 0.0, 'this_estimate': 0.0}
        for call in calls:
            row = next((r for r in rows if r['pass_name'] == 'fwd' and all(
                r[key] == call[key] for key in ('stage', 'batch', 'heads', 'height', 'width'))),
                None)
            if row is None:
                raise SystemExit(f'{args.gpu_profile}: no forward row of stage {call["stage"]} '
                                 f'at batch {args.batch}, {call["height"]}x{call["width"]}')
            entry = dict(direct_us=row['host_issue_us'],
                         triton_us=row['host_issue_us_tritons_launch_path'], layers=call['layers'])
            if baseline is not None and 'triton' in baseline['paths']:
                # This tree on the GPU machine, estimated: Triton's path there,
                # scaled by this tree over the old Triton path on this CPU.
                (mine,) = this['paths'].values()
                ratio = (_stage(mine, call)['median_us']
                         / _stage(baseline['paths']['triton'], call)['median_us'])
                entry.update(this_over_old_triton_path_cpu=round(ratio, 4),
                             this_estimate_us=round(entry['triton_us'] * ratio, 2))
                per_forward['this_estimate'] += entry['this_estimate_us'] * call['layers']
            per_forward['direct'] += entry['direct_us'] * call['layers']
            per_forward['triton'] += entry['triton_us'] * call['layers']
            gpu['stages'][str(call['stage'])] = entry
        gpu['triton_path_minus_direct'] = share(per_forward['triton'] - per_forward['direct'])
        if per_forward['this_estimate']:
            gpu['this_estimate_minus_direct'] = share(per_forward['this_estimate']
                                                      - per_forward['direct'])
        shares['gpu_host'] = gpu
    return shares


def _stage(paths_mode: dict, call: dict) -> dict:
    return next(stage for stage in paths_mode['forward']['stages']
                if stage['stage'] == call['stage'])


def _relative(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    from devtools.checkout import git_commit
    from mavit_mm.tooling.device import cpu_model
    # Before measuring: the reference forward must be there.
    forward_ms = None if args.eager_fps is None else eager_forward_ms(args.eager_fps, args.image)
    baseline = None
    if args.baseline is not None:
        this, baseline = measure_interleaved(args)
    else:
        this = dict(paths={'stubbed' if args.launch == 'stub-kernels' else 'triton':
                           measure(args)})
    (results,) = this['paths'].values()
    this['commit'] = git_commit()
    report = dict(
        benchmark='mala_host_overhead',
        date=utc_timestamp(),
        commit=this['commit'],
        measures=("mala_attention(impl='triton') on the CPU, Triton interpreter off, at the "
                  "op's calls in MAViT-T; " + (
                      "kernels compiled for sm_90 and launched through Triton's host code down "
                      "to a stub CUDA driver's launcher (benchmarks/triton_stub_driver.py)"
                      if args.launch == 'stub-driver' else
                      'kernel launches stubbed (kernel[grid](...) only counts)')
                  + "; excludes the host work only a GPU does (device switch, CUDA "
                    'allocator, the C launch)'),
        launch=args.launch,
        config=dict(batch=args.batch, image=list(args.image), dtype=args.dtype,
                    layout=args.layout, calls=args.calls, rounds=args.rounds,
                    warmup=args.warmup, torch_threads=1,
                    repeats=args.repeats if baseline is not None else 1),
        environment=dict(cpu=cpu_model(), python=platform.python_version(),
                         torch=torch.__version__, triton=__import__('triton').__version__,
                         platform=platform.platform()),
        results=results)
    if baseline is not None:
        report.update(this=this, baseline=baseline,
                      differences=differences(this, baseline, args.modes))
        for name, modes in report['differences'].items():
            for mode, diff in modes.items():
                print(f'{mode:8s} {name}: {diff["us_per_call"]:+7.1f} us/call '
                      f'(fastest rounds {diff["best_us_per_call"]:+7.1f}), '
                      f'{diff["us_per_mavit_t_pass"]:+8.1f} us per MAViT-T pass')
    if forward_ms is not None:
        report['eager_upernet_share'] = gpu_shares(args, forward_ms, this, baseline)
        print(json.dumps(report['eager_upernet_share'], indent=1))
    if args.output is not None:
        write_json(args.output, report)
        print(f'wrote {args.output}')
    return report


if __name__ == '__main__':
    main()
