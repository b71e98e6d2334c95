"""Which tests ``make test``'s workers (pytest-xdist, ``--dist loadgroup``)
must run together: tests that share a fixture their module builds once."""
from __future__ import annotations

import pytest

SHARED_SCOPES = ('module', 'package', 'session')


def group_tests_sharing_module_fixtures(items) -> None:
    """Mark ``xdist_group(<module>)`` on every test that uses a module-,
    package- or session-scoped fixture defined in its own module (a trained
    model, an exported graph, a compiled probe), so that one worker builds it
    once. A test with its own ``xdist_group`` mark keeps it (finer groups:
    tests/test_deploy/test_deploy.py); conftest fixtures (cheap: a thread
    setting, the golden data) group nothing."""
    for item in items:
        if item.get_closest_marker('xdist_group'):
            continue
        module = item.nodeid.split('::', 1)[0]
        info = getattr(item, '_fixtureinfo', None)
        if info is None:
            continue
        if any(fixturedef.scope in SHARED_SCOPES and fixturedef.baseid == module
               for name in item.fixturenames for fixturedef in info.name2fixturedefs.get(name, ())):
            item.add_marker(pytest.mark.xdist_group(module))
