"""The analysis and conversion tools: FLOPs, FPS, checkpoint conversion, demo."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from mavit_mm.models import MAViT

from conftest import REPO_ROOT

for tools_dir in ('tools', 'tools/analysis_tools', 'tools/model_converters'):
    sys.path.insert(0, str(REPO_ROOT / tools_dir))
import convert_checkpoint  # noqa: E402
import get_flops  # noqa: E402

BENCHMARK_FPS = REPO_ROOT / 'tools' / 'analysis_tools' / 'benchmark_fps.py'
UPERNET_T = str(REPO_ROOT / 'configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py')
MASK_RCNN_T = str(REPO_ROOT / 'configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py')


def test_flops_of_mavit_t_match_the_published_split():
    # Reference README: MAViT-T at 1280x800 is about 49 GMac of convolutions
    # plus about 53 GMac of attention products.
    figures = get_flops.main(['--arch', 't', '--shape', '800', '1280'])['backbone']
    assert figures['params'] == 13347328
    assert figures['layer_macs'] / 1e9 == pytest.approx(49, rel=0.02)
    assert figures['attention_macs'] / 1e9 == pytest.approx(53, rel=0.02)


def test_flops_of_upernet_t_match_the_paper(tmp_path):
    # Paper: UperNet + MAViT-T, 893 GFLOPs at 512x2048 (convs and linears only).
    out = tmp_path / 'flops.json'
    figures = get_flops.main([UPERNET_T, '--shape', '512', '2048', '--json', str(out)])
    assert json.loads(out.read_text()) == figures
    assert figures['scope'] == 'mmseg'
    assert figures['model']['layer_macs'] / 1e9 == pytest.approx(893, rel=0.01)
    assert figures['model']['params'] > figures['backbone']['params'] > 13e6
    assert figures['model']['layer_macs'] > figures['backbone']['layer_macs']
    # the heads have no attention: all attention MACs are the backbone's
    assert figures['model']['attention_macs'] == figures['backbone']['attention_macs']


def test_get_flops_needs_a_config_or_an_arch():
    with pytest.raises(SystemExit):
        get_flops.parse_args([])


def test_benchmark_fps_writes_json(tmp_path):
    out = tmp_path / 'fps.json'
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), UPERNET_T,
         '--shape', '64', '128', '--iters', '2', '--warmup', '1', '--device', 'cpu',
         '--out', str(out)], capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report['device_type'] == 'cpu' and report['iters'] == 2
    assert report['versions']['torch'] == torch.__version__
    (record,) = report['results']
    assert record['shape'] == [64, 128] and record['fps_median'] > 0
    assert 'img/s' in result.stdout and not (tmp_path / 'fps.png').exists()


SWIN_UPERNET = 'configs/baselines/upernet_swin-t_8xb2-160k_ade20k-512x512.py'


def test_benchmark_fps_sweeps_configs_side_by_side_and_plots(tmp_path):
    out = tmp_path / 'sweep.json'
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), UPERNET_T, SWIN_UPERNET,
         '--backbone-only', '--shapes', '64x64', '96x128', '--iters', '1', '--warmup', '0',
         '--device', 'cpu', '--out', str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report['results']
    assert [(r['config'], r['shape']) for r in rows] == [
        (UPERNET_T, [64, 64]), (UPERNET_T, [96, 128]),
        (SWIN_UPERNET, [64, 64]), (SWIN_UPERNET, [96, 128])]
    assert 'MAViT' in rows[0]['label'] and 'SwinTransformer' in rows[2]['label']
    assert all(r['latency_ms_median'] > 0 and r['pixels'] == r['shape'][0] * r['shape'][1]
               for r in rows)
    # Peak resident memory of a forward, measured on Linux.
    assert all(r['peak_memory_mib'] is not None and r['peak_memory_mib'] >= 0 for r in rows)
    png = tmp_path / 'sweep.png'
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b'\x89PNG'
    assert str(png) in result.stdout


def test_benchmark_fps_rejects_bad_sizes_and_missing_configs():
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), UPERNET_T,
         '--shapes', '512by512'], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 2 and 'HEIGHTxWIDTH' in result.stderr
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_FPS), 'configs/nope.py'],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 2 and 'config not found: configs/nope.py' in result.stderr


def classification_checkpoint(path, arch='t'):
    """A checkpoint laid out like the published ImageNet ones."""
    weights = {k: v for k, v in MAViT(arch).state_dict().items() if not k.startswith('extra_norms')}
    weights['head.weight'] = torch.zeros(1000, 512)
    weights['head.bias'] = torch.zeros(1000)
    torch.save({'model': weights}, path)
    return weights


def test_convert_classification_checkpoint(tmp_path):
    weights = classification_checkpoint(tmp_path / 'in1k.pth')
    dst = tmp_path / 'out' / 'mavit_t_in1k.pth'
    report = convert_checkpoint.main([str(tmp_path / 'in1k.pth'), str(dst), '--arch', 't'])
    assert report['dropped'] == ['head.bias', 'head.weight']
    assert all(k.startswith('extra_norms.') for k in report['missing'])
    converted = torch.load(dst, weights_only=True)['state_dict']
    assert converted.keys() == weights.keys() - {'head.weight', 'head.bias'}
    model = MAViT('t', init_cfg=dict(type='Pretrained', checkpoint=str(dst)))
    model.init_weights()
    assert torch.equal(model.state_dict()['layers.2.blocks.0.attn.qkvo.weight'],
                       weights['layers.2.blocks.0.attn.qkvo.weight'])


def test_convert_rejects_the_wrong_size_and_strict_misses(tmp_path):
    classification_checkpoint(tmp_path / 'in1k.pth')
    with pytest.raises(ValueError, match='does not fit MAViT-S'):
        convert_checkpoint.convert(str(tmp_path / 'in1k.pth'), str(tmp_path / 'x.pth'), 's')
    with pytest.raises(ValueError, match='missing extra_norms.0.norm.weight'):
        convert_checkpoint.convert(str(tmp_path / 'in1k.pth'), str(tmp_path / 'x.pth'), 't',
                                   strict=True)
    with pytest.raises(FileNotFoundError, match='absent.pth'):
        convert_checkpoint.convert(str(tmp_path / 'absent.pth'), str(tmp_path / 'x.pth'), 't')


# --- tools/demo.py: mmdet's DetInferencer / mmseg's MMSegInferencer -------------------

@pytest.fixture(scope='module')
def demo_setup(tmp_path_factory):
    """Tiny data (64 px), the Mask R-CNN and UperNet demo configs on it, and a
    freshly initialised checkpoint of each: with the class names in its meta
    (as mmengine's Runner saves them) and without."""
    pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed')
    from mavit_mm.data.synthetic import ade20k_metainfo, coco_metainfo
    from tool_helpers import make_tiny_data, save_initialised_checkpoint, write_tiny_config
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
    import demo
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
        # Drawn: vis/<name>, the input's size, boxes and masks on it.
        assert entry['out_file'] == str(tmp_path / 'low' / 'vis' / name)
        drawn, source = read_rgb(entry['out_file']), read_rgb(entry['image'])
        assert drawn.shape == source.shape == (64, 64, 3)
        assert np.abs(drawn - source).mean() > 5
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
        assert np.abs(drawn - source).mean() < 3  # the image itself, re-encoded
        saved = json.loads(Path(entry['pred_file']).read_text())
        assert len(saved['scores']) == entry['num_detections'] > 0


def test_demo_segments_images(demo_setup, tmp_path):
    import demo
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
    assert drawn.shape == source.shape and np.abs(drawn - source).mean() > 5
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
    import demo
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
    import demo
    config = demo_setup['mask_rcnn'][0]
    segmentor = demo_setup['upernet'][1]
    with pytest.raises(ValueError, match=r'upernet.pth does not fit the model: keys of the model '
                                         r'missing from it \(\d+\): neck\.lateral_convs'):
        demo.main([str(demo_setup['coco_val']), config, segmentor, '--out-dir', str(tmp_path),
                   '--device', 'cpu'])
    assert not (tmp_path / 'vis').exists()


def test_demo_names_a_missing_image(tmp_path):
    import demo
    with pytest.raises(FileNotFoundError, match='no image or folder at .*missing.jpg'):
        demo.main([str(tmp_path / 'missing.jpg'), MASK_RCNN_T, str(tmp_path / 'c.pth')])
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'empty' / 'notes.txt').write_text('not an image')
    with pytest.raises(FileNotFoundError, match='no images .* in .*empty'):
        demo.main([str(tmp_path / 'empty'), MASK_RCNN_T, str(tmp_path / 'c.pth')])


def test_demo_names_a_missing_checkpoint(tmp_path):
    import cv2
    import demo
    image = tmp_path / 'scene.jpg'
    cv2.imwrite(str(image), np.zeros((32, 32, 3), np.uint8))
    with pytest.raises(FileNotFoundError, match='checkpoint not found: .*absent.pth'):
        demo.main([str(image), MASK_RCNN_T, str(tmp_path / 'absent.pth')])


def test_demo_help_and_bad_options(capsys):
    import demo
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
