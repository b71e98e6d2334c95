"""Run one of the repository's Python scripts (``tools/train.py`` ...) in a
subprocess with this interpreter, as a user would: used by the main job and
the tests."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def run_script(script, *args, cwd=None, timeout: float | None = None,
               transcript: Path | None = None,
               environ: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python <script> <args>``; the result has ``.seconds`` (wall time).
    ``environ``: the environment to start from (default: this process's).

    Without ``transcript`` stdout and stderr are captured separately. With it,
    they are merged, shown on the console as they come (progress stays
    visible) and written to ``transcript``; ``.stdout`` holds them all.
    """
    if transcript is not None and timeout is not None:
        raise ValueError('run_script: a timeout applies to captured runs only, not with transcript')
    command = [sys.executable, str(script), *map(str, args)]
    env = dict(os.environ if environ is None else environ, PYTHONUNBUFFERED='1')
    start = time.time()
    if transcript is None:
        result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env,
                                timeout=timeout)
    else:
        lines = []
        with open(transcript, 'w') as log_file:
            process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
            try:
                for line in process.stdout:
                    sys.stdout.write(line)
                    sys.stdout.flush()
                    log_file.write(line)
                    log_file.flush()
                    lines.append(line)
                process.wait()
            finally:
                if process.poll() is None:
                    process.kill()
        result = subprocess.CompletedProcess(command, process.returncode, ''.join(lines), '')
    result.seconds = time.time() - start
    return result
