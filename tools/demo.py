"""Run a trained MAViT detector or segmentor on images and save the drawn results.

Built on mmdet's DetInferencer (detection configs, mmdet scope) and mmseg's
MMSegInferencer (segmentation configs, mmseg scope), as their
demo/image_demo.py are. INPUTS is an image or a folder (its images, sorted by
name). Under --out-dir:

  vis/<image name>         the image with the prediction drawn: boxes and masks
                           scoring above --score-thr, or the class map
                           (--opacity); not with --no-save-vis
  preds/<image stem>.json  detection: every box the model returned (labels,
                           scores, bboxes, RLE masks), mmdet's format
  preds/<image stem>.png   segmentation: the label map (class index per pixel,
                           0 the config's first class; tools/test.py --out
                           writes the dataset's own encoding instead, one
                           higher for ADE20K, whose 0 is "ignore")
                           (neither with --no-save-pred)

--show also opens a window per image; without it nothing is displayed and the
files are written. One line per image says what was found (detections above
--score-thr, classes present). The checkpoint must fit the config's model
exactly (a mismatch is an error naming the keys); class names come from its
meta (dataset_meta, or CLASSES of mmdet 2.x / mmseg 0.x), else from the
config's test dataset.

Examples:
  python tools/demo.py demo.jpg configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py epoch_12.pth
  python tools/demo.py images/ configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py \\
      iter_160000.pth --out-dir vis --device cuda
"""
from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

IMAGE_SUFFIXES = {'.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp'}
# What mmdet's / mmseg's inferencers warn before falling back to COCO /
# Cityscapes class names; here the config's classes are used instead.
_NO_CLASSES_WARNING = 'dataset_meta or class names are not saved'


def parse_args(argv=None):
    from mavit_mm.tooling.cli import ConfigOptions, device_option  # (mavit_mm where used, as below)

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('inputs', help='an image file or a folder of images')
    parser.add_argument('config', help='model config')
    parser.add_argument('checkpoint', help='trained checkpoint of that config')
    parser.add_argument('--out-dir', default='outputs/demo',
                        help='where vis/ and preds/ go (default: outputs/demo)')
    parser.add_argument('--device', type=device_option, default=None,
                        help='cuda or cpu (default: cuda if available)')
    parser.add_argument('--score-thr', '--pred-score-thr', dest='score_thr', type=float,
                        default=0.3, help='detection: draw and count boxes scoring above this '
                                          '(default: 0.3); segmentation ignores it')
    parser.add_argument('--opacity', type=float, default=0.5,
                        help='segmentation: opacity of the drawn class map, in (0, 1] '
                             '(default: 0.5)')
    parser.add_argument('--batch-size', type=int, default=1, help='images per forward pass')
    parser.add_argument('--show', action='store_true',
                        help='also display each drawn image in a window')
    parser.add_argument('--wait-time', type=float, default=0,
                        help='with --show: seconds per image (0: wait for a key)')
    parser.add_argument('--no-save-vis', action='store_true', help='do not write vis/')
    parser.add_argument('--no-save-pred', action='store_true', help='do not write preds/')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions, default={},
                        help='override config entries, key=value (mmengine syntax)')
    args = parser.parse_args(argv)
    if not 0 < args.opacity <= 1:
        parser.error(f'--opacity must be in (0, 1], got {args.opacity}')
    if args.batch_size < 1:
        parser.error(f'--batch-size must be at least 1, got {args.batch_size}')
    return args


def list_images(inputs: str):
    path = Path(inputs)
    if path.is_dir():
        images = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    elif path.is_file():
        images = [path]
    else:
        raise FileNotFoundError(f'no image or folder at {inputs}')
    if not images:
        raise FileNotFoundError(f'no images ({", ".join(sorted(IMAGE_SUFFIXES))}) in {inputs}')
    return images


def build_inferencer(cfg, checkpoint: str, device: str):
    """mmdet's DetInferencer or mmseg's MMSegInferencer for ``cfg`` (a loaded
    config), loading ``checkpoint`` strictly, class names from its meta or
    else from the config. Returns ``(inferencer, classes_from)``."""
    from mavit_mm.models.checkpoint import extract_state_dict, fit_whole_model
    from mavit_mm.tooling.legacy_checkpoints import checkpoint_dataset_meta
    from mavit_mm.tooling.model_builder import dataset_meta_from_config

    if cfg.default_scope == 'mmdet':
        from mmdet.apis import DetInferencer as Base
        options = dict(palette='none', show_progress=False)
    else:
        from mmseg.apis import MMSegInferencer as Base
        options = {}

    class Inferencer(Base):
        classes_from = 'checkpoint'

        def _load_weights_to_model(self, model, loaded, model_cfg):
            if loaded is not None:
                # The whole model, exactly: mmengine alone would load what fits
                # and only warn about the rest.
                fitted = fit_whole_model(model.state_dict(), extract_state_dict(loaded),
                                         source=checkpoint)
                loaded = dict(loaded, state_dict=fitted)
            super()._load_weights_to_model(model, loaded, model_cfg)
            if checkpoint_dataset_meta((loaded or {}).get('meta')) is None:
                model.dataset_meta = dataset_meta_from_config(model_cfg)
                self.classes_from = 'config'

    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message=_NO_CLASSES_WARNING)
        inferencer = Inferencer(model=cfg, weights=checkpoint, device=device, **options)
    inferencer.show_progress = False
    return inferencer, inferencer.classes_from


