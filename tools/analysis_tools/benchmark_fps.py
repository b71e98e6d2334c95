"""Inference speed (images/s) and peak memory of models at high resolution,
several configs side by side, optionally swept over input sizes and run
several ways (eager, CUDA graph, torch.compile).

The paper's high-resolution figure is UperNet at 512x2048, batch 1, on an A100.
This times each model's tensor-mode forward (``model(inputs, samples,
mode='tensor')``: backbone + neck + heads, no pre- or post-processing) after
warm-up, synchronising the GPU around every run. Peak memory is the extra
memory a forward takes: on CUDA from the allocator's peak, on a CPU from the
process's peak resident memory (Linux). Results are printed as one table and
written as JSON with the device, library versions and settings.

``--modes`` (any of these, timed side by side in one table and one JSON;
default eager):
  eager       the forward as it is, every kernel launched from Python.
  cuda-graph  the forward captured once in a ``torch.cuda.CUDAGraph`` after
              warm-up on a side stream, then ``graph.replay()`` timed on the
              same static inputs. CUDA only: asked for on a CPU, the tool
              stops before building a model. Peak memory is the capture's
              (the graph's pool, which every replay reuses).
  compile     ``torch.compile(forward, mode='reduce-overhead')`` (inductor:
              on CUDA with CUDA graphs, on a CPU its C++ kernels). Its first
              two calls (compilation; on CUDA the graph's recording) are
              timed on their own as ``compile_s``, not in the per-image time.
              ``--compile-mode max-autotune`` compiles with inductor's GEMM
              templates, which fuse their epilogues (a 1x1 convolution's bias,
              what follows a matrix product), for every model alike.
A mode that fails for a model (a capture meets a host synchronisation, as a
detector's NMS does) is reported as failed in its row (``error``), the rest
still runs, and the tool exits with status 1 at the end.

With two configs, the table and the JSON (``fps_ratios``) give the first's
images/s over the second's, per mode and size (MAViT over Swin below); with
more, the first over each of the others.

With ``--shapes``, every config is timed at every size, and a PNG plots latency
and memory against the number of pixels: MAViT's linear attention against
softmax attention is the paper's linear-versus-quadratic story.

Examples:
  # UperNet MAViT-T against UperNet Swin-T at 512x2048
  python tools/analysis_tools/benchmark_fps.py configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py \\
      configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py
  python tools/analysis_tools/benchmark_fps.py CONFIG --dtype bf16 --mala-impl triton --iters 100
  # the same two eager, as a CUDA graph and compiled, in bf16
  python tools/analysis_tools/benchmark_fps.py configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py \\
      configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py \\
      --modes eager cuda-graph compile --dtype bf16 --shape 512 2048 --out fps.json
  # resolution sweep of the backbones, latency and memory against pixels as a PNG
  python tools/analysis_tools/benchmark_fps.py CONFIG_A CONFIG_B --backbone-only \\
      --shapes 256x256 512x512 512x1024 1024x1024 1024x2048 --plot sweep.png
"""
from __future__ import annotations

import argparse
import ctypes
import platform
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))


from mavit_mm.tooling.cli import (  # noqa: E402
    ConfigOptions,
    device_option,
    image_side,
    image_size,
    int_at_least,
)

