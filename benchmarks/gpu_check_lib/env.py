"""The ``env`` step, first in every part: the GPU, driver and versions, the
commit, and the measured device-to-device copy bandwidth (the kernel
targets' yardstick)."""
from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path

import torch

from benchmarks.gpu_check_lib.children import write_results


def step_env(out: Path, budget_s: float, commit: str | None = None) -> dict:
    import triton

    from benchmarks.bench_mala import COPY_METHOD, copy_bandwidth_tbps
    from devtools.checkout import git_commit
    device = torch.device('cuda')
    props = torch.cuda.get_device_properties(device)
    driver = _command_output(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'])
    env = dict(device=torch.cuda.get_device_name(device), driver=driver,
               capability='.'.join(map(str, torch.cuda.get_device_capability(device))),
               multiprocessors=props.multi_processor_count,
               memory_gib=round(props.total_memory / 2 ** 30, 1),
               l2_cache_mib=round(getattr(props, 'L2_cache_size', 0) / 2 ** 20, 1),
               torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__,
               python=platform.python_version(), commit=commit or git_commit(),
               copy_bandwidth_tbps=round(copy_bandwidth_tbps(device), 3),
               copy_bandwidth_method=COPY_METHOD,
               date=datetime.datetime.now().isoformat(timespec='seconds'))
    write_results(out / 'env.json', env)
    return env



def _command_output(command: list[str]) -> str | None:
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None

