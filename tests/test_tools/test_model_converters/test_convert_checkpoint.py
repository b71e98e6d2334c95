"""tools/model_converters/convert_checkpoint.py: the published ImageNet
checkpoints for the backbone, and with --config whole-model checkpoints of
mmdet 2.x / mmseg 0.x (heads included) for our mmdet 3 / mmseg 1 configs.

The old checkpoints are made from our own models, written the way mmdet 2.x /
mmseg 0.x wrote them (mavit_mm/tooling/legacy_checkpoints.py says what differs:
the container and meta, not the parameter names): ``meta`` with the library's
version, ``CLASSES`` (and mmseg's ``PALETTE``) and the config text, the
optimizer's state beside the weights, keys in another order, and once the
``module.`` prefix of a DataParallel wrapper. Converted, they load with
``strict=True`` into a model built from the config and give the original
model's outputs exactly. What cannot be converted is refused, naming why.
"""
import random
from collections import OrderedDict

import pytest
import torch
from helpers.tools import load_tool, make_tiny_data, write_tiny_config

from mavit_mm.models import MAViT
from mavit_mm.tooling.config import load_config

convert_checkpoint = load_tool('model_converters/convert_checkpoint')


# -- the published ImageNet checkpoints, for the backbone ------------------------

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


# -- whole-model checkpoints of mmdet 2.x / mmseg 0.x ------------------------------

PIPELINES = ('mask_rcnn', 'retinanet', 'cascade_mask_rcnn', 'sem_fpn', 'upernet')
OLD_VERSIONS = {'mmdet': ('mmdet_version', '2.28.2'), 'mmseg': ('mmseg_version', '0.30.0')}
SIZE = 64


@pytest.fixture(scope='module')
def tiny(tmp_path_factory, one_torch_thread):
    """The demo configs on tiny data; an original model of each (seed 0)."""
    pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed for these tests')
    pytest.importorskip('mmdet.models')
    pytest.importorskip('mmseg.models')
    from mavit_mm.tooling.model_builder import build_model
    root = tmp_path_factory.mktemp('convert_full')
    roots = make_tiny_data(root / 'data')
    setup = {}
    for name in PIPELINES:
        config = write_tiny_config(name, roots, root / 'configs')
        cfg = load_config(config)
        if cfg.model.get('test_cfg', {}).get('rpn'):
            # 10 proposals, not 100, through the R-CNN heads: a faster forward,
            # the same weights.
            cfg.model.test_cfg.rpn.max_per_img = 10
        torch.manual_seed(0)
        model = build_model(cfg).eval()
        setup[name] = (config, cfg, model)
    return setup


def demo_metainfo(cfg):
    from mavit_mm.data.synthetic import ade20k_metainfo, coco_metainfo
    return coco_metainfo() if cfg.default_scope == 'mmdet' else ade20k_metainfo()


def old_checkpoint(model, cfg, wrapped=False, classes=None, **meta_changes) -> dict:
    """``model`` saved as mmdet 2.x / mmseg 0.x saved a training checkpoint."""
    key, version = OLD_VERSIONS[cfg.default_scope]
    metainfo = demo_metainfo(cfg)
    meta = {key: version, 'mmcv_version': '1.7.1', 'config': "model = dict(type='X')",
            'epoch': 12, 'iter': 1000, 'time': 'Thu Jan  5 10:00:00 2023',
            'CLASSES': tuple(classes or metainfo['classes'])}
    if cfg.default_scope == 'mmseg':
        meta['PALETTE'] = [list(colour) for colour in metainfo['palette']]
    meta.update(meta_changes)
    items = list(model.state_dict().items())
    random.Random(0).shuffle(items)  # the order of the keys does not matter
    state_dict = OrderedDict((('module.' if wrapped else '') + k, v.clone()) for k, v in items)
    optimizer = dict(state={}, param_groups=[dict(lr=1e-4, weight_decay=0.05, params=[0, 1])])
    return dict(meta={k: v for k, v in meta.items() if v is not None}, state_dict=state_dict,
                optimizer=optimizer)


def outputs(model, cfg):
    """The model's tensor-mode outputs on a fixed input, flattened."""
    from mavit_mm.tooling.model_builder import dummy_forward_inputs
    torch.manual_seed(123)
    inputs, samples = dummy_forward_inputs(cfg, SIZE, SIZE)
    with torch.no_grad():
        result = model.eval()(inputs, samples, mode='tensor')
    flat = []

    def walk(item):
        if torch.is_tensor(item):
            flat.append(item)
        elif isinstance(item, (list, tuple)):
            for part in item:
                walk(part)
        elif isinstance(item, dict):
            for part in item.values():
                walk(part)
    walk(result)
    assert flat, 'the model returned no tensors'
    return flat


