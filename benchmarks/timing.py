"""The benchmarks' one timer: the median milliseconds of a call.

On CUDA, ``triton.testing.do_bench`` with ``return_mode='median'``: CUDA
events around each call, the L2 cache cleared between calls, ``warmup_ms``
of untimed calls, then calls for ``rep_ms``. With ``cuda_graph``,
``triton.testing.do_bench_cudagraph``: the calls captured in one CUDA graph
and replayed, so the host's cost of issuing them is not timed (nor is L2
cleared): the GPU's time, where a small call's host cost would hide it. On a
CPU (the tests, the CPU runs of the op's PyTorch path), ``cpu_warmup``
untimed calls and the median of ``cpu_calls`` timed by ``time.perf_counter``.

``in_mode`` makes the call to time as ``tools/analysis_tools/benchmark_fps.py``
runs a forward, through its own code (``benchmarks/`` may import from
``tools/``, never the reverse): ``eager`` as it is; ``cuda-graph`` captured
once in a CUDA graph (``capture_cuda_graph``) and replayed; ``compile``
compiled (``compiled``), its seconds apart.

``interleaved_ms`` times two or more calls against each other, a round of
one call each at a time with the order reversed every other round, each call
timed alone by the host's clock (synchronised around on CUDA: what an eager
caller waits for, the host's issue and the GPU's work). A drift of the
machine while it runs (a shared host slowing down, a clock) then falls on
every call alike, and ``pair_ratios`` gives the median of the rounds' ratios.
That is the A/B of a host-bound call: the GPU check's eager ablations had
their all-on forward move from 35 to 19 ms between the first row and the
last (``gpu-h100-2026-11-27b/part-2/ablations.json``, ``drift``), so rows
timed one after the other could not be compared.

Used by ``bench_mala.py``, ``tune_mala.py``, ``host_calls.py``,
``backbone_ab.py`` and the GPU check's model and op steps
(``benchmarks/gpu_check_lib/``).
"""
from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Iterator, Mapping

import torch

# do_bench's warm-up and measuring time in ms, and the CPU's calls.
CUDA_WARMUP_MS, CUDA_REP_MS = 25, 100
CPU_WARMUP_CALLS, CPU_CALLS = 2, 5


def median_ms(step: Callable, device: torch.device, warmup_ms: float | None = None,
              rep_ms: float | None = None, *, cpu_warmup: int | None = None,
              cpu_calls: int | None = None, cuda_graph: bool = False) -> float:
    """The median ms of ``step()`` on ``device`` (``None``: the default of each)."""
    if device.type == 'cuda':
        import triton.testing
        rep = int(CUDA_REP_MS if rep_ms is None else rep_ms)
        if cuda_graph:
            return triton.testing.do_bench_cudagraph(step, rep=rep, return_mode='median')
        return triton.testing.do_bench(
            step, warmup=int(CUDA_WARMUP_MS if warmup_ms is None else warmup_ms), rep=rep,
            return_mode='median')
    if cuda_graph:
        raise ValueError(f'a CUDA graph replays CUDA work; {device} has none to time')
    warmup = CPU_WARMUP_CALLS if cpu_warmup is None else int(cpu_warmup)
    calls = CPU_CALLS if cpu_calls is None else int(cpu_calls)
    if warmup < 0 or calls < 1:
        raise ValueError(f'a CPU timing takes 0 or more warm-up calls and 1 or more timed '
                         f'calls, got {warmup} and {calls}')
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        step()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def interleaved_ms(steps: Mapping[str, Callable], device: torch.device, rounds: int,
                   warmup: int = CPU_WARMUP_CALLS,
                   progress: Callable[[int, dict[str, list[float]]], None] | None = None
                   ) -> dict[str, list[float]]:
    """Each step's ms, one call a round for ``rounds`` rounds after ``warmup``
    untimed calls of each; the steps' order reversed every other round, each
    call timed alone (module docstring). The garbage collector is held off
    while the rounds run, as ``timeit`` does. ``progress(round, times)`` after
    each round."""
    if rounds < 1 or warmup < 0 or not steps:
        raise ValueError(f'interleaved timing takes one or more steps and rounds and 0 or '
                         f'more warm-up calls, got {len(steps)} steps, {rounds} rounds, '
                         f'{warmup} warm-up calls')

    def sync():
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
    for step in steps.values():
        for _ in range(warmup):
            step()
    times = {name: [] for name in steps}
    names = list(steps)
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for index in range(rounds):
            for name in (names if index % 2 == 0 else names[::-1]):
                sync()
                start = time.perf_counter()
                steps[name]()
                sync()
                times[name].append((time.perf_counter() - start) * 1e3)
            if progress is not None:
                progress(index, times)
    finally:
        if collecting:
            gc.enable()
    return times


def pair_ratios(times: Mapping[str, list[float]], name: str, base: str) -> dict:
    """``name``'s time over ``base``'s, round by round (``interleaved_ms``):
    the median, least and most of the ratios, and each one's median ms."""
    ratios = [a / b for a, b in zip(times[name], times[base], strict=True)]
    return dict(ratio_median=statistics.median(ratios), ratio_min=min(ratios),
                ratio_max=max(ratios), median_ms={key: statistics.median(times[key])
                                                  for key in (name, base)})


@contextlib.contextmanager
def in_mode(step: Callable, mode: str, device: torch.device) -> Iterator[tuple[Callable, dict]]:
    """``step`` made into the call that ``mode`` (one of benchmark_fps.py's
    ``MODES``) times, and what making it measured (``compile_s``: the
    compile's first calls); a compile's graphs are freed
    (``torch._dynamo.reset``) on leaving."""
    if mode == 'eager':
        yield step, {}
        return
    from tools.analysis_tools import benchmark_fps
    if mode not in benchmark_fps.MODES:
        raise ValueError(f'unknown mode {mode!r}: one of {benchmark_fps.MODES}')
    if mode == 'cuda-graph':
        replay, _ = benchmark_fps.capture_cuda_graph(step, device, benchmark_fps.CAPTURE_WARMUP)
        yield replay, {}
        return
    run, compile_s, _ = benchmark_fps.compiled(step, device)
    try:
        yield run, {'compile_s': round(compile_s, 1)}
    finally:
        torch._dynamo.reset()