DTYPES = {'fp32': 'float32', 'fp16': 'float16', 'bf16': 'bfloat16'}
MODES = ('eager', 'cuda-graph', 'compile')
CAPTURE_WARMUP = 3  # side-stream runs before a capture, at least (the CUDA-graph recipe)
COMPILE_CALLS = 2   # compilation; reduce-overhead records its CUDA graph on the next call
COMPILE_MODE = 'reduce-overhead'   # inductor's kernels, replayed as CUDA graphs
COMPILE_MODES = ('reduce-overhead', 'max-autotune', 'max-autotune-no-cudagraphs', 'default')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('configs', nargs='+', metavar='CONFIG',
                        help='model configs (detection or segmentation), timed side by side')
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument('--shape', type=image_side, nargs=2, metavar=('HEIGHT', 'WIDTH'),
                       default=[512, 2048], help='input size (default: 512 2048)')
    sizes.add_argument('--shapes', type=image_size, nargs='+', metavar='HxW',
                       help='sweep these input sizes instead of --shape, and plot them')
    parser.add_argument('--batch-size', type=int_at_least(1), default=1,
                        help='images per run (default: 1)')
    parser.add_argument('--iters', type=int_at_least(1), default=50,
                        help='timed runs (default: 50)')
    parser.add_argument('--warmup', type=int_at_least(0), default=10,
                        help='untimed runs first, for autotuning and caches (default: 10)')
    parser.add_argument('--device', type=device_option, default=None,
                        help='cuda or cpu (default: cuda when available)')
    parser.add_argument('--dtype', choices=sorted(DTYPES), default='fp32',
                        help='autocast precision on CUDA (default: fp32, no autocast)')
    parser.add_argument('--mala-impl', choices=['auto', 'torch', 'triton'], default=None,
                        help="override the MAViT backbones' MALA implementation")
    parser.add_argument('--depthwise-impl', choices=['auto', 'torch', 'triton'], default=None,
                        help="override the MAViT backbones' depthwise-stage implementation")
    parser.add_argument('--compile-mode', choices=COMPILE_MODES, default=COMPILE_MODE,
                        help=f'torch.compile mode of the compile runs (default: {COMPILE_MODE}; '
                             'max-autotune: GEMM templates with fused epilogues)')
    parser.add_argument('--backbone-only', action='store_true', help='time the backbones alone')
    parser.add_argument('--modes', nargs='+', choices=MODES, default=['eager'], metavar='MODE',
                        help='how the forward runs, timed side by side (default: eager): eager; '
                             'cuda-graph (captured once, replayed; CUDA only); compile '
                             "(torch.compile, mode='reduce-overhead'; compile time on its own)")
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions, default={},
                        help='override config entries of every config, key=value')
    parser.add_argument('--out', metavar='FILE',
                        help='JSON output (default: work_dirs/benchmark_fps/'
                             'fps-<device>-<time>.json)')
    parser.add_argument('--plot', metavar='PNG',
                        help='latency and memory against pixels (default with --shapes: '
                             'the JSON path with .png)')
    args = parser.parse_args(argv)
    for config in args.configs:
        if not Path(config).is_file():
            parser.error(f'config not found: {config}')
    args.modes = list(dict.fromkeys(args.modes))
    return args


def peak_extra_mib(call, device) -> float | None:
    """Extra memory one call takes: the CUDA allocator's peak, or on a CPU the
    process's peak resident memory (Linux; ``None`` elsewhere)."""
    from mavit_mm.tooling.device import cuda_peak_extra_bytes
    if device.type == 'cuda':
        return cuda_peak_extra_bytes(call, device) / 2 ** 20
    try:  # "5" resets the kernel's peak-RSS counter (VmHWM) of this process
        _release_free_heap()
        Path('/proc/self/clear_refs').write_text('5')
        base = _status_kib('VmRSS')
        call()
        return max(0, _status_kib('VmHWM') - base) / 1024
    except OSError:
        return None


def _release_free_heap() -> None:
    # Memory freed by earlier runs stays in the C heap and would be reused
    # without raising the RSS: hand it back first so the peak counts it.
    try:
        ctypes.CDLL('libc.so.6').malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _status_kib(field: str) -> int:
    for line in Path('/proc/self/status').read_text().splitlines():
        if line.startswith(field + ':'):
            return int(line.split()[1])
    raise OSError(f'{field} not in /proc/self/status')


def label_of(config: str, cfg) -> str:
    backbone = cfg.model.backbone
    impl = f", {backbone.get('mala_impl', 'auto')}" if backbone.type == 'MAViT' else ''
    return f'{Path(config).stem} ({backbone.type}{impl})'


def forward_of(model, inputs, samples, backbone_only: bool):
    """The call every mode times, on static inputs: the tensor-mode forward, or the backbone's."""
    if backbone_only:
        return lambda: model.backbone(inputs)
    return lambda: model(inputs, samples, mode='tensor')


