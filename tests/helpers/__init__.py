"""Helper modules shared by the tests, importable from every test folder
(``pytest.ini`` puts ``tests/`` on ``sys.path``; the instruments the tests
share with the benchmarks, such as the op log and the censuses, are in
``devtools/``):

- ``helpers.paths``: the repository's folders (``REPO_ROOT``, ``TESTS_DIR``);
- ``helpers.models``: configs, models built without pretrained weights, and
  small CPU batches with real ground truth;
- ``helpers.tools``: tiny data and configs derived from the demo configs,
  running the tools (in a process of their own, or their ``main`` in the
  test's process with mmengine's global instances as a new process has them);
- ``helpers.depthwise_stages``: the fused depthwise stages called as the
  model calls them;
- ``helpers.mala_cases``: the fused MALA tests' small cases and float64
  reference;
- ``helpers.threads``: ``torch_threads``, PyTorch's thread count for a block;
- ``helpers.shared_runs``: work a test session does once for all its workers
  (the demo data, the demo detectors' training runs);
- ``helpers.xdist_groups``: which tests ``make test``'s pytest-xdist workers
  must run together (``conftest.py`` applies it);
- ``helpers.dist_probe``: a hook the distributed runs load, writing what each
  process did.
"""
