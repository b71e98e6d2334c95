"""Inference speed (images/s) of a MAViT model at high resolution.

The paper's high-resolution figure is UperNet at 512x2048, batch 1, on an A100.
This times the model's tensor-mode forward (backbone + neck + heads, no pre- or
post-processing) after warm-up, synchronising the GPU around every run, and
records peak GPU memory. Results are printed and written as JSON with the
device, library versions and settings.

Examples:
  python tools/benchmark_fps.py configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py
  python tools/benchmark_fps.py CONFIG --dtype bf16 --mala-impl triton --iters 100
  python tools/benchmark_fps.py CONFIG --shape 256 512 --iters 3 --warmup 1 --device cpu
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mavit_mm.utils.model_builder import DictAction  # noqa: E402

DTYPES = {'fp32': 'float32', 'fp16': 'float16', 'bf16': 'bfloat16'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('config', help='model config (detection or segmentation)')
    parser.add_argument('--shape', type=int, nargs=2, metavar=('HEIGHT', 'WIDTH'),
                        default=[512, 2048], help='input size (default: 512 2048)')
    parser.add_argument('--batch-size', type=int, default=1, help='images per run (default: 1)')
    parser.add_argument('--iters', type=int, default=50, help='timed runs (default: 50)')
    parser.add_argument('--warmup', type=int, default=10,
                        help='untimed runs first, for autotuning and caches (default: 10)')
    parser.add_argument('--device', default=None,
                        help='cuda or cpu (default: cuda when available)')
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='fp32',
                        help='autocast precision on CUDA (default: fp32, no autocast)')
    parser.add_argument('--mala-impl', choices=['auto', 'torch', 'triton'], default=None,
                        help="override the backbone's MALA implementation")
    parser.add_argument('--backbone-only', action='store_true', help='time the backbone alone')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='override config entries, key=value (mmengine syntax)')
    parser.add_argument('--out', metavar='FILE',
                        help='JSON output (default: benchmarks/results/fps-<device>-<time>.json)')
    return parser.parse_args(argv)


def device_name(device) -> str:
    import torch
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or 'cpu'


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    from mavit_mm.utils.model_builder import build_model, dummy_forward_inputs, load_config

    device = torch.device(args.device or ('cuda' if torch.cuda.is_available() else 'cpu'))
    if args.dtype != 'fp32' and device.type != 'cuda':
        raise SystemExit(f'--dtype {args.dtype} needs a CUDA device (got {device})')
    cfg_options = dict(args.cfg_options)
    if args.mala_impl:
        cfg_options['model.backbone.mala_impl'] = args.mala_impl
    cfg = load_config(args.config, cfg_options)
    model = build_model(cfg).to(device).eval()
    height, width = args.shape
    inputs, samples = dummy_forward_inputs(cfg, height, width, args.batch_size, str(device))
    if args.backbone_only:
        def run():
            return model.backbone(inputs)
    else:
        def run():
            return model._forward(inputs, samples)

    autocast = torch.autocast(device.type, dtype=getattr(torch, DTYPES[args.dtype]),
                              enabled=args.dtype != 'fp32')

    def synchronize():
        if device.type == 'cuda':
            torch.cuda.synchronize(device)

    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    with torch.no_grad(), autocast:
        for i in range(args.warmup + args.iters):
            synchronize()
            start = time.perf_counter()
            run()
            synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
                done = len(times)
                if done % max(1, args.iters // 5) == 0 or done == args.iters:
                    print(f'[{done}/{args.iters}] {args.batch_size * done / sum(times):.2f} img/s',
                          flush=True)
    times.sort()
    median = times[len(times) // 2]
    result = dict(
        config=args.config, shape=[height, width], batch_size=args.batch_size,
        backbone_only=args.backbone_only, dtype=args.dtype,
        mala_impl=cfg.model.backbone.get('mala_impl', 'auto'),
        device=device_name(device), device_type=device.type,
        iters=args.iters, warmup=args.warmup,
        fps_mean=args.batch_size * len(times) / sum(times),
        fps_median=args.batch_size / median,
        latency_ms_median=median * 1e3,
        peak_memory_mib=(torch.cuda.max_memory_allocated(device) / 2 ** 20
                         if device.type == 'cuda' else None),
        versions=dict(python=platform.python_version(), torch=torch.__version__),
        date=datetime.now(timezone.utc).isoformat(timespec='seconds'))
    try:
        import triton
        result['versions']['triton'] = triton.__version__
    except ImportError:
        pass
    out = Path(args.out) if args.out else (
        Path(__file__).resolve().parents[1] / 'benchmarks' / 'results' /
        f'fps-{device.type}-{datetime.now():%Y%m%d-%H%M%S}.json')
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f'{result["fps_median"]:.2f} img/s (median latency {result["latency_ms_median"]:.1f} ms) '
          f'on {result["device"]}, {height}x{width}, batch {args.batch_size}, {args.dtype}; '
          f'written to {out}')
    return result


if __name__ == '__main__':
    main()