def timed(call, device) -> float:
    import torch
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    call()
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def capture_cuda_graph(forward, device, warmup: int):
    """``forward`` captured in a CUDA graph after warm-up on a side stream (the
    recipe of PyTorch's CUDA-graph docs); returns the graph's replay and the
    extra memory the capture took: the graph's pool, which every replay reuses."""
    import torch
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup):
            forward()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()

    def capture():
        with torch.cuda.graph(graph):
            forward()
    return graph.replay, peak_extra_mib(capture, device)


def compiled(forward, device, mode: str = COMPILE_MODE):
    """``forward`` under ``torch.compile`` (``mode``, static shapes) from a
    cold start, its first calls made: the one recipe of this tool's
    ``compile`` mode, which ``benchmarks/timing.py`` times the GPU check's backbones
    with too. Returns the compiled call, the seconds those first calls took
    (compilation and, with reduce-overhead on CUDA, the graph's recording)
    and, on CUDA, the extra memory they took (``None`` on a CPU, where the
    compiler's own memory would count in the process's peak).
    ``torch._dynamo.reset()`` frees it again."""
    import torch
    # A cold compile per model and size, never near dynamo's recompile limit.
    torch._dynamo.reset()
    run = torch.compile(forward, mode=mode, dynamic=False)

    def first_calls():
        for _ in range(COMPILE_CALLS):
            run()
    start = time.perf_counter()
    memory = peak_extra_mib(first_calls, device) if device.type == 'cuda' else first_calls()
    return run, time.perf_counter() - start, memory


def time_model(forward, mode: str, args, device, progress, pixels: int) -> dict:
    """``forward`` (no arguments) run as ``mode``, after warm-up: img/s,
    latency, peak memory and, for ``compile``, the time to compile."""
    import torch
    # A capture must not keep casts cached outside its graph: autocast's cache off.
    autocast = torch.autocast(device.type, dtype=getattr(torch, DTYPES[args.dtype]),
                              enabled=args.dtype != 'fp32', cache_enabled=mode != 'cuda-graph')
    compile_s = memory = None
    with torch.no_grad(), autocast:
        if mode == 'cuda-graph':
            run, memory = capture_cuda_graph(forward, device, max(CAPTURE_WARMUP, args.warmup))
        elif mode == 'compile':
            # On CUDA the recording takes the graph's pool; on a CPU a later run is measured.
            run, compile_s, memory = compiled(forward, device, args.compile_mode)
        else:
            run = forward
        times = []
        for i in range(args.warmup + args.iters):
            elapsed = timed(run, device)
            if i >= args.warmup:
                times.append(elapsed)
            progress(pixels)
        if memory is None:
            memory = peak_extra_mib(run, device)
    if mode == 'compile':
        torch._dynamo.reset()  # frees the compiled graphs (and their CUDA-graph pools)
    median = statistics.median(times)      # (of an even count, the mean of the middle two)
    return dict(fps=args.batch_size / median, ms_per_image=median * 1e3 / args.batch_size,
                fps_mean=args.batch_size * len(times) / sum(times),
                fps_median=args.batch_size / median, latency_ms_median=median * 1e3,
                peak_memory_mib=memory, compile_s=compile_s, error=None)


def failed(error: Exception) -> dict:
    first_line = (str(error).strip().splitlines() or [''])[0]
    return dict(fps=None, ms_per_image=None, fps_mean=None, fps_median=None,
                latency_ms_median=None, peak_memory_mib=None, compile_s=None,
                error=f'{type(error).__name__}: {first_line}')


def fps_ratios(results, per_config: int) -> list[dict]:
    """img/s of the first config over each other one, per mode and size (rows
    are in the same order of sizes and modes for every config)."""
    first, *others = (results[i:i + per_config] for i in range(0, len(results), per_config))
    return [dict(config=a['config'], relative_to=b['config'], mode=a['mode'], shape=a['shape'],
                 height=a['height'], width=a['width'],
                 fps_ratio=a['fps'] / b['fps'] if a['fps'] and b['fps'] else None)
            for rows in others for a, b in zip(first, rows)]