@pytest.mark.parametrize('name', PIPELINES)
def test_old_checkpoint_converts_and_gives_the_same_outputs(tiny, tmp_path, name):
    from mavit_mm.tooling.model_builder import build_model
    config, cfg, original = tiny[name]
    scope = cfg.default_scope
    old = old_checkpoint(original, cfg, wrapped=(name == 'mask_rcnn'))
    src, dst = tmp_path / 'old.pth', tmp_path / 'converted' / 'new.pth'
    torch.save(old, src)

    report = convert_checkpoint.main([str(src), str(dst), '--config', str(config)])
    assert report['layout'] == {'mmdet': 'mmdet 2.x', 'mmseg': 'mmseg 0.x'}[scope]
    assert report['version'] == OLD_VERSIONS[scope][1]
    assert report['dropped'] == ['optimizer'] and report['classes_from'] == 'checkpoint'

    converted = torch.load(dst, weights_only=True)
    assert set(converted) == {'state_dict', 'meta'}
    torch.manual_seed(1)  # other random weights than the original's
    model = build_model(cfg).eval()
    assert list(converted['state_dict']) == list(model.state_dict())
    before = outputs(model, cfg)
    expected = outputs(original, cfg)
    assert any(not torch.equal(a, b) for a, b in zip(before, expected))
    model.load_state_dict(converted['state_dict'], strict=True)
    after = outputs(model, cfg)
    assert len(after) == len(expected)
    assert all(torch.equal(a, b) for a, b in zip(after, expected))

    # The class names move to mmengine's place; the palette comes from the
    # checkpoint (mmseg 0.x saved one) or else from the config's dataset.
    metainfo = demo_metainfo(cfg)
    dataset_meta = converted['meta']['dataset_meta']
    assert dataset_meta['classes'] == tuple(old['meta']['CLASSES'])
    assert [tuple(c) for c in dataset_meta['palette']] == [tuple(c) for c in metainfo['palette']]
    assert converted['meta']['converted_from'] == report['layout']
    assert 'CLASSES' not in converted['meta'] and 'config' in converted['meta']


def test_converted_checkpoint_gives_det_inferencer_its_classes(tiny, tmp_path):
    from mmdet.apis import DetInferencer
    config, cfg, original = tiny['mask_rcnn']
    classes = ('disc', 'box', 'wedge', 'spark')  # not the config's: they must come from the file
    torch.save(old_checkpoint(original, cfg, classes=classes), tmp_path / 'old.pth')
    convert_checkpoint.main([str(tmp_path / 'old.pth'), str(tmp_path / 'new.pth'),
                             '--config', str(config)])
    inferencer = DetInferencer(str(config), str(tmp_path / 'new.pth'), device='cpu',
                               show_progress=False)
    assert tuple(inferencer.model.dataset_meta['classes']) == classes
    own = inferencer.model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in original.state_dict().items())


def test_without_class_names_the_configs_are_used(tiny, tmp_path):
    config, cfg, original = tiny['upernet']
    old = old_checkpoint(original, cfg, CLASSES=None, PALETTE=None)
    torch.save(old, tmp_path / 'old.pth')
    report = convert_checkpoint.convert_full(str(tmp_path / 'old.pth'),
                                             str(tmp_path / 'new.pth'), str(config))
    assert report['classes_from'] == 'config'
    meta = torch.load(tmp_path / 'new.pth', weights_only=True)['meta']
    assert meta['dataset_meta']['classes'] == demo_metainfo(cfg)['classes']


# --- what is refused, and the reason given ---------------------------------------

def convert_dict(tiny, tmp_path, name, checkpoint):
    config = tiny[name][0]
    torch.save(checkpoint, tmp_path / 'old.pth')
    return convert_checkpoint.convert_full(str(tmp_path / 'old.pth'),
                                           str(tmp_path / 'new.pth'), str(config))


