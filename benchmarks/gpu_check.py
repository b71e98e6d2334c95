"""One command for a GPU machine: prove the fused MALA correct there and
measure its speed, writing every result as JSON plus a short summary.

Steps (``--steps`` picks some; all by default, about 10-15 minutes on an H100):

``env``       device, driver and library versions; the measured device-to-device
              copy bandwidth (the yardstick of the kernel targets).
``tests``     the kernel tests on CUDA (``tests/test_mala_cuda.py``: every dtype,
              head dims 16-128, both layouts, default and small plans, B*heads
              1-64, gradients against fp64; the 512x2048 bf16 backbone) and the
              CUDA cases of ``test_mala_triton.py`` (MAViT-T parity with the
              golden data in fp32 with ``mala_impl='triton'``).
``bench``     the ``bench_mala.py`` sweep (both paths, every dtype, fwd and
              fwd+bwd, N 16384 / 65536, d 64 / 96, B*heads 1 / 16).
``backbone``  MAViT-T (``triton`` and ``torch`` MALA, fp32 and bf16 autocast)
              against Swin-T at 512x2048, batch 1 and 2, forward and
              forward+backward: mmdet's ``SwinTransformer`` where mmdet imports,
              else timm's Swin-T (``features_only``); the JSON says which.
``tune``      ``tune_mala.py`` on the issue's target shapes.

The machine needs Python with torch (CUDA), triton, numpy and pytest; mmengine
and its small pure-Python needs travel as wheels (``scripts/gpu_wheels.sh``
downloads them; see the README's "On a GPU" section). mmcv, mmdet and mmseg
are not needed.

``--dry-run`` (no GPU) checks the imports and prints the plan; CI runs it.

Example::

    python benchmarks/gpu_check.py --out gpu_results
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

STEPS = ('env', 'tests', 'bench', 'backbone', 'tune')
# Rough minutes per step on an H100, for the progress line.
STEP_MINUTES = {'env': 0.3, 'tests': 4, 'bench': 2, 'backbone': 2, 'tune': 4}
CUDA_TEST_FILES = ['tests/test_mala_cuda.py', 'tests/test_mala_triton.py']
BENCH_ARGS = ['--tokens', '65536', '16384', '--head-dims', '64', '96',
              '--batch-heads', '1', '16', '--dtypes', 'bf16', 'fp16', 'fp32']
TUNE_ARGS = ['--dtypes', 'bf16', '--head-dims', '64', '96', '--batch-heads', '16', '1',
             '--tokens', '65536']
BACKBONE_SIZE = (512, 2048)
BACKBONE_BATCHES = (1, 2)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, default=Path('gpu_results'),
                        help='folder for the JSON files and summary.txt (default gpu_results)')
    parser.add_argument('--steps', nargs='+', choices=STEPS, default=list(STEPS),
                        help='which steps to run, in this order (default: all)')
    parser.add_argument('--dry-run', action='store_true',
                        help='no GPU needed: check imports and arguments, print the plan')
    parser.add_argument('--pytest-workers', type=int, default=8,
                        help='pytest-xdist workers for the tests step (kernel compiles run in '
                             'parallel); 0 runs in one process')
    return parser.parse_args(argv)


# --------------------------------------------------------------------------
# Steps
# --------------------------------------------------------------------------
def step_env(out: Path) -> Dict:
    import triton
    import triton.testing
    device = torch.device('cuda')
    props = torch.cuda.get_device_properties(device)
    driver = _command_output(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'])
    # Device-to-device copy of 1 GiB: bytes read + written per second.
    src = torch.empty(2 ** 30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=200,
                                      return_mode='median')
    copy_tbps = 2 * src.numel() / (copy_ms * 1e-3) / 1e12
    del src, dst
    torch.cuda.empty_cache()
    env = dict(device=torch.cuda.get_device_name(device), driver=driver,
               capability='.'.join(map(str, torch.cuda.get_device_capability(device))),
               multiprocessors=props.multi_processor_count,
               memory_gib=round(props.total_memory / 2 ** 30, 1),
               l2_cache_mib=round(getattr(props, 'L2_cache_size', 0) / 2 ** 20, 1),
               torch=torch.__version__, cuda=torch.version.cuda, triton=triton.__version__,
               python=platform.python_version(),
               copy_bandwidth_tbps=round(copy_tbps, 3),
               copy_bandwidth_note='torch copy_ of 1 GiB, (read + write) / median time',
               date=datetime.datetime.now().isoformat(timespec='seconds'))
    _write(out / 'env.json', env)
    return env


def step_tests(out: Path, workers: int) -> Dict:
    junit = out / 'tests_junit.xml'
    command = [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
               f'--junitxml={junit}', *CUDA_TEST_FILES]
    if workers > 0 and _has_module('xdist'):
        command[3:3] = ['-n', str(workers)]
    started = time.time()
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    (out / 'tests_log.txt').write_text(result.stdout + result.stderr)
    summary = _junit_summary(junit)
    summary.update(command=' '.join(command[1:]), returncode=result.returncode,
                   seconds=round(time.time() - started, 1))
    print(result.stdout[-3000:])
    _write(out / 'tests.json', summary)
    return summary


def step_bench(out: Path) -> Dict:
    from benchmarks import bench_mala
    output = out / 'bench_mala.json'
    bench_mala.main(BENCH_ARGS + ['--output', str(output)])
    return {'file': output.name}


def step_tune(out: Path) -> Dict:
    from benchmarks import tune_mala
    output = out / 'tune_mala.json'
    tune_mala.main(TUNE_ARGS + ['--output', str(output)])
    return {'file': output.name}


def step_backbone(out: Path) -> Dict:
    import triton.testing

    from mavit_mm.utils.device import cuda_peak_extra_bytes
    device = torch.device('cuda')
    rows = []
    swin_builder, swin_source = swin_tiny_builder()
    models = [('MAViT-T triton', lambda: _mavit('triton')),
              ('MAViT-T torch', lambda: _mavit('torch')),
              (f'Swin-T ({swin_source})', swin_builder)]
    height, width = BACKBONE_SIZE
    for name, build in models:
        model = build().to(device)
        for precision in ('fp32', 'bf16'):
            for batch in BACKBONE_BATCHES:
                for pass_name in ('fwd', 'fwd+bwd'):
                    images = torch.randn(batch, 3, height, width, device=device)
                    step = _backbone_step(model, images, precision, pass_name)
                    try:
                        step()
                        ms = triton.testing.do_bench(step, warmup=50, rep=300,
                                                     return_mode='median')
                        memory = cuda_peak_extra_bytes(step, device)
                        error = None
                    except Exception as exc:  # e.g. out of memory: record it
                        ms = memory = None
                        error = f'{type(exc).__name__}: {str(exc)[:200]}'
                    row = dict(model=name, precision=precision, batch=batch, pass_name=pass_name,
                               height=height, width=width, time_ms=ms,
                               images_per_s=None if ms is None else batch / (ms * 1e-3),
                               peak_memory_mib=None if memory is None else memory / 2 ** 20,
                               error=error)
                    rows.append(row)
                    print(f'  {name:24} {precision:4} batch {batch} {pass_name:8} '
                          f'{"failed " + error if error else f"{ms:8.2f} ms"}', flush=True)
                    torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()
    report = dict(input_size=list(BACKBONE_SIZE), swin_source=swin_source,
                  note='backbones alone (no neck or head); bf16 means torch.autocast bf16; '
                       'fwd in eval mode under no_grad, fwd+bwd in train mode with the '
                       'sum of the four outputs\' means as the loss',
                  results=rows)
    _write(out / 'backbone.json', report)
    return report


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------
def _mavit(impl: str):
    from mavit_mm import MAViT
    return MAViT(arch='tiny', mala_impl=impl)


def swin_tiny_builder():
    """Swin-T as the baseline: mmdet's where it imports, else timm's."""
    try:
        from mmdet.models.backbones import SwinTransformer

        def build():
            return SwinTransformer(embed_dims=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24),
                                   window_size=7, out_indices=(0, 1, 2, 3))
        return build, 'mmdet SwinTransformer, window 7'
    except Exception:
        pass
    import timm

    def build_timm():
        return timm.create_model('swin_tiny_patch4_window7_224', pretrained=False,
                                 features_only=True, img_size=BACKBONE_SIZE,
                                 strict_img_size=False)
    try:
        build_timm()
        return build_timm, f'timm {timm.__version__} swin_tiny_patch4_window7_224, window 7'
    except Exception:
        pass

    def build_timm_window8():
        # Older timm cannot pad 128x512 patches to windows of 7: use 8, which tiles
        # every stage; the attention cost per token barely changes.
        return timm.create_model('swin_tiny_patch4_window7_224', pretrained=False,
                                 features_only=True, img_size=BACKBONE_SIZE, window_size=8)
    return build_timm_window8, f'timm {timm.__version__} swin_tiny, window 8 (7 cannot tile)'


def _backbone_step(model, images, precision: str, pass_name: str) -> Callable:
    autocast = torch.autocast('cuda', dtype=torch.bfloat16, enabled=precision == 'bf16')
    if pass_name == 'fwd':
        model.eval()

        def forward():
            with torch.no_grad(), autocast:
                return model(images)
        return forward
    model.train()

    def forward_backward():
        with autocast:
            outputs = model(images)
        loss = sum(o.float().mean() for o in outputs)
        loss.backward()
        model.zero_grad(set_to_none=True)
    return forward_backward


def _junit_summary(path: Path) -> Dict:
    if not path.exists():
        return dict(passed=0, failed=0, errors=1, skipped=0, failures=['no junit file'])
    root = ET.parse(path).getroot()
    counts = dict(passed=0, failed=0, errors=0, skipped=0)
    failures = []
    for case in root.iter('testcase'):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find('failure') is not None:
            counts['failed'] += 1
            failures.append(name + ': ' + (case.find('failure').get('message') or '')[:300])
        elif case.find('error') is not None:
            counts['errors'] += 1
            failures.append(name + ': ' + (case.find('error').get('message') or '')[:300])
        elif case.find('skipped') is not None:
            counts['skipped'] += 1
        else:
            counts['passed'] += 1
    counts['failures'] = failures
    return counts


def _has_module(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _command_output(command: List[str]) -> Optional[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _write(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=1, default=str) + '\n')


def dry_run(args) -> int:
    """Check what the GPU run needs, without a GPU."""
    problems = []
    for module in ('triton', 'mmengine', 'pytest', 'numpy'):
        if not _has_module(module):
            problems.append(f'{module} is not importable')
    for name in CUDA_TEST_FILES:
        if not (REPO_ROOT / name).is_file():
            problems.append(f'{name} is missing')
    from benchmarks import bench_mala, tune_mala
    bench_mala.parse_args(BENCH_ARGS)
    tune_mala.main(TUNE_ARGS + ['--dry-run'])
    import mavit_mm  # noqa: F401  (the backbone and the op import)
    from mavit_mm.ops.mala import function  # noqa: F401  (the Triton launches import)
    total = sum(STEP_MINUTES[s] for s in args.steps)
    print(f'plan: {", ".join(args.steps)} into {args.out}/ (about {total:.0f} min on an H100)')
    for problem in problems:
        print(f'problem: {problem}')
    return 1 if problems else 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    if not torch.cuda.is_available():
        print('gpu_check.py needs a CUDA GPU; --dry-run checks the plan without one')
        return 2
    os.environ.pop('TRITON_INTERPRET', None)
    args.out.mkdir(parents=True, exist_ok=True)
    total = sum(STEP_MINUTES[s] for s in args.steps)
    started = time.time()
    summary = {}
    for index, name in enumerate(args.steps):
        elapsed = (time.time() - started) / 60
        left = sum(STEP_MINUTES[s] for s in args.steps[index:])
        print(f'[gpu_check] step {index + 1}/{len(args.steps)}: {name} '
              f'({elapsed:.1f} min so far, about {left:.0f} of {total:.0f} min left)', flush=True)
        step_started = time.time()
        try:
            if name == 'env':
                result = step_env(args.out)
            elif name == 'tests':
                result = step_tests(args.out, args.pytest_workers)
            elif name == 'bench':
                result = step_bench(args.out)
            elif name == 'backbone':
                result = step_backbone(args.out)
            else:
                result = step_tune(args.out)
            summary[name] = {'ok': True, 'seconds': round(time.time() - step_started, 1)}
            if name in ('env', 'tests'):
                summary[name]['result'] = result
        except Exception as exc:  # keep going: later steps still produce results
            import traceback
            traceback.print_exc()
            summary[name] = {'ok': False, 'error': f'{type(exc).__name__}: {exc}'}
    _write(args.out / 'summary.json', summary)
    print(json.dumps(summary, indent=1, default=str)[:4000])
    tests = summary.get('tests', {}).get('result', {})
    return 1 if tests.get('failed') or tests.get('errors') else 0


if __name__ == '__main__':
    sys.exit(main())