def format_table(results) -> str:
    header = (f"{'model':62} {'mode':10} {'size':>9} {'img/s':>8} {'ms':>9} {'peak MiB':>9} "
              f"{'compile s':>9}")
    lines = [header, '-' * len(header)]
    for r in results:
        size = f"{r['shape'][0]}x{r['shape'][1]}"
        row = f"{r['label'][:62]:62} {r['mode']:10} {size:>9} "
        if r['error']:
            lines.append(row + f"failed: {r['error']}"[:120])
            continue
        memory = 'n/a' if r['peak_memory_mib'] is None else f"{r['peak_memory_mib']:.0f}"
        compile_s = '-' if r['compile_s'] is None else f"{r['compile_s']:.1f}"
        lines.append(row + f"{r['fps_median']:>8.2f} {r['latency_ms_median']:>9.1f} {memory:>9} "
                           f'{compile_s:>9}')
    return '\n'.join(lines)


def format_ratios(ratios) -> str:
    lines = []
    for pair in dict.fromkeys((r['config'], r['relative_to']) for r in ratios):
        lines += [f'img/s ratio, {Path(pair[0]).stem} over {Path(pair[1]).stem}:',
                  f"{'mode':10} {'size':>9} {'ratio':>7}"]
        for r in (r for r in ratios if (r['config'], r['relative_to']) == pair):
            ratio = 'n/a' if r['fps_ratio'] is None else f"{r['fps_ratio']:.2f}"
            size = f"{r['height']}x{r['width']}"
            lines.append(f"{r['mode']:10} {size:>9} {ratio:>7}")
    return '\n'.join(lines)


