"""tools/analysis_tools/visualize_attention.py: the attention maps of every variant over an
image (random weights without a checkpoint, never the config's pretrained
file), with a checkpoint, and the paper's Fig. 2."""
from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from helpers.paths import REPO_ROOT
from helpers.tools import explain, load_tool, run_tool

# One torch thread for the module (tests/conftest.py: small models run faster so).
pytestmark = pytest.mark.usefixtures('one_torch_thread')

# Names pretrained/mavit_t_in1k.pth, which the tests never have.
CONFIG = str(REPO_ROOT / 'configs/sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py')


@pytest.fixture(scope='module')
def tool():
    return load_tool('analysis_tools/visualize_attention')


@pytest.fixture
def image(tmp_path):
    import cv2
    rng = np.random.default_rng(0)
    picture = rng.integers(0, 60, (64, 96, 3), dtype=np.uint8)
    cv2.circle(picture, (30, 30), 14, (20, 200, 240), -1)
    cv2.rectangle(picture, (55, 20), (90, 60), (200, 40, 40), -1)
    path = tmp_path / 'scene.png'
    cv2.imwrite(str(path), picture)
    return path


def read_png(path):
    import cv2
    picture = cv2.imread(str(path))
    assert picture is not None, f'{path} is not a readable image'
    return picture


def test_help_explains_both_modes():
    result = run_tool('analysis_tools/visualize_attention.py', '--help', timeout=120)
    assert result.returncode == 0, explain(result)
    text = ' '.join(result.stdout.split())
    for phrase in ('--checkpoint', 'random weights', 'pretrained file', '--fig2',
                   'attention_scores', 'attention_grid.png', '--attn-types', '--query ROW COL'):
        assert phrase in text, phrase


def test_random_weights_write_a_grid_and_one_png_per_variant(tool, image, tmp_path, capsys):
    from mavit_mm.ops import ATTN_TYPES

    out_dir = tmp_path / 'vis'
    report = tool.main([str(image), '--config', CONFIG, '--out-dir', str(out_dir),
                        '--stage', '0', '--block', '1', '--query', '3', '5'])
    stdout = capsys.readouterr().out
    assert 'RANDOM weights' in stdout and 'pretrained/mavit_t_in1k.pth is not used' in stdout
    assert report['weights'] == 'random weights'
    assert report['grid'] == [16, 24] and report['query'] == [3, 5] and report['block'] == 1

    # One PNG per variant and the grid, all readable, the grid the widest.
    assert sorted(report['variant_pngs']) == sorted(ATTN_TYPES)
    pictures = {name: read_png(path) for name, path in report['variant_pngs'].items()}
    grid = read_png(out_dir / 'attention_grid.png')
    assert grid.shape[1] > max(p.shape[1] for p in pictures.values())
    assert json.loads((out_dir / 'summary.json').read_text())['scores'].keys() == \
        set(ATTN_TYPES)

    # Same q and k, different formulas: every pair of maps differs, and so do
    # the drawn pictures.
    maps = report['maps']
    assert all(m.shape == (16, 24) for m in maps.values())
    for a, b in itertools.combinations(ATTN_TYPES, 2):
        assert np.abs(maps[a] - maps[b]).max() > 1e-7, (a, b)
        if pictures[a].shape == pictures[b].shape:
            assert not np.array_equal(pictures[a], pictures[b]), (a, b)
    # The maps are the query's rows of attention_scores (softmax: they sum to 1).
    assert maps['softmax'].sum() == pytest.approx(1.0, abs=1e-9)


def test_checkpoint_weights_are_used(tool, image, tmp_path, capsys):
    """With --checkpoint the maps come from its weights (a detector-style
    checkpoint, backbone.* keys), not the random ones."""
    from mavit_mm.models import MAViT

    torch.manual_seed(1)
    trained = MAViT('t', drop_path_rate=0.1)
    for param in trained.parameters():
        param.data.normal_(0, 0.2)
    checkpoint = tmp_path / 'model.pth'
    # With a tensor of another variant (InLine's residual), which is left out, and said so.
    extra = {'backbone.layers.0.blocks.0.attn.residual.0.weight': torch.zeros(64, 64, 1, 1)}
    torch.save({'state_dict': {**{f'backbone.{k}': v for k, v in trained.state_dict().items()},
                               **extra}}, checkpoint)
    args = [str(image), '--config', CONFIG, '--attn-types', 'mala', 'linear', '--head', '0']
    random = tool.main(args + ['--out-dir', str(tmp_path / 'a')])
    loaded = tool.main(args + ['--checkpoint', str(checkpoint), '--out-dir', str(tmp_path / 'b')])
    stdout = capsys.readouterr().out
    assert 'loaded' in stdout
    assert '1 not in this backbone (left out: a checkpoint of another variant or head?): ' \
        'layers.0.blocks.0.attn.residual.0.weight' in stdout
    assert loaded['weights'] == 'weights of model.pth'
    assert sorted(loaded['variant_pngs']) == ['linear', 'mala']
    assert np.abs(loaded['maps']['mala'] - random['maps']['mala']).max() > 1e-6


def test_bad_requests_are_clear_errors(tool, image, tmp_path):
    out = ['--out-dir', str(tmp_path / 'x')]
    with pytest.raises(ValueError, match="--attn-types entries must be one of .*got 'flash'"):
        tool.main([str(image), '--config', CONFIG, '--attn-types', 'flash'] + out)
    with pytest.raises(ValueError, match='outside the 16x24 token grid'):
        tool.main([str(image), '--config', CONFIG, '--query', '16', '0'] + out)
    with pytest.raises(ValueError, match='--stage 4: the model has stages 0..3'):
        tool.main([str(image), '--config', CONFIG, '--stage', '4'] + out)
    with pytest.raises(FileNotFoundError, match='no image at'):
        tool.main([str(tmp_path / 'missing.png'), '--config', CONFIG] + out)
    notes = tmp_path / 'notes.pth'
    notes.write_bytes(b'\x80\x02not a checkpoint')       # a pickle's first bytes
    with pytest.raises(ValueError, match=r'cannot read .*notes\.pth as a checkpoint \(torch.load '
                                         r'with weights_only=True refused it: [^W]'):
        tool.main([str(image), '--config', CONFIG, '--checkpoint', str(notes)] + out)
    with pytest.raises(SystemExit):
        tool.parse_args(out)   # neither an image and config nor --fig2


def test_fig2_mode_reproduces_the_paper_trend(tool, tmp_path):
    report = tool.main(['--fig2', '--out-dir', str(tmp_path / 'fig2')])
    read_png(report['png'])
    summary = json.loads((tmp_path / 'fig2' / 'fig2_summary.json').read_text())
    assert summary == report['summary'] and set(summary) == {'softmax', 'linear', 'mala'}
    for attn_type in ('softmax', 'mala'):
        maxima = [summary[attn_type][a]['max'] for a in ('1', '2', '4')]
        entropies = [summary[attn_type][a]['entropy'] for a in ('1', '2', '4')]
        assert maxima[0] < maxima[1] < maxima[2], attn_type
        assert entropies[0] > entropies[1] > entropies[2], attn_type
    linear = report['scores']['linear']
    assert np.array_equal(linear[0], linear[1]) and np.array_equal(linear[0], linear[2])
