"""The GPU check: prove the fused MALA correct on a GPU and measure the speed
targets (``GPU_TARGETS``): of the lean forward and the fused block (MAViT-T
against Swin-T: the backbones eager, under a CUDA graph and compiled,
UperNet's FPS, what each fast path is worth, where the GPU time goes) and of
the MALA op (the op at the model's calls), writing every result as JSON the
moment it exists.

The check runs in parts, one GPU command of at most 8 minutes each, in
priority order: a GPU session has 15 minutes, the machine's start included,
so a session runs the first part not yet run. Each part's step budgets add up
to at most ``PART_AIM_MIN`` (7 minutes; ``--dry-run`` prints the sums):

    python benchmarks/gpu_check.py --part 1 --out gpu_results/part-1
    python benchmarks/gpu_check.py --part 2 --out gpu_results/part-2   # and so on

Part 1, correctness before any timing: the kernel tests and the model tests
on CUDA (the MALA and depthwise kernels against their references, the model's
parity with the published outputs with the fused paths on). Part 2, what each
fast path is worth: the backbones against Swin-T in the three modes, and each
switch off in turn (``ablations``). Part 3, UperNet's FPS at 512x2048 in the
three modes (eager and CUDA graph, then compiled; a median of three runs
each). Part 4: UperNet at 1024x2048 in every mode, where the eager forward's
GPU time goes and its kernel count, the training step. Part 5: where the
compiled forward's GPU time goes, the op at MAViT-T's calls and at the
bandwidth targets' shapes, SDPA's kernels. Part 6, what no target needs: the
tuning. ``PRIORITY_PARTS`` fixes the first two parts; ``GPU_TARGETS`` names
the step that measures each target (docs/gpu.md, "What measures each
target", is its table); ``plan_problems`` keeps them in that order.
``--budget STEP=MIN`` shortens a step to fit what is left of a loan.

Each step has a time budget, enforced: the tests and the sweeps run as child
processes killed at their budget, the in-process steps stop between rows, and
each writes its JSON as it goes, so a step cut short still leaves what it
measured. ``summary.json`` is rewritten after every step. A part writes one
file per step (``env.json``, then ``<step>.json``; ``bench`` writes
``bench_mala.json``), ``summary.json`` and ``logs.txt`` (the child processes'
output): at most 8 files, what a GPU command returns.

Swin-T is mmseg's ``SwinTransformer`` as the UperNet baseline's config builds
it (``swin_tiny``) in every row; MAViT-T is ``MAViT(arch='tiny')``. The model
steps time bf16 autocast forwards at batch 1 in eval mode under no_grad
unless they say otherwise, in benchmark_fps.py's modes (``_time_in_mode``):
eager; ``cuda-graph``, captured once by its ``capture_cuda_graph`` and
replayed; ``compile``, compiled by its ``compiled`` (``torch.compile``,
``mode='reduce-overhead'``).

The op steps (``bench``, ``tune-*``, ``profile``) build q, k, v with
``mavit_mm.tooling.mala_inputs`` in ``--layout`` (default ``channels_last``,
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
                  one set of weights: under a CUDA graph, eager, then compiled
                  where a switch acts under compile (``ablation_rows``); a switch
                  that only changes a training step is timed on one (forward
                  and backward, train mode).
``kernel-tests``  ``tests/test_ops/test_mala/test_mala_cuda.py``: every dtype,
                  head dims 16-128, both layouts, default and small plans,
                  B*heads 1-64, gradients against fp64; the 512x2048 bf16
                  backbone. ``tests/test_ops/test_depthwise.py``: the fused
                  depthwise stages against their formulas on CUDA.
                  ``tests/test_ops/test_fused_ops_under_compile.py``: both
                  fused ops as nodes of a compiled graph, not of an exported one.
``model-tests``   ``tests/test_ops/test_mala/test_mala_triton.py`` on CUDA:
                  dispatch, fallbacks, MAViT-T parity with the golden data
                  with ``mala_impl='triton'``; ``tests/test_models/
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
                  by category and its kernel count.
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
import ast
import contextlib
import datetime
import functools
import inspect
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from mavit_mm.tooling.mala_inputs import DEFAULT_LAYOUT, MALA_LAYOUTS  # noqa: E402
from mavit_mm.tooling.results_file import write_json  # noqa: E402

# Time budget per step in minutes (enforced), each at most STEP_LIMIT_MIN: a
# quarter or more over the step's time on an H200
# (benchmarks/results/gpu-h200-2026-11-26/part-*/summary.json: env 1 s,
# kernel-tests 60 s, model-tests 55 s, sdpa 16 s, sweep 53 s, profile 2 s,
# model-profile 4 s, bench 22 s for two thirds of the rows it now has,
# tune-bh16 43 s; upernet-fps.json: a benchmark_fps.py child timing both
# UperNets eager and under a CUDA graph 27 s, one compiling one UperNet
# 49-54 s; backbones-profile-and-compiled.json: a cold compile of the
# MAViT-T backbone 16 s, of Swin-T's 24 s; fps-512.json: an UperNet compile
# 4-11 s once inductor's caches on disk are warm) or, where it was slower,
# on the H100 (benchmarks/results/gpu-h100-2026-11-25/*/summary.json: env
# 16 s, kernel-tests 134 s, model-tests 81 s, sdpa 35 s, sweep 66 s, bench
# 77 s for three times the rows it had, tune-bh16 75 s; tune-bh1, 34 s
# there, stops itself at 90% of its budget).
# Not run yet, so estimated from those: backbones (two cold compiles, the
# eager and CUDA-graph rows), compiled-profile (two compiles, inductor's
# Triton kernels cached by backbones), ablations (6 CUDA-graph forwards and 2
# training steps of seconds each, then 3 compiled forwards and 2 compiled
# training steps), the UperNet steps (three children each; the first
# compiles cold, the others find inductor's caches warm).
# ablations: 38 rows (15 under a CUDA graph and 15 eager at a few seconds each,
# 8 compiled at a cold compile each; ablation_rows), given the step's limit.
STEP_BUDGET_MIN = {'env': 0.4, 'kernel-tests': 2.8, 'model-tests': 1.75,
                   'backbones': 1.25, 'ablations': 5.0,
                   'upernet-fps': 1.85, 'upernet-fps-compile': 3.85,
                   'upernet-fps-1024': 3.75, 'model-profile': 0.25, 'sweep': 1.4,
                   'compiled-profile': 1.0, 'profile': 0.25, 'bench': 0.85, 'sdpa': 0.75,
                   'tune-bh16': 1.6, 'tune-bh1': 0.5}
STEPS = tuple(STEP_BUDGET_MIN)
STEP_LIMIT_MIN = 5.0
# One GPU command each, in priority order: correctness first, then what each
# switch is worth (PRIORITY_PARTS), then the targets (GPU_TARGETS), then what
# no target needs (plan_problems). Every step but env in exactly one.
PARTS = {1: ['env', 'kernel-tests', 'model-tests'],
         2: ['env', 'backbones', 'ablations'],
         3: ['env', 'upernet-fps', 'upernet-fps-compile'],
         4: ['env', 'upernet-fps-1024', 'model-profile', 'sweep'],
         5: ['env', 'compiled-profile', 'profile', 'bench', 'sdpa'],
         6: ['env', 'tune-bh16', 'tune-bh1']}
# A loan's first commands: whether the kernels compute the right thing, before
# anything is timed; then what each fast path is worth, which sets the defaults.
PRIORITY_PARTS = {1: ('correctness', ('kernel-tests', 'model-tests')),
                  2: ('what each switch is worth', ('backbones', 'ablations'))}
COMMAND_LIMIT_MIN = 8.0    # what one GPU command may take
PART_AIM_MIN = 7.0         # a part's budgets: the command's 8 minutes less the wheels and start-up
COMMAND_FILES = 8          # the files a GPU command returns
# The file each step writes (the sweep's name follows its options: run_step).
STEP_FILES = {step: f'{step}.json' for step in STEPS} | {'bench': 'bench_mala.json'}
TEST_FILES = {'kernel-tests': ('tests/test_ops/test_mala/test_mala_cuda.py',
                              'tests/test_ops/test_depthwise.py',
                              'tests/test_ops/test_fused_ops_under_compile.py'),
              'model-tests': ('tests/test_ops/test_mala/test_mala_triton.py',
                             'tests/test_models/test_fused_block.py')}
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
BACKBONE_SIZE = (512, 2048)
# The child processes' output, all steps in one file.
LOG_NAME = 'logs.txt'
SDPA_SIZES = ((512, 2048), (1024, 2048))
SWEEP_SIZES = ((512, 512), (512, 1024), (1024, 1024), (512, 2048), (1024, 2048))
# The sweep's training step (forward, backward, AdamW; peak memory).
TRAIN_SIZE, TRAIN_BATCH = BACKBONE_SIZE, 2
# The batches of the profile step's op calls at MAViT-T's shapes.
PROFILE_BATCHES = (1, 8)
MODEL_PROFILE_WARMUP = 10
# compiled-profile compiles without reduce-overhead's CUDA graph: the profiler
# then sees each kernel launch, and the graph would replay the same kernels.
PROFILE_COMPILE_MODE = 'default'
# The backbones step's modes (benchmark_fps.py's), in order: the lean forward's
# target first, the compile (the longest) last.
BACKBONE_MODES = ('cuda-graph', 'eager', 'compile')
# The ablations step's modes, in order: under a CUDA graph the GPU work shows
# (an eager forward at batch 1 is the host's launches, docs/gpu.md); eager is
# how users train; compile, the slowest (a cold compile a row), last.
ABLATION_MODES = ('cuda-graph', 'eager', 'compile')
UPERNET_CONFIGS = ('configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py',
                   'configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py')
# The UperNet baseline: its backbone is the Swin-T of every row (swin_tiny).
SWIN_T_CONFIG = UPERNET_CONFIGS[1]
SWIN_T_LABEL = "Swin-T (mmseg's SwinTransformer, the UperNet baseline's backbone)"
MAVIT_T_LABEL = 'MAViT-T (mala_impl auto)'
# The UperNet steps: benchmark_fps.py's modes and input size of each, bf16,
# both models in each child, FPS_RUNS children a step (upernet_fps_runs).
FPS_STEPS = {'upernet-fps': dict(modes=('eager', 'cuda-graph'), size=(512, 2048)),
             'upernet-fps-compile': dict(modes=('compile',), size=(512, 2048)),
             'upernet-fps-1024': dict(modes=('eager', 'cuda-graph', 'compile'), size=(1024, 2048))}
FPS_DTYPE = 'bf16'
# The targets judge each FPS figure by the median of three runs of --iters 50
# (benchmark_fps.py's default warm-up, 10).
FPS_RUNS, FPS_ITERS, FPS_WARMUP = 3, 50, 10
FPS_MIN_RUN_S = 10   # a child given less could not even build its models


class Target(NamedTuple):
    """A GPU target of the speed work and the step that measures it; ``goal``
    groups them (``GOALS``: the lean forward, the fused block, the MALA op,
    in the order the work is done). bf16,
    batch 1 and MAViT-T's figure over mmseg's Swin-T's in the same run unless
    it says otherwise; ``now``: on the H200 at 48ab1c3
    (benchmarks/results/gpu-h200-2026-11-26/; the backbone under a CUDA graph
    against timm's Swin-T), then after ``H100:`` where the first run of the
    fused block measured it (benchmarks/results/gpu-h100-2026-11-27/, at
    0f15fb3; the backbone against mmseg's Swin-T)."""
    goal: str
    measurement: str
    target: str
    now: str
    step: str


GPU_TARGETS = (
    Target('lean forward', 'backbone time, 512x2048, CUDA graph', '≤ 0.75', '0.886; H100: 0.657',
           'backbones'),
    Target('lean forward', 'UperNet FPS, 512x2048, CUDA graph', '≥ 1.15', '1.11, 1.11; H100: 1.21',
           'upernet-fps'),
    Target('lean forward', 'UperNet FPS, 512x2048, eager', '≥ 1.05', '0.98, 1.05; H100: 0.78',
           'upernet-fps'),
    Target('fused block', 'UperNet FPS, 512x2048, compile', '≥ 1.2', '0.91, 0.91', 'upernet-fps-compile'),
    Target('fused block', 'UperNet FPS, 512x2048, CUDA graph', '≥ 1.3', '1.11, 1.11; H100: 1.21',
           'upernet-fps'),
    Target('fused block', 'UperNet FPS, 512x2048, eager', '≥ 1.2', '0.98, 1.05; H100: 0.78',
           'upernet-fps'),
    Target('fused block', 'UperNet FPS, 1024x2048, eager / CUDA graph / compile', '≥ 1.3 each',
           '1.12 / 1.10 / 0.86', 'upernet-fps-1024'),
    Target('fused block', 'backbone time, 512x2048, CUDA graph', '≤ 0.6', '0.886; H100: 0.657',
           'backbones'),
    Target('fused block', 'backbone time, 512x2048, compiled', '≤ 0.8',
           '1.52 (3.74 vs 2.47 ms); H100: 1.378 (3.67 vs 2.66 ms)', 'backbones'),
    Target('fused block', 'training step time, 512x2048, batch 2', '≤ 0.85', '1.008', 'sweep'),
    Target('fused block', "GPU kernels per eager backbone forward (MAViT-T's)", '≤ 300', '543',
           'model-profile'),
    Target('MALA op', 'each MALA stage call, batch 1, fwd: GPU kernel time', '≤ 20 µs',
           '104 and 94 µs', 'profile'),
    Target('MALA op', 'each MALA stage call, batch 1, fwd+bwd: GPU kernel time', '≤ 60 µs',
           '257 and 233 µs', 'profile'),
    Target('MALA op', "the op's 4 calls in MAViT-T's forward at 512x2048: GPU time", '≤ 80 µs',
           '402 µs', 'model-profile'),
    Target('MALA op', 'each MALA stage call, batch 8, fwd: share of the copy bandwidth '
               '(B·heads 8 at N 65,536; B·heads 16 at N 16,384)', '≥ 40%',
           'stage 1 unmeasured; stage 2 10.3%', 'bench'),
    Target('MALA op', 'the op, B·heads 16, N 65,536, d 64, fwd: share of the copy bandwidth',
           '≥ 50%', '11.1%', 'bench'),
    Target('MALA op', 'the op, B·heads 16, N 65,536, d 64, fwd+bwd: share of the copy bandwidth',
           '≥ 35%', '12.8%', 'bench'),
    Target('MALA op', 'kernel tests on CUDA', 'all pass', '132 passed; H100: 151 passed, 2 failed',
           'kernel-tests'),
    Target('MALA op', 'model tests on CUDA, parity with the published outputs among them',
           'all pass', '66 passed, 1 failed; H100: 73 passed, 3 failed', 'model-tests'),
)
GOALS = ('lean forward', 'fused block', 'MALA op')
# Besides the targets' steps, what the speed work asks the check to measure
# (where compiled time goes, what each fast path is worth).
WANTED_STEPS = ('compiled-profile', 'ablations')


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
                             'profile): mavit_mm/tooling/mala_inputs.py (default '
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
    args = parser.parse_args(argv)
    args.steps = PARTS[args.part] if args.part else (args.steps or PARTS[1])
    args.budgets = dict(STEP_BUDGET_MIN)
    for item in args.budget:
        step, _, minutes = item.partition('=')
        if step not in STEP_BUDGET_MIN:
            parser.error(f'--budget {item}: no step {step!r}; the steps are {", ".join(STEPS)}')
        try:
            args.budgets[step] = float(minutes)
        except ValueError:
            parser.error(f'--budget {item}: {minutes!r} is not a number of minutes')
        if not 0 < args.budgets[step] <= STEP_LIMIT_MIN:
            parser.error(f'--budget {item}: a budget is more than 0 and at most '
                         f'{STEP_LIMIT_MIN:g} min')
    return args


# --------------------------------------------------------------------------
# Steps: each gets its budget in seconds and writes its results at once
# --------------------------------------------------------------------------
def step_env(out: Path, budget_s: float, commit: str | None = None) -> dict:
    import triton

    from benchmarks.bench_mala import COPY_METHOD, copy_bandwidth_tbps
    from mavit_mm.tooling.device import git_commit
    device = torch.device('cuda')
    props = torch.cuda.get_device_properties(device)
    driver = _command_output(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'])
    env = dict(device=torch.cuda.get_device_name(device), driver=driver,
               capability='.'.join(map(str, torch.cuda.get_device_capability(device))),
               multiprocessors=props.multi_processor_count,
               memory_gib=round(props.total_memory / 2 ** 30, 1),
               l2_cache_mib=round(getattr(props, 'L2_cache_size', 0) / 2 ** 20, 1),
               torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__,
               python=platform.python_version(), commit=commit or git_commit(),
               copy_bandwidth_tbps=round(copy_bandwidth_tbps(device), 3),
               copy_bandwidth_method=COPY_METHOD,
               date=datetime.datetime.now().isoformat(timespec='seconds'))
    _write(out / 'env.json', env)
    return env


def step_tests(name: str, out: Path, budget_s: float, workers: int) -> dict:
    junit = Path(tempfile.mkdtemp()) / f'{name}.xml'   # summarised into {name}.json
    command = [sys.executable, '-m', 'pytest', '-q', '-rfE', '-p', 'no:cacheprovider',
               f'--junitxml={junit}', *TEST_FILES[name]]
    if workers > 0 and _has_module('xdist'):
        command[3:3] = ['-n', str(workers)]
    run = _run_child(command, budget_s, out / LOG_NAME)
    summary = _junit_summary(junit) if not run['timed_out'] else _log_summary(run['output'])
    summary.update(command=' '.join(command[1:]), **{k: v for k, v in run.items()
                                                      if k != 'output'})
    print(run['output'][-3000:])
    _write(out / f'{name}.json', summary)
    return summary


def bench_command(output: Path, layout: str = DEFAULT_LAYOUT) -> list[str]:
    return ['benchmarks/bench_mala.py', *BENCH_ARGS, '--layout', layout, '--output', str(output)]


def step_bench(out: Path, budget_s: float, layout: str = DEFAULT_LAYOUT) -> dict:
    output = out / STEP_FILES['bench']
    run = _run_child([sys.executable, *bench_command(output, layout)], budget_s, out / LOG_NAME)
    return {'file': output.name, 'layout': layout,
            **{k: v for k, v in run.items() if k != 'output'}}


def tune_command(name: str, output: Path, budget_s: float,
                 layout: str = DEFAULT_LAYOUT) -> list[str]:
    # The sweep stops itself at 90% of the budget (keeping its JSON); the kill
    # at the budget is the backstop.
    return ['benchmarks/tune_mala.py', *TUNE_ARGS, '--batch-heads', str(TUNE_BATCH_HEADS[name]),
            '--layout', layout, '--budget-s', str(round(0.9 * budget_s)),
            '--output', str(output)]


def step_tune(name: str, out: Path, budget_s: float, layout: str = DEFAULT_LAYOUT) -> dict:
    output = out / STEP_FILES[name]
    run = _run_child([sys.executable, *tune_command(name, output, budget_s, layout)],
                     budget_s, out / LOG_NAME)
    return {'file': output.name, 'layout': layout,
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
    # Each builds (model, its name).
    builders = [lambda impl=impl: (_mavit(impl), f'MAViT-T {impl}') for impl in impls]
    builders.append(lambda: (swin_tiny(), SWIN_T_LABEL))

    def measure(rows_out, size, precision, batch, pass_name, build):
        row = dict(model=None, height=size[0], width=size[1], precision=precision, batch=batch,
                   pass_name=pass_name)
        if time.time() > deadline:
            rows_out.append(dict(row, skipped='time budget spent'))
            return
        try:
            model, row['model'] = build()
            images = torch.randn(batch, 3, *size, device=device)
            step = _backbone_step(model.to(device), images, precision, pass_name, device.type,
                                  optimizer=pass_name == 'train step')
            row.update(_time_in_mode(step, 'cuda-graph' if cuda_graphs else 'eager', device,
                                     batch=batch, rep=rep))
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


def _add_ratios(rows: list[dict]) -> None:
    """time / Swin-T's time at the same size, precision, batch, pass and mode."""
    def key(row):
        return (row['height'], row['width'], row['precision'], row['batch'], row['pass_name'],
                row.get('mode'))
    swin = {key(row): row.get('time_ms') for row in rows if row['model'].startswith('Swin-T')}
    for row in rows:
        base = swin.get(key(row))
        if row.get('time_ms') and base and not row['model'].startswith('Swin-T'):
            row['time_vs_swin'] = row['time_ms'] / base


# --------------------------------------------------------------------------
# The backbones in benchmark_fps.py's modes (backbones), and the fast paths
# switched off in turn (ablations)
# --------------------------------------------------------------------------
def step_backbones(out: Path, budget_s: float, device: str = 'cuda', size=BACKBONE_SIZE,
                   modes=BACKBONE_MODES, rep: int = 200) -> dict:
    """MAViT-T (``mala_impl`` auto) against Swin-T (``swin_tiny``), bf16
    autocast, batch 1, eval mode under no_grad, in each of ``modes``
    (``_time_in_mode``): median ms and MAViT-T's time over Swin-T's per mode."""
    from tools.analysis_tools.benchmark_fps import COMPILE_MODE
    device = torch.device(device)
    path = out / STEP_FILES['backbones']
    rows = []
    report = dict(note='backbones alone, batch 1, eval mode under no_grad, torch.autocast bf16; '
                       'time_ms: median of triton.testing.do_bench (CUDA) of a forward: eager, '
                       'replayed from a CUDA graph (benchmark_fps.capture_cuda_graph), or '
                       'compiled (benchmark_fps.compiled: compile_mode, compile_s apart); '
                       "time_vs_swin: MAViT-T's time over Swin-T's in the same mode",
                  height=size[0], width=size[1], compile_mode=COMPILE_MODE,
                  complete=False, results=rows, time_vs_swin={})
    deadline = time.time() + budget_s
    torch.manual_seed(0)
    models = [(MAVIT_T_LABEL, _mavit('auto').to(device)), (SWIN_T_LABEL, swin_tiny().to(device))]
    images = torch.randn(1, 3, *size, device=device)
    for mode in modes:
        for name, model in models:
            row = dict(model=name, mode=mode, height=size[0], width=size[1], precision='bf16',
                       batch=1, pass_name='fwd')
            if time.time() > deadline:
                rows.append(dict(row, skipped='time budget spent'))
                continue
            try:
                step = _backbone_step(model, images, 'bf16', 'fwd', device.type)
                row.update(_time_in_mode(step, mode, device, rep=rep))
            except Exception as exc:   # e.g. a capture or a compile that fails: record it
                row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
            rows.append(row)
            _add_ratios(rows)
            report['time_vs_swin'] = {row['mode']: round(row['time_vs_swin'], 4)
                                      for row in rows if 'time_vs_swin' in row}
            _write(path, report)
            print(f'  {mode:10} {name[:45]:45} ' + (f'{row["time_ms"]:8.3f} ms' if 'time_ms' in row
                                                    else row['error']), flush=True)
            _empty_cache(device)
    report['complete'] = not any('skipped' in row for row in rows)
    _write(path, report)
    return {'rows': len(rows), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in rows),
            'time_vs_swin': report['time_vs_swin']}


def ablation_rows(modes=ABLATION_MODES) -> list[dict]:
    """The ablations step's rows in the order they run, the most wanted first:
    per mode, all switches on, then each switch that acts in that mode
    (``FAST_PATH_MODES``) off in turn, then all on again (``repeat``) but
    where that costs a compile: the two all-on rows bound how far the timings
    drifted while the rows ran (the eager rows of the first GPU run fell by
    half, whatever was switched off). A forward, but for the switches that
    only change a training step (``TRAINING_ONLY``), timed on one with all-on
    rows of its own."""
    from mavit_mm.ops.fast_paths import FAST_PATH_MODES, FAST_PATHS, TRAINING_ONLY
    rows = []
    for mode in modes:
        for pass_name in ('fwd', 'fwd+bwd'):
            switches = [name for name in FAST_PATHS if mode in FAST_PATH_MODES[name]
                        and (name in TRAINING_ONLY) == (pass_name == 'fwd+bwd')]
            if switches:
                rows += [dict(mode=mode, pass_name=pass_name, switches_off=off)
                         for off in ([], *([name] for name in switches))]
                if mode != 'compile':
                    rows.append(dict(mode=mode, pass_name=pass_name, switches_off=[],
                                     repeat=True))
    return rows


def step_ablations(out: Path, budget_s: float, device: str = 'cuda', size=BACKBONE_SIZE,
                   rows=None, rep: int = 200) -> dict:
    """MAViT-T (``mala_impl`` auto) with each fast-path switch off in turn
    against all switches on (``ablation_rows``, or ``rows``), bf16 autocast,
    batch 1: a forward in eval mode under no_grad, or a training step (forward
    and backward, train mode). One set of weights: each row's model is built
    with its switches and loads the same state dict."""
    from mavit_mm.ops.fast_paths import FAST_PATH_MODES, FAST_PATHS, TRAINING_ONLY
    from tools.analysis_tools.benchmark_fps import COMPILE_MODE
    device = torch.device(device)
    path = out / STEP_FILES['ablations']
    plan = ablation_rows() if rows is None else rows
    results = []
    report = dict(note='MAViT-T backbone, batch 1, torch.autocast bf16; fwd: eval mode under '
                       'no_grad; fwd+bwd: train mode, loss = sum of the outputs\' means, '
                       'backward; switches_off: the fast_paths switches off in the row '
                       '(mavit_mm/ops/fast_paths.py), every other one on (ALL_ON, whatever '
                       'the defaults); time_ms: median of '
                       'triton.testing.do_bench (CUDA), replayed from a CUDA graph or compiled '
                       '(compile_mode); time_vs_all_on: over the mean of the all-on rows of '
                       'the same mode and pass (the second, repeat, closes the case); drift: '
                       'the closing all-on time over the opening one; every row loads the '
                       'same weights',
                  height=size[0], width=size[1], compile_mode=COMPILE_MODE,
                  switch_modes=FAST_PATH_MODES, training_only=list(TRAINING_ONLY),
                  complete=False, results=results)
    deadline = time.time() + budget_s
    torch.manual_seed(0)
    weights = _mavit('auto').state_dict()
    images = torch.randn(1, 3, *size, device=device)
    for planned in plan:
        row = dict(planned, switches_off=list(planned['switches_off']))
        if time.time() > deadline:
            results.append(dict(row, skipped='time budget spent'))
            continue
        try:
            model = _mavit('auto', {name: name not in row['switches_off'] for name in FAST_PATHS})
            model.load_state_dict(weights)
            step = _backbone_step(model.to(device), images, 'bf16', row['pass_name'],
                                  device.type)
            row.update(_time_in_mode(step, row['mode'], device, rep=rep))
        except Exception as exc:   # e.g. a switch the model does not take: record it
            row.update(error=f'{type(exc).__name__}: {str(exc)[:300]}')
        model = step = None
        results.append(row)
        report['drift'] = _add_ablation_ratios(results)
        _write(path, report)
        print(f'  {row["mode"]:10} {row["pass_name"]:7} off: '
              f'{", ".join(row["switches_off"]) or "none":22} '
              + (f'{row["time_ms"]:8.3f} ms' + (f' ({row["time_vs_all_on"]:.3f} of all on)'
                                                if 'time_vs_all_on' in row else '')
                 if 'time_ms' in row else row['error']), flush=True)
        _empty_cache(device)
    report['complete'] = not any('skipped' in row for row in results)
    _write(path, report)
    return {'rows': len(results), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in results)}


def _add_ablation_ratios(rows: list[dict]) -> dict:
    """time / the mean of the all-on rows of the same mode and pass; returns
    each case's drift (the closing all-on row over the opening one)."""
    all_on = {}
    for row in rows:
        if not row['switches_off'] and row.get('time_ms'):
            all_on.setdefault((row['mode'], row['pass_name']), []).append(row['time_ms'])
    for row in rows:
        times = all_on.get((row['mode'], row['pass_name']))
        if row.get('time_ms') and times:
            row['time_vs_all_on'] = row['time_ms'] / statistics.mean(times)
    return {f'{mode} {pass_name}': round(times[-1] / times[0], 4)
            for (mode, pass_name), times in all_on.items() if len(times) > 1}


def _time_in_mode(step: Callable, mode: str, device: torch.device, batch: int = 1,
                  rep: int = 200) -> dict:
    """``step`` timed as benchmark_fps.py's ``mode`` runs a forward, through its
    own code: ``eager`` as it is; ``cuda-graph`` captured once
    (``capture_cuda_graph``) and replayed; ``compile`` compiled by
    ``compiled`` (its seconds as ``compile_s``; dynamo reset afterwards, which
    frees the compiled graphs). ``_time_backbone_step``'s median ms,
    throughput and peak memory."""
    from tools.analysis_tools import benchmark_fps
    extra = {}
    if mode == 'cuda-graph':
        step, _ = benchmark_fps.capture_cuda_graph(step, device, benchmark_fps.CAPTURE_WARMUP)
    elif mode == 'compile':
        step, compile_s, _ = benchmark_fps.compiled(step, device)
        extra['compile_s'] = round(compile_s, 1)
    elif mode != 'eager':
        raise ValueError(f'unknown mode {mode!r}: one of {benchmark_fps.MODES}')
    try:
        return dict(_time_backbone_step(step, batch, device, warmup=25, rep=rep), **extra)
    finally:
        if mode == 'compile':
            torch._dynamo.reset()


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


def step_profile(out: Path, budget_s: float, device: str = 'cuda', shapes=None,
                 layout: str = DEFAULT_LAYOUT) -> dict:
    """Kernel time against host time per call of the fused op (bf16 where
    CUDA) at MAViT-T's shapes (``mala_model_shapes``; q, k, v in ``layout``):
    the profiler's GPU kernel time, the wall time of a synchronised call, and
    the host's time to issue a call (un-synchronised calls)."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.bench_mala import make_step
    from mavit_mm.ops.rope2d import RoPE2d
    from mavit_mm.tooling.mala_inputs import layout_of, mala_inputs
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
            _synchronize(device)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
            with profile(activities=activities) as prof:
                for _ in range(calls):
                    step()
                _synchronize(device)
            kernels = {name: round(us / calls, 2) for name, us, _ in _profiled_kernels(prof) if us}
            wall_us = _median_ms(step, device, 25, 100) * 1e3
            host_us = _host_issue_us(step, device, calls)
            kernel_us = sum(kernels.values())
            row.update(wall_us=round(wall_us, 2), kernel_us=round(kernel_us, 2),
                       host_issue_us=round(host_us, 2), kernels=kernels,
                       host_bound=bool(on_cuda and host_us > kernel_us),
                       host_python=_python_profile(step, device, calls))
            rows.append(row)
            _write(out / STEP_FILES['profile'], report)
            print(f'  stage {shape["stage"]} batch {shape["batch"]} heads {shape["heads"]} '
                  f'{shape["height"]}x{shape["width"]} d={shape["head_dim"]} {layout} '
                  f'{pass_name:8} wall {wall_us:8.1f} us, kernels {kernel_us:8.1f} us, '
                  f'host issue {host_us:8.1f} us', flush=True)
    report['complete'] = not any('skipped' in row for row in rows)
    _write(out / STEP_FILES['profile'], report)
    return {'rows': len(rows), 'complete': report['complete']}


# --------------------------------------------------------------------------
# Where a forward's GPU time goes (model-profile)
# --------------------------------------------------------------------------
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


def _profiled_kernels(prof) -> list[tuple[str, float, int]]:
    """(name, GPU µs, launches) of each GPU kernel and memory operation a
    ``torch.profiler`` profile holds."""
    return [(event.key, _device_time_us(event), event.count) for event in prof.key_averages()
            if 'CUDA' in str(getattr(event, 'device_type', ''))]


def step_model_profile(out: Path, budget_s: float, device: str = 'cuda',
                       size=BACKBONE_SIZE, warmup: int = MODEL_PROFILE_WARMUP,
                       compiled: bool = False) -> dict:
    """One bf16 (autocast) forward of each backbone (MAViT-T, ``mala_impl``
    auto; Swin-T, ``swin_tiny``), batch 1, eval mode, under the profiler after
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
    models = [(MAVIT_T_LABEL, lambda: _mavit('auto')), (SWIN_T_LABEL, swin_tiny)]
    rows = []
    report = dict(note='backbones alone, batch 1, eval mode under no_grad, torch.autocast bf16; '
                       'one forward profiled after warm-up; time_us: GPU time of the kernels '
                       'and memory operations of each category; kernels: their launches; '
                       'forward_ms: median wall time of the warm-up forwards after the first'
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
            forward = _backbone_step(model, images, 'bf16', 'fwd', device.type)
            if compiled:
                forward, compile_s, _ = benchmark_fps.compiled(forward, device,
                                                               PROFILE_COMPILE_MODE)
            times_ms = [benchmark_fps.timed(forward, device) * 1e3 for _ in range(warmup)]
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
            with profile(activities=activities) as prof:
                forward()
                _synchronize(device)
            warm_ms = sorted(times_ms[1:] or times_ms)
            row = dict(model=label, forward_ms=round(warm_ms[len(warm_ms) // 2], 3),
                       **({'compile_s': round(compile_s, 1)} if compiled else {}),
                       **gpu_time_by_category(_profiled_kernels(prof)))
        except Exception as exc:   # e.g. out of memory, a compile that fails: record it
            row = dict(model=label, error=f'{type(exc).__name__}: {str(exc)[:300]}')
        finally:
            if compiled:
                torch._dynamo.reset()   # frees the compiled graphs
        rows.append(row)
        _write(path, report)
        print(f'  {label[:45]:45} ' + (row['error'] if 'error' in row else
              f'{row["gpu_time_us"] / 1e3:8.2f} ms on the GPU in {row["kernel_count"]} kernels: '
              + ', '.join(f'{category} {entry["share"]:.0%}'
                          for category, entry in row['categories'].items() if entry['kernels'])),
              flush=True)
        model = forward = None
        _empty_cache(device)
    report['complete'] = not any('skipped' in row for row in rows)
    _write(path, report)
    return {'rows': len(rows), 'complete': report['complete'],
            'errors_recorded': sum('error' in row for row in rows)}


# --------------------------------------------------------------------------
# UperNet: MAViT-T against Swin-T (upernet-fps, upernet-fps-compile,
# upernet-fps-1024)
# --------------------------------------------------------------------------
def upernet_fps_runs(step: str = 'upernet-fps') -> list[dict]:
    """The ``benchmark_fps.py`` runs of an UperNet step (``FPS_STEPS``): both
    models in each, bf16, the step's modes and size, ``FPS_RUNS`` times (the
    targets' figure is the median of three runs; a compile per model takes a
    minute or more cold, seconds once inductor's caches are warm)."""
    spec = FPS_STEPS[step]
    return [dict(configs=list(UPERNET_CONFIGS), modes=list(spec['modes']), dtype=FPS_DTYPE,
                 height=spec['size'][0], width=spec['size'][1], run=run)
            for run in range(1, FPS_RUNS + 1)]


def fps_command(run: dict, output: Path) -> list[str]:
    return ['tools/analysis_tools/benchmark_fps.py', *run['configs'], '--modes', *run['modes'],
            '--dtype', run['dtype'], '--shape', str(run['height']), str(run['width']),
            '--iters', str(FPS_ITERS), '--warmup', str(FPS_WARMUP), '--out', str(output)]


def step_upernet_fps(out: Path, budget_s: float, name: str = 'upernet-fps') -> dict:
    """Each run of ``upernet_fps_runs(name)`` as a child process, given what
    is left of the budget; their rows gathered into one JSON (a GPU command
    returns few files), each with its run, MAViT-T's FPS over Swin-T's in the
    same run, mode, dtype and size, and the median of those over the runs."""
    path = out / STEP_FILES[name]
    runs, rows = [], []
    report = dict(configs=list(UPERNET_CONFIGS), iters=FPS_ITERS, warmup=FPS_WARMUP,
                  note='tools/analysis_tools/benchmark_fps.py, whole models in tensor mode, '
                       'batch 1, one child process per run; run: which; fps_vs_swin: MAViT-T\'s '
                       'fps over Swin-T\'s in the same run, mode, dtype and size; medians: '
                       'those ratios over the runs and their median, the targets\' figure',
                  complete=False, runs=runs, results=rows, medians=[])
    if not _has_module('mmseg'):
        report['error'] = 'mmseg is not importable: install the wheels of scripts/gpu_wheels.sh'
        _write(path, report)
        return {'rows': 0, 'complete': False, 'failed': 1, 'error': report['error']}
    deadline = time.time() + budget_s
    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        for index, run in enumerate(upernet_fps_runs(name)):
            left = deadline - time.time()
            if left < FPS_MIN_RUN_S:
                runs.append(dict(run, skipped='time budget spent'))
                continue
            child_json = scratch / f'run{index}.json'
            child = _run_child([sys.executable, *fps_command(run, child_json)], left, out / LOG_NAME)
            runs.append(dict(run, **{k: v for k, v in child.items() if k not in ('output', 'log')}))
            if child_json.exists():
                results = json.loads(child_json.read_text())
                rows.extend(dict(row, run=run['run']) for row in results.get('results', []))
            _add_fps_ratios(rows)
            report['medians'] = fps_medians(rows)
            _write(path, report)
            print(f'  run {run["run"]}: {"+".join(run["modes"]):26} {run["dtype"]} '
                  f'{run["height"]}x{run["width"]}: '
                  f'{"killed at the budget" if child["timed_out"] else "exit " + str(child["returncode"])}'
                  f' after {child["seconds"]:.0f} s', flush=True)
    for median in report['medians']:
        print(f'  {median["mode"]:10} {median["height"]}x{median["width"]}: MAViT-T / Swin-T fps '
              f'{median["fps_vs_swin_median"]:.3f} (median of {median["fps_vs_swin_per_run"]})', flush=True)
    report['complete'] = all(run.get('returncode') == 0 for run in runs)
    _write(path, report)
    return {'rows': len(rows), 'complete': report['complete'],
            'failed': sum(run.get('returncode') not in (0, None) for run in runs),
            'runs_cut_or_skipped': sum(bool(run.get('timed_out') or run.get('skipped'))
                                       for run in runs),
            'fps_vs_swin_median': {f'{m["mode"]} {m["height"]}x{m["width"]}': round(
                m['fps_vs_swin_median'], 4) for m in report['medians']}}


def _fps_case(row: dict) -> tuple:
    return row.get('mode'), row.get('dtype'), row.get('height'), row.get('width')


def _is_swin(row: dict) -> bool:
    return 'swin' in str(row.get('config', '')).lower()


def _add_fps_ratios(rows: list[dict]) -> None:
    """fps / Swin-T's fps in the same run, mode, dtype and size."""
    swin = {(row.get('run'), *_fps_case(row)): row.get('fps') for row in rows if _is_swin(row)}
    for row in rows:
        base = swin.get((row.get('run'), *_fps_case(row)))
        if not _is_swin(row) and row.get('fps') and base:
            row['fps_vs_swin'] = row['fps'] / base


def fps_medians(rows: list[dict]) -> list[dict]:
    """Per mode, dtype and size: MAViT-T's fps over Swin-T's in each run, and
    their median (the targets judge by the median of three runs)."""
    ratios = {}
    for row in rows:
        if 'fps_vs_swin' in row:
            ratios.setdefault(_fps_case(row), []).append(row['fps_vs_swin'])
    return [dict(mode=mode, dtype=dtype, height=height, width=width,
                 fps_vs_swin_per_run=[round(ratio, 4) for ratio in values],
                 fps_vs_swin_median=statistics.median(values))
            for (mode, dtype, height, width), values in ratios.items()]


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
def _mavit(impl: str, fast_paths: dict | None = None):
    """MAViT-T; ``fast_paths`` (switches to change) passed only when given."""
    from mavit_mm import MAViT
    switches = {} if fast_paths is None else dict(fast_paths=fast_paths)
    return MAViT(arch='tiny', mala_impl=impl, **switches)


def mala_model_shapes(arch: str = 'tiny', size=BACKBONE_SIZE, batches=PROFILE_BATCHES) -> list[dict]:
    """The fused op's calls in MAViT-``arch`` at input ``size``: one per
    stage with MALA and batch, from the preset (``ARCH_SETTINGS``) and the
    model's default ``attn_types``. A stage's map is the input over 4 (the
    stem's stride) times 2 per stage before it."""
    from mavit_mm.models.mavit import ARCH_SETTINGS, MAViT
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


def swin_tiny() -> torch.nn.Module:
    """Swin-T as the UperNet baseline builds it: mmseg's ``SwinTransformer``
    with the backbone settings of ``SWIN_T_CONFIG`` (96 channels, depths
    2/2/6/2, windows of 7), freshly initialised. The Swin-T of every row, so
    that the backbone rows and the UperNet rows compare the same baseline."""
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.model_builder import build_model
    cfg = load_config(REPO_ROOT / SWIN_T_CONFIG)
    return build_model(cfg, model_cfg=cfg.model.backbone)


def _backbone_step(model, images, precision: str, pass_name: str,
                   device_type: str = 'cuda', optimizer: bool = False) -> Callable:
    def autocast():   # made inside the step, which torch.compile then traces
        return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == 'bf16')
    if pass_name == 'fwd':
        model.eval()

        def forward():
            with torch.no_grad(), autocast():
                return model(images)
        return forward
    model.train()
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-4) if optimizer else None

    def forward_backward():
        with autocast():
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
    write_json(path, data, default=str)


def dry_run(args) -> int:
    """Check what the GPU run needs, without a GPU: imports, the child
    processes' arguments, the models the steps build, the parts' budgets,
    files and order; print the plan."""
    problems = []
    for module in ('triton', 'mmengine', 'mmseg', 'pytest', 'numpy'):
        if not _has_module(module):
            problems.append(f'{module} is not importable')
    for name in (*(path for paths in TEST_FILES.values() for path in paths), *UPERNET_CONFIGS):
        if not (REPO_ROOT / name).is_file():
            problems.append(f'{name} is missing')
    problems += plan_problems()
    from benchmarks import bench_mala, tune_mala
    out = Path(tempfile.gettempdir())
    children = [(bench_mala.parse_args, bench_command(out / 'bench.json', args.layout)),
                (tune_mala.parse_args, tune_command('tune-bh16', out / 'tune.json', 60,
                                                    args.layout))]
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
    import mavit_mm  # noqa: F401  (the backbone and the op import)
    from mavit_mm.ops.mala import function  # noqa: F401  (the Triton launches import)
    print(f'MALA calls profiled (MAViT-T at {BACKBONE_SIZE[0]}x{BACKBONE_SIZE[1]}): ' + '; '.join(
        f'stage {s["stage"]} batch {s["batch"]} heads {s["heads"]} {s["height"]}x{s["width"]} '
        f'd {s["head_dim"]}' for s in mala_model_shapes()))
    ablations = {}
    for row in ablation_rows():
        ablations.setdefault(f'{row["mode"]} {row["pass_name"]}', []).extend(row['switches_off'])
    for case, switches in ablations.items():
        print(f'ablations, {case}: all on, then off in turn: {", ".join(switches)}')
    total = sum(args.budgets[s] for s in args.steps)
    print(f'plan: {", ".join(args.steps)} into {args.out}/ (at most {total:.2f} min, '
          f'layout {args.layout})')
    for part, steps in PARTS.items():
        print(f'part {part}: {" ".join(steps)} '
              f'(at most {part_minutes(part):.2f} min, {len(steps) + 2} files)')
    whole = sum(part_minutes(part) for part in PARTS)
    longest = max(part_minutes(part) for part in PARTS)
    print(f'whole check: {len(PARTS)} parts in priority order, one GPU command of at most '
          f'{COMMAND_LIMIT_MIN:g} min each ({whole:.2f} min of budgets; the longest part '
          f'{longest:.2f}, planned to at most {PART_AIM_MIN:.2f})')
    for target in GPU_TARGETS:
        print(f'target of the {target.goal}: {target.measurement} {target.target} '
              f'(now {target.now}): {target_file(target)}')
    for problem in problems:
        print(f'problem: {problem}')
    return 1 if problems else 0


def model_problems() -> list[str]:
    """What the model steps would meet: Swin-T not built from its config, a
    MAViT that takes no fast-path switches (the ablations would time their
    all-on rows only)."""
    problems = []
    try:
        swin_tiny()
    except Exception as exc:
        problems.append(f'Swin-T does not build from {SWIN_T_CONFIG}: {type(exc).__name__}: {exc}')
    from mavit_mm.models.mavit import MAViT
    if 'fast_paths' not in inspect.signature(MAViT).parameters:
        problems.append('MAViT takes no fast_paths: the ablations step would time its all-on '
                        'rows only')
    return problems


def part_minutes(part: int) -> float:
    return round(sum(STEP_BUDGET_MIN[step] for step in PARTS[part]), 2)


def part_of(step: str) -> int | None:
    """The part that runs ``step`` (``env``: the first)."""
    return next((part for part, steps in PARTS.items() if step in steps), None)


def target_file(target: Target) -> str:
    """Where a target's figure lands: ``part-<N>/<step's file>``, the folder
    of the part's command (its ``--out``) in a GPU run's results."""
    return f'part-{part_of(target.step)}/{STEP_FILES.get(target.step)}'


def plan_problems() -> list[str]:
    """What breaks the plan: a step over its limit, in no part or in two
    (``env`` is in every part), ``tune-bh1`` without ``tune-bh16`` before it,
    a part over its time or over the files a GPU command returns; a target
    measured by no step; the first parts (``PRIORITY_PARTS``: correctness,
    then what each switch is worth) not as they are planned; a step that
    measures a target after one that measures none."""
    problems = [f'step {step} has a budget of {minutes} min (limit {STEP_LIMIT_MIN})'
                for step, minutes in STEP_BUDGET_MIN.items() if minutes > STEP_LIMIT_MIN]
    for step in STEPS:
        parts = [part for part, steps in PARTS.items() if step in steps]
        if not parts:
            problems.append(f'step {step} is in no part')
        elif len(parts) > 1 and step != 'env':
            problems.append(f'step {step} is in parts {", ".join(map(str, parts))}')
    for part, steps in PARTS.items():
        # tune-bh1's budget counts on the candidates tune-bh16 compiled.
        if 'tune-bh1' in steps and 'tune-bh16' not in steps[:steps.index('tune-bh1')]:
            problems.append(f'part {part} runs tune-bh1 without tune-bh16 before it')
        if part_minutes(part) > PART_AIM_MIN:
            problems.append(f'part {part} needs {part_minutes(part):g} min '
                            f'(limit {PART_AIM_MIN})')
        files = {STEP_FILES[step] for step in steps} | {'summary.json', LOG_NAME}
        if len(files) > COMMAND_FILES:
            problems.append(f'part {part} writes {len(files)} files (a GPU command returns '
                            f'{COMMAND_FILES})')
    problems += [f'the target "{target.measurement}" of the {target.goal} names no step '
                 f'{target.step!r}' for target in GPU_TARGETS if target.step not in STEPS]
    for part, (why, steps) in PRIORITY_PARTS.items():
        problems += [f'step {step} is {why} but is in part {part_of(step)}, not {part}'
                     for step in steps if part_of(step) != part]
        problems += [f'part {part} is {why} but runs {step}' for step in PARTS.get(part, ())
                     if step not in ('env', *steps)]
    # The targets first: no step that measures none before one that does.
    wanted = {target.step for target in GPU_TARGETS} | set(WANTED_STEPS)
    order = [step for part in sorted(PARTS) for step in PARTS[part] if step != 'env']
    unwanted = next((step for step in order if step not in wanted), None)
    if unwanted:
        problems += [f'step {step} measures a target but runs after {unwanted}, which '
                     f'measures none' for step in order[order.index(unwanted):] if step in wanted]
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
    if name == 'ablations':
        return step_ablations(out, budget_s)
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
        _write(args.out / 'summary.json', summary)
    print(json.dumps(summary, indent=1, default=str)[:4000])
    return 0 if all(summary[name].get('ok') for name in args.steps) else 1


if __name__ == '__main__':
    sys.exit(main())
