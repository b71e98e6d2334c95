"""tools/train.py and tools/test.py refuse bad input at once, naming the path or
value, before the Runner (model, datasets) is built; and apply their options."""
import json
import logging
import re
import time

import pytest
import torch
from helpers.paths import REPO_ROOT
from helpers.tools import (
    load_tool,
    make_tiny_data,
    run_tool,
    save_initialised_checkpoint,
    write_tiny_config,
)
from mmengine.config import Config

from mavit_mm.tooling import runner_setup
from mavit_mm.tooling.config import ConfigCheckError, FormattedOnceConfig, load_config


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp('checks')
    roots = make_tiny_data(root / 'data')
    return dict(
        roots=roots,
        det=write_tiny_config('mask_rcnn', roots, root / 'configs'),
        seg=write_tiny_config('upernet', roots, root / 'configs'))


@pytest.fixture(scope='module')
def train_tool():
    return load_tool('train')


@pytest.fixture(scope='module')
def test_tool():
    return load_tool('test')


def _train_error(train_tool, config, *extra, work_dir) -> str:
    with pytest.raises(ConfigCheckError) as error:
        train_tool.main([str(config), '--work-dir', str(work_dir), *map(str, extra)])
    assert not work_dir.exists(), 'failed after the Runner started writing its work dir'
    return str(error.value)


def test_missing_data_root(tiny, train_tool, tmp_path):
    missing = tmp_path / 'no_such_root'
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'train_dataloader.dataset.data_root={missing}',
                           work_dir=tmp_path / 'work')
    assert str(missing) in message and 'data_root' in message


def test_missing_annotation_file(tiny, train_tool, tmp_path):
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           'val_dataloader.dataset.ann_file=annotations/instances_nope.json',
                           work_dir=tmp_path / 'work')
    assert str(tiny['roots']['coco'] / 'annotations' / 'instances_nope.json') in message
    assert 'not found' in message


@pytest.mark.parametrize('content,problem', [('{"images": [{"id": 1', 'not valid JSON'),
                                             ('not json at all', 'not valid JSON'),
                                             ('[1, 2]', 'holds a'), ('', 'is empty')])
def test_corrupt_annotation_file(tiny, train_tool, tmp_path, content, problem):
    corrupt = tmp_path / 'instances_corrupt.json'
    corrupt.write_text(content)
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'train_dataloader.dataset.ann_file={corrupt}',
                           work_dir=tmp_path / 'work')
    assert str(corrupt) in message and problem in message, message


def test_missing_evaluator_annotation_file(tiny, test_tool, train_tool, tmp_path):
    """CocoMetric reads its own copy of the annotation path."""
    missing = tmp_path / 'instances_gone.json'
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'val_evaluator.ann_file={missing}', work_dir=tmp_path / 'work')
    assert str(missing) in message and 'val_evaluator' in message
    checkpoint = tmp_path / 'iter_1.pth'
    checkpoint.write_bytes(b'')  # exists; never read, the check fails first
    with pytest.raises(ConfigCheckError, match='test_evaluator'):
        test_tool.main([str(tiny['det']), str(checkpoint), '--work-dir', str(tmp_path / 'w'),
                        '--cfg-options', f'test_evaluator.ann_file={missing}'])


def test_coco_file_without_images(tiny, train_tool, tmp_path):
    wrong = tmp_path / 'instances_wrong.json'
    wrong.write_text(json.dumps({'annotations': []}))
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'train_dataloader.dataset.ann_file={wrong}',
                           work_dir=tmp_path / 'work')
    assert str(wrong) in message and "'images'" in message


def test_missing_segmentation_label_folder(tiny, train_tool, tmp_path):
    message = _train_error(train_tool, tiny['seg'], '--cfg-options',
                           'train_dataloader.dataset.data_prefix.seg_map_path=annotations/nope',
                           work_dir=tmp_path / 'work')
    assert str(tiny['roots']['ade20k'] / 'annotations' / 'nope') in message
    assert 'folder not found' in message


