"""The GPU check: prove the fused MALA correct on a GPU and measure the speed
targets (``benchmarks/gpu_targets.py``): of the lean forward and the fused block (MAViT-T
against Swin-T: the backbones eager, under a CUDA graph and compiled,
UperNet's FPS, what each fast path is worth, where the GPU time goes) and of
the MALA op (the op at the model's calls), writing every result as JSON the
moment it exists.

The check runs in parts, one GPU command of at most 8 minutes each, in
priority order: a GPU session has 15 minutes, the machine's start included,
so a session runs the first part not yet run. Each part's step budgets add up
to at most ``--part-minutes`` (7 minutes; ``--dry-run`` prints the sums):

    python benchmarks/gpu_check.py --part 1 --out gpu_results/part-1
    python benchmarks/gpu_check.py --part 2 --out gpu_results/part-2   # and so on

Part 1, correctness before any timing: the kernel tests and the model tests
on CUDA (the MALA and depthwise kernels against their references, the model's
parity with the published outputs with the fused paths on). Part 2, what each
fast path is worth: the backbones against Swin-T in the three modes, and each
switch off in turn under a CUDA graph and eager (``ablations``). Part 3, UperNet's FPS at 512x2048 in the
three modes (eager and CUDA graph, then compiled; a median of three runs
each). Part 4: UperNet at 1024x2048 in every mode, where the eager forward's
GPU time goes and its kernel count, the training step. Part 5: where the
compiled forward's GPU time goes, the op at MAViT-T's calls and at the
bandwidth targets' shapes, SDPA's kernels. Part 6, what no target needs: the
tuning. Part 7, each switch off in turn under compile (``ablations-compile``:
a cold compile a row). ``PRIORITY_PARTS`` fixes the first two parts; ``GPU_TARGETS`` names
the step that measures each target (docs/gpu.md, "What measures each
target", is its table); ``plan_problems`` keeps them in that order.
``--budget STEP=MIN`` shortens a step to fit what is left of a loan.

Each step has a time budget, enforced: the tests and the sweeps run as child
processes killed at their budget, the in-process steps stop between rows, and
each writes its JSON as it goes, so a step cut short still leaves what it
measured. ``summary.json`` is rewritten after every step. A part writes one
file per step (``env.json``, then ``<step>.json``; ``bench`` writes
``bench_mala.json``), ``summary.json`` and ``logs.txt`` (the child processes'
output): at most 8 files (``--command-files``), what a GPU command returns.

Swin-T is mmseg's ``SwinTransformer`` as the UperNet baseline's config builds
it (``swin_t``) in every row; MAViT-T is ``MAViT(arch='tiny')``. The model
steps time bf16 autocast forwards at batch 1 in eval mode under no_grad
unless they say otherwise, in benchmark_fps.py's modes (``benchmarks/timing.py``'s
``in_mode``), the median of ``triton.testing.do_bench`` (``median_ms``):
eager; ``cuda-graph``, captured once by its ``capture_cuda_graph`` and
replayed; ``compile``, compiled by its ``compiled`` (``torch.compile``,
``mode='reduce-overhead'``). Eager, where the host sets the pace and its pace
drifts, the ``backbones`` and ``ablations`` rows time each model against its
reference (Swin-T, all switches on) in the same interleaved rounds
(``benchmarks/timing.py``'s ``interleaved_ms``), each call synchronised
around, the ratio the median of the rounds'.

The op steps (``bench``, ``tune-*``, ``profile``) build q, k, v with
``devtools.mala_inputs`` in ``--layout`` (default ``channels_last``,
what the model passes) and record the layout by name in every row.

Steps (``--steps`` runs any of them in any order):

``env``           device, driver, library versions and the measured
                  device-to-device copy bandwidth (the yardstick of the kernel
                  targets: ``bench_mala.copy_bandwidth_tbps``).
``backbones``     MAViT-T (``mala_impl`` auto) against Swin-T at 512x2048,
                  under a CUDA graph, eager and compiled: median ms of each
                  and MAViT-T's time over Swin-T's per mode.
``compiled-profile`` both backbones compiled (``PROFILE_COMPILE_MODE``), one
                  forward under the profiler after warm-up: GPU time and
                  kernel count by category (``kernel_category``; inductor's
                  own kernels are ``inductor``), the top kernels.
``ablations``     MAViT-T with each fast-path switch off in turn
                  (``mavit_mm/ops/fast_paths.py``) against all switches on,
                  one set of weights: under a CUDA graph, then eager
                  (``ablation_rows``); a forward, and a training step (forward
                  and backward, train mode) with the switches that act there:
                  eager, every one that acts with gradients; under a CUDA
                  graph, those that change only a training step.
``ablations-compile`` the same, compiled, where a switch acts under compile.
``kernel-tests``  ``tests/test_ops/test_mala/test_mala_cuda.py``: every dtype,
                  head dims 16-128, both layouts, default and small plans,
                  B*heads 1-64, gradients against fp64; the 512x2048 bf16
                  backbone. ``tests/test_ops/test_depthwise.py``: the fused
                  depthwise stages against their formulas on CUDA.
                  ``tests/test_ops/test_fused_ops_under_compile.py``: both
                  fused ops as nodes of a compiled graph, not of an exported one.
``model-tests``   ``tests/test_ops/test_mala/test_mala_numerics.py``,
                  ``test_mala_plans_and_compile.py`` and
                  ``test_mala_dispatch.py`` on CUDA: numerics, plans and
                  compile, dispatch, fallbacks, MAViT-T parity with the golden
                  data with ``mala_impl='triton'``; ``tests/test_models/
                  test_fused_block.py``: the block with its fused stages
                  against its modules.
``profile``       the op at MAViT-T's shapes at 512x2048 (``mala_model_shapes``:
                  stage 1, 128x512, 1 head; stage 2, 64x256, 2 heads; d 64;
                  batch 1 and 8), bf16, under the profiler: GPU kernel time
                  per call against the wall time per call, the host's launch
                  time per call, and where the host's time goes (cProfile).
``sdpa``          MAViT-T forward+backward at 512x2048 and 1024x2048 (fp32 and
                  bf16 autocast) with SDPA restricted to its flash and
                  memory-efficient kernels, and the SDPA kernels a profiled
                  forward ran (the softmax stages must not take the math path).
``bench``         the ``bench_mala.py`` sweep at the op targets' shapes (both
                  paths, bf16 and fp32, fwd and fwd+bwd, N 16384 / 65536, d 64,
                  B*heads 1 / 8 / 16: B*heads 8 at N 65536 is stage 1 at
                  batch 8; q, k, v in ``--layout``).
``sweep``         MAViT-T (both MALA paths) against Swin-T over resolutions
                  512x512 to 1024x2048, fp32 and bf16, batch 1 forward; then
                  a training step (forward, backward, AdamW) at 512x2048,
                  batch 2, fp32 and bf16, with its peak memory.
``model-profile`` as ``compiled-profile``, eager: the eager forward's GPU time
                  by category and its kernel count; both profile steps also
                  time the host's issue of a forward, by whose Python spends
                  it (``profiling.host_time``).
``upernet-fps``,  UperNet MAViT-T against UperNet Swin-T through
``upernet-fps-compile``, ``tools/analysis_tools/benchmark_fps.py``, bf16,
``upernet-fps-1024`` ``--iters 50``, three runs (a child process each: the
                  targets judge by the median of three; ``upernet_fps_runs``):
                  eager and CUDA graph at 512x2048; compiled there; all three
                  modes at 1024x2048. Needs mmseg.
``tune-bh16``,    ``tune_mala.py`` on the op's target shape (bf16, N 65536, d 64)
``tune-bh1``      at B*heads 16 and 1, for the backward's query kernel only (24
                  tile candidates; 59% of a fwd+bwd at B*heads 16, and the
                  committed tuning's largest change: ``TUNE_ARGS``), then
                  the split-N chunk counts, the tokens per program and the
                  tuned plan against the default. A candidate costs a compile
                  (1-2.5 s), so run ``tune-bh16`` first: ``tune-bh1`` then finds
                  them compiled. ``tune_mala.py`` by hand tunes every kernel.
``tune-depthwise`` ``tune_depthwise.py``: the fused depthwise stages' launch tiles
                  (``mavit_mm/ops/depthwise/function.py``, ``TUNED_TILES``) at
                  MAViT-T's shapes at 512x2048, bf16, batch 1: each launch's
                  current tile and its halves and doubles (block_w, block_c,
                  warps; about 69 compiles), the FFN's middle first, the
                  norm launches last; then each stage's forward and
                  forward+backward with the winners against the current tiles.

Dropped: the ``backbone`` step (MAViT-T against Swin-T at 512x2048, batch 1
and 2): its batch-1 forwards are the sweep's 512x2048 rows, and its
forward+backward is the sweep's training step, which now runs at 512x2048,
batch 2, with the optimizer step and peak memory. UperNet in fp32: no target
asks for it (``benchmark_fps.py --dtype fp32`` by hand).

The machine needs Python with torch (CUDA), triton, numpy and pytest;
mmengine, mmseg, an mmcv built without its C++ ops (with a stub ``mmcv._ext``
that raises when an op is called) and their small pure-Python needs travel as
wheels: ``scripts/gpu_wheels.sh`` puts them into ``.whl/``, which git ignores,
so it must be named when the tree is copied to the GPU machine. The commands
are in docs/gpu.md, "Running the GPU check". mmdet is not needed.

``--dry-run`` (no GPU) checks the imports, the child processes' arguments, the
parts' budgets and files, and prints the plan; CI runs it.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import inspect
import io
import json
import os
import tempfile
import time
from pathlib import Path

import torch

from benchmarks import gpu_targets
from benchmarks.gpu_check_lib.children import REPO_ROOT, has_module, write_results
from benchmarks.gpu_check_lib.correctness import TEST_FILES, step_tests
from benchmarks.gpu_check_lib.env import step_env
from benchmarks.gpu_check_lib.model_steps import (
    ABLATION_STEP_MODES,
    ablation_rows,
    step_ablations,
    step_backbones,
    step_sweep,
)
from benchmarks.gpu_check_lib.models import (
    BACKBONE_SIZE,
    UPERNET_CONFIGS,
)
from benchmarks.gpu_check_lib.op_steps import (
    TUNE_ARGS,
    bench_command,
    mala_model_shapes,
    step_bench,
    step_profile,
    step_sdpa,
    step_tune,
    tune_command,
)
from benchmarks.gpu_check_lib.plan import (
    MACHINE_LIMITS,
    PARTS,
    STEPS,
    MachineLimits,
    budgets_with,
    part_minutes,
    plan_problems,
    target_file,
)
from benchmarks.gpu_check_lib.profiling import step_model_profile
from benchmarks.gpu_check_lib.upernet_fps import (
    FPS_STEPS,
    fps_command,
    step_upernet_fps,
    upernet_fps_runs,
)
from devtools.baseline import SWIN_T_CONFIG, swin_t
from devtools.mala_inputs import DEFAULT_LAYOUT, MALA_LAYOUTS


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, default=Path('gpu_results'),
                        help='folder for the JSON files, logs and summary.json '
                             '(default gpu_results)')
    which = parser.add_mutually_exclusive_group()
    which.add_argument('--part', type=int, choices=sorted(PARTS),
                       help='one GPU command: ' + '; '.join(
                           f'{number}: {" ".join(steps)}' for number, steps in PARTS.items()))
    which.add_argument('--steps', nargs='+', choices=STEPS,
                       help='these steps, in this order')
    parser.add_argument('--sweep-batch', type=int, default=1,
                        help='batch of the sweep step\'s forward rows (default 1; at batch 1 '
                             'a small backbone is bound by the host\'s kernel launches)')
    parser.add_argument('--cuda-graphs', action='store_true',
                        help='the sweep step times CUDA-graph replays of each forward '
                             '(no training rows); writes sweep[-bN]-graphs.json')
    parser.add_argument('--layout', choices=MALA_LAYOUTS, default=DEFAULT_LAYOUT,
                        help='memory layout of q, k, v in the op steps (bench, tune-*, '
                             'profile): devtools/mala_inputs.py (default '
                             f'{DEFAULT_LAYOUT}, what the model passes)')
    parser.add_argument('--dry-run', action='store_true',
                        help='no GPU needed: check imports, child arguments, budgets and '
                             'files, print the plan')
    parser.add_argument('--commit', default=None,
                        help='the commit the copied tree is (recorded in env.json; default: '
                             'git\'s, where the tree has its .git: the GPU machine\'s copy has none)')
    parser.add_argument('--pytest-workers', type=int, default=8,
                        help='pytest-xdist workers for the test steps (kernel compiles run in '
                             'parallel); 0 runs in one process')
    parser.add_argument('--budget', action='append', default=[], metavar='STEP=MIN',
                        help='this step\'s budget in minutes instead of its planned one '
                             '(repeatable): to fit a command into what is left of a loan')
    limits = parser.add_argument_group('the GPU machine\'s limits, which --dry-run plans the '
                                       'parts to')
    limits.add_argument('--command-minutes', type=float, default=MACHINE_LIMITS.command_limit_min,
                        help='what one GPU command may take, in minutes (default '
                             f'{MACHINE_LIMITS.command_limit_min:g})')
    limits.add_argument('--part-minutes', type=float, default=MACHINE_LIMITS.part_aim_min,
                        help='the most a part\'s budgets may add up to: the command\'s minutes '
                             'less the wheels\' install and the start-up (default '
                             f'{MACHINE_LIMITS.part_aim_min:g})')
    limits.add_argument('--command-files', type=int, default=MACHINE_LIMITS.command_files,
                        help='the files a GPU command returns from its --out (default '
                             f'{MACHINE_LIMITS.command_files})')
    args = parser.parse_args(argv)
    args.steps = PARTS[args.part] if args.part else (args.steps or PARTS[1])
    try:
        args.budgets = budgets_with(args.budget)
    except ValueError as error:
        parser.error(str(error))
    args.limits = MachineLimits(args.command_minutes, args.part_minutes, args.command_files)
    return args


def dry_run(args) -> int:
    """Check what the GPU run needs, without a GPU: imports, the child
    processes' arguments, the models the steps build, the parts' budgets,
    files and order; print the plan."""
    problems = []
    for module in ('triton', 'mmengine', 'mmseg', 'pytest', 'numpy'):
        if not has_module(module):
            problems.append(f'{module} is not importable')
    for name in (*(path for paths in TEST_FILES.values() for path in paths), *UPERNET_CONFIGS):
        if not (REPO_ROOT / name).is_file():
            problems.append(f'{name} is missing')
    problems += plan_problems(args.limits)
    from benchmarks import bench_mala, tune_depthwise, tune_mala
    out = Path(tempfile.gettempdir())
    children = [(bench_mala.parse_args, bench_command(out / 'bench.json', args.layout)),
                (tune_mala.parse_args, tune_command('tune-bh16', out / 'tune.json', 60,
                                                    args.layout)),
                (tune_depthwise.parse_args, tune_command('tune-depthwise', out / 'tune.json', 60))]
    try:
        from tools.analysis_tools import benchmark_fps
        children += [(benchmark_fps.parse_args, fps_command(run, out / 'fps.json'))
                     for step in FPS_STEPS for run in upernet_fps_runs(step)]
    except Exception as exc:
        problems.append(f'benchmark_fps.py does not import: {type(exc).__name__}: {exc}')
    for parse, command in children:
        why = io.StringIO()
        try:
            with contextlib.redirect_stderr(why):
                parse(command[1:])
        except SystemExit:
            error = why.getvalue().strip().splitlines()[-1:] or ['']
            problems.append(f'{command[0]} refuses its arguments: {error[0]}')
    tuned = tune_mala.parse_args(tune_command('tune-bh1', out / 'tune.json', 60)[1:]).kernels
    problems += [f'tune_mala.py has no kernel {kernel!r}' for kernel in tuned
                 if kernel not in (*tune_mala.TOKEN_KERNELS, 'combine')]
    problems += model_problems()
    problems = list(dict.fromkeys(problems))
    tune_mala.main(TUNE_ARGS + ['--batch-heads', '16', '--dry-run'])
    tune_depthwise.main(tune_command('tune-depthwise', out / 'tune.json', 60)[1:] + ['--dry-run'])
    import mavit_mm  # noqa: F401  (the backbone and the op import)
    from mavit_mm.ops.mala import function  # noqa: F401  (the Triton launches import)
    print(f'MALA calls profiled (MAViT-T at {BACKBONE_SIZE[0]}x{BACKBONE_SIZE[1]}): ' + '; '.join(
        f'stage {s["stage"]} batch {s["batch"]} heads {s["heads"]} {s["height"]}x{s["width"]} '
        f'd {s["head_dim"]}' for s in mala_model_shapes()))
    for step, modes in ABLATION_STEP_MODES.items():
        ablations = {}
        for row in ablation_rows(modes):
            ablations.setdefault(f'{row["mode"]} {row["pass_name"]}', []).extend(
                row['switches_off'])
        for case, switches in ablations.items():
            print(f'{step}, {case}: all on, then off in turn: {", ".join(switches)}')
    total = sum(args.budgets[s] for s in args.steps)
    print(f'plan: {", ".join(args.steps)} into {args.out}/ (at most {total:.2f} min, '
          f'layout {args.layout})')
    for part, steps in PARTS.items():
        print(f'part {part}: {" ".join(steps)} '
              f'(at most {part_minutes(part):.2f} min, {len(steps) + 2} files)')
    whole = sum(part_minutes(part) for part in PARTS)
    longest = max(part_minutes(part) for part in PARTS)
    print(f'whole check: {len(PARTS)} parts in priority order, one GPU command of at most '
          f'{args.limits.command_limit_min:g} min each ({whole:.2f} min of budgets; the longest '
          f'part {longest:.2f}, planned to at most {args.limits.part_aim_min:.2f})')
    from benchmarks.readme_tables import target_now
    for target in gpu_targets.GPU_TARGETS:
        print(f'target of the {target.goal}: {target.measurement} {target.text} '
              f'(now {target_now(target)}): {target_file(target)}')
    for problem in problems:
        print(f'problem: {problem}')
    return 1 if problems else 0


def model_problems() -> list[str]:
    """What the model steps would meet: Swin-T not built from its config, a
    MAViT that takes no fast-path switches (the ablations would time their
    all-on rows only)."""
    problems = []
    try:
        swin_t()
    except Exception as exc:
        problems.append(f'Swin-T does not build from {SWIN_T_CONFIG}: {type(exc).__name__}: {exc}')
    from mavit_mm.models.mavit import MAViT
    if 'fast_paths' not in inspect.signature(MAViT).parameters:
        problems.append('MAViT takes no fast_paths: the ablations step would time its all-on '
                        'rows only')
    return problems



def run_step(name: str, out: Path, args) -> dict:
    budget_s = 60 * args.budgets[name]
    if name == 'env':
        return step_env(out, budget_s, args.commit)
    if name in TEST_FILES:
        return step_tests(name, out, budget_s, args.pytest_workers)
    if name == 'bench':
        return step_bench(out, budget_s, args.layout)
    if name == 'sdpa':
        return step_sdpa(out, budget_s)
    if name == 'sweep':
        file_name = 'sweep' + ('' if args.sweep_batch == 1 else f'-b{args.sweep_batch}') + \
            ('-graphs' if args.cuda_graphs else '')
        return step_sweep(out, budget_s, batch=args.sweep_batch, name=file_name,
                          cuda_graphs=args.cuda_graphs)
    if name == 'profile':
        return step_profile(out, budget_s, layout=args.layout)
    if name in ('model-profile', 'compiled-profile'):
        return step_model_profile(out, budget_s, compiled=name == 'compiled-profile')
    if name == 'backbones':
        return step_backbones(out, budget_s)
    if name in ABLATION_STEP_MODES:
        return step_ablations(out, budget_s, step_name=name)
    if name in FPS_STEPS:
        return step_upernet_fps(out, budget_s, name)
    return step_tune(name, out, budget_s, args.layout)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    if not torch.cuda.is_available():
        print('gpu_check.py needs a CUDA GPU; --dry-run checks the plan without one')
        return 2
    os.environ.pop('TRITON_INTERPRET', None)
    args.out.mkdir(parents=True, exist_ok=True)
    total = sum(args.budgets[s] for s in args.steps)
    started = time.time()
    summary = {'steps': args.steps, 'started': datetime.datetime.now().isoformat(timespec='seconds')}
    for index, name in enumerate(args.steps):
        elapsed = (time.time() - started) / 60
        left = sum(args.budgets[s] for s in args.steps[index:])
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
        write_results(args.out / 'summary.json', summary)
    print(json.dumps(summary, indent=1, default=str)[:4000])
    return 0 if all(summary[name].get('ok') for name in args.steps) else 1


