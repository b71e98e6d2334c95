"""The golden data lives in the repository, unchanged from the published reference."""
import hashlib

import pytest
from helpers.paths import REFERENCE_DIR, REPO_ROOT


def _manifest():
    lines = (REFERENCE_DIR / 'SHA256SUMS').read_text().split('\n')
    return dict(reversed(line.split()) for line in lines if line.strip())


def test_golden_files_match_their_checksums():
    manifest = _manifest()
    assert set(manifest) == {'parity_tiny.pt'} | {
        f'mavit_{size}_state_dict_shapes.json' for size in 'tsbl'}
    for name, digest in manifest.items():
        assert hashlib.sha256((REFERENCE_DIR / name).read_bytes()).hexdigest() == digest, name


def test_reference_dir_is_inside_the_repository():
    assert REFERENCE_DIR.resolve().is_relative_to(REPO_ROOT.resolve())


def test_nothing_reads_the_workspace_outside_the_repository():
    """A user's clone holds only the repository: no code may look beside it."""
    import subprocess
    pattern = '|'.join(['shared' + '/reference', "'shared'" + ' /', 'parent / ' + "'shared'"])
    found = subprocess.run(['git', 'grep', '-nE', pattern, '--', '*.py', '*.sh', 'Makefile', '.ci'],
                           cwd=REPO_ROOT, capture_output=True, text=True)
    if found.returncode == 128:
        pytest.skip('not a git checkout')
    assert found.returncode == 1, f'code refers to the workspace outside the repo:\n{found.stdout}'