def test_a_head_of_another_size_is_a_shape_error(tiny, tmp_path):
    _, cfg, original = tiny['mask_rcnn']
    old = old_checkpoint(original, cfg)
    # COCO's 80 classes (+ background) against the config's 4.
    old['state_dict']['roi_head.bbox_head.fc_cls.weight'] = torch.zeros(81, 1024)
    old['state_dict']['roi_head.bbox_head.fc_cls.bias'] = torch.zeros(81)
    with pytest.raises(ValueError, match=r'does not fit the model: shapes differ \(2\): '
                                         r'roi_head\.bbox_head\.fc_cls\.weight: checkpoint '
                                         r'\(81, 1024\) vs model \(5, 1024\)'):
        convert_dict(tiny, tmp_path, 'mask_rcnn', old)
    assert not (tmp_path / 'new.pth').exists()


def test_keys_that_do_not_fit_are_named(tiny, tmp_path):
    _, cfg, original = tiny['upernet']
    old = old_checkpoint(original, cfg)
    old['state_dict']['decode_head.cls_seg.weight'] = \
        old['state_dict'].pop('decode_head.conv_seg.weight')
    with pytest.raises(ValueError) as error:
        convert_dict(tiny, tmp_path, 'upernet', old)
    message = str(error.value)
    assert 'keys of the model missing from it (1): decode_head.conv_seg.weight' in message
    assert 'keys the model does not have (1): decode_head.cls_seg.weight' in message
    assert 'shapes differ' not in message


def test_class_names_must_match_the_heads(tiny, tmp_path):
    _, cfg, original = tiny['retinanet']
    old = old_checkpoint(original, cfg, classes=[f'class{i}' for i in range(80)])
    with pytest.raises(ValueError, match="names 80 classes .* the config's heads have 4"):
        convert_dict(tiny, tmp_path, 'retinanet', old)


def test_mmdet_1x_layout_is_refused(tiny, tmp_path):
    from mavit_mm.tooling.legacy_checkpoints import LegacyCheckpointError
    _, cfg, original = tiny['mask_rcnn']
    old = old_checkpoint(original, cfg)
    # mmdet 1.x: the R-CNN heads at the top level.
    old['state_dict'] = OrderedDict((k.replace('roi_head.', ''), v)
                                    for k, v in old['state_dict'].items())
    with pytest.raises(LegacyCheckpointError, match=r'mmdet 1.x layout \(R-CNN heads at the '
                                                    r'top level.*upgrade_model_version'):
        convert_dict(tiny, tmp_path, 'mask_rcnn', old)
    # ... or said so by its meta, whatever the keys.
    old = old_checkpoint(original, cfg, mmdet_version='1.0rc1+d3ca926')
    with pytest.raises(LegacyCheckpointError, match=r'mmdet 1.x layout \(mmdet 1.0rc1'):
        convert_dict(tiny, tmp_path, 'mask_rcnn', old)


def test_a_checkpoint_of_the_other_library_is_refused(tiny, tmp_path):
    from mavit_mm.tooling.legacy_checkpoints import LegacyCheckpointError
    _, cfg, original = tiny['sem_fpn']
    with pytest.raises(LegacyCheckpointError,
                       match=r'is a segmentor checkpoint \(mmseg\); the config builds a '
                             r'detector \(mmdet\)'):
        convert_dict(tiny, tmp_path, 'retinanet', old_checkpoint(original, cfg))
    _, cfg, original = tiny['retinanet']
    with pytest.raises(LegacyCheckpointError,
                       match=r'is a detector checkpoint \(mmdet\); the config builds a '
                             r'segmentor \(mmseg\)'):
        convert_dict(tiny, tmp_path, 'sem_fpn', old_checkpoint(original, cfg))


def test_a_training_checkpoint_of_mmdet_3_is_stripped(tiny, tmp_path):
    """The same command on what mmengine's Runner writes: the weights and the
    class names kept, the training state dropped."""
    config, cfg, original = tiny['retinanet']
    metainfo = demo_metainfo(cfg)
    runner_checkpoint = dict(
        meta=dict(dataset_meta=dict(metainfo), mmengine_version='0.10.7', epoch=0, iter=2,
                  cfg='model = dict()'),
        state_dict=original.state_dict(), message_hub=dict(log_scalars={}),
        optimizer=dict(state={}, param_groups=[]), param_schedulers=[])
    report = convert_dict(tiny, tmp_path, 'retinanet', runner_checkpoint)
    assert report['layout'] == 'mmdet 3.x' and report['version'] is None
    assert report['dropped'] == ['message_hub', 'optimizer', 'param_schedulers']
    converted = torch.load(tmp_path / 'new.pth', weights_only=True)
    assert converted['meta']['dataset_meta']['classes'] == metainfo['classes']
    own = original.state_dict()
    assert list(converted['state_dict']) == list(own)
    assert all(torch.equal(converted['state_dict'][k], v) for k, v in own.items())


