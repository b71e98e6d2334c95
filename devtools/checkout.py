"""The checkout these instruments run from: its folder and its commit, for
results files (the installed package knows neither)."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def git_commit(repo_root: Path = REPO_ROOT) -> str | None:
    """The checkout's short commit, ``+changes`` when tracked files differ from it."""
    try:
        out = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=repo_root,
                             capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'],
                               cwd=repo_root, capture_output=True, text=True, timeout=10)
        return out.stdout.strip() + ('+changes' if dirty.stdout.strip() else '') or None
    except (OSError, subprocess.SubprocessError):
        return None


__all__ = ['REPO_ROOT', 'git_commit']