def plot(results, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_memory) = plt.subplots(1, 2, figsize=(12, 4.5))
    several_modes = len({r['mode'] for r in results}) > 1
    for label, mode in dict.fromkeys((r['label'], r['mode']) for r in results):
        rows = sorted((r for r in results if (r['label'], r['mode']) == (label, mode)
                       and not r['error']), key=lambda r: r['pixels'])
        name = f'{label}, {mode}' if several_modes else label
        pixels = [r['pixels'] / 1e6 for r in rows]
        ax_time.plot(pixels, [r['latency_ms_median'] for r in rows], 'o-', label=name)
        if all(r['peak_memory_mib'] is not None for r in rows):
            ax_memory.plot(pixels, [r['peak_memory_mib'] for r in rows], 'o-', label=name)
    ax_time.set(xlabel='input pixels (millions)', ylabel='median latency (ms)',
                title='latency')
    ax_memory.set(xlabel='input pixels (millions)', ylabel='peak extra memory (MiB)',
                  title='memory')
    for ax in (ax_time, ax_memory):
        ax.grid(alpha=0.3)
    ax_time.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch

    from mavit_mm.tooling.cli import resolve_device

    # A user's mistake (a ValueError): 'benchmark_fps.py: error: ...', status 2
    # (run_tool); status 1 is the runs that failed.
    device = resolve_device(args.device)
    if 'cuda-graph' in args.modes and device.type != 'cuda':
        raise ValueError(f'--modes cuda-graph needs a CUDA device (got {device}): a CUDA graph '
                         'replays CUDA kernels; time eager or compile here')
    if args.dtype != 'fp32' and device.type != 'cuda':
        raise ValueError(f'--dtype {args.dtype} needs a CUDA device (got {device})')

    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.device import device_name
    from mavit_mm.tooling.model_builder import build_model, dummy_forward_inputs

    shapes = args.shapes or [tuple(args.shape)]
    runs_per_shape = len(args.modes) * (args.warmup + args.iters)
    total_runs = len(args.configs) * len(shapes) * runs_per_shape
    # The time left is estimated from the pixels still to process: a run costs
    # roughly in proportion to its input size.
    total_pixels = len(args.configs) * runs_per_shape * sum(h * w for h, w in shapes)
    done = dict(runs=0, pixels=0)
    started = time.time()

    def progress(pixels: int):
        done['runs'] += 1
        done['pixels'] += pixels
        if done['runs'] % max(1, total_runs // 20) == 0 or done['runs'] == total_runs:
            elapsed = time.time() - started
            left = elapsed / done['pixels'] * (total_pixels - done['pixels'])
            print(f"[{done['runs']}/{total_runs} runs] {elapsed:.0f} s so far, "
                  f'about {left:.0f} s left', flush=True)

    name = device_name(device)
    results = []
    for config in args.configs:
        cfg_options = dict(args.cfg_options)
        cfg = load_config(config, cfg_options)
        if args.mala_impl and cfg.model.backbone.type == 'MAViT':
            cfg.model.backbone.mala_impl = args.mala_impl
        if args.depthwise_impl and cfg.model.backbone.type == 'MAViT':
            cfg.model.backbone.depthwise_impl = args.depthwise_impl
        model = build_model(cfg).to(device).eval()
        label = label_of(config, cfg)
        for height, width in shapes:
            inputs, samples = dummy_forward_inputs(cfg, height, width, args.batch_size,
                                                   str(device))
            forward = forward_of(model, inputs, samples, args.backbone_only)
            for mode in args.modes:
                try:
                    timing = time_model(forward, mode, args, device, progress, height * width)
                except Exception as error:  # eager must work; the others may not, for a model
                    if mode == 'eager':
                        raise
                    timing = failed(error)
                results.append(dict(config=config, label=label, mode=mode, shape=[height, width],
                                    height=height, width=width, pixels=height * width,
                                    batch_size=args.batch_size, dtype=args.dtype, device=name,
                                    **timing))
                if timing['error']:
                    print(f"{label}: {mode}: {height}x{width}: failed: {timing['error']}",
                          flush=True)
                    continue
                compiled = '' if timing['compile_s'] is None else (
                    f", compiled in {timing['compile_s']:.1f} s")
                print(f'{label}: {mode}: {height}x{width}: {timing["fps_median"]:.2f} img/s, '
                      f'{timing["latency_ms_median"]:.1f} ms{compiled}', flush=True)
        del model, forward
        if device.type == 'cuda':
            torch.cuda.empty_cache()
    ratios = fps_ratios(results, len(shapes) * len(args.modes)) if len(args.configs) > 1 else []

    versions = dict(python=platform.python_version(), torch=torch.__version__)
    try:
        import triton
        versions['triton'] = triton.__version__
    except ImportError:
        pass
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    report = dict(device=name, device_type=device.type,
                  cuda=torch.version.cuda if device.type == 'cuda' else None,
                  batch_size=args.batch_size, backbone_only=args.backbone_only,
                  dtype=args.dtype, mala_impl_override=args.mala_impl,
                  depthwise_impl_override=args.depthwise_impl, compile_mode=args.compile_mode,
                  modes=args.modes,
                  iters=args.iters, warmup=args.warmup, cpu_threads=torch.get_num_threads(),
                  versions=versions, date=utc_timestamp(),
                  results=results, fps_ratios=ratios)
    out = Path(args.out) if args.out else (     # beside the runs' work dirs (./work_dirs, as
        Path('work_dirs') / 'benchmark_fps' /     # train.py's and test.py's), not committed
        f'fps-{device.type}-{datetime.now():%Y%m%d-%H%M%S}.json')
    write_json(out, report)
    print(format_table(results))
    if ratios:
        print(format_ratios(ratios))
    print(f'on {report["device"]}, batch {args.batch_size}, {args.dtype}'
          f'{", backbones only" if args.backbone_only else ""}; JSON written to {out}')
    if args.plot or args.shapes:
        png = Path(args.plot) if args.plot else out.with_suffix('.png')
        plot(results, png, f'{report["device"]}, batch {args.batch_size}, {args.dtype}'
                           f'{", backbones" if args.backbone_only else ""}')
        print(f'plot of latency and memory against pixels: {png}')
    failures = [r for r in results if r['error']]
    if failures:
        raise SystemExit(f'{len(failures)} of {len(results)} runs failed (their rows in {out})')
    return report


if __name__ == '__main__':
    from mavit_mm.tooling.cli import run_tool
    run_tool(main, 'benchmark_fps.py')