@pytest.mark.parametrize('config_key', ['det', 'seg'])
def test_unknown_backbone_size(tiny, train_tool, tmp_path, config_key):
    message = _train_error(train_tool, tiny[config_key], '--cfg-options',
                           'model.backbone.arch=huge', work_dir=tmp_path / 'work')
    assert "'huge'" in message and 'model.backbone.arch' in message


def test_missing_test_checkpoint(tiny, test_tool, tmp_path):
    missing = tmp_path / 'iter_99.pth'
    with pytest.raises(ConfigCheckError, match=str(missing)):
        test_tool.main([str(tiny['det']), str(missing), '--work-dir', str(tmp_path / 'work')])
    assert not (tmp_path / 'work').exists()


def test_missing_resume_and_load_from_checkpoints(tiny, train_tool, tmp_path):
    missing = tmp_path / 'iter_7.pth'
    message = _train_error(train_tool, tiny['det'], '--resume', missing,
                           work_dir=tmp_path / 'work')
    assert str(missing) in message and 'resume' in message
    message = _train_error(train_tool, tiny['seg'], '--cfg-options', f'load_from={missing}',
                           work_dir=tmp_path / 'work')
    assert str(missing) in message and 'load_from' in message


@pytest.fixture(scope='module')
def segmentor_checkpoint(tiny, tmp_path_factory):
    """A checkpoint of the tiny UperNet: another model for the Mask R-CNN config."""
    return save_initialised_checkpoint(tiny['seg'], tmp_path_factory.mktemp('ckpt') / 'seg.pth')


def test_test_checkpoint_of_another_model_is_refused(tiny, test_tool, segmentor_checkpoint,
                                                     tmp_path):
    """mmengine alone loads what fits, logs the rest and scores a part-random model."""
    with pytest.raises(ConfigCheckError, match=r'test checkpoint: .*seg\.pth does not fit the '
                                               r'model: .*keys of the model missing from it'):
        test_tool.main([str(tiny['det']), str(segmentor_checkpoint),
                        '--work-dir', str(tmp_path / 'work')])
    assert not (tmp_path / 'work').exists()   # refused before the Runner


def test_resume_from_a_checkpoint_of_another_model_is_refused(tiny, train_tool,
                                                              segmentor_checkpoint, tmp_path):
    with pytest.raises(ConfigCheckError, match=r'resume: .*seg\.pth does not fit the model'):
        train_tool.main([str(tiny['det']), '--work-dir', str(tmp_path / 'work'),
                         '--resume', str(segmentor_checkpoint)])
    assert not (tmp_path / 'work').exists()   # refused before the Runner


def test_a_file_that_is_no_checkpoint_is_refused(tiny, test_tool, tmp_path):
    garbage = tmp_path / 'garbage.pth'
    garbage.write_bytes(b'not a checkpoint')
    with pytest.raises(ConfigCheckError, match=r'cannot read .*garbage\.pth as a checkpoint'):
        test_tool.main([str(tiny['seg']), str(garbage), '--work-dir', str(tmp_path / 'work')])
    # The config given twice (the arguments swapped): torch's own reason would
    # be 'pop from empty list'.
    with pytest.raises(ConfigCheckError, match=r"\.py as a checkpoint \(not a PyTorch checkpoint: "
                                               r"neither torch's zip format nor a pickle"):
        test_tool.main([str(tiny['seg']), str(tiny['seg']), '--work-dir', str(tmp_path / 'work')])
    assert not (tmp_path / 'work').exists()   # refused before the Runner


def test_a_checkpoint_whose_weights_mmengine_would_not_find_is_refused(
        tiny, test_tool, segmentor_checkpoint, tmp_path):
    """mmengine's loader reads 'state_dict' (or the top level) and strips only
    'module.': the model's tensors under 'model', or behind torch.compile's
    '_orig_mod.', would leave it random, and the test would score it."""
    weights = torch.load(segmentor_checkpoint, weights_only=True)['state_dict']
    for name, content in (('under_model.pth', {'model': weights}),
                          ('compiled.pth', {'state_dict': {f'_orig_mod.{k}': v
                                                           for k, v in weights.items()}})):
        torch.save(content, tmp_path / name)
        with pytest.raises(ConfigCheckError, match=r"test checkpoint: .* does not fit the model: "
                                                   r".*its tensors fit the model, but not where "
                                                   r"mmengine's loader reads them"):
            test_tool.main([str(tiny['seg']), str(tmp_path / name), '--work-dir',
                            str(tmp_path / 'work')])
    assert not (tmp_path / 'work').exists()