def test_backbone_only_and_unknown_layouts_are_refused(tiny, tmp_path):
    from mavit_mm.tooling.legacy_checkpoints import LegacyCheckpointError
    _, cfg, original = tiny['upernet']
    backbone = {k[len('backbone.'):]: v for k, v in original.state_dict().items()
                if k.startswith('backbone.')}
    with pytest.raises(LegacyCheckpointError, match='no backbone.* weights.*--arch'):
        convert_dict(tiny, tmp_path, 'upernet', dict(model=backbone))
    # A backbone and something else that no detector / segmentor has.
    odd = {f'backbone.{k}': v for k, v in backbone.items()}
    odd['head.fc.weight'] = torch.zeros(10, 512)
    with pytest.raises(LegacyCheckpointError, match='unknown layout: a backbone but no '
                                                    'detector or segmentor heads'):
        convert_dict(tiny, tmp_path, 'upernet', dict(state_dict=odd))


def test_command_line_needs_a_target_and_a_file(tiny, tmp_path):
    with pytest.raises(SystemExit):
        convert_checkpoint.parse_args(['a.pth', 'b.pth'])  # neither --arch nor --config
    with pytest.raises(SystemExit):
        convert_checkpoint.parse_args(['a.pth', 'b.pth', '--arch', 't', '--config', 'c.py'])
    with pytest.raises(FileNotFoundError, match='checkpoint not found: .*absent.pth'):
        convert_checkpoint.main([str(tmp_path / 'absent.pth'), str(tmp_path / 'b.pth'),
                                 '--config', str(tiny['upernet'][0])])
    notes = tmp_path / 'notes.pth'
    notes.write_bytes(b'\x80\x02not a checkpoint')
    for target in (['--arch', 't'], ['--config', str(tiny['upernet'][0])]):
        with pytest.raises(ValueError, match=r'cannot read .*notes\.pth as a checkpoint'):
            convert_checkpoint.main([str(notes), str(tmp_path / 'b.pth'), *target])


def test_options_that_do_not_apply_and_a_folder_to_write_are_refused(tmp_path, capsys):
    """Not a traceback from torch.save, nor a flag silently ignored."""
    for argv, message in (
            (['--config', 'c.py', '--prefix', 'backbone.'], '--prefix, --strict and --state-dict-key go with --arch'),
            (['--config', 'c.py', '--strict'], '--prefix, --strict and --state-dict-key go with --arch'),
            (['--arch', 't', '--cfg-options', 'a=1'], '--cfg-options goes with --config')):
        with pytest.raises(SystemExit) as exit_info:
            convert_checkpoint.parse_args(['a.pth', 'b.pth', *argv])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        convert_checkpoint.parse_args(['a.pth', str(tmp_path), '--arch', 't'])
    assert f'{tmp_path} is a folder: give the file to write' in capsys.readouterr().err


def test_a_checkpoint_of_the_published_classification_code_converts_model_or_ema(tmp_path,
                                                                                 capsys):
    """The published MALA training script (DeiT's) saves its command line
    (an argparse.Namespace) and the EMA weights beside 'model': both read with
    weights_only=True; 'model' converts by default, the EMA copy on request."""
    import argparse
    weights, ema = (MAViT('t').state_dict() for _ in range(2))
    source = tmp_path / 'best.pth'
    torch.save({'model': weights, 'model_ema': ema, 'optimizer': {'state': {}},
                'epoch': 299, 'max_accuracy': 82.4,
                'args': argparse.Namespace(model='MALA_T', lr=5e-4, opt_betas=None,
                                           cutmix_minmax=None, lr_noise=[0.1])}, source)
    for argv, expected in (([], weights), (['--state-dict-key', 'model_ema'], ema)):
        out = tmp_path / 'converted.pth'
        convert_checkpoint.main([str(source), str(out), '--arch', 't', *argv])
        converted = torch.load(out, weights_only=True)['state_dict']
        assert all(torch.equal(converted[k], expected[k]) for k in converted)
        printed = capsys.readouterr().out
        assert ("also in the source, not converted: 'model_ema'" in printed) == (not argv)
    with pytest.raises(ValueError, match=r"no state dict under 'ema' \(it holds \['args', "):
        convert_checkpoint.main([str(source), str(out), '--arch', 't', '--state-dict-key', 'ema'])
