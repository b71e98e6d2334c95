"""The repository's folders, as the tests and their helpers find them."""
import os
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = TESTS_DIR.parent
CONFIG_DIR = REPO_ROOT / 'configs'
TOOLS_DIR = REPO_ROOT / 'tools'
# Test data committed with the tests: golden data, resolved-config snapshots.
DATA_DIR = TESTS_DIR / 'data'
# The published implementation's golden outputs and key lists, copied byte for
# byte into the repository (tests/data/reference/README.md says from where).
REFERENCE_DIR = DATA_DIR / 'reference'


def child_environment(**variables: str) -> dict[str, str]:
    """The environment of a Python child process that imports the repository:
    this one's, the repository first on ``PYTHONPATH`` ahead of what was there
    (packages installed with ``pip --target``, as on the GPU machine, stay
    importable), and ``variables``."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get('PYTHONPATH')]))
    return dict(os.environ, PYTHONPATH=path, **variables)