def test_tta_runs_the_configs_test_time_augmentation(tiny, test_tool, tmp_path):
    """mmseg's ADE20K flips at six scales (SegTTAModel), through the real runner."""
    checkpoint = save_initialised_checkpoint(tiny['seg'], tmp_path / 'seg.pth')
    argv = [str(tiny['seg']), str(checkpoint), '--tta', '--work-dir', str(tmp_path / 'work')]
    cfg = test_tool.prepare_config(test_tool.parse_args(argv))
    assert cfg.model.type == 'SegTTAModel' and cfg.model.module.type == 'EncoderDecoder'
    assert cfg.test_dataloader.dataset.pipeline[1]['type'] == 'TestTimeAug'
    metrics = test_tool.main(argv)
    assert 0 <= metrics['mIoU'] <= 100


def test_tta_of_detectors(tiny):
    """mmdet's flip default where a config names none; refused for masks,
    which mmdet 3.3's DetTTAModel cannot merge."""
    retinanet = load_config(REPO_ROOT / 'configs' / 'demo' / 'retinanet_mavit-t_fpn_demo-shapes.py')
    test_pipeline = list(retinanet.test_dataloader.dataset.pipeline)
    runner_setup.configure_tta(retinanet)
    assert retinanet.model.type == 'DetTTAModel' and retinanet.model.module.type == 'RetinaNet'
    pipeline = retinanet.test_dataloader.dataset.pipeline
    assert pipeline[:-1] == test_pipeline[:-1] and pipeline[-1]['type'] == 'TestTimeAug'
    with pytest.raises(ConfigCheckError, match='no test-time augmentation for instance'):
        runner_setup.configure_tta(load_config(tiny['det']))
    # A wrapped test set: the pipeline of the dataset inside is replaced.
    wrapped = load_config(REPO_ROOT / 'configs' / 'demo' / 'retinanet_mavit-t_fpn_demo-shapes.py')
    inner = wrapped.test_dataloader.dataset
    wrapped.test_dataloader.dataset = dict(type='RepeatDataset', times=1, dataset=inner)
    runner_setup.configure_tta(wrapped)
    assert 'pipeline' not in wrapped.test_dataloader.dataset
    assert wrapped.test_dataloader.dataset.dataset.pipeline[-1]['type'] == 'TestTimeAug'


def test_pretrained_backbone_path_checks_take_home_and_lists(tiny, backbone_files, tmp_path,
                                                             monkeypatch):
    """'~/...' and a list init_cfg, as the backbone itself takes them."""
    import shutil

    from mavit_mm.tooling import preflight
    monkeypatch.setenv('HOME', str(tmp_path))
    shutil.copy(backbone_files / 'mavit_t.pth', tmp_path / 'mavit_t.pth')
    cfg = load_config(tiny['det'])
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint='~/mavit_t.pth')
    preflight.check_mavit_backbones(cfg, check_pretrained=True)
    cfg.model.backbone.init_cfg = [dict(type='Constant', layer='Conv2d', val=1.0),
                                   dict(type='Pretrained', checkpoint='~/missing.pth')]
    with pytest.raises(ConfigCheckError, match='missing.pth'):
        preflight.check_mavit_backbones(cfg, check_pretrained=True)


def test_stale_auto_resume_pointer(tiny, train_tool, tmp_path):
    work_dir = tmp_path / 'work'
    work_dir.mkdir()
    (work_dir / 'last_checkpoint').write_text(str(work_dir / 'iter_5.pth'))
    with pytest.raises(ConfigCheckError, match='iter_5.pth'):
        train_tool.main([str(tiny['det']), '--work-dir', str(work_dir), '--resume'])


