"""The GPU check's code; ``benchmarks/gpu_check.py`` runs it (``--help``
there says what the check does).

- ``plan``: each step's budget, the parts in priority order, the file each
  step writes, the GPU machine's limits, ``plan_problems``, ``--budget``;
- ``runner``: the command line, ``--dry-run``, one step after another;
- ``children``: the child processes killed at their budget, the results files;
- ``env``, ``correctness`` (the test steps), ``model_steps`` (backbones,
  ablations, ablations-compile, sweep), ``upernet_fps``, ``op_steps`` (bench, tune-*, profile,
  sdpa), ``profiling`` (model-profile, compiled-profile, kernel categories);
- ``models``: the models the steps build and how a step runs one.

The targets are ``benchmarks/gpu_targets.py``; the timer ``benchmarks/timing.py``.
"""
