"""The GPU check's plan: each step's time budget, the parts (one GPU command
each) in priority order, the file each step writes, the GPU machine's limits
(``MachineLimits``: options of the command line, today's values the
defaults) and ``plan_problems``, what breaks the plan. No torch: the pages'
generator reads it too."""
from __future__ import annotations

from typing import NamedTuple

from benchmarks import gpu_targets

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
# Triton kernels cached by backbones), the UperNet steps (three children
# each; the first compiles cold, the others find inductor's caches warm).
# ablations: 331 s for 38 rows in gpu-h100-2026-11-27b/part-2/summary.json, of
# which the 8 compiled rows' compiles alone took 284 s (their compile_s); now
# 15 rows under a CUDA graph (2-3 s each), 12 eager forwards (20 rounds of
# two calls of ~20-35 ms, 3 warm-up calls each) and 10 eager training steps
# (10 rounds of two ~75-200 ms calls): about 2 minutes.
# ablations-compile: those 8 compiled rows (the forwards' compiles 16-30 s,
# the training steps' 69 s): about 5 minutes and a half, so the step
# overruns its budget by its last row (an in-process step stops between
# rows), which part 7's minutes leave room for.
# tune-depthwise: about 69 compiles (tune_depthwise.py --dry-run) at 1-2.5 s each
# as tune-bh16's, and some 220 timings of tens of ms: about 2 min at 1.5 s a
# compile; it stops itself at 90%, the norm launches (last) then cut short.
STEP_BUDGET_MIN = {'env': 0.4, 'kernel-tests': 2.8, 'model-tests': 1.75,
                   'backbones': 1.25, 'ablations': 3.0, 'ablations-compile': 5.0,
                   'upernet-fps': 1.85, 'upernet-fps-compile': 3.85,
                   'upernet-fps-1024': 3.75, 'model-profile': 0.25, 'sweep': 1.4,
                   'compiled-profile': 1.0, 'profile': 0.25, 'bench': 0.85, 'sdpa': 0.75,
                   'tune-bh16': 1.6, 'tune-bh1': 0.5, 'tune-depthwise': 2.5}
STEPS = tuple(STEP_BUDGET_MIN)
STEP_LIMIT_MIN = 5.0
# One GPU command each, in priority order: correctness first, then what each
# switch is worth (PRIORITY_PARTS), then the targets (gpu_targets.GPU_TARGETS),
# then what no target needs (plan_problems). Every step but env in exactly one.
PARTS = {1: ['env', 'kernel-tests', 'model-tests'],
         2: ['env', 'backbones', 'ablations'],
         3: ['env', 'upernet-fps', 'upernet-fps-compile'],
         4: ['env', 'upernet-fps-1024', 'model-profile', 'sweep'],
         5: ['env', 'compiled-profile', 'profile', 'bench', 'sdpa'],
         6: ['env', 'tune-bh16', 'tune-bh1', 'tune-depthwise'],
         7: ['env', 'ablations-compile']}
# A loan's first commands: whether the kernels compute the right thing, before
# anything is timed; then what each fast path is worth, which sets the defaults.
PRIORITY_PARTS = {1: ('correctness', ('kernel-tests', 'model-tests')),
                  2: ('what each switch is worth', ('backbones', 'ablations'))}


class MachineLimits(NamedTuple):
    """What a GPU command may take and return (``--command-minutes``,
    ``--part-minutes``, ``--command-files``)."""
    command_limit_min: float = 8.0   # what one GPU command may take
    # A part's budgets: the command's minutes less the wheels and start-up.
    part_aim_min: float = 7.0
    command_files: int = 8           # the files a GPU command returns


MACHINE_LIMITS = MachineLimits()   # today's GPU machine


# The file each step writes (the sweep's name follows its options: run_step).
STEP_FILES = {step: f'{step}.json' for step in STEPS} | {'bench': 'bench_mala.json'}
# The child processes' output, all steps in one file.
LOG_NAME = 'logs.txt'
# Besides the targets' steps, what the speed work asks the check to measure
# (where compiled time goes, what each fast path is worth). Not the compiled
# ablations (part 7, last): gpu-h100-2026-11-27b measured them after the
# compile fix, where the eager rows were the ones left without a usable figure.
WANTED_STEPS = ('compiled-profile', 'ablations')


