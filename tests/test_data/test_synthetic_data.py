"""The bundled synthetic datasets: formats, learnable content, determinism."""
import hashlib
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from helpers.paths import REPO_ROOT
from helpers.tools import dataset_cfgs_of, load_tool

from mavit_mm.data.synthetic import (
    DEMO_DATA_ROOT,
    SHAPE_CLASSES,
    ade20k_metainfo,
    coco_metainfo,
    dataset_complete,
    make_ade20k_dataset,
    make_coco_dataset,
    read_manifest,
)
from mavit_mm.tooling.cli import run_tool
from mavit_mm.tooling.config import load_config
from mavit_mm.tooling.demo_jobs import DEMO_JOBS
from mavit_mm.tooling.run_script import run_script

SMALL = dict(num_train=5, num_val=2, image_size=(72, 96), max_objects=3)


def _digests(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob('*')) if p.is_file()}


@pytest.mark.parametrize('maker', [make_coco_dataset, make_ade20k_dataset])
def test_same_seed_gives_byte_identical_files(tmp_path, maker):
    maker(tmp_path / 'a', seed=7, **SMALL)
    maker(tmp_path / 'b', seed=7, **SMALL)
    maker(tmp_path / 'c', seed=8, **SMALL)
    first, second, other = (_digests(tmp_path / name) for name in 'abc')
    assert len(first) >= SMALL['num_train'] + SMALL['num_val'] + 2  # images + annotations
    assert first == second
    assert set(first) == set(other) and first != other


def test_coco_dataset_masks_match_the_pixels(tmp_path):
    from pycocotools.coco import COCO
    paths = make_coco_dataset(tmp_path, seed=1, **SMALL)
    for split, count in (('train', SMALL['num_train']), ('val', SMALL['num_val'])):
        coco = COCO(str(paths[f'{split}_ann']))
        assert len(coco.getImgIds()) == count
        assert [c['name'] for c in coco.loadCats(coco.getCatIds())] == \
            [name for name, _ in SHAPE_CLASSES]
        assert len(coco.getAnnIds()) >= count  # every image has at least one object
        for ann in coco.loadAnns(coco.getAnnIds()):
            info = coco.loadImgs(ann['image_id'])[0]
            assert (info['height'], info['width']) == SMALL['image_size']
            image = cv2.imread(str(tmp_path / split / info['file_name']))
            mask = coco.annToMask(ann).astype(bool)
            x, y, w, h = ann['bbox']
            assert w > 4 and h > 4 and x >= 0 and y >= 0
            assert x + w <= info['width'] and y + h <= info['height']
            assert ann['area'] == pytest.approx(mask.sum(), rel=0.25)
            # The polygon covers pixels of the class colour (JPEG and shading aside).
            colour = np.array(SHAPE_CLASSES[ann['category_id'] - 1][1], float)
            inside = image[cv2.erode(mask.astype(np.uint8), np.ones((3, 3))) > 0].astype(float)
            direction = colour / np.linalg.norm(colour)
            cosine = inside @ direction / np.linalg.norm(inside, axis=1).clip(1)
            assert np.median(cosine) > 0.97


def test_ade20k_dataset_labels(tmp_path):
    paths = make_ade20k_dataset(tmp_path, seed=2, **SMALL)
    num_labels = len(ade20k_metainfo()['classes'])  # ground + shapes
    images = sorted(paths['train_img_dir'].glob('*.jpg'))
    labels = sorted(paths['train_ann_dir'].glob('*.png'))
    assert [p.stem for p in images] == [p.stem for p in labels]
    assert len(images) == SMALL['num_train']
    assert len(list(paths['val_ann_dir'].glob('*.png'))) == SMALL['num_val']
    seen = set()
    for image_path, label_path in zip(images, labels):
        label = cv2.imread(str(label_path), cv2.IMREAD_UNCHANGED)
        image = cv2.imread(str(image_path))
        assert label.dtype == np.uint8 and label.shape == image.shape[:2] == SMALL['image_size']
        values = set(np.unique(label).tolist())
        assert values <= set(range(num_labels + 1))
        assert 1 in values and values & set(range(2, num_labels + 1))
        # 0 (unlabelled) only in thin bands along the ground / shape borders.
        unlabelled = (label == 0).astype(np.uint8)
        assert unlabelled.any()
        assert not cv2.erode(unlabelled, np.ones((5, 5))).any()
        ground = cv2.dilate((label == 1).astype(np.uint8), np.ones((7, 7))) > 0
        assert np.all(ground[unlabelled > 0])
        assert unlabelled.mean() < 0.2
        seen |= values
    assert len(seen) >= 4  # several classes across a handful of images