@pytest.fixture(scope='module')
def backbone_files(tmp_path_factory):
    """A MAViT-S backbone checkpoint (not the demo's MAViT-T), a MAViT-T one,
    and a file that is no checkpoint."""
    from mavit_mm.models import MAViT
    root = tmp_path_factory.mktemp('backbones')
    with torch.device('meta'):
        small, tiny = MAViT('s'), MAViT('t')
    for name, model in (('mavit_s.pth', small), ('mavit_t.pth', tiny)):
        torch.save({k: torch.zeros(v.shape) for k, v in model.state_dict().items()}, root / name)
    (root / 'notes.pth').write_bytes(b'\x80\x02not a checkpoint\n')     # a pickle's first bytes
    return root


@pytest.mark.parametrize('file,problem', [
    ('mavit_s.pth', r'.*mavit_s\.pth does not fit this MAViT \(\d+ tensors differ in shape: '
                    r'.*another size'),
    ('notes.pth', r'cannot read .*notes\.pth as a checkpoint \(torch.load with '
                  r'weights_only=True refused it: '),
])
def test_pretrained_backbone_that_does_not_fit_is_refused(tiny, train_tool, backbone_files,
                                                          tmp_path, file, problem):
    """Before the Runner: not a traceback from init_weights once all is built."""
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'model.backbone.pretrained={backbone_files / file}',
                           work_dir=tmp_path / 'work')
    assert re.search(r'model\.backbone\.init_cfg\.checkpoint \(pretrained backbone\): '
                     + problem, message), message
    assert 'weights_only=False' not in message


def test_load_from_that_shares_no_tensor_with_the_model_is_refused(tiny, train_tool,
                                                                  backbone_files, tmp_path):
    """mmengine would load nothing, log it, and train from scratch."""
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'load_from={backbone_files / "mavit_t.pth"}', work_dir=tmp_path / 'w')
    assert re.search(r"load_from: no tensor of .*mavit_t\.pth is one of the config's model .*"
                     r"backbone checkpoint goes in model\.backbone\.init_cfg", message), message
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           f'load_from={backbone_files / "notes.pth"}', work_dir=tmp_path / 'w')
    assert re.search(r'load_from: cannot read .*notes\.pth as a checkpoint', message), message


def test_load_from_is_judged_as_mmengine_loads_it(tiny, segmentor_checkpoint, tmp_path):
    """mmengine takes 'state_dict' (else the whole dict) and drops 'module.':
    a DDP checkpoint is fine; one under 'model' with compile's '_orig_mod.' it
    loads nothing from."""
    from mavit_mm.tooling import preflight
    cfg = load_config(tiny['seg'])
    weights = torch.load(segmentor_checkpoint, weights_only=True)['state_dict']
    ddp = tmp_path / 'ddp.pth'
    torch.save({'state_dict': {f'module.{k}': v for k, v in weights.items()}}, ddp)
    preflight.check_load_from_fits(cfg, str(ddp))
    compiled = tmp_path / 'compiled.pth'
    torch.save({'model': {f'_orig_mod.{k}': v for k, v in weights.items()}}, compiled)
    with pytest.raises(ConfigCheckError, match=r'load_from: no tensor of .*compiled\.pth .*'
                                               r"under 'state_dict' or at the top"):
        preflight.check_load_from_fits(cfg, str(compiled))


def test_backbone_settings_are_checked_before_the_runner(tiny, train_tool, tmp_path):
    message = _train_error(train_tool, tiny['seg'], '--cfg-options',
                           'model.backbone.frozen_stages=9', work_dir=tmp_path / 'work')
    assert message.startswith('model.backbone: frozen_stages must lie in [-1, 4]'), message
    message = _train_error(train_tool, tiny['seg'], '--cfg-options',
                           'model.backbone.attn_type=linear', work_dir=tmp_path / 'work')
    assert "model.backbone: " in message and "'attn_type'" in message, message


