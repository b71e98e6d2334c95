"""Pictures of a trained model for a person to look at (``tools/main_job.py``):
ground truth beside the prediction for a few test images, and the training curves.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

from .json_logs import is_metric_record, metrics_only, run_dirs, training_records

_visualizer_ids = itertools.count()


def _matplotlib_pyplot():
    import matplotlib
    matplotlib.use('Agg')  # files only, no display needed
    import matplotlib.pyplot as plt
    return plt


def draw_validation_samples(config, checkpoint, out_dir, num_images: int = 4,
                            score_thr: float = 0.3, device: str = 'cpu',
                            title: str | None = None) -> dict[str, object]:
    """Draw ground truth (left) beside prediction (right) for the first
    ``num_images`` images of the test split of ``config`` (a path or an mmengine
    Config), with the weights of ``checkpoint``, by the library's own visualiser
    (mmdet's: boxes, masks, labels and scores; mmseg's: class overlays).

    Returns ``{'images': [one PNG per image], 'sheet': PNG of all of them}``.
    """
    import mmcv
    import torch
    from mmengine.config import Config
    from mmengine.dataset import pseudo_collate
    from mmengine.model.utils import revert_sync_batchnorm
    from mmengine.runner import load_checkpoint

    from .config import load_config
    from .model_builder import build_model, scope_registry

    cfg = config if isinstance(config, Config) else load_config(config)
    dataset = scope_registry(cfg, 'DATASETS').build(cfg.test_dataloader.dataset)
    model = revert_sync_batchnorm(build_model(cfg))  # no backbone init: weights follow
    load_checkpoint(model, str(checkpoint), map_location='cpu', strict=True,
                    logger='silent')
    model.to(device).eval()
    model.dataset_meta = dict(classes=dataset.metainfo['classes'],
                              palette=dataset.metainfo.get('palette'))
    # Only the visualiser's type from the config: it draws, out_file saves.
    visualizer = scope_registry(cfg, 'VISUALIZERS').build(
        dict(type=cfg.visualizer['type'], name=f'mavit_pictures_{next(_visualizer_ids)}'))
    visualizer.dataset_meta = model.dataset_meta

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written, drawn = [], []
    count = min(num_images, len(dataset))
    for index in range(count):
        batch = pseudo_collate([dataset[index]])
        with torch.no_grad():
            sample = model.test_step(batch)[0]
        image = mmcv.imread(sample.img_path, channel_order='rgb')
        out_file = out_dir / f'{index:02d}_{Path(sample.img_path).stem}.png'
        options = (dict(pred_score_thr=score_thr) if cfg.default_scope == 'mmdet'
                   else dict(with_labels=True))
        visualizer.add_datasample(out_file.stem, image, data_sample=sample, draw_gt=True,
                                  draw_pred=True, out_file=str(out_file), **options)
        # Read back what was written: mmseg's visualiser keeps only the last
        # half as its current image, the file holds both.
        drawn.append((Path(sample.img_path).name,
                      mmcv.imread(str(out_file), channel_order='rgb')))
        written.append(out_file)
        print(f'  drew {index + 1}/{count}: {out_file}', flush=True)

    sheet = out_dir / 'ground_truth_vs_prediction.png'
    prediction = (f'prediction (score >= {score_thr:g})' if cfg.default_scope == 'mmdet'
                  else 'prediction')
    _write_sheet(drawn, sheet, ('ground truth', prediction), title)
    return dict(images=written, sheet=sheet)


def _write_sheet(drawn: Sequence, out_file: Path, column_titles, title=None) -> None:
    """One row per drawn image (ground truth | prediction, split in the middle)."""
    plt = _matplotlib_pyplot()
    rows = len(drawn)
    height, width = drawn[0][1].shape[:2]
    panel = 3.2  # inches per half image
    figure, axes = plt.subplots(rows, 2, squeeze=False,
                                figsize=(2 * panel, rows * panel * height / (width / 2) + 0.6))
    for row, (name, image) in enumerate(drawn):
        half = image.shape[1] // 2
        for column, part in enumerate((image[:, :half], image[:, half:])):
            axis = axes[row][column]
            axis.imshow(part, interpolation='nearest')
            axis.set(xticks=[], yticks=[])
            if row == 0:
                axis.set_title(column_titles[column], fontsize=11)
            if column == 0:
                axis.set_ylabel(name, fontsize=8)
    if title:
        figure.suptitle(title, fontsize=12)
    figure.tight_layout()
    figure.savefig(out_file, dpi=100)
    plt.close(figure)


def training_curves(work_dir) -> dict[str, object]:
    """``{'losses': {name: ([iter], [value])}, 'metrics': {name: ([iter], [value])}}``
    of the newest training run of ``work_dir``."""
    for run_dir in reversed(run_dirs(work_dir)):
        records = training_records(run_dir)
        if any('loss' in record for record in records):
            break
    else:
        raise FileNotFoundError(f'no training log (vis_data/*.json with losses) in {work_dir}')
    losses: dict[str, tuple] = {}
    metrics: dict[str, tuple] = {}
    for record in records:
        step = record.get('step', record.get('iter'))
        if step is None:
            continue
        if is_metric_record(record):
            target, values = metrics, metrics_only(record)
        elif 'loss' in record:
            target = losses
            # mmdet: loss, loss_cls, ...; mmseg: loss, decode.loss_ce, aux.loss_ce
            values = {k: v for k, v in record.items()
                      if k.startswith('loss') or '.loss' in k}
        else:
            continue
        for name, value in values.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                steps, series = target.setdefault(name, ([], []))
                steps.append(int(step))
                series.append(float(value))
    return dict(losses=losses, metrics=metrics, run_dir=run_dir)


def plot_training_curves(work_dir, out_file, metric_names: Sequence[str],
                         final_metrics: dict[str, float] | None = None,
                         final_step: int | None = None,
                         bars: dict[str, float] | None = None,
                         title: str | None = None) -> Path:
    """Losses (left) and validation metrics (right) against the iteration, from
    mmengine's JSON logs of the newest training run of ``work_dir``.

    ``final_metrics`` (e.g. the test run of the final checkpoint) are drawn as
    stars at ``final_step``, ``bars`` (``{metric: minimum}``) as dashed lines.
    """
    curves = training_curves(work_dir)
    plt = _matplotlib_pyplot()
    figure, (loss_axis, metric_axis) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, (steps, values) in sorted(curves['losses'].items(),
                                        key=lambda item: item[0] != 'loss'):
        loss_axis.plot(steps, values, label=name,
                       linewidth=2.2 if name == 'loss' else 1.0,
                       color='black' if name == 'loss' else None)
    positive = [v for _, values in curves['losses'].values() for v in values if v > 0]
    if positive and max(positive) / min(positive) > 50:
        loss_axis.set_yscale('log')
    loss_axis.set(xlabel='iteration', ylabel='training loss',
                  title='losses (mmengine log, smoothed over the log window)')
    loss_axis.grid(True, alpha=0.3)
    loss_axis.legend(fontsize=8)

    plotted, starred = [], False
    for index, name in enumerate(metric_names):
        color = f'C{index}'
        steps, values = curves['metrics'].get(name, ([], []))
        if steps:
            metric_axis.plot(steps, values, marker='o', color=color, label=name)
            plotted.append(name)
        if final_metrics and name in final_metrics and final_step is not None:
            metric_axis.plot([final_step], [final_metrics[name]], marker='*', markersize=14,
                             linestyle='none', color=color)
            starred = True
        if bars and name in bars:
            metric_axis.axhline(bars[name], color=color, linestyle='--', linewidth=1,
                                label=f'bar: {name} >= {bars[name]:g}')
            plotted.append(name)
    if starred:  # one legend entry for the stars of every metric
        metric_axis.plot([], [], marker='*', markersize=14, linestyle='none', color='grey',
                         label='test of the final checkpoint')
        plotted.append('test')
    metric_axis.set(xlabel='iteration', ylabel='validation metric',
                    title='validation split (iteration 0 = untrained)')
    metric_axis.grid(True, alpha=0.3)
    if plotted:
        metric_axis.legend(fontsize=8)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    out_file = Path(out_file)
    out_file.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_file, dpi=100)
    plt.close(figure)
    return out_file
