"""The repository's folders, as the tests and their helpers find them."""
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