def part_minutes(part: int) -> float:
    return round(sum(STEP_BUDGET_MIN[step] for step in PARTS[part]), 2)


def part_of(step: str) -> int | None:
    """The part that runs ``step`` (``env``: the first)."""
    return next((part for part, steps in PARTS.items() if step in steps), None)


def target_file(target: gpu_targets.Target) -> str:
    """Where a target's figure lands: ``part-<N>/<step's file>``, the folder
    of the part's command (its ``--out``) in a GPU run's results."""
    return f'part-{part_of(target.step)}/{STEP_FILES.get(target.step)}'


def plan_problems(limits: MachineLimits = MACHINE_LIMITS) -> list[str]:
    """What breaks the plan: a step over its limit, in no part or in two
    (``env`` is in every part), ``tune-bh1`` without ``tune-bh16`` before it,
    a part over its time or over the files a GPU command returns; a target
    measured by no step; the first parts (``PRIORITY_PARTS``: correctness,
    then what each switch is worth) not as they are planned; a step that
    measures a target after one that measures none; a part's aim beyond
    what a command may take."""
    problems = [f'a part is planned to {limits.part_aim_min:g} min, more than the '
                f'{limits.command_limit_min:g} min a GPU command may take'
                ] if limits.part_aim_min > limits.command_limit_min else []
    problems += [f'step {step} has a budget of {minutes} min (limit {STEP_LIMIT_MIN})'
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
        if part_minutes(part) > limits.part_aim_min:
            problems.append(f'part {part} needs {part_minutes(part):g} min '
                            f'(limit {limits.part_aim_min})')
        files = {STEP_FILES[step] for step in steps} | {'summary.json', LOG_NAME}
        if len(files) > limits.command_files:
            problems.append(f'part {part} writes {len(files)} files (a GPU command returns '
                            f'{limits.command_files})')
    problems += [f'the target "{target.measurement}" of the {target.goal} names no step '
                 f'{target.step!r}' for target in gpu_targets.GPU_TARGETS
                 if target.step not in STEPS]
    for part, (why, steps) in PRIORITY_PARTS.items():
        problems += [f'step {step} is {why} but is in part {part_of(step)}, not {part}'
                     for step in steps if part_of(step) != part]
        problems += [f'part {part} is {why} but runs {step}' for step in PARTS.get(part, ())
                     if step not in ('env', *steps)]
    # The targets first: no step that measures none before one that does.
    wanted = {target.step for target in gpu_targets.GPU_TARGETS} | set(WANTED_STEPS)
    order = [step for part in sorted(PARTS) for step in PARTS[part] if step != 'env']
    unwanted = next((step for step in order if step not in wanted), None)
    if unwanted:
        problems += [f'step {step} measures a target but runs after {unwanted}, which '
                     f'measures none' for step in order[order.index(unwanted):] if step in wanted]
    return problems


def budgets_with(changes: list[str]) -> dict[str, float]:
    """``STEP_BUDGET_MIN`` with the ``STEP=MIN`` changes of ``--budget``;
    ``ValueError`` saying what is wrong with one."""
    budgets = dict(STEP_BUDGET_MIN)
    for item in changes:
        step, _, minutes = item.partition('=')
        if step not in STEP_BUDGET_MIN:
            raise ValueError(f'--budget {item}: no step {step!r}; the steps are {", ".join(STEPS)}')
        try:
            budgets[step] = float(minutes)
        except ValueError:
            raise ValueError(f'--budget {item}: {minutes!r} is not a number of minutes') from None
        if not 0 < budgets[step] <= STEP_LIMIT_MIN:
            raise ValueError(f'--budget {item}: a budget is more than 0 and at most '
                             f'{STEP_LIMIT_MIN:g} min')
    return budgets
