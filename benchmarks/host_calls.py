"""The host's work of one eager backbone pass, MAViT-T against Swin-T: Python
calls, aten ops and kernel launches, counted without a clock
(``devtools/host_calls.py``, its module docstring says why and how).

MAViT-T runs CUDA's host code on CPU tensors (``cuda_path_on_cpu``: the fused
ops' dispatch and launch arithmetic, their kernels stubbed); Swin-T (mmseg's,
the UperNet baseline's backbone) runs as it is. Both in bf16 autocast, batch
1, at ``--size`` (default 64x64: the counts hardly depend on it, and the CPU's
own work stays small). Two passes each:

* ``forward``: eval mode under ``no_grad``, the second forward (the first
  fills the caches);
* ``train``: training mode, forward and backward of the outputs' mean squares,
  the second step.

Per pass: ``python_calls`` (every Python function entered and builtin
called), ``issued_by_mavit_mm`` (those the package's code makes),
``aten_ops`` (every aten op dispatched, views included: each is a call into
the dispatcher), ``launches`` (MAViT-T's stubbed Triton kernels) and
``cpu_ms`` (median time of the pass on this CPU: host work plus the CPU's
own compute at this size, so a rough guide; compare within one run).

``--ablate`` adds MAViT-T's host work with every switch on
(``fast_paths.ALL_ON``) and with each switch that acts in eager mode off in
turn (``ablations``), the host side of the GPU check's eager ablations.

``--package-root DIR`` imports ``mavit_mm`` from another checkout (e.g. a
``git worktree`` of an older commit) to measure it with this tree's
instrument; ``--baseline DIR`` measures that checkout as well, in a
subprocess, and records it beside this one (``baseline``), so that one file
holds a change's before and after.

Example:
  git worktree add /tmp/base f73578c
  python benchmarks/host_calls.py --baseline /tmp/base \
      --out benchmarks/results/host-calls-cpu-2026-11-27.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PASSES = ('forward', 'train')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--size', type=int, nargs=2, default=(64, 64), metavar=('H', 'W'),
                        help='input size (default 64 64)')
    parser.add_argument('--passes', nargs='+', choices=PASSES, default=list(PASSES),
                        help='which passes (default both)')
    parser.add_argument('--repeats', type=int, default=15,
                        help='timed passes per model and pass, after the counted one '
                             '(default 15)')
    parser.add_argument('--package-root', type=Path, default=REPO_ROOT,
                        help='the checkout to import mavit_mm from (default this one)')
    parser.add_argument('--baseline', type=Path, default=None, metavar='DIR',
                        help='also measure the checkout at DIR (in a subprocess), recorded '
                             'as the baseline')
    parser.add_argument('--ablate', action='store_true',
                        help="also count MAViT-T with every switch on and each eager one off "
                             'in turn (ablations)')
    parser.add_argument('--out', type=Path, help='JSON to write (default: print only)')
    args = parser.parse_args(argv)
    for option, root in (('--package-root', args.package_root), ('--baseline', args.baseline)):
        if root is not None and not (root / 'mavit_mm' / '__init__.py').is_file():
            parser.error(f'{option} {root}: no mavit_mm package there')
    if args.repeats < 1:
        parser.error('--repeats must be at least 1')
    return args


def measure(run, repeats: int, launches=None) -> dict:
    import torch

    from benchmarks.timing import median_ms
    from devtools.host_calls import count_python_calls
    from devtools.op_log import OpLog
    run()                                    # fills the caches
    before = launches.count if launches is not None else 0
    calls = count_python_calls(run)
    launched = launches.count - before if launches is not None else None
    with OpLog() as log:
        run()
    cpu_ms = median_ms(run, torch.device('cpu'), cpu_warmup=0, cpu_calls=repeats)
    return dict(python_calls=calls.total, issued_by_mavit_mm=calls.issued,
                aten_ops=sum(log.ops.values()), launches=launched, cpu_ms=round(cpu_ms, 3))


def measure_ablations(image, args) -> dict:
    """MAViT-T's counts with every switch on, then each switch that acts in
    eager mode off in turn (``fast_paths.FAST_PATH_MODES``), keyed ``'none'``
    or by the switch off."""
    from devtools.host_calls import cuda_path_on_cpu, eager_pass
    from devtools.op_census import mavit_t
    from mavit_mm.ops.fast_paths import ALL_ON, FAST_PATH_MODES, FAST_PATHS
    rows = {}
    with cuda_path_on_cpu() as launches:
        for off in ('none', *[name for name in FAST_PATHS if 'eager' in FAST_PATH_MODES[name]]):
            switches = ALL_ON if off == 'none' else ALL_ON.without(off)
            model = mavit_t(switches)
            rows[off] = {which: measure(eager_pass(model, image, which), args.repeats, launches)
                         for which in args.passes}
            print(f'off: {off:22}', '; '.join(
                f"{which} {row['python_calls']} Python calls, {row['aten_ops']} aten ops, "
                f"{row['launches']} launches" for which, row in rows[off].items()), flush=True)
    return rows


def measure_baseline(args) -> dict:
    """This script on ``args.baseline``'s package, in a subprocess: its report."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / 'baseline.json'
        subprocess.run([sys.executable, __file__, '--size', *map(str, args.size),
                        '--passes', *args.passes, '--repeats', str(args.repeats),
                        '--package-root', str(args.baseline), '--out', str(out)], check=True)
        report = json.loads(out.read_text())
    return dict(commit=report['commit'], results=report['results'])