def test_metainfo_matches_the_classes():
    assert coco_metainfo()['classes'] == tuple(name for name, _ in SHAPE_CLASSES)
    assert ade20k_metainfo()['classes'][0] == 'ground'
    assert len(coco_metainfo(2)['palette']) == 2
    with pytest.raises(ValueError, match='num_classes'):
        coco_metainfo(len(SHAPE_CLASSES) + 1)


def test_manifest_records_the_parameters(tmp_path):
    make_coco_dataset(tmp_path, seed=3, **SMALL)
    manifest = read_manifest(tmp_path)
    assert manifest['seed'] == 3 and manifest['image_size'] == list(SMALL['image_size'])
    assert dataset_complete(tmp_path, 'coco', seed=3, image_size=SMALL['image_size'])
    assert not dataset_complete(tmp_path, 'coco', seed=4)
    assert not dataset_complete(tmp_path, 'ade20k')
    assert not dataset_complete(tmp_path / 'missing', 'coco')


def test_command_line(tmp_path, capsys):
    result = run_script(REPO_ROOT / 'tools' / 'make_demo_data.py', '--out', tmp_path,
                        '--num-train', '2', '--num-val', '1', '--image-size', '64', '--seed', '5')
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / 'coco' / 'annotations' / 'instances_val.json').read_text())[
        'images'][0]['height'] == 64
    assert len(list((tmp_path / 'ade20k' / 'images' / 'training').glob('*.jpg'))) == 2
    assert read_manifest(tmp_path / 'ade20k')['seed'] == 5
    # Its parser in this process.
    tool = load_tool('make_demo_data')
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(['--help'])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for flag in ('--out', '--kind', '--num-train', '--num-val', '--image-size', '--seed'):
        assert flag in help_text
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(['--num-train', '0'])
    assert exit_info.value.code == 2 and '--num-train' in capsys.readouterr().err



@pytest.mark.parametrize('flags,message', [
    (('--num-classes', '0'), 'num_classes must be in [1, 4], got 0'),
    (('--image-size', '8'), 'image_size must be at least 32x32, got 8x8'),
])
def test_command_line_value_errors_end_as_errors(flags, message, tmp_path, capsys):
    """As the tool's __main__ runs it (run_tool; the command line of a
    run_tool tool is tested in tests/test_tools/test_cli.py)."""
    tool = load_tool('make_demo_data')
    with pytest.raises(SystemExit) as exit_info:
        run_tool(tool.main, 'make_demo_data.py', ['--out', str(tmp_path / 'bad'), *flags])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f'make_demo_data.py: error: {message}')


def _as_json(value):
    return json.loads(json.dumps(value))  # tuples -> lists, as a dumped config has them


def _num_classes_settings(node, where='model'):
    """Every ``num_classes`` under the model config, with where it sits."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == 'num_classes':
                yield where, value
            else:
                yield from _num_classes_settings(value, f'{where}.{key}')
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from _num_classes_settings(value, f'{where}[{index}]')


@pytest.mark.parametrize('name', list(DEMO_JOBS))
def test_demo_configs_match_the_generator(name):
    """Class names, palette and data root of every dataset of each demo config,
    and the classes of every head, are those of the data the generator writes."""
    job = DEMO_JOBS[name]
    cfg = load_config(REPO_ROOT / job.config)
    metainfo = coco_metainfo() if job.data_kind == 'coco' else ade20k_metainfo()
    datasets = list(dataset_cfgs_of(cfg))
    assert len(datasets) == 3  # train, val, test
    for dataset in datasets:
        assert _as_json(dataset.metainfo) == _as_json(metainfo)
        assert dataset.data_root.rstrip('/') == f'{DEMO_DATA_ROOT}/{job.data_kind}'
    heads = list(_num_classes_settings(cfg.model.to_dict()))
    assert heads and all(value == len(metainfo['classes']) for _, value in heads), heads
