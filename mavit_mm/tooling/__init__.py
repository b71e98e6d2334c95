"""What the scripts in ``tools/`` (and the benchmarks and tests) share; not used
by training itself.

* ``config``: load a config (one loader for all) and derive variants of it;
  ``ConfigCheckError``.
* ``preflight``: check a config's paths and values before a run.
* ``runner_setup``: apply train.py / test.py options and build the Runner.
* ``cpu_distributed``: the launch side of data-parallel runs without CUDA.
* ``model_builder``: build a config's model outside the Runner, dummy inputs.
* ``json_logs``: read metrics back from mmengine's JSON logs.
* ``pictures``: ground truth beside prediction, training curves.
* ``demo_jobs``: the demo configs, their data and headline metrics.
* ``run_script``: run a repository script in a subprocess.
"""
