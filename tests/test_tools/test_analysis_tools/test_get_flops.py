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
    assert figures['scope'] == 'mmseg'
    assert figures['model']['layer_macs'] / 1e9 == pytest.approx(893, rel=0.01)
    assert figures['model']['params'] > figures['backbone']['params'] > 13e6
    assert figures['model']['layer_macs'] > figures['backbone']['layer_macs']
    # the heads have no attention: all attention MACs are the backbone's
    assert figures['model']['attention_macs'] == figures['backbone']['attention_macs']


def test_get_flops_needs_a_config_or_an_arch():
    with pytest.raises(SystemExit):
        get_flops.parse_args([])
