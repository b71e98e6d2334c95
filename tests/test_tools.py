"""The analysis and conversion tools: FLOPs, FPS, checkpoint conversion, demo."""
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from mavit_mm.models import MAViT

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / 'tools'))
import convert_checkpoint  # noqa: E402
import get_flops  # noqa: E402

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
        [sys.executable, str(REPO_ROOT / 'tools/benchmark_fps.py'), UPERNET_T,
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
        [sys.executable, str(REPO_ROOT / 'tools/benchmark_fps.py'), UPERNET_T, SWIN_UPERNET,
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
        [sys.executable, str(REPO_ROOT / 'tools/benchmark_fps.py'), UPERNET_T,
         '--shapes', '512by512'], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert result.returncode == 2 and 'HEIGHTxWIDTH' in result.stderr
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'tools/benchmark_fps.py'), 'configs/nope.py'],
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


def test_demo_draws_detections(tmp_path):
    import cv2

    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.model_builder import build_model

    cfg = load_config(MASK_RCNN_T)
    model = build_model(cfg)
    checkpoint = tmp_path / 'mask_rcnn.pth'
    torch.save({'state_dict': model.state_dict(),
                'meta': {'dataset_meta': {'classes': tuple(f'c{i}' for i in range(80))}}},
               checkpoint)
    image = tmp_path / 'scene.jpg'
    cv2.imwrite(str(image), np.random.default_rng(0).integers(0, 255, (96, 128, 3), np.uint8))
    sys.path.insert(0, str(REPO_ROOT / 'tools'))
    import demo
    summaries = demo.main([str(image), MASK_RCNN_T, str(checkpoint), '--out-dir',
                           str(tmp_path / 'vis'), '--device', 'cpu', '--score-thr', '0.0'])
    assert len(summaries) == 1 and 'objects' in summaries[0]['summary']
    drawn = cv2.imread(summaries[0]['out_file'])
    assert drawn is not None and drawn.shape[:2] == (96, 128)


def test_demo_names_a_missing_image(tmp_path):
    import demo
    with pytest.raises(FileNotFoundError, match='no image or folder at .*missing.jpg'):
        demo.main([str(tmp_path / 'missing.jpg'), MASK_RCNN_T, str(tmp_path / 'c.pth')])
