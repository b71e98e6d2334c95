"""What the scripts in ``tools/`` share (the benchmarks and tests use it too;
their own instruments are in ``devtools/``, outside the package); a training
run itself needs none of it (what a run builds from a config is in
``mavit_mm.engine``). The modules:

* ``config``: load a config (one loader for all) and derive variants of it;
  ``ConfigCheckError``.
* ``preflight``: check a config's paths and values before a run.
* ``runner_setup``: apply train.py / test.py options and build the Runner.
* ``model_builder``: build a config's model outside the Runner, dummy inputs.
* ``complexity``: MAC counting (``tools/analysis_tools/get_flops.py``).
* ``legacy_checkpoints``: whole-model checkpoints of mmdet 2.x / mmseg 0.x.
* ``device``: what results files record about the machine.
* ``results_file``: ``write_json``, the one way a results file is written.
* ``json_logs``: read metrics back from mmengine's JSON logs.
* ``pictures``: ground truth beside prediction, training curves.
* ``demo_jobs``: the demo configs, their data and headline metrics.
* ``run_script``: run a repository script in a subprocess (the one runner).
"""