def _detections(prediction: dict, score_thr: float, classes) -> list:
    """The detections the visualiser draws: scores above ``score_thr``."""
    kept = []
    for index, score in enumerate(prediction['scores']):
        if score > score_thr:
            label = int(prediction['labels'][index])
            kept.append(dict(label=label, score=float(score),
                             bbox=[float(v) for v in prediction['bboxes'][index]],
                             class_name=classes[label] if label < len(classes) else str(label)))
    return kept


def _run_detector(inferencer, images, args, out_dir: str) -> list:
    results = inferencer([str(p) for p in images], batch_size=args.batch_size, show=args.show,
                         wait_time=args.wait_time, no_save_vis=args.no_save_vis,
                         no_save_pred=args.no_save_pred, pred_score_thr=args.score_thr,
                         out_dir=out_dir)
    classes = inferencer.model.dataset_meta['classes']
    summaries = []
    for image, prediction in zip(images, results['predictions']):
        kept = _detections(prediction, args.score_thr, classes)
        # Per class, most found first: "12 person, 3 car", not every name in turn.
        counts = Counter(d['class_name'] for d in kept).most_common()
        summary = (f'{len(kept)} object{"" if len(kept) == 1 else "s"} above score '
                   f'{args.score_thr:g}'
                   + (': ' + ', '.join(f'{n} {name}' for name, n in counts) if counts else '')
                   + f' ({len(prediction["scores"])} detections in all)')
        summaries.append(dict(
            image=str(image), summary=summary, detections=kept,
            num_detections=len(prediction['scores']),
            out_file=(str(Path(out_dir, 'vis', image.name))
                      if out_dir and not args.no_save_vis else None),
            pred_file=(str(Path(out_dir, 'preds', image.stem + '.json'))
                       if out_dir and not args.no_save_pred else None)))
    return summaries


def _run_segmentor(inferencer, images, args, out_dir: str) -> list:
    import numpy as np
    from PIL import Image

    vis_root = out_dir if out_dir and not args.no_save_vis else ''
    samples = inferencer([str(p) for p in images], return_datasamples=True,
                         batch_size=args.batch_size, show=args.show, wait_time=args.wait_time,
                         out_dir=vis_root, opacity=args.opacity)
    samples = samples if isinstance(samples, list) else [samples]
    classes = inferencer.model.dataset_meta['classes']
    summaries = []
    for image, sample in zip(images, samples):
        label_map = sample.pred_sem_seg.data[0].cpu().numpy()
        counts = np.bincount(label_map.ravel())
        present = [(int(i), counts[i] / label_map.size) for i in np.flatnonzero(counts)]
        present.sort(key=lambda item: -item[1])
        names = [classes[i] if i < len(classes) else str(i) for i, _ in present]
        summary = 'classes present: ' + ', '.join(
            f'{name} {fraction:.0%}' for name, (_, fraction) in zip(names, present))
        pred_file = None
        if out_dir and not args.no_save_pred:
            pred_file = Path(out_dir, 'preds', image.stem + '.png')
            pred_file.parent.mkdir(parents=True, exist_ok=True)
            dtype = np.uint8 if label_map.max(initial=0) < 256 else np.uint16
            Image.fromarray(label_map.astype(dtype)).save(pred_file)
        summaries.append(dict(
            image=str(image), summary=summary, classes=names, label_map=label_map,
            out_file=str(Path(vis_root, 'vis', image.name)) if vis_root else None,
            pred_file=str(pred_file) if pred_file else None))
    return summaries


def main(argv=None) -> list:
    args = parse_args(argv)
    import mavit_mm  # noqa: F401  (registers MAViT; allow-lists mmengine's checkpoints)
    from mavit_mm.models.checkpoint import read_checkpoint
    from mavit_mm.tooling.cli import resolve_device
    from mavit_mm.tooling.config import load_config

    images = list_images(args.inputs)
    if not Path(args.checkpoint).is_file():
        raise FileNotFoundError(f'checkpoint not found: {args.checkpoint}')
    read_checkpoint(args.checkpoint)    # memory-mapped: a file that is no checkpoint fails here
    device = str(resolve_device(args.device))
    cfg = load_config(args.config, args.cfg_options)
    inferencer, classes_from = build_inferencer(cfg, args.checkpoint, device)
    if classes_from == 'config':
        print(f'{args.checkpoint} names no classes: using those of the config\'s test dataset')
    # As mmdet's image_demo.py: nothing to write, no output folder.
    out_dir = '' if args.no_save_vis and args.no_save_pred else str(args.out_dir)
    run = _run_detector if cfg.default_scope == 'mmdet' else _run_segmentor
    summaries = run(inferencer, images, args, out_dir)
    for entry in summaries:
        written = [entry[key] for key in ('out_file', 'pred_file') if entry[key]]
        print(f'{Path(entry["image"]).name}: {entry["summary"]}'
              + (f' -> {", ".join(written)}' if written else ''))
    if out_dir:
        print(f'results have been saved at {out_dir}')
    return summaries


if __name__ == '__main__':
    from mavit_mm.tooling.cli import run_tool
    run_tool(main, 'demo.py')