def main(argv=None) -> dict:
    args = parse_args(argv)
    baseline = measure_baseline(args) if args.baseline is not None else None
    # This tree's instruments (bound first), the package from --package-root.
    sys.path.insert(0, str(REPO_ROOT))
    import benchmarks.timing  # noqa: F401
    import devtools  # noqa: F401
    sys.path.insert(0, str(args.package_root))
    import torch

    import mavit_mm
    from devtools.checkout import git_commit
    from devtools.host_calls import cuda_path_on_cpu, eager_pass
    from devtools.op_census import mavit_t, swin_t
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    torch.set_num_threads(1)
    image = torch.randn(1, 3, *args.size, generator=torch.Generator().manual_seed(0))
    results = {}
    with cuda_path_on_cpu() as launches:
        model = mavit_t()
        results['MAViT-T'] = {which: measure(eager_pass(model, image, which), args.repeats,
                                             launches) for which in args.passes}
    ablations = measure_ablations(image, args) if args.ablate else None
    model = swin_t()
    results['Swin-T'] = {which: measure(eager_pass(model, image, which), args.repeats)
                         for which in args.passes}
    for name, passes in results.items():
        for which, row in passes.items():
            print(f"{name:8} {which:8}: {row['python_calls']:6d} Python calls "
                  f"({row['issued_by_mavit_mm']} by mavit_mm), {row['aten_ops']} aten ops, "
                  f"{row['launches'] or 0} stubbed launches, {row['cpu_ms']:.1f} ms on this CPU")
    report = dict(
        benchmark='host_calls', input=[1, 3, *args.size], autocast='cpu bf16',
        rule='devtools/host_calls.py (module docstring)',
        backbones=dict(mavit="MAViT('tiny', mala_impl='triton', depthwise_impl='triton'), "
                             'CUDA host path on CPU tensors, kernels stubbed',
                       swin='mmseg SwinTransformer, Swin-T settings, window 7'),
        # What was measured (the package of --package-root); the instrument
        # (this script, devtools) is this checkout.
        commit=git_commit(args.package_root), instrument_commit=git_commit(REPO_ROOT),
        own_checkout=Path(mavit_mm.__file__).resolve().parent == REPO_ROOT / 'mavit_mm',
        python=sys.version.split()[0], torch=torch.__version__,
        date=utc_timestamp(),
        python_calls_vs_swin={which: round(results['MAViT-T'][which]['python_calls']
                                           / results['Swin-T'][which]['python_calls'], 3)
                              for which in args.passes},
        results=results, baseline=baseline)
    if ablations is not None:
        report['ablations'] = ablations
    if args.out:
        write_json(args.out, report)
        print(f'wrote {args.out}')
    return report


if __name__ == '__main__':
    main()
