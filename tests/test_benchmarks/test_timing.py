"""benchmarks/timing.py, the benchmarks' one timer, where it runs without a GPU."""
import pytest
import torch

from benchmarks import timing

CPU = torch.device('cpu')


def test_median_ms_on_a_cpu_is_the_median_of_the_timed_calls(monkeypatch):
    """Warm-up calls untimed, then each call timed by the host's clock: the
    median of their times (calls that take 7, 7, then 5, 1 and 3 ms on a
    stood-in clock: 3)."""
    clock = [0.0]
    durations_ms = [7, 7, 5, 1, 3]
    monkeypatch.setattr(timing.time, 'perf_counter', lambda: clock[0])

    def step():
        clock[0] += durations_ms.pop(0) * 1e-3
    assert timing.median_ms(step, CPU, cpu_warmup=2, cpu_calls=3) == pytest.approx(3.0)
    assert durations_ms == []
    calls = []
    timing.median_ms(lambda: calls.append(1), CPU)   # the defaults: 2 warm-up calls, 5 timed
    assert len(calls) == timing.CPU_WARMUP_CALLS + timing.CPU_CALLS == 7


@pytest.mark.parametrize('warmup, calls', [(-1, 3), (0, 0)])
def test_median_ms_refuses_calls_it_cannot_time(warmup, calls):
    with pytest.raises(ValueError, match='timed calls'):
        timing.median_ms(lambda: None, CPU, cpu_warmup=warmup, cpu_calls=calls)


def test_median_ms_on_cuda_is_do_bench_s_median(monkeypatch):
    """On CUDA, triton.testing.do_bench's median, with its warm-up and
    measuring time in ms (the defaults where none is given)."""
    import triton.testing
    asked = []

    def do_bench(step, **kwargs):
        asked.append(kwargs)
        return 1.5
    monkeypatch.setattr(triton.testing, 'do_bench', do_bench)
    cuda = torch.device('cuda')
    assert timing.median_ms(lambda: None, cuda, 10, 50, cpu_calls=9) == 1.5
    timing.median_ms(lambda: None, cuda)
    assert asked == [dict(warmup=10, rep=50, return_mode='median'),
                     dict(warmup=timing.CUDA_WARMUP_MS, rep=timing.CUDA_REP_MS,
                          return_mode='median')]


def test_median_ms_in_a_cuda_graph_is_do_bench_cudagraph_s_median(monkeypatch):
    """``cuda_graph``: the calls replayed from one CUDA graph (the host's
    cost of issuing them untimed), for ``rep_ms``; a CPU has no graph to
    replay, and says so."""
    import triton.testing
    asked = []

    def do_bench_cudagraph(step, **kwargs):
        asked.append(kwargs)
        return 0.25
    monkeypatch.setattr(triton.testing, 'do_bench_cudagraph', do_bench_cudagraph)
    monkeypatch.setattr(triton.testing, 'do_bench', None)     # not called
    cuda = torch.device('cuda')
    assert timing.median_ms(lambda: None, cuda, 10, 40, cuda_graph=True) == 0.25
    timing.median_ms(lambda: None, cuda, cuda_graph=True)
    assert asked == [dict(rep=40, return_mode='median'),
                     dict(rep=timing.CUDA_REP_MS, return_mode='median')]
    with pytest.raises(ValueError, match='CUDA graph'):
        timing.median_ms(lambda: None, CPU, cuda_graph=True)


def test_in_mode_makes_the_call_each_mode_times(monkeypatch):
    """eager: the step itself; compile: benchmark_fps.py's ``compiled`` (stood
    in for), its seconds recorded, dynamo reset on leaving; an unknown mode
    refused."""
    from tools.analysis_tools import benchmark_fps

    def step():
        return None

    with timing.in_mode(step, 'eager', CPU) as (call, made):
        assert call is step and made == {}
    resets = []
    monkeypatch.setattr(benchmark_fps, 'compiled', lambda forward, device: (forward, 12.34, None))
    monkeypatch.setattr(torch._dynamo, 'reset', lambda: resets.append(1))
    with timing.in_mode(step, 'compile', CPU) as (call, made):
        assert call is step and made == {'compile_s': 12.3} and not resets
    assert resets == [1]
    with pytest.raises(ValueError, match='unknown mode'), timing.in_mode(step, 'jit', CPU):
        pass


def test_interleaved_ms_alternates_the_order_and_times_each_call_alone(monkeypatch):
    """After the warm-up calls (untimed), a round calls each step once, the
    order reversed every other round, each call timed by the host's clock on
    its own; the collector is off while the rounds run and back on after; a
    progress callback sees each round."""
    import gc
    clock = [0.0]
    calls, collecting = [], []
    monkeypatch.setattr(timing.time, 'perf_counter', lambda: clock[0])

    def step(name, ms):
        def call():
            calls.append(name)
            collecting.append(gc.isenabled())
            clock[0] += ms * 1e-3
        return call
    seen = []
    times = timing.interleaved_ms({'a': step('a', 2.0), 'b': step('b', 5.0)}, CPU, rounds=3,
                                  warmup=1, progress=lambda index, so_far: seen.append(
                                      (index, {name: len(t) for name, t in so_far.items()})))
    assert calls == ['a', 'b'] + ['a', 'b', 'b', 'a', 'a', 'b']
    assert times == {'a': [pytest.approx(2.0)] * 3, 'b': [pytest.approx(5.0)] * 3}
    assert collecting == [True, True] + [False] * 6 and gc.isenabled()
    assert seen == [(0, {'a': 1, 'b': 1}), (1, {'a': 2, 'b': 2}), (2, {'a': 3, 'b': 3})]


@pytest.mark.parametrize('steps, rounds, warmup', [({}, 3, 1), ({'a': print}, 0, 1),
                                                   ({'a': print}, 3, -1)])
def test_interleaved_ms_refuses_what_it_cannot_time(steps, rounds, warmup):
    with pytest.raises(ValueError, match='interleaved timing takes'):
        timing.interleaved_ms(steps, CPU, rounds, warmup=warmup)


def test_interleaved_ms_waits_for_the_gpu_around_each_call_on_cuda(monkeypatch):
    """On CUDA each call is timed from a synchronised start to a synchronised
    end: what an eager caller waits for."""
    events = []
    cuda = torch.device('cuda')
    monkeypatch.setattr(torch.cuda, 'synchronize', lambda device: events.append(device))
    timing.interleaved_ms({'a': lambda: events.append('a')}, cuda, rounds=2, warmup=0)
    assert events == [cuda, 'a', cuda] * 2


def test_pair_ratios_is_the_median_of_the_rounds_ratios():
    """Rounds of 10/10, 30/10 and 12/20 ms: ratios 1, 3 and 0.6, median 1.0,
    where the ratio of the medians would be 12/10."""
    ratios = timing.pair_ratios({'off': [10.0, 30.0, 12.0], 'on': [10.0, 10.0, 20.0]},
                                'off', 'on')
    assert ratios == dict(ratio_median=1.0, ratio_min=0.6, ratio_max=3.0,
                          median_ms={'off': 12.0, 'on': 10.0})
    with pytest.raises(ValueError):
        timing.pair_ratios({'off': [1.0], 'on': [1.0, 2.0]}, 'off', 'on')
