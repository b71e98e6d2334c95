"""tools/demo.py: mmdet's DetInferencer and mmseg's MMSegInferencer on images
or folders: what it draws and saves, the score threshold, the class names, and
its errors."""
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers.drawing import NOTHING_DRAWN, drawn_difference
from helpers.paths import CONFIG_DIR
from helpers.tools import load_tool, make_tiny_data, save_initialised_checkpoint, write_tiny_config

demo = load_tool('demo')

MASK_RCNN_T = str(CONFIG_DIR / 'mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py')


@pytest.fixture(scope='module')
def demo_setup(tmp_path_factory):
    """Tiny data (64 px), the Mask R-CNN and UperNet demo configs on it, and a
    freshly initialised checkpoint of each: with the class names in its meta
    (as mmengine's Runner saves them) and without."""
    pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed')
    from mavit_mm.data.synthetic import ade20k_metainfo, coco_metainfo
    root = tmp_path_factory.mktemp('demo_tool')
    roots = make_tiny_data(root / 'data')
    setup = dict(coco_val=roots['coco'] / 'val',
                 ade_val=roots['ade20k'] / 'images' / 'validation')
    for name, metainfo in (('mask_rcnn', coco_metainfo()), ('upernet', ade20k_metainfo())):
        config = write_tiny_config(name, roots, root / 'configs')
        # The same seed: the same weights, with and without class names.
        with_meta = save_initialised_checkpoint(
            config, root / f'{name}.pth',
            dataset_meta=dict(classes=metainfo['classes'], palette=metainfo['palette']))
        without_meta = save_initialised_checkpoint(config, root / f'{name}_no_meta.pth')
        setup[name] = (str(config), str(with_meta), str(without_meta), metainfo)
    return setup


def read_rgb(path):
    import cv2
    image = cv2.imread(str(path))
    assert image is not None, f'{path} is not an image'
    return image[..., ::-1].astype(int)


def test_demo_draws_and_saves_detections_above_the_threshold(demo_setup, tmp_path):
    config, checkpoint, _, metainfo = demo_setup['mask_rcnn']
    folder = demo_setup['coco_val']
    names = ['000000.jpg', '000001.jpg']
    low = demo.main([str(folder), config, checkpoint, '--out-dir', str(tmp_path / 'low'),
                     '--device', 'cpu', '--score-thr', '0'])
    assert [Path(s['image']).name for s in low] == names  # the folder's images, by name
    scores = {}
    for entry in low:
        name = Path(entry['image']).name
        # Threshold 0 keeps every detection the model returned (all score above 0).
        assert entry['num_detections'] > 0
        assert len(entry['detections']) == entry['num_detections']
        assert all(d['class_name'] in metainfo['classes'] for d in entry['detections'])
        assert entry['summary'].startswith(f'{entry["num_detections"]} object')
        assert ' above score 0' in entry['summary']
        # One count per class, most found first, adding up to the detections.
        counts = [part.split(' ', 1) for part in
                  entry['summary'].split(': ', 1)[1].split(' (')[0].split(', ')]
        found = Counter(d['class_name'] for d in entry['detections'])
        assert {name: int(n) for n, name in counts} == found
        assert [int(n) for n, _ in counts] == sorted(found.values(), reverse=True)
        # Drawn: vis/<name>, the input's size, boxes and masks on it.
        assert entry['out_file'] == str(tmp_path / 'low' / 'vis' / name)
        drawn, source = read_rgb(entry['out_file']), read_rgb(entry['image'])
        assert drawn.shape == source.shape == (64, 64, 3)
        assert drawn_difference(drawn, source) > NOTHING_DRAWN
        # Predictions: preds/<stem>.json in mmdet's format, every detection.
        assert entry['pred_file'] == str(tmp_path / 'low' / 'preds' / f'{Path(name).stem}.json')
        saved = json.loads(Path(entry['pred_file']).read_text())
        assert len(saved['scores']) == len(saved['bboxes']) == entry['num_detections']
        assert sorted(saved['scores']) == pytest.approx(
            sorted(d['score'] for d in entry['detections']))
        scores[name] = saved['scores']

    # A threshold in the middle: exactly the detections scoring above it.
    threshold = float(np.median(scores[names[0]]))
    middle = demo.main([str(folder / names[0]), config, checkpoint, '--out-dir',
                        str(tmp_path / 'middle'), '--device', 'cpu', '--score-thr',
                        repr(threshold), '--no-save-vis', '--no-save-pred'])
    kept = sorted(d['score'] for d in middle[0]['detections'])
    assert kept == pytest.approx(sorted(s for s in scores[names[0]] if s > threshold))
    assert 0 < len(kept) < len(scores[names[0]])
    # Nothing to save: no files, no folder (as mmdet's image_demo.py).
    assert middle[0]['out_file'] is None and middle[0]['pred_file'] is None
    assert not (tmp_path / 'middle').exists()

    # 1.0: no score is above it, nothing kept or drawn; the saved predictions
    # are still every detection, as mmdet's.
    high = demo.main([str(folder), config, checkpoint, '--out-dir', str(tmp_path / 'high'),
                      '--device', 'cpu', '--score-thr', '1.0'])
    for entry in high:
        assert entry['detections'] == [] and entry['summary'].startswith('0 objects above score 1')
        drawn, source = read_rgb(entry['out_file']), read_rgb(entry['image'])
        assert drawn_difference(drawn, source) < NOTHING_DRAWN  # the image itself, re-encoded
        saved = json.loads(Path(entry['pred_file']).read_text())
        assert len(saved['scores']) == entry['num_detections'] > 0


