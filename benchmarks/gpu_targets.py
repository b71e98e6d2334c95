"""The GPU targets of the speed work, as data: what each measures, its
threshold, the step of the GPU check that measures it and the fields of that
step's JSON it is judged from. ``benchmarks/gpu_check_lib/`` plans its steps
by them; ``benchmarks/readme_tables.py`` judges the figures of docs/gpu.md by
them and shows each target's figure now, read from the newest committed
results file of its step (``target_now``).

``goal`` groups them (``GOALS``: the lean forward, the fused block, the MALA
op, in the order the work is done). bf16, batch 1 and MAViT-T's figure over
Swin-T's in the same run unless the measurement says otherwise.
"""
from __future__ import annotations

import fnmatch
import operator
from typing import Any, NamedTuple


class Figure(NamedTuple):
    """One figure of a step's JSON: ``field`` (a dotted path) of the report
    itself, or (``rows``: the name of a list in it) of the first row that
    ``match`` selects; a string in ``match`` is a shell pattern (``fnmatch``:
    the model labels carry details after the name)."""
    field: str
    rows: str | None = None
    match: dict[str, Any] = {}
    label: str = ''


class Target(NamedTuple):
    goal: str
    measurement: str
    comparison: str          # a key of COMPARISONS: each figure against the threshold
    threshold: float
    unit: str                # after the threshold and the figures: '', ' µs', '%'
    fmt: str                 # how a figure is written
    step: str                # the GPU check's step that measures it
    figures: tuple[Figure, ...]

    @property
    def text(self) -> str:
        """The threshold as the pages write it, e.g. ``≤ 20 µs``."""
        return f'{self.comparison} {self.threshold:g}{self.unit}'


COMPARISONS = {'≤': operator.le, '≥': operator.ge, '=': operator.eq}
GOALS = ('lean forward', 'fused block', 'MALA op')


def _fps(mode: str, height: int = 512, width: int = 2048, label: str = '') -> Figure:
    """The median over the runs of UperNet MAViT-T's FPS over Swin-T's."""
    return Figure('fps_vs_swin_median', 'medians',
                  dict(mode=mode, height=height, width=width), label)


def _op(batch_heads: int, tokens: int, pass_name: str, label: str = '') -> Figure:
    """The fused op's share of the copy bandwidth (bench_mala.py's rows), bf16, d 64."""
    return Figure('percent_of_copy', 'results',
                  dict(impl='triton', dtype='bf16', head_dim=64, batch_heads=batch_heads,
                       tokens=tokens, **{'pass': pass_name}), label)


def _call(stage: int, pass_name: str) -> Figure:
    """The GPU kernel time of one of MAViT-T's calls of the op at batch 1."""
    return Figure('kernel_us', 'results', dict(stage=stage, batch=1, pass_name=pass_name),
                  f'stage {stage}')


_MAVIT = dict(model='MAViT-T *')
_TESTS = (Figure('failed', label='failed'), Figure('errors', label='errors'))