def test_cfg_option_under_a_value_that_is_no_dict_is_refused(tiny, train_tool, tmp_path):
    """The demo configs train from scratch: init_cfg is None, no dict to set a key in."""
    message = _train_error(train_tool, tiny['det'], '--cfg-options',
                           'model.backbone.init_cfg.checkpoint=x.pth', work_dir=tmp_path / 'work')
    assert message.startswith('--cfg-options: init_cfg=') and 'NoneType' in message, message


def test_outputs_that_cannot_be_written_are_refused_before_the_runner(
        tiny, train_tool, test_tool, segmentor_checkpoint, tmp_path):
    """A file where a folder must be: mmengine failed on it once all was built,
    a detection --out only after the whole test."""
    a_file = tmp_path / 'afile'
    a_file.write_text('')
    with pytest.raises(ConfigCheckError, match=re.escape(f'work_dir {a_file}: {a_file} is a file, '
                                                         'not a folder')):
        train_tool.main([str(tiny['seg']), '--work-dir', str(a_file)])
    work = ['--work-dir', str(tmp_path / 'work')]
    for options, problem in (
            (['--out', str(a_file / 'preds')], f'--out {a_file / "preds"}: {a_file} is a file'),
            (['--show-dir', str(a_file)], f'--show-dir {a_file}: {a_file} is a file')):
        with pytest.raises(ConfigCheckError, match=re.escape(problem)):
            test_tool.main([str(tiny['seg']), str(segmentor_checkpoint), *work, *options])
    detector = save_initialised_checkpoint(tiny['det'], tmp_path / 'det.pth')
    with pytest.raises(ConfigCheckError, match=re.escape(f'--out {a_file / "x.pkl"}: {a_file} is a file')):
        test_tool.main([str(tiny['det']), str(detector), *work, '--out', str(a_file / 'x.pkl')])
    assert not (tmp_path / 'work').exists()


def test_a_segmentors_out_is_a_folder_made_only_once_the_checks_pass(
        tiny, test_tool, segmentor_checkpoint, tmp_path):
    """A .pkl --out (mmdet's habit) would quietly become a folder of PNGs; and a
    run refused for its checkpoint leaves no empty --out folder behind."""
    work = ['--work-dir', str(tmp_path / 'work')]
    pickle = tmp_path / 'preds.pkl'
    with pytest.raises(ConfigCheckError, match=re.escape(f'--out {pickle}: a segmentor writes one '
                                                         'label PNG per image into a folder')):
        test_tool.main([str(tiny['seg']), str(segmentor_checkpoint), *work, '--out', str(pickle)])
    out = tmp_path / 'preds'
    with pytest.raises(ConfigCheckError, match='test checkpoint: checkpoint not found'):
        test_tool.main([str(tiny['seg']), str(tmp_path / 'missing.pth'), *work, '--out', str(out)])
    assert not pickle.exists() and not out.exists()


@pytest.mark.parametrize('kind', ['det', 'seg'])
def test_show_and_wait_time_reach_the_visualisation_hook(tiny, test_tool, segmentor_checkpoint,
                                                         tmp_path, kind):
    """mmdet's and mmseg's test.py --show / --wait-time: drawn, shown for that
    long, and saved only where --show-dir says."""
    checkpoint = (segmentor_checkpoint if kind == 'seg'
                  else save_initialised_checkpoint(tiny['det'], tmp_path / 'det.pth'))
    common = [str(tiny[kind]), str(checkpoint), '--work-dir', str(tmp_path / 'work')]
    cfg = test_tool.prepare_config(test_tool.parse_args([*common, '--show', '--wait-time', '0.5']))
    hook = cfg.default_hooks.visualization
    assert (hook.draw, hook.show, hook.wait_time) == (True, True, 0.5)
    assert hook.get('test_out_dir') is None and cfg.visualizer.get('save_dir') is None
    cfg = test_tool.prepare_config(test_tool.parse_args([*common, '--show-dir', 'painted']))
    hook = cfg.default_hooks.visualization
    assert hook.draw and not hook.get('show', False)
    assert (hook.test_out_dir if kind == 'det' else cfg.visualizer.save_dir) == 'painted'


