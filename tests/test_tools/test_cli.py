"""The tools' shared command-line parts (mavit_mm/tooling/cli.py): numbers and
sizes that cannot run are refused by argparse, naming the option; a CUDA
device that is not there, and a user's mistake, end as ``prog: error: ...``."""
import argparse

import pytest
import torch
from helpers.tools import load_tool, run_tool

from mavit_mm.tooling import cli


def test_int_at_least_and_image_sizes():
    assert cli.int_at_least(1)('3') == 3
    with pytest.raises(argparse.ArgumentTypeError, match='must be at least 1, got 0'):
        cli.int_at_least(1)('0')
    with pytest.raises(argparse.ArgumentTypeError, match="expected an integer, got 'x'"):
        cli.int_at_least(0)('x')
    assert cli.image_size('512x2048') == (512, 2048)
    for text in ('16x16', '512', '512x-4'):
        with pytest.raises(argparse.ArgumentTypeError):
            cli.image_size(text)


@pytest.mark.parametrize('tool,argv,option', [
    ('analysis_tools/get_flops', ['--arch', 't', '--shape', '0', '0'], '--shape'),
    ('analysis_tools/benchmark_fps', ['CONFIG', '--shape', '-5', '100'], '--shape'),
    ('analysis_tools/benchmark_fps', ['CONFIG', '--iters', '0'], '--iters'),
    ('analysis_tools/benchmark_fps', ['CONFIG', '--warmup', '-1'], '--warmup'),
    ('analysis_tools/benchmark_fps', ['CONFIG', '--batch-size', '0'], '--batch-size'),
    ('analysis_tools/visualize_attention', ['IMAGE', '--size', '8', '8'], '--size'),
    ('analysis_tools/benchmark_fps', ['CONFIG', '--device', 'tpu'], '--device'),
    ('analysis_tools/benchmark_fps', ['CONFIG', '--shape', '64', '64', '--shapes', '64x64'],
     '--shapes: not allowed with argument --shape'),
    ('demo', ['IMAGES', 'CONFIG', 'CHECKPOINT', '--device', 'gpu0'], '--device'),
])
def test_options_that_cannot_run_are_refused(tool, argv, option, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_tool(tool).parse_args(argv)
    assert exit_info.value.code == 2
    assert option in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks a machine without CUDA')
def test_a_cuda_device_that_is_not_there():
    assert cli.resolve_device(None).type == 'cpu'
    with pytest.raises(ValueError, match='this machine has no CUDA device'):
        cli.resolve_device('cuda')


def test_a_bad_config_ends_benchmark_fps_without_a_traceback(tmp_path, capsys):
    """As its __main__ runs it (the command line itself: the demo.py test below)."""
    config = tmp_path / 'bad.py'
    config.write_text('x = (\n')
    with pytest.raises(SystemExit) as exit_info:
        cli.run_tool(load_tool('analysis_tools/benchmark_fps').main, 'benchmark_fps.py',
                     [str(config), '--shape', '64', '64', '--device', 'cpu'])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith(f'benchmark_fps.py: error: config {config}, line 1: '
                                              'invalid Python')


def test_a_users_mistake_ends_without_a_traceback(tmp_path):
    """demo.py on a folder without images, through the real command line."""
    result = run_tool('demo.py', tmp_path, 'CONFIG', 'CHECKPOINT')
    assert result.returncode == 2
    assert result.stderr.strip().startswith('demo.py: error: no images')
    assert 'tools/demo.py:' in result.stderr    # where it was raised
    assert 'Traceback' not in result.stderr


# Each tool that takes --cfg-options, with its positional arguments.
CFG_OPTIONS_TOOLS = [('train', ['CONFIG']), ('test', ['CONFIG', 'CHECKPOINT']),
                     ('demo', ['IMAGES', 'CONFIG', 'CHECKPOINT']),
                     ('model_converters/convert_checkpoint', ['SRC', 'DST', '--config', 'C']),
                     ('analysis_tools/get_flops', ['CONFIG']),
                     ('analysis_tools/benchmark_fps', ['CONFIG']),
                     ('analysis_tools/visualize_attention', ['IMAGE'])]


@pytest.mark.parametrize('tool,argv', CFG_OPTIONS_TOOLS, ids=[t for t, _ in CFG_OPTIONS_TOOLS])
@pytest.mark.parametrize('item', ['train_cfg.max_iters', '=100'])
def test_cfg_options_without_key_and_value_are_refused(tool, argv, item, capsys):
    """mmengine's own action ended these in a ValueError traceback."""
    with pytest.raises(SystemExit) as exit_info:
        load_tool(tool).parse_args([*argv, '--cfg-options', 'a=1', item])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --cfg-options: expected KEY=VALUE, e.g. train_cfg.max_iters=100; got {item!r}" in err


@pytest.mark.parametrize('item', ['model.backbone.depths=[1,2', 'a=(1,[2)'])
def test_cfg_options_whose_brackets_do_not_pair_are_refused(item, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load_tool('train').parse_args(['CONFIG', '--cfg-options', item])
    assert exit_info.value.code == 2
    assert f'argument --cfg-options: cannot parse the value of {item!r}' in capsys.readouterr().err


def test_cfg_options_are_mmengines():
    """Values parse as mmengine's DictAction parses them (numbers, lists)."""
    args = load_tool('train').parse_args(['CONFIG', '--cfg-options', 'train_cfg.max_iters=3',
                                          'model.backbone.depths=[1,1,2,1]', 'name=a=b',
                                          '--cfg-options', 'pairs=[(1,2),(3,4)]', 'empty='])
    assert args.cfg_options == {'train_cfg.max_iters': 3,
                                'model.backbone.depths': [1, 1, 2, 1], 'name': 'a=b',
                                'pairs': [(1, 2), (3, 4)], 'empty': ''}
