"""tools/analysis_tools/get_flops.py: parameters and MACs of the backbone and of
whole models, against the published figures."""
import json

import pytest
from helpers.paths import CONFIG_DIR
from helpers.tools import load_tool

get_flops = load_tool('analysis_tools/get_flops')

UPERNET_T = str(CONFIG_DIR / 'upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py')


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
    assert figures['scope'] == 'mmseg' and figures['counted_on'] == 'meta'   # in a moment
    assert figures['model']['layer_macs'] / 1e9 == pytest.approx(893, rel=0.01)
    assert figures['model']['params'] > figures['backbone']['params'] > 13e6
    assert figures['model']['layer_macs'] > figures['backbone']['layer_macs']
    # the heads have no attention: all attention MACs are the backbone's
    assert figures['model']['attention_macs'] == figures['backbone']['attention_macs']


@pytest.mark.parametrize('baseline', ['upernet_swin-t_8xb2-160k_ade20k-512x512.py',
                                      'mask-rcnn_swin-t_fpn_1x_coco.py'])
def test_swin_baselines_window_attention_is_counted(baseline):
    """mmseg's and mmdet's Swin-T at 224x224 (every stage a whole number of
    7x7 windows): q k^T and a v over each window, 2 x 49^2 x C MACs a window a
    block, depths 2, 2, 6, 2 over 64, 16, 4 and 1 windows of 96-768 channels."""
    report = get_flops.main([str(CONFIG_DIR / 'baselines' / baseline), '--shape', '224', '224',
                             '--backbone-only'])
    figures = report['backbone']
    assert report['counted_on'] == 'cpu'    # Swin's constructor reads a value (.item())
    expected = 2 * 49 * 49 * (2 * 64 * 96 + 2 * 16 * 192 + 6 * 4 * 384 + 2 * 1 * 768)
    assert figures['attention_macs'] == expected == 140_141_568
    assert figures['per_module_type']['swin_window_attention'] == expected
    # Swin-T's 4.5 GFLOPs (its paper, attention included) at 224x224.
    assert figures['total_macs'] / 1e9 == pytest.approx(4.5, rel=0.03)


@pytest.mark.parametrize('argv', [[UPERNET_T], ['--arch', 's']], ids=['upernet', 'backbone'])
def test_counting_on_the_meta_device_gives_the_cpus_figures(argv):
    args = get_flops.parse_args([*argv, '--shape', '64', '96'])
    on_meta, on_cpu = get_flops.count_on(args, 'meta'), get_flops.count_on(args, 'cpu')
    assert on_meta.pop('counted_on') == 'meta' and on_cpu.pop('counted_on') == 'cpu'
    assert on_meta == on_cpu


def test_a_forward_that_reads_values_is_counted_on_the_cpu():
    """Mask R-CNN's proposals (NMS) need values: its whole model is counted on the CPU."""
    figures = get_flops.main([str(CONFIG_DIR / 'mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py'),
                              '--shape', '64', '96'])
    assert figures['counted_on'] == 'cpu' and figures['model']['layer_macs'] > 0


def test_get_flops_needs_a_config_or_an_arch():
    with pytest.raises(SystemExit):
        get_flops.parse_args([])


def test_shape_takes_one_side_and_defaults_by_the_configs_task(capsys):
    """As mmseg's get_flops.py: one value is a square; and a segmentor is
    counted at 512x2048 (the segmentation papers' size), a detector or a
    backbone alone at 800x1280, unless --shape says otherwise."""
    assert get_flops.parse_args(['--arch', 't', '--shape', '64']).shape == [64, 64]
    with pytest.raises(SystemExit):
        get_flops.parse_args(['--arch', 't', '--shape', '64', '64', '96'])
    assert 'takes HEIGHT WIDTH or one side, got 3 values' in capsys.readouterr().err
    segmentor = get_flops.count_on(get_flops.parse_args([UPERNET_T, '--backbone-only']), 'meta')
    backbone = get_flops.count_on(get_flops.parse_args(['--arch', 't']), 'meta')
    assert (segmentor['input_shape'], backbone['input_shape']) == ([512, 2048], [800, 1280])