def test_batch_size_below_one_is_refused(tiny, train_tool, tmp_path):
    message = _train_error(train_tool, tiny['seg'], '--cfg-options', 'train_dataloader.batch_size=0',
                           work_dir=tmp_path / 'work')
    assert message == 'train_dataloader.batch_size must be a whole number >= 1, got 0', message


def test_missing_pretrained_backbone_of_the_published_config(tmp_path, train_tool, tiny):
    """The published configs start from ImageNet weights that are not bundled."""
    config = REPO_ROOT / 'configs' / 'mask_rcnn' / 'mask-rcnn_mavit-t_fpn_1x_coco.py'
    expected = load_config(config).model.backbone.init_cfg.checkpoint
    message = _train_error(train_tool, config, work_dir=tmp_path / 'work')
    assert expected in message and 'init_cfg' in message


def test_auto_scale_lr_needs_the_config_entry(tiny, train_tool, tmp_path):
    message = _train_error(train_tool, tiny['det'], '--auto-scale-lr', '--cfg-options',
                           'auto_scale_lr=None', work_dir=tmp_path / 'work')
    assert 'auto_scale_lr' in message


def test_missing_config_file(train_tool, tmp_path):
    missing = tmp_path / 'nope.py'
    with pytest.raises(ConfigCheckError, match=str(missing)):
        train_tool.main([str(missing)])


def test_syntax_error_names_the_file_and_line_even_in_a_base(train_tool, tmp_path):
    """mmengine reports a syntax error as in ``<unknown>``, whichever file holds it."""
    (tmp_path / 'base.py').write_text('a = 1\nb = [\n')
    (tmp_path / 'top.py').write_text("_base_ = ['./base.py']\nmodel = dict()\n")
    (tmp_path / 'own.py').write_text('x = 1 +\n')
    with pytest.raises(ConfigCheckError,
                       match=rf'config {tmp_path / "base.py"}, line 2: invalid Python'):
        train_tool.main([str(tmp_path / 'top.py')])
    with pytest.raises(ConfigCheckError, match=rf'config {tmp_path / "own.py"}, line 1: '):
        train_tool.main([str(tmp_path / 'own.py')])