def test_demo_segments_images(demo_setup, tmp_path):
    config, checkpoint, _, metainfo = demo_setup['upernet']
    image = demo_setup['ade_val'] / '000000.jpg'
    (entry,) = demo.main([str(image), config, checkpoint, '--out-dir', str(tmp_path / 'one'),
                          '--device', 'cpu'])
    label_map = entry['label_map']
    assert label_map.shape == (64, 64) and 0 <= label_map.min() <= label_map.max() < 5
    present = [metainfo['classes'][i] for i in np.unique(label_map)]
    assert sorted(entry['classes']) == sorted(present)
    assert entry['summary'].startswith('classes present: ')
    assert entry['out_file'] == str(tmp_path / 'one' / 'vis' / image.name)
    drawn, source = read_rgb(entry['out_file']), read_rgb(image)
    assert drawn.shape == source.shape and drawn_difference(drawn, source) > NOTHING_DRAWN
    from PIL import Image
    assert entry['pred_file'] == str(tmp_path / 'one' / 'preds' / '000000.png')
    with Image.open(entry['pred_file']) as saved:
        assert np.array_equal(np.asarray(saved), label_map)

    # A folder, drawings only.
    both = demo.main([str(demo_setup['ade_val']), config, checkpoint, '--out-dir',
                      str(tmp_path / 'all'), '--device', 'cpu', '--no-save-pred'])
    assert [Path(e['image']).name for e in both] == ['000000.jpg', '000001.jpg']
    assert np.array_equal(both[0]['label_map'], label_map)
    assert sorted(p.name for p in (tmp_path / 'all' / 'vis').iterdir()) == [
        '000000.jpg', '000001.jpg']
    assert not (tmp_path / 'all' / 'preds').exists()


@pytest.mark.parametrize('name', ['mask_rcnn', 'upernet'])
def test_demo_takes_class_names_from_the_config_when_the_checkpoint_has_none(
        demo_setup, tmp_path, capsys, name):
    config, _, without_meta, metainfo = demo_setup[name]
    folder = demo_setup['coco_val' if name == 'mask_rcnn' else 'ade_val']
    (entry,) = demo.main([str(folder / '000000.jpg'), config, without_meta, '--out-dir',
                          str(tmp_path), '--device', 'cpu', '--score-thr', '0'])
    assert "names no classes: using those of the config's test dataset" in capsys.readouterr().out
    # Not mmdet's COCO or mmseg's Cityscapes fallback names.
    found = ([d['class_name'] for d in entry['detections']] if name == 'mask_rcnn'
             else entry['classes'])
    assert found and set(found) <= set(metainfo['classes'])


def test_demo_refuses_a_checkpoint_of_another_model(demo_setup, tmp_path):
    config = demo_setup['mask_rcnn'][0]
    segmentor = demo_setup['upernet'][1]
    with pytest.raises(ValueError, match=r'upernet.pth does not fit the model: keys of the model '
                                         r'missing from it \(\d+\): neck\.lateral_convs'):
        demo.main([str(demo_setup['coco_val']), config, segmentor, '--out-dir', str(tmp_path),
                   '--device', 'cpu'])
    assert not (tmp_path / 'vis').exists()


def test_demo_names_a_missing_image(tmp_path):
    with pytest.raises(FileNotFoundError, match='no image or folder at .*missing.jpg'):
        demo.main([str(tmp_path / 'missing.jpg'), MASK_RCNN_T, str(tmp_path / 'c.pth')])
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'empty' / 'notes.txt').write_text('not an image')
    with pytest.raises(FileNotFoundError, match='no images .* in .*empty'):
        demo.main([str(tmp_path / 'empty'), MASK_RCNN_T, str(tmp_path / 'c.pth')])


def test_demo_names_a_missing_checkpoint(tmp_path):
    import cv2
    image = tmp_path / 'scene.jpg'
    cv2.imwrite(str(image), np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(FileNotFoundError, match='checkpoint not found: .*absent.pth'):
        demo.main([str(image), MASK_RCNN_T, str(tmp_path / 'absent.pth')])
    (tmp_path / 'notes.pth').write_bytes(b'\x80\x02not a checkpoint')
    with pytest.raises(ValueError, match=r'cannot read .*notes\.pth as a checkpoint'):
        demo.main([str(image), MASK_RCNN_T, str(tmp_path / 'notes.pth')])


def test_demo_help_and_bad_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        demo.parse_args(['--help'])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for flag in ('--out-dir', '--device', '--score-thr', '--pred-score-thr', '--show',
                 '--no-save-vis', '--no-save-pred', '--opacity', '--batch-size',
                 '--cfg-options', 'vis/<image name>', 'preds/<image stem>.json'):
        assert flag in text, flag
    with pytest.raises(SystemExit):
        demo.parse_args(['a.jpg', 'c.py', 'w.pth', '--opacity', '0'])
