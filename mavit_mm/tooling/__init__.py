"""What the scripts in ``tools/`` share (the benchmarks and tests use it too;
their own instruments are in ``devtools/``, outside the package); a training
run itself needs none of it (what a run builds from a config is in
``mavit_mm.engine``). Each module's docstring says what it holds.
"""