def test_config_that_raises_names_its_line(train_tool, tmp_path, monkeypatch):
    config = tmp_path / 'raises.py'
    config.write_text('scale = 2\nx = undefined_name * scale\n')
    with pytest.raises(ConfigCheckError, match=rf'config {config}, line 2: NameError: name '
                                               r"'undefined_name' is not defined"):
        train_tool.main([str(config)])
    not_a_config = tmp_path / 'notes.txt'
    not_a_config.write_text('x = 1\n')
    with pytest.raises(ConfigCheckError, match=rf'config {not_a_config}: not a config file'):
        train_tool.main([str(not_a_config)])
    # What a module of custom_imports raises is its own: it keeps its traceback.
    (tmp_path / 'broken_plugin.py').write_text("raise RuntimeError('plugin bug')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / 'with_plugin.py'
    config.write_text("custom_imports = dict(imports=['broken_plugin'], allow_failed_imports=False)\n")
    with pytest.raises(RuntimeError, match='plugin bug'):
        train_tool.main([str(config)])


def test_command_line_reports_the_error_and_exits(tiny, tmp_path):
    """Through the real command line: non-zero exit, the path on stderr, quickly."""
    missing = tmp_path / 'no_such_root'
    work_dir = tmp_path / 'work'
    start = time.time()
    result = run_tool('train.py', tiny['det'], '--work-dir', work_dir, '--cfg-options',
                      f'train_dataloader.dataset.data_root={missing}')
    assert result.returncode == 2     # as argparse, and the other tools
    assert f'train.py: error: train_dataloader.dataset: data_root not found: {missing}' \
        in result.stderr
    assert 'Traceback' not in result.stderr
    assert not work_dir.exists()
    assert time.time() - start < 120  # imports only; nothing was built


def _help(tool, capsys) -> str:
    """``--help`` of the tool's parser, in this process (the command line itself
    runs in the tests above and in test_e2e.py)."""
    with pytest.raises(SystemExit) as exit_info:
        tool.parse_args(['--help'])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_flags(train_tool, test_tool, capsys):
    train_help = _help(train_tool, capsys)
    for flag in ('--work-dir', '--resume', '--amp', '--cfg-options', '--launcher',
                 '--auto-scale-lr', '--local-rank'):
        assert flag in train_help
    test_help = _help(test_tool, capsys)
    for flag in ('--work-dir', '--out', '--show-dir', '--show ', '--wait-time', '--cfg-options',
                 '--launcher'):
        assert flag in test_help


# -- the config a run is built from ---------------------------------------------

def test_config_is_formatted_once_per_content(monkeypatch, tmp_path):
    """mmengine formats the config with yapf at every log, dump and checkpoint;
    ours formats each content once and gives exactly mmengine's text."""
    import copy

    from mmengine.config import config as mmengine_config
    formatted = []
    format_code = mmengine_config.FormatCode
    monkeypatch.setattr(mmengine_config, 'FormatCode',
                        lambda text, **kwargs: (formatted.append(text), format_code(text, **kwargs))[1])
    monkeypatch.setattr(FormattedOnceConfig, '_formatted', type(FormattedOnceConfig._formatted)())
    path = REPO_ROOT / 'configs/demo/fpn_mavit-t_demo-shapes.py'
    expected = Config.fromfile(str(path)).pretty_text
    assert len(formatted) == 1

    cfg = load_config(path)
    assert isinstance(cfg, FormattedOnceConfig) and FormattedOnceConfig.of(cfg) is cfg
    runner_copy = copy.deepcopy(cfg)    # what the Runner keeps
    assert type(runner_copy) is FormattedOnceConfig
    texts = [cfg.pretty_text, runner_copy.pretty_text, cfg.pretty_text]
    cfg.dump(str(tmp_path / 'dumped.py'))
    assert texts == [expected] * 3
    assert (tmp_path / 'dumped.py').read_text() == expected
    assert len(formatted) == 2            # mmengine's once, ours once

    runner_copy.train_cfg.max_iters = 7   # a changed config is formatted anew
    changed = runner_copy.pretty_text
    assert len(formatted) == 3 and changed != expected and 'max_iters=7' in changed
    assert cfg.pretty_text == expected and len(formatted) == 3


# -- options applied to the config ---------------------------------------------

def _amp_config():
    return Config(dict(optim_wrapper=dict(type='AmpOptimWrapper', loss_scale='dynamic',
                                          optimizer=dict(type='AdamW', lr=1e-4))))


def test_amp_wrapper_becomes_fp32_without_cuda(monkeypatch, caplog):
    monkeypatch.setattr(runner_setup, 'cuda_available', lambda: False)
    messages = []
    monkeypatch.setattr(runner_setup, 'log', lambda message, level=logging.INFO: messages.append(message))
    cfg = _amp_config()
    runner_setup.configure_amp(cfg, amp_requested=False)
    assert cfg.optim_wrapper.type == 'OptimWrapper'
    assert 'loss_scale' not in cfg.optim_wrapper
    assert cfg.optim_wrapper.optimizer.lr == 1e-4
    assert len(messages) == 1 and 'OptimWrapper' in messages[0]
    runner_setup.configure_amp(Config(dict(optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)))),
                      amp_requested=True)
    assert '--amp ignored' in messages[-1]


def test_amp_flag_with_cuda(monkeypatch):
    monkeypatch.setattr(runner_setup, 'cuda_available', lambda: True)
    monkeypatch.setattr(runner_setup, 'log', lambda *args, **kwargs: None)
    cfg = Config(dict(optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1))))
    runner_setup.configure_amp(cfg, amp_requested=True)
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper'
    kept = _amp_config()
    runner_setup.configure_amp(kept, amp_requested=False)
    assert kept.optim_wrapper.type == 'AmpOptimWrapper'


