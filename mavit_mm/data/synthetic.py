"""Small synthetic datasets in COCO and ADE20K format, deterministic from a seed.

Both show a few solid shapes (one colour per class, with some brightness
jitter) on a textured, muted background, which a detector or segmentor trained
from scratch on a CPU learns quickly: what the demo configs and the end-to-end
tests need.

Same arguments give byte-identical files: randomness comes from
``numpy.random.RandomState`` (whose streams numpy keeps stable across
versions), JSON is written with fixed key order and rounding, and images are
encoded with fixed OpenCV settings.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

# (name, BGR colour as drawn by OpenCV). Colours are far apart so the classes are
# easy to tell apart; shapes differ too, so masks need more than a colour lookup.
SHAPE_CLASSES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ('circle', (40, 40, 220)),     # red
    ('square', (40, 200, 40)),     # green
    ('triangle', (220, 60, 40)),   # blue
    ('star', (30, 210, 230)),      # yellow
)
# The bundled demo data (data/demo/<kind>, what configs/demo read): what
# tools/make_demo_data.py and the main job write, and the generators' defaults.
DEMO_DATA_ROOT = 'data/demo'
DEMO_DATA_SETTINGS = dict(num_train=64, num_val=16, image_size=(160, 160),
                          num_classes=len(SHAPE_CLASSES), max_objects=3, seed=0)
COCO_SPLITS = ('train', 'val')
ADE_SPLITS = {'train': 'training', 'val': 'validation'}
GROUND_CLASS = 'ground'
# Pixels within this distance of an object border are "unlabelled" (0) in the
# semantic maps.
UNLABELLED_BORDER_PX = 1
JPEG_QUALITY = 95
MANIFEST_NAME = 'synthetic_dataset.json'


def shape_class_names(num_classes: int = len(SHAPE_CLASSES)) -> tuple[str, ...]:
    return tuple(name for name, _ in SHAPE_CLASSES[:_check_num_classes(num_classes)])


def shape_palette(num_classes: int = len(SHAPE_CLASSES)) -> list[tuple[int, int, int]]:
    """RGB colours of the shape classes (for visualisers / metainfo)."""
    return [tuple(reversed(bgr)) for _, bgr in SHAPE_CLASSES[:_check_num_classes(num_classes)]]


def coco_metainfo(num_classes: int = len(SHAPE_CLASSES)) -> dict:
    """``metainfo`` for mmdet's ``CocoDataset`` on the generated COCO dataset."""
    return dict(classes=shape_class_names(num_classes), palette=shape_palette(num_classes))


def ade20k_metainfo(num_classes: int = len(SHAPE_CLASSES)) -> dict:
    """``metainfo`` for mmseg's ``BaseSegDataset`` (``reduce_zero_label=True``):
    label ``i`` in the PNGs is class ``i - 1`` here."""
    return dict(classes=(GROUND_CLASS,) + shape_class_names(num_classes),
                palette=[(120, 120, 120)] + shape_palette(num_classes))


def _check_num_classes(num_classes: int) -> int:
    if not 1 <= num_classes <= len(SHAPE_CLASSES):
        raise ValueError(f'num_classes must be in [1, {len(SHAPE_CLASSES)}], got {num_classes}')
    return num_classes


@dataclass
class ShapeInstance:
    class_index: int                 # 0-based index into SHAPE_CLASSES
    polygon: np.ndarray              # (P, 2) float, x/y in pixels


@dataclass
class Scene:
    image: np.ndarray                # (H, W, 3) uint8 BGR
    instances: list[ShapeInstance]
    instance_masks: list[np.ndarray]  # (H, W) bool each, as drawn


# Polygon corners of each shape (a star's alternate between two radii).
_CORNERS = {'circle': 32, 'square': 4, 'triangle': 3, 'star': 10}


def _shape_polygon(kind: str, cx: float, cy: float, radius: float, rotation: float) -> np.ndarray:
    corners = _CORNERS[kind]
    angles = np.linspace(0, 2 * math.pi, corners, endpoint=False)
    if kind != 'circle':
        angles = angles + rotation
    radii = np.full_like(angles, radius)
    if kind == 'star':
        radii = np.where(np.arange(corners) % 2 == 0, radius, radius * 0.45)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], axis=1)


