"""Writing a results file: **the** one way the benchmarks and tools write JSON.

The folder is made, and the file is written whole: the text goes to
``<name>.partial`` first and then replaces the file, so a reader (a later
step, a person looking while a long run goes on) never sees half of one.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path


def write_json(path, data, default: Callable | None = None) -> Path:
    """``data`` as indented JSON at ``path``; ``default``: as ``json.dumps``'s
    (e.g. ``str`` for values JSON has no type for)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + '.partial')
    partial.write_text(json.dumps(data, indent=1, default=default) + '\n')
    partial.replace(path)
    return path


def utc_timestamp() -> str:
    """Now, as a results file records its date: UTC, to the second, ISO 8601
    (``2026-11-28T18:44:51+00:00``)."""
    return datetime.now(timezone.utc).isoformat(timespec='seconds')


__all__ = ['utc_timestamp', 'write_json']