@pytest.mark.parametrize('cuda', [False, True], ids=['cpu', 'cuda'])
def test_a_plain_optim_wrapper_over_a_recipe_drops_its_amp_settings(monkeypatch, cuda):
    """``--cfg-options optim_wrapper.type=OptimWrapper`` (fp32 on a GPU) on a
    recipe: mmengine's OptimWrapper refused the recipe's loss_scale once the
    model and data were built."""
    from mmengine.optim import build_optim_wrapper
    messages = []
    monkeypatch.setattr(runner_setup, 'cuda_available', lambda: cuda)
    monkeypatch.setattr(runner_setup, 'log', lambda message, level=logging.INFO: messages.append(message))
    cfg = load_config(REPO_ROOT / 'configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py',
                      {'optim_wrapper.type': 'OptimWrapper'})
    assert 'loss_scale' in cfg.optim_wrapper
    runner_setup.configure_amp(cfg, amp_requested=False)
    assert 'loss_scale' not in cfg.optim_wrapper and cfg.optim_wrapper.type == 'OptimWrapper'
    assert messages == ['optim_wrapper is a plain OptimWrapper (fp32): loss_scale dropped '
                        '(settings of AmpOptimWrapper).']
    wrapper = build_optim_wrapper(torch.nn.Linear(2, 2), cfg.optim_wrapper)
    assert type(wrapper).__name__ == 'OptimWrapper'


def test_amp_where_available_wrapper_left_to_itself(monkeypatch):
    """The recipes' AmpWhereAvailableOptimWrapper chooses AMP or fp32 itself when
    built: configure_amp leaves it as it is, with or without CUDA, and --amp on
    a GPU says mixed precision is already on."""
    messages = []
    monkeypatch.setattr(runner_setup, 'log', lambda message, level=logging.INFO: messages.append(message))
    for cuda in (False, True):
        monkeypatch.setattr(runner_setup, 'cuda_available', lambda cuda=cuda: cuda)
        cfg = Config(dict(optim_wrapper=dict(type='AmpWhereAvailableOptimWrapper',
                                             loss_scale='dynamic',
                                             optimizer=dict(type='AdamW', lr=1e-4))))
        runner_setup.configure_amp(cfg, amp_requested=False)
        assert cfg.optim_wrapper.type == 'AmpWhereAvailableOptimWrapper'
        assert cfg.optim_wrapper.loss_scale == 'dynamic'
        assert messages == []
        runner_setup.configure_amp(cfg, amp_requested=True)
        assert cfg.optim_wrapper.type == 'AmpWhereAvailableOptimWrapper'
        expected = 'already on' if cuda else '--amp ignored'
        assert len(messages) == 1 and expected in messages[0], messages
        messages.clear()


def test_resume_options():
    cfg = Config(dict(load_from='x.pth', resume=False))
    runner_setup.configure_resume(cfg, None)
    assert cfg.resume is False and cfg.load_from == 'x.pth'
    runner_setup.configure_resume(cfg, 'auto')
    assert cfg.resume is True and cfg.load_from is None
    runner_setup.configure_resume(cfg, 'run/iter_4.pth')
    assert cfg.resume is True and cfg.load_from == 'run/iter_4.pth'


def test_resume_flag_parsing(train_tool):
    assert train_tool.parse_args(['c.py']).resume is None
    assert train_tool.parse_args(['c.py', '--resume']).resume == 'auto'
    assert train_tool.parse_args(['c.py', '--resume', 'a.pth']).resume == 'a.pth'


def test_prediction_output_folder_exists_before_any_rank_writes(tiny, tmp_path):
    # mmseg's IoUMetric creates --out in the main process only: every rank
    # must find the folder before saving its first label map.
    out = tmp_path / 'nested' / 'predictions'
    cfg = load_config(tiny['seg'])
    runner_setup.configure_prediction_output(cfg, str(out))
    assert out.is_dir()
    assert cfg.test_evaluator['output_dir'] == str(out)
    det = load_config(tiny['det'])
    with pytest.raises(ConfigCheckError, match='ending in .pkl'):
        runner_setup.configure_prediction_output(det, str(tmp_path / 'predictions'))
