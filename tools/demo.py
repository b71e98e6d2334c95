"""Run a trained MAViT detector or segmentor on images and save the drawn results.

Detection configs (mmdet scope) draw boxes and masks above --score-thr;
segmentation configs (mmseg scope) draw the class map. Each output image is
written to --out-dir under the input's name, and a line per image summarises
what was found.

Examples:
  python tools/demo.py demo.jpg configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py epoch_12.pth
  python tools/demo.py images/ configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py \\
      iter_160000.pth --out-dir vis --device cuda
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmengine.config import DictAction  # noqa: E402

IMAGE_SUFFIXES = {'.jpg', '.jpeg', '.png', '.bmp', '.tif', '.tiff', '.webp'}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('inputs', help='an image file or a folder of images')
    parser.add_argument('config', help='model config')
    parser.add_argument('checkpoint', help='trained checkpoint of that config')
    parser.add_argument('--out-dir', default='outputs/demo', help='where drawn images go')
    parser.add_argument('--device', default=None, help='cuda or cpu (default: cuda if available)')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detection score threshold for drawing and counting (default: 0.3)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default={},
                        help='override config entries, key=value (mmengine syntax)')
    return parser.parse_args(argv)


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


def main(argv=None) -> list:
    args = parse_args(argv)
    import mmcv
    import torch

    import mavit_mm  # noqa: F401
    from mavit_mm.tooling.config import load_config

    images = list_images(args.inputs)
    if not Path(args.checkpoint).is_file():
        raise FileNotFoundError(f'checkpoint not found: {args.checkpoint}')
    device = args.device or ('cuda' if torch.cuda.is_available() else 'cpu')
    cfg = load_config(args.config, args.cfg_options)
    cfg.model.backbone.init_cfg = None
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if cfg.default_scope == 'mmdet':
        from mmdet.apis import inference_detector as infer, init_detector as init
        from mmdet.registry import VISUALIZERS
    else:
        from mmseg.apis import inference_model as infer, init_model as init
        from mmseg.registry import VISUALIZERS
    model = init(cfg, args.checkpoint, device=device)
    visualizer = VISUALIZERS.build(dict(cfg.visualizer, name='mavit_demo'))
    visualizer.dataset_meta = model.dataset_meta
    summaries = []
    for image_path in images:
        image = mmcv.imread(str(image_path), channel_order='rgb')
        result = infer(model, str(image_path))
        out_file = out_dir / image_path.name
        draw_kwargs = dict(draw_gt=False, show=False, out_file=str(out_file))
        if cfg.default_scope == 'mmdet':
            draw_kwargs['pred_score_thr'] = args.score_thr
            kept = result.pred_instances[result.pred_instances.scores >= args.score_thr]
            classes = model.dataset_meta['classes']
            found = [classes[int(label)] for label in kept.labels]
            summary = f'{len(found)} objects' + (f': {", ".join(found)}' if found else '')
        else:
            labels = result.pred_sem_seg.data.unique().tolist()
            classes = model.dataset_meta['classes']
            summary = 'classes present: ' + ', '.join(classes[i] for i in labels if i < len(classes))
        visualizer.add_datasample(image_path.stem, image, result, **draw_kwargs)
        print(f'{image_path.name}: {summary} -> {out_file}')
        summaries.append(dict(image=str(image_path), out_file=str(out_file), summary=summary))
    return summaries


if __name__ == '__main__':
    main()