def _textured_background(rng: np.random.RandomState, height: int, width: int) -> np.ndarray:
    """Muted, low-saturation texture: smooth blotches plus stripes plus grain."""
    base = rng.uniform(70, 150, size=3)
    blotches = rng.uniform(-25, 25, size=(max(2, height // 24), max(2, width // 24), 3))
    blotches = cv2.resize(blotches, (width, height), interpolation=cv2.INTER_CUBIC)
    period = rng.uniform(6, 16)
    angle = rng.uniform(0, math.pi)
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    stripes = 10 * np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period)
    grain = rng.normal(0, 6, size=(height, width, 1))
    image = base + blotches + stripes[..., None] + grain
    # Pull the colour toward grey so no background patch looks like a shape colour.
    grey = image.mean(axis=2, keepdims=True)
    image = grey + 0.35 * (image - grey)
    return np.clip(image, 0, 255).astype(np.uint8)


def render_scene(rng: np.random.RandomState, height: int, width: int, num_classes: int,
                 max_objects: int = 3) -> Scene:
    """One image with 1..max_objects non-overlapping shapes."""
    image = _textured_background(rng, height, width)
    short_side = min(height, width)
    instances, masks, boxes = [], [], []
    wanted = rng.randint(1, max_objects + 1)
    for _ in range(wanted * 20):  # rejection sampling for non-overlapping boxes
        if len(instances) == wanted:
            break
        class_index = rng.randint(num_classes)
        radius = rng.uniform(0.12, 0.24) * short_side
        cx = rng.uniform(radius, width - radius)
        cy = rng.uniform(radius, height - radius)
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        if any(box[0] < b[2] + 2 and b[0] < box[2] + 2 and box[1] < b[3] + 2 and b[1] < box[3] + 2
               for b in boxes):
            continue
        kind, colour = SHAPE_CLASSES[class_index]
        polygon = _shape_polygon(kind, cx, cy, radius, rng.uniform(0, 2 * math.pi))
        # Brightness jitter keeps colour a strong but not perfectly constant cue.
        shade = rng.uniform(0.8, 1.15)
        fill = tuple(int(np.clip(c * shade, 0, 255)) for c in colour)
        mask = np.zeros((height, width), np.uint8)
        points = np.round(polygon).astype(np.int32)
        cv2.fillPoly(mask, [points], 1, lineType=cv2.LINE_8)
        if mask.sum() < 16:
            continue
        image[mask.astype(bool)] = fill
        instances.append(ShapeInstance(class_index, polygon))
        masks.append(mask.astype(bool))
        boxes.append(box)
    return Scene(image, instances, masks)


_JPEG_PARAMS = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY, cv2.IMWRITE_JPEG_OPTIMIZE, 0]
_PNG_PARAMS = [cv2.IMWRITE_PNG_COMPRESSION, 6]


def _write_image(path: Path, image: np.ndarray, params: list[int]) -> None:
    """``image`` encoded by the format of ``path``'s suffix, with ``params``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, encoded = cv2.imencode(path.suffix, image, params)
    if not ok:
        raise RuntimeError(f'could not encode {path}')
    path.write_bytes(encoded.tobytes())


_KIND_SALT = {'coco': 0xC0C0, 'ade20k': 0xADE2}


def _splits(kind: str, seed: int, num_train: int, num_val: int):
    """(split, image count, random stream) of each split. Independent streams per
    dataset kind and split: changing num_val leaves the train images unchanged."""
    if num_train < 1 or num_val < 1:
        raise ValueError(f'need at least one train and one val image, got {num_train}/{num_val}')
    for index, (split, count) in enumerate(zip(COCO_SPLITS, (num_train, num_val))):
        yield split, count, np.random.RandomState([seed, _KIND_SALT[kind], index])


def make_coco_dataset(root, num_train: int = DEMO_DATA_SETTINGS['num_train'],
                      num_val: int = DEMO_DATA_SETTINGS['num_val'],
                      image_size=DEMO_DATA_SETTINGS['image_size'],
                      num_classes: int = DEMO_DATA_SETTINGS['num_classes'],
                      max_objects: int = DEMO_DATA_SETTINGS['max_objects'],
                      seed: int = DEMO_DATA_SETTINGS['seed']) -> dict[str, Path]:
    """Write a COCO-format instance segmentation dataset under ``root``:
    ``{train,val}/*.jpg`` and ``annotations/instances_{train,val}.json``
    (polygon masks, ``iscrowd=0``); ``image_size`` is (height, width).

    Returns ``{'root': ..., 'train_ann': ..., 'val_ann': ...}``.
    """
    root = Path(root)
    height, width = _image_size(image_size)
    categories = [dict(id=i + 1, name=name, supercategory='shape')
                  for i, name in enumerate(shape_class_names(num_classes))]
    outputs = {'root': root}
    annotation_id = 1
    for split, count, rng in _splits('coco', seed, num_train, num_val):
        images, annotations = [], []
        for index in range(count):
            scene = render_scene(rng, height, width, num_classes, max_objects)
            image_id = index + 1
            file_name = f'{index:06d}.jpg'
            _write_image(root / split / file_name, scene.image, _JPEG_PARAMS)
            images.append(dict(id=image_id, file_name=file_name, height=height, width=width))
            for instance in scene.instances:
                annotations.append(_coco_annotation(annotation_id, image_id, instance, width, height))
                annotation_id += 1
        ann_file = root / 'annotations' / f'instances_{split}.json'
        ann_file.parent.mkdir(parents=True, exist_ok=True)
        content = dict(info=dict(description=f'mavit-mm synthetic shapes, seed {seed}'),
                       licenses=[], images=images, annotations=annotations,
                       categories=categories)
        ann_file.write_text(json.dumps(content, sort_keys=True, separators=(',', ':')))
        outputs[f'{split}_ann'] = ann_file
    _write_manifest(root, 'coco', num_train=num_train, num_val=num_val,
                    image_size=[height, width], num_classes=num_classes,
                    max_objects=max_objects, seed=seed)
    return outputs


def _coco_annotation(annotation_id: int, image_id: int, instance: ShapeInstance,
                     width: int, height: int) -> dict:
    polygon = np.round(instance.polygon.clip(0, [width - 1, height - 1]), 2)
    x_min, y_min = polygon.min(axis=0)
    x_max, y_max = polygon.max(axis=0)
    xs, ys = polygon[:, 0], polygon[:, 1]
    area = 0.5 * abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1))))
    return dict(
        id=annotation_id, image_id=image_id, category_id=instance.class_index + 1,
        segmentation=[[round(float(v), 2) for v in polygon.reshape(-1)]],
        area=round(area, 2),
        bbox=[round(float(x_min), 2), round(float(y_min), 2),
              round(float(x_max - x_min), 2), round(float(y_max - y_min), 2)],
        iscrowd=0)


def make_ade20k_dataset(root, num_train: int = DEMO_DATA_SETTINGS['num_train'],
                        num_val: int = DEMO_DATA_SETTINGS['num_val'],
                        image_size=DEMO_DATA_SETTINGS['image_size'],
                        num_classes: int = DEMO_DATA_SETTINGS['num_classes'],
                        max_objects: int = DEMO_DATA_SETTINGS['max_objects'],
                        seed: int = DEMO_DATA_SETTINGS['seed']) -> dict[str, Path]:
    """Write an ADE20K-format semantic segmentation dataset under ``root``:
    ``images/{training,validation}/*.jpg`` and ``annotations/{training,validation}/*.png``,
    where 0 is unlabelled (a thin band on every object border, as ADE20K leaves
    ambiguous pixels), 1 the textured ground and 2.. the shapes: read it with
    ``reduce_zero_label=True``, exactly like ADE20K.

    Returns ``{'root': ..., 'train_img_dir': ..., 'val_img_dir': ..., ...}``.
    """
    root = Path(root)
    height, width = _image_size(image_size)
    _check_num_classes(num_classes)
    kernel = np.ones((2 * UNLABELLED_BORDER_PX + 1,) * 2, np.uint8)
    outputs = {'root': root}
    for split, count, rng in _splits('ade20k', seed, num_train, num_val):
        folder = ADE_SPLITS[split]
        img_dir, ann_dir = root / 'images' / folder, root / 'annotations' / folder
        outputs.update({f'{split}_img_dir': img_dir, f'{split}_ann_dir': ann_dir})
        for index in range(count):
            scene = render_scene(rng, height, width, num_classes, max_objects)
            label_map = np.ones((height, width), np.uint8)  # 1 = ground
            unlabelled = np.zeros((height, width), bool)
            for instance, mask in zip(scene.instances, scene.instance_masks):
                label_map[mask] = instance.class_index + 2
                mask_u8 = mask.astype(np.uint8)
                unlabelled |= cv2.dilate(mask_u8, kernel) != cv2.erode(mask_u8, kernel)
            label_map[unlabelled] = 0
            _write_image(img_dir / f'{index:06d}.jpg', scene.image, _JPEG_PARAMS)
            _write_image(ann_dir / f'{index:06d}.png', label_map, _PNG_PARAMS)
    _write_manifest(root, 'ade20k', num_train=num_train, num_val=num_val,
                    image_size=[height, width], num_classes=num_classes,
                    max_objects=max_objects, seed=seed)
    return outputs


def _image_size(image_size) -> tuple[int, int]:
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    height, width = (int(v) for v in image_size)
    if height < 32 or width < 32:
        raise ValueError(f'image_size must be at least 32x32, got {height}x{width}')
    return height, width


def _write_manifest(root: Path, kind: str, **params) -> None:
    """Written last, so its presence means the dataset was generated completely."""
    (root / MANIFEST_NAME).write_text(
        json.dumps(dict(kind=kind, **params), sort_keys=True, indent=1) + '\n')


def read_manifest(root) -> dict:
    """The generation parameters of a dataset under ``root`` ({} if none/incomplete)."""
    manifest = Path(root) / MANIFEST_NAME
    try:
        return json.loads(manifest.read_text())
    except (OSError, ValueError):
        return {}


def dataset_complete(root, kind: str, **params) -> bool:
    """Whether ``root`` holds a completely generated dataset of ``kind`` ('coco'|'ade20k')
    made with ``params`` (those given; e.g. ``seed=0, image_size=[160, 160]``)."""
    if kind not in ('coco', 'ade20k'):
        raise ValueError(f"kind must be 'coco' or 'ade20k', got {kind!r}")
    manifest = read_manifest(root)
    expected = json.loads(json.dumps(dict(kind=kind, **params)))  # tuples -> lists
    return bool(manifest) and all(manifest.get(k) == v for k, v in expected.items())


__all__ = ['SHAPE_CLASSES', 'GROUND_CLASS', 'DEMO_DATA_ROOT', 'DEMO_DATA_SETTINGS',
           'make_coco_dataset', 'make_ade20k_dataset',
           'coco_metainfo', 'ade20k_metainfo', 'shape_class_names', 'shape_palette',
           'render_scene', 'dataset_complete', 'read_manifest']
