"""The workshop's instruments: what the tests and the benchmarks share, never
installed (``setup.py`` packages ``mavit_mm`` alone; ``.importlinter`` keeps
the package from importing this folder). They run from the checkout, whose
root is on ``sys.path`` (``pytest.ini``; each benchmark puts it there).

* ``op_log``: ``OpLog``, the one dispatch-mode op counter.
* ``op_census``: the eager op census and its counting rule (built on ``op_log``).
* ``compiled_census``: what inductor compiles a forward into, and its rule.
* ``baseline``: the Swin-T every comparison runs against, from the UperNet
  baseline config.
* ``mala_inputs``: the MALA op's q, k, v by layout name.
* ``gpu_compile_report``: a Triton kernel compiled for an NVIDIA GPU without
  one, and what it uses.
* ``checkout``: the checkout's root and its commit, for results files.
"""