GPU_TARGETS = (
    Target('lean forward', 'backbone time, 512x2048, CUDA graph', '≤', 0.75, '', '.3f',
           'backbones', (Figure('time_vs_swin.cuda-graph'),)),
    Target('lean forward', 'UperNet FPS, 512x2048, CUDA graph', '≥', 1.15, '', '.2f',
           'upernet-fps', (_fps('cuda-graph'),)),
    Target('lean forward', 'UperNet FPS, 512x2048, eager', '≥', 1.05, '', '.2f',
           'upernet-fps', (_fps('eager'),)),
    Target('fused block', 'UperNet FPS, 512x2048, compile', '≥', 1.2, '', '.2f',
           'upernet-fps-compile', (_fps('compile'),)),
    Target('fused block', 'UperNet FPS, 512x2048, CUDA graph', '≥', 1.3, '', '.2f',
           'upernet-fps', (_fps('cuda-graph'),)),
    Target('fused block', 'UperNet FPS, 512x2048, eager', '≥', 1.2, '', '.2f',
           'upernet-fps', (_fps('eager'),)),
    Target('fused block', 'UperNet FPS, 1024x2048, each mode', '≥', 1.3, '', '.2f',
           'upernet-fps-1024', tuple(_fps(mode, 1024, label=mode)
                                     for mode in ('eager', 'cuda-graph', 'compile'))),
    Target('fused block', 'backbone time, 512x2048, CUDA graph', '≤', 0.6, '', '.3f',
           'backbones', (Figure('time_vs_swin.cuda-graph'),)),
    Target('fused block', 'backbone time, 512x2048, compiled', '≤', 0.8, '', '.3f',
           'backbones', (Figure('time_vs_swin.compile'),)),
    Target('fused block', 'training step time, 512x2048, batch 2 (the fused MALA)', '≤', 0.85,
           '', '.3f', 'sweep',
           (Figure('time_vs_swin', 'training', dict(model='MAViT-T triton', precision='bf16')),)),
    Target('fused block', "GPU kernels per eager backbone forward (MAViT-T's)", '≤', 300, '',
           'd', 'model-profile', (Figure('kernel_count', 'results', _MAVIT),)),
    Target('MALA op', 'each MALA stage call, batch 1, fwd: GPU kernel time', '≤', 20, ' µs',
           '.1f', 'profile', (_call(1, 'fwd'), _call(2, 'fwd'))),
    Target('MALA op', 'each MALA stage call, batch 1, fwd+bwd: GPU kernel time', '≤', 60, ' µs',
           '.1f', 'profile', (_call(1, 'fwd+bwd'), _call(2, 'fwd+bwd'))),
    Target('MALA op', "the op's 4 calls in MAViT-T's forward at 512x2048: GPU time", '≤', 80,
           ' µs', '.1f', 'model-profile',
           (Figure('categories.mala.time_us', 'results', _MAVIT),)),
    Target('MALA op', 'each MALA stage call, batch 8, fwd: share of the copy bandwidth '
           '(B·heads 8 at N 65,536; B·heads 16 at N 16,384)', '≥', 40, '%', '.1f', 'bench',
           (_op(8, 65536, 'fwd', 'stage 1'), _op(16, 16384, 'fwd', 'stage 2'))),
    Target('MALA op', 'the op, B·heads 16, N 65,536, d 64, fwd: share of the copy bandwidth',
           '≥', 50, '%', '.1f', 'bench', (_op(16, 65536, 'fwd'),)),
    Target('MALA op', 'the op, B·heads 16, N 65,536, d 64, fwd+bwd: share of the copy bandwidth',
           '≥', 35, '%', '.1f', 'bench', (_op(16, 65536, 'fwd+bwd'),)),
    Target('MALA op', 'kernel tests on CUDA: failed and errors', '=', 0, '', 'd',
           'kernel-tests', _TESTS),
    Target('MALA op', 'model tests on CUDA, parity with the published outputs among them: '
           'failed and errors', '=', 0, '', 'd', 'model-tests', _TESTS),
)


def matches(row: dict, match: dict) -> bool:
    """Whether ``row`` is one that ``match`` selects (``Figure``)."""
    def same(value, wanted):
        if isinstance(wanted, str) and isinstance(value, str):
            return fnmatch.fnmatchcase(value, wanted)
        return value == wanted
    return all(same(row.get(key), wanted) for key, wanted in match.items())


def figure_value(figure: Figure, report: dict):
    """The value of ``figure`` in a step's JSON, ``None`` where it has none."""
    rows = [report] if figure.rows is None else [
        row for row in report.get(figure.rows) or [] if matches(row, figure.match)]
    for row in rows:
        value = row
        for key in figure.field.split('.'):
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            return value
    return None


def met(target: Target, values) -> bool | None:
    """Whether every figure meets the threshold; ``None`` while one is missing."""
    if any(value is None for value in values):
        return None
    return all(COMPARISONS[target.comparison](value, target.threshold) for value in values)


def target_of(step: str, field: str, row: dict) -> Target | None:
    """The target judged from ``field`` of this row of the step's JSON, if any."""
    return next((target for target in GPU_TARGETS if target.step == step
                 for figure in target.figures
                 if figure.field == field and matches(row, figure.match)), None)


def figures_of(step: str, field: str) -> list[Figure]:
    """The figures of the step's targets judged from ``field``."""
    return [figure for target in GPU_TARGETS if target.step == step
            for figure in target.figures if figure.field == field]
