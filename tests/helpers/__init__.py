"""Helper modules shared by the tests, importable from every test folder
(``pytest.ini`` puts ``tests/`` on ``sys.path``): ``helpers.paths`` (the
repository's folders), ``helpers.models`` (configs, models and batches),
``helpers.tools`` (tiny data and configs, running the tools),
``helpers.op_log`` (the aten ops a call runs) and ``helpers.dist_probe`` (a
hook the distributed runs load)."""
