"""Training-step time of the demo Mask R-CNN: MAViT-T against ResNet-18 in the
same config, on the bundled synthetic COCO data.

Both detectors are built from ``configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py``
(the published MAViT-T Mask R-CNN with the demo's data and schedule); for the
baseline only the backbone changes, to mmdet's ResNet-18 (from scratch, the
same four output widths 64/128/256/512, so neck and heads are identical). Each
step is ``model.train_step`` on one real batch from the config's train
dataloader (two 160 px images with their boxes and masks) with the config's
AdamW optimizer wrapper: data preprocessing, forward, losses, backward and the
update, what ``tools/train.py`` runs per iteration. The two models alternate,
step by step, on the same batches; the medians and their ratio go to JSON.

A regression of the kind the layout fix caused (a slow path in the backbone,
a copy before RoIAlign) shows as this ratio moving. Example::

    python benchmarks/demo_train_step.py --steps 20
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CONFIG = 'configs/demo/mask-rcnn_mavit-t_fpn_demo-shapes.py'
RESNET18 = dict(type='ResNet', depth=18, num_stages=4, out_indices=(0, 1, 2, 3),
                frozen_stages=-1, norm_cfg=dict(type='BN', requires_grad=True),
                norm_eval=False, style='pytorch', init_cfg=None)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--steps', type=int, default=20,
                        help='timed training steps per model (default 20)')
    parser.add_argument('--warmup', type=int, default=3,
                        help='untimed steps per model first (default 3)')
    parser.add_argument('--out', type=Path, default=None,
                        help='JSON file (default benchmarks/results/'
                             'demo-train-step-cpu-<date>.json)')
    return parser.parse_args(argv)


def build(cfg, backbone=None):
    import torch
    from mmengine.optim import build_optim_wrapper

    from mavit_mm.tooling.model_builder import build_model
    model_cfg = cfg.model.copy()
    if backbone is not None:
        model_cfg.backbone = backbone
    torch.manual_seed(0)
    model = build_model(cfg, model_cfg=model_cfg)
    model.init_weights()
    model.train()
    return model, build_optim_wrapper(model, cfg.optim_wrapper.copy())


def main(argv=None) -> dict:
    args = parse_args(argv)
    import torch
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from devtools.checkout import git_commit
    from mavit_mm.data.synthetic import (
        DEMO_DATA_ROOT,
        DEMO_DATA_SETTINGS,
        dataset_complete,
        make_coco_dataset,
    )
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.device import device_name, library_versions
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    root = Path(DEMO_DATA_ROOT) / 'coco'
    if not dataset_complete(root, 'coco', **DEMO_DATA_SETTINGS):
        print(f'writing the demo data to {root} ...', flush=True)
        make_coco_dataset(root, **DEMO_DATA_SETTINGS)
    cfg = load_config(str(REPO_ROOT / CONFIG))
    init_default_scope(cfg.default_scope)
    loader_cfg = cfg.train_dataloader.copy()
    loader_cfg.num_workers = 0
    loader_cfg.persistent_workers = False
    loader = Runner.build_dataloader(loader_cfg, seed=0)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == args.warmup + args.steps:
            break
    models = {'MAViT-T': build(cfg), 'ResNet-18': build(cfg, RESNET18)}
    times = {name: [] for name in models}
    total = len(batches)
    started = time.time()
    for index, batch in enumerate(batches):
        order = list(models) if index % 2 == 0 else list(models)[::-1]
        for name in order:
            model, optim_wrapper = models[name]
            begin = time.perf_counter()
            model.train_step(batch, optim_wrapper)
            if index >= args.warmup:
                times[name].append(1e3 * (time.perf_counter() - begin))
        elapsed = time.time() - started
        print(f'[step {index + 1}/{total}] ' + ', '.join(
            f'{name} {times[name][-1]:.0f} ms' for name in models if times[name]) +
            f'; {elapsed:.0f} s so far, about {elapsed / (index + 1) * (total - index - 1):.0f} s '
            'left', flush=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    report = dict(
        benchmark='demo-train-step', config=CONFIG, device=device_name(torch.device('cpu')),
        device_type='cpu', cpu_threads=torch.get_num_threads(), versions=library_versions(),
        commit=git_commit(),
        date=utc_timestamp(),
        batch_size=cfg.train_dataloader.batch_size, warmup=args.warmup, steps=args.steps,
        baseline_backbone=RESNET18, times_ms=times, median_ms=medians,
        ratio_mavit_over_resnet18=round(medians['MAViT-T'] / medians['ResNet-18'], 3))
    out = args.out or (REPO_ROOT / 'benchmarks' / 'results' /
                       f'demo-train-step-cpu-{time.strftime("%Y-%m-%d")}.json')
    write_json(out, report)
    print(f'median train step: MAViT-T {medians["MAViT-T"]:.0f} ms, ResNet-18 '
          f'{medians["ResNet-18"]:.0f} ms, ratio {report["ratio_mavit_over_resnet18"]:.2f}; '
          f'wrote {out}')
    return report


if __name__ == '__main__':
    main()
