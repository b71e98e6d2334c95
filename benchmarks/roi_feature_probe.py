#!/usr/bin/env python
"""What a detector's RoI head can see at initialisation (issue 8).

Pools each backbone's stride-4 and stride-8 outputs over the ground-truth
boxes of the demo training images and over as many background boxes of the
same sizes, with mmcv's RoIAlign as Mask R-CNN does, and fits a ridge
classifier on the pooled features (2-fold cross-validation). Reports the
held-out accuracy of foreground vs background and of the 5-way label
(4 shapes + background). Features that carry nothing score about 0.5 on
both (half the boxes are background).

    python benchmarks/roi_feature_probe.py
    python benchmarks/roi_feature_probe.py --backbones mavit swin --strided

``--strided`` also probes MAViT's outputs as the pre-fix LayerNorm2d returned
them (a channels_last view of the same values): what the R-CNN head got before
the fix. Needs the demo data (``python tools/make_demo_data.py``). CPU,
seconds per backbone. Writes JSON (``--out``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / 'benchmarks'))

import mmcv  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import mavit_mm  # noqa: E402,F401
from mavit_mm.tooling.device import cpu_model  # noqa: E402

MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([58.395, 57.12, 57.375])


def backbone_cfgs():
    import detector_stall
    detector_stall.register_variants()
    return {
        'mavit': dict(type='MAViT', arch='tiny', init_cfg=None),
        'swin': dict(detector_stall.SWIN_T64),
        'resnet18': dict(detector_stall.RESNET18),
        'resnet18-ln': dict(detector_stall.RESNET18, type='ResNetWithOutputLN'),
    }


def box_iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def load_boxes(data_root: Path, num_images: int, seed: int = 0):
    """Images (normalised, NCHW), RoIs ``[i, x1, y1, x2, y2]`` and labels (0 = background)."""
    ann = json.loads((data_root / 'annotations' / 'instances_train.json').read_text())
    rng = np.random.default_rng(seed)
    images, rois, labels = [], [], []
    by_image = {}
    for obj in ann['annotations']:
        by_image.setdefault(obj['image_id'], []).append(obj)
    for index, info in enumerate(ann['images'][:num_images]):
        pixels = mmcv.imread(str(data_root / 'train' / info['file_name']))[:, :, ::-1]
        height, width = pixels.shape[:2]
        images.append(torch.tensor(((pixels - MEAN) / STD).transpose(2, 0, 1).copy(),
                                   dtype=torch.float32))
        gts = []
        for obj in by_image.get(info['id'], []):
            x, y, w, h = obj['bbox']
            gts.append([x, y, x + w, y + h])
            rois.append([index, x, y, x + w, y + h])
            labels.append(obj['category_id'])
        for gt in gts:  # one background box of the same size per object
            w, h = gt[2] - gt[0], gt[3] - gt[1]
            for _ in range(100):
                cx, cy = rng.uniform(w / 2, width - w / 2), rng.uniform(h / 2, height - h / 2)
                box = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
                if all(box_iou(box, other) < 0.2 for other in gts):
                    rois.append([index] + box)
                    labels.append(0)
                    break
    return (torch.stack(images), torch.tensor(rois, dtype=torch.float32), np.array(labels))


def ridge_accuracy(features: np.ndarray, labels: np.ndarray, ridge: float = 10.0) -> float:
    """Held-out accuracy of a one-vs-rest ridge classifier, 2-fold."""
    order = np.random.default_rng(1).permutation(len(labels))
    half = len(labels) // 2
    classes = np.unique(labels)
    scores = []
    for train, test in ((order[:half], order[half:]), (order[half:], order[:half])):
        mean, std = features[train].mean(0), features[train].std(0) + 1e-6
        x_train, x_test = (features[train] - mean) / std, (features[test] - mean) / std
        targets = np.stack([labels[train] == c for c in classes], 1).astype(float)
        weights = np.linalg.solve(x_train.T @ x_train + ridge * np.eye(x_train.shape[1]),
                                  x_train.T @ targets)
        scores.append(float((classes[(x_test @ weights).argmax(1)] == labels[test]).mean()))
    return float(np.mean(scores))


def probe(outputs, rois, labels, levels=(0, 1)) -> dict:
    from mmcv.ops import roi_align
    result = {}
    for level in levels:
        pooled = roi_align(outputs[level], rois, (7, 7), 1 / (4 * 2 ** level), 0, 'avg', True)
        features = pooled.mean((2, 3)).numpy()
        result[f'stride{4 * 2 ** level}'] = dict(
            fg_vs_bg=round(ridge_accuracy(features, (labels > 0).astype(int)), 3),
            five_way=round(ridge_accuracy(features, labels), 3))
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--backbones', nargs='+', default=['mavit', 'swin', 'resnet18',
                                                            'resnet18-ln'])
    parser.add_argument('--strided', action='store_true',
                        help="also probe MAViT's outputs as channels_last views (pre-fix)")
    parser.add_argument('--data-root', type=Path, default=REPO_ROOT / 'data/demo/coco')
    parser.add_argument('--num-images', type=int, default=48)
    parser.add_argument('--out', type=Path,
                        default=REPO_ROOT / 'benchmarks/results/roi-feature-probe-cpu.json')
    args = parser.parse_args(argv)
    if not (args.data_root / 'annotations').is_dir():
        parser.error(f'no demo data at {args.data_root}: run python tools/make_demo_data.py')

    from mmdet.registry import MODELS
    from mmdet.utils import register_all_modules
    register_all_modules()
    cfgs = backbone_cfgs()
    unknown = sorted(set(args.backbones) - set(cfgs))
    if unknown:
        parser.error(f'unknown backbones {unknown}; choose from {sorted(cfgs)}')
    images, rois, labels = load_boxes(args.data_root, args.num_images)
    print(f'{len(labels)} boxes ({int((labels > 0).sum())} objects) on {len(images)} images')
    rows = {}
    for name in args.backbones:
        start = time.time()
        torch.manual_seed(0)
        model = MODELS.build(cfgs[name])
        model.init_weights()
        model.train()  # batch statistics, as in the first training iterations
        with torch.no_grad():
            outputs = model(images)
        rows[name] = probe(outputs, rois, labels)
        if name == 'mavit' and args.strided:
            strided = [o.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2) for o in outputs]
            rows['mavit (channels_last views, pre-fix)'] = probe(strided, rois, labels)
        print(f'{name}: {rows[name]} ({time.time() - start:.0f} s)')
    if 'mavit (channels_last views, pre-fix)' in rows:
        print(f"mavit as channels_last views: {rows['mavit (channels_last views, pre-fix)']}")
    record = dict(
        what=__doc__.split('\n\n')[0], date=time.strftime('%Y-%m-%d'),
        machine=dict(cpu=cpu_model(), threads=torch.get_num_threads()),
        versions=dict(torch=torch.__version__, mmcv=mmcv.__version__),
        data=dict(root=str(args.data_root.relative_to(REPO_ROOT)
                           if args.data_root.is_relative_to(REPO_ROOT) else args.data_root),
                  images=len(images), boxes=len(labels), objects=int((labels > 0).sum())),
        chance=dict(fg_vs_bg=0.5, five_way=round(float(np.bincount(labels).max() / len(labels)), 3)),
        results=rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
