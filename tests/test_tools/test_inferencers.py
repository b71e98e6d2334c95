"""mmdet's DetInferencer and mmseg's MMSegInferencer with our configs and
checkpoints, as their users call them: a config path and a checkpoint path,
nothing else (the configs import mavit_mm themselves, which registers MAViT
and lets mmengine's torch.load run with weights_only=True).

Tiny generated data (64 px images), the demo Mask R-CNN and UperNet configs
on it, and a freshly initialised checkpoint of each saved as mmengine's Runner
saves one (``meta.dataset_meta``): the predictions' structure and sizes, the
weights and class names the inferencers load, the files they write, and the
score threshold of the drawing.
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers.drawing import NOTHING_DRAWN, drawn_difference, exact_canvas
from helpers.tools import explain, make_tiny_data, save_initialised_checkpoint, write_tiny_config

from mavit_mm.data.synthetic import ade20k_metainfo, coco_metainfo

pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed for these tests')
pytest.importorskip('mmdet.models')
pytest.importorskip('mmseg.models')

TINY = 64  # px, helpers.tools.TINY_IMAGE_SIZE


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    """Tiny data, the Mask R-CNN and UperNet demo configs on it, and a
    checkpoint of each freshly built model with the dataset's class names
    and palette in its meta, as the Runner writes them."""
    root = tmp_path_factory.mktemp('inferencers')
    roots = make_tiny_data(root / 'data')
    setup = dict(roots=roots)
    for name, metainfo in (('mask_rcnn', coco_metainfo()), ('upernet', ade20k_metainfo())):
        config = write_tiny_config(name, roots, root / 'configs')
        checkpoint = save_initialised_checkpoint(
            config, root / f'{name}.pth',
            dataset_meta=dict(classes=metainfo['classes'], palette=metainfo['palette']))
        setup[name] = (config, checkpoint, metainfo)
    return setup


def coco_val_images(tiny):
    return sorted((tiny['roots']['coco'] / 'val').glob('*.jpg'))


def ade_val_images(tiny):
    return sorted((tiny['roots']['ade20k'] / 'images' / 'validation').glob('*.jpg'))


def read_rgb(path):
    import mmcv
    image = mmcv.imread(str(path), channel_order='rgb')
    assert image is not None, f'{path} is not an image'
    return image


def assert_same_weights(model, checkpoint):
    saved = torch.load(checkpoint, weights_only=True)['state_dict']
    own = model.state_dict()
    assert list(own) == list(saved)
    assert all(torch.equal(own[key].cpu(), saved[key]) for key in saved)


def test_det_inferencer_predicts_boxes_and_masks(tiny, tmp_path):
    from mmdet.apis import DetInferencer
    config, checkpoint, metainfo = tiny['mask_rcnn']
    images = coco_val_images(tiny)
    assert len(images) == 2
    inferencer = DetInferencer(str(config), str(checkpoint), device='cpu', show_progress=False)
    assert_same_weights(inferencer.model, checkpoint)
    assert tuple(inferencer.model.dataset_meta['classes']) == metainfo['classes']
    num_classes = len(metainfo['classes'])

    # A folder, as mmdet's image_demo.py passes it; threshold 0 draws every box.
    out_dir = tmp_path / 'det'
    result = inferencer(str(images[0].parent), out_dir=str(out_dir), pred_score_thr=0.0,
                        return_datasamples=True)
    # mmdet lists the folder in the file system's order.
    samples = sorted(result['predictions'], key=lambda sample: sample.img_path)
    assert [s.img_path for s in samples] == [str(p) for p in images]
    for image_path, sample in zip(images, samples):
        height, width = read_rgb(image_path).shape[:2]
        assert (height, width) == (TINY, TINY) and tuple(sample.ori_shape) == (height, width)
        instances = sample.pred_instances
        count = len(instances)
        # The tiny config keeps every detection (score_thr 0), at most 20 (demo config).
        assert 0 < count <= 20
        assert instances.bboxes.shape == (count, 4)
        boxes = instances.bboxes
        assert (boxes[:, 2] >= boxes[:, 0]).all() and (boxes[:, 3] >= boxes[:, 1]).all()
        assert boxes.min() >= 0 and boxes[:, 0::2].max() <= width and boxes[:, 1::2].max() <= height
        assert instances.labels.shape == (count,) and instances.labels.dtype == torch.int64
        assert ((instances.labels >= 0) & (instances.labels < num_classes)).all()
        assert instances.scores.shape == (count,)
        assert ((instances.scores >= 0) & (instances.scores <= 1)).all()
        assert instances.masks.shape == (count, height, width)
        assert instances.masks.dtype == torch.bool
        # Drawn, under out_dir/vis/ with the input's name, at the input's size.
        drawn = read_rgb(out_dir / 'vis' / image_path.name)
        assert drawn.shape == (height, width, 3)
        assert np.abs(drawn.astype(int) - read_rgb(image_path).astype(int)).mean() > 5

    # As dicts (the default), predictions also saved as JSON under preds/.
    result = inferencer([str(p) for p in images], out_dir=str(out_dir), no_save_pred=False,
                        no_save_vis=True)
    for image_path, prediction in zip(images, result['predictions']):
        count = len(prediction['scores'])
        assert count > 0 and len(prediction['labels']) == len(prediction['bboxes']) == count
        assert all(len(box) == 4 for box in prediction['bboxes'])
        assert len(prediction['masks']) == count
        assert all(mask['size'] == [TINY, TINY] for mask in prediction['masks'])
        saved = json.loads((out_dir / 'preds' / f'{image_path.stem}.json').read_text())
        assert saved['labels'] == prediction['labels']
        assert saved['scores'] == pytest.approx(prediction['scores'])


def test_det_inferencer_draws_only_boxes_above_the_threshold(tiny):
    from mmdet.apis import DetInferencer
    config, checkpoint, _ = tiny['mask_rcnn']
    image = coco_val_images(tiny)[0]
    source = read_rgb(image)
    inferencer = DetInferencer(str(config), str(checkpoint), device='cpu', show_progress=False)
    drawn = {}
    for threshold in (1.0, 0.0):
        result = inferencer(str(image), return_vis=True, pred_score_thr=threshold)
        drawn[threshold] = result['visualization'][0]
        # The threshold is the drawing's: the predictions are the model's either way.
        assert len(result['predictions'][0]['scores']) > 0
    # No score is above 1: nothing drawn, the picture is the image itself
    # (exactly, where matplotlib's canvas gives it back so: helpers/drawing.py).
    assert drawn_difference(drawn[1.0], source) < NOTHING_DRAWN
    assert np.array_equal(drawn[1.0], source) or not exact_canvas()
    assert drawn_difference(drawn[0.0], source) > NOTHING_DRAWN


def test_seg_inferencer_predicts_a_label_map_of_the_image_size(tiny, tmp_path):
    from mmseg.apis import MMSegInferencer
    config, checkpoint, metainfo = tiny['upernet']
    images = ade_val_images(tiny)
    assert len(images) == 2
    inferencer = MMSegInferencer(str(config), str(checkpoint), device='cpu')
    inferencer.show_progress = False
    assert_same_weights(inferencer.model, checkpoint)
    assert tuple(inferencer.model.dataset_meta['classes']) == metainfo['classes']
    num_classes = len(metainfo['classes'])

    out_dir = tmp_path / 'seg'
    result = inferencer(str(images[0]), out_dir=str(out_dir))  # one image: one array
    label_map = result['predictions']
    height, width = read_rgb(images[0]).shape[:2]
    assert isinstance(label_map, np.ndarray) and label_map.shape == (height, width)
    assert np.issubdtype(label_map.dtype, np.integer)
    assert label_map.min() >= 0 and label_map.max() < num_classes
    drawn = read_rgb(out_dir / 'vis' / images[0].name)
    assert drawn.shape == (height, width, 3)
    assert np.abs(drawn.astype(int) - read_rgb(images[0]).astype(int)).mean() > 5
    # mmseg numbers its label-map files; the first holds this prediction.
    from PIL import Image
    with Image.open(out_dir / 'pred' / '00000000_pred.png') as saved:
        assert np.array_equal(np.asarray(saved), label_map)

    # A list gives one map per image, each of its image's size; the same image
    # gives the same map.
    result = inferencer([str(p) for p in images])
    assert len(result['predictions']) == 2
    for image_path, prediction in zip(images, result['predictions']):
        assert prediction.shape == read_rgb(image_path).shape[:2]
        assert prediction.max() < num_classes
    assert np.array_equal(result['predictions'][0], label_map)


def test_inferencers_as_a_user_runs_them(tiny, tmp_path):
    """A fresh Python with only mmdet's / mmseg's APIs imported (not mavit_mm):
    the example of docs/tools.md."""
    det_config, det_checkpoint, det_meta = tiny['mask_rcnn']
    seg_config, seg_checkpoint, seg_meta = tiny['upernet']
    det_image, seg_image = coco_val_images(tiny)[0], ade_val_images(tiny)[0]
    script = textwrap.dedent(f'''
        import json, sys
        from mmdet.apis import DetInferencer
        from mmseg.apis import MMSegInferencer

        detector = DetInferencer({str(det_config)!r}, {str(det_checkpoint)!r}, device='cpu')
        detections = detector({str(det_image)!r}, out_dir={str(tmp_path / 'det')!r},
                              pred_score_thr=0.0)['predictions'][0]
        segmentor = MMSegInferencer({str(seg_config)!r}, {str(seg_checkpoint)!r}, device='cpu')
        label_map = segmentor({str(seg_image)!r}, out_dir={str(tmp_path / 'seg')!r})['predictions']
        print(json.dumps(dict(
            mavit_imported_by_configs='mavit_mm' in sys.modules,
            det_classes=list(detector.model.dataset_meta['classes']),
            num_boxes=len(detections['bboxes']), labels=detections['labels'],
            seg_classes=list(segmentor.model.dataset_meta['classes']),
            seg_shape=list(label_map.shape), seg_max=int(label_map.max()))))
    ''')
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    env.pop('PYTHONPATH', None)
    result = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                            cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, explain(result)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report['mavit_imported_by_configs']  # through the configs' custom_imports
    assert tuple(report['det_classes']) == det_meta['classes']
    assert report['num_boxes'] > 0
    assert all(0 <= label < len(det_meta['classes']) for label in report['labels'])
    assert tuple(report['seg_classes']) == seg_meta['classes']
    assert report['seg_shape'] == [TINY, TINY] and report['seg_max'] < len(seg_meta['classes'])
    assert (tmp_path / 'det' / 'vis' / det_image.name).is_file()
    assert (tmp_path / 'seg' / 'vis' / seg_image.name).is_file()
