#!/usr/bin/env python
"""Train a detector (mmdet config) or segmentor (mmseg config) with mmengine's Runner.

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
                          [--auto-scale-lr] [--cfg-options k=v ...]
    bash tools/dist_train.sh CONFIG GPUS [same options]      # several GPUs / nodes

The task follows the config's ``default_scope``. Paths, checkpoints and the
backbone size are checked before anything is built.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO_ROOT))


import mavit_mm  # noqa: E402,F401  (registers MAViT; torch.load allow-list for checkpoints)
from mavit_mm.tooling import preflight, runner_setup  # noqa: E402
from mavit_mm.tooling.cli import ConfigOptions  # noqa: E402
from mavit_mm.tooling.config import ConfigCheckError, load_config  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='Train a MAViT detector or segmentor (mmdet / mmseg config) with '
                    "mmengine's Runner. The task is taken from the config's default_scope.")
    parser.add_argument('config', help='config file, e.g. '
                        'configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py')
    parser.add_argument('--work-dir', help='folder for logs and checkpoints (default: the '
                        "config's work_dir, else ./work_dirs/<config name>)")
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto', metavar='CKPT',
        help='resume training: without a value from the latest checkpoint in the work dir, '
             'with a value from that checkpoint (weights, optimizer, schedule, iteration)')
    parser.add_argument('--amp', action='store_true',
                        help='mixed-precision training (AmpOptimWrapper); needs CUDA, '
                             'ignored with a warning on a CPU')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate linearly with the total batch size '
                             "(GPUs x samples per GPU) relative to the config's "
                             'auto_scale_lr.base_batch_size')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                        metavar='KEY=VALUE', help=runner_setup.CFG_OPTIONS_HELP)
    parser.add_argument('--launcher', choices=runner_setup.LAUNCHERS, default='none',
                        help=runner_setup.LAUNCHER_HELP)
    # torch.distributed.launch passes --local-rank (torch >= 2) or --local_rank.
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0,
                        help=runner_setup.LOCAL_RANK_HELP)
    args = parser.parse_args(argv)
    runner_setup.export_local_rank(args.local_rank)
    return args


def prepare_config(args: argparse.Namespace):
    """The config with every command-line option applied, checked."""
    cfg = load_config(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    runner_setup.set_work_dir(cfg, args.work_dir, args.config)
    runner_setup.configure_amp(cfg, args.amp)
    runner_setup.configure_dist_backend(cfg)
    if args.auto_scale_lr:
        runner_setup.configure_auto_scale_lr(cfg)
    runner_setup.configure_resume(cfg, args.resume)
    preflight.check_for_training(cfg)
    return cfg


def main(argv=None):
    """Train; returns the Runner (its model, iteration and message hub)."""
    args = parse_args(argv)
    cfg = prepare_config(args)
    runner = runner_setup.build_runner(cfg)
    runner.train()
    runner_setup.close_process_group()
    return runner


if __name__ == '__main__':
    try:
        main()
    except ConfigCheckError as error:
        print(f'train.py: error: {error}', file=sys.stderr)
        sys.exit(2)     # as argparse ends a bad command line, and the other tools
    runner_setup.exit_if_distributed()
