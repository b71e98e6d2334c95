#!/usr/bin/env python
"""Evaluate a trained detector (mmdet config) or segmentor (mmseg config).

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out PATH]
                         [--show-dir DIR] [--show [--wait-time S]] [--tta]
                         [--cfg-options k=v ...]
    bash tools/dist_test.sh CONFIG CHECKPOINT GPUS [same options]

The checkpoint must hold exactly the config's model (a checkpoint of another
config is refused, naming the keys). The metrics (COCO bbox/segm AP, mIoU, ...)
are logged and written to ``<work-dir>/<timestamp>/<timestamp>.json``.
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
        description='Evaluate a MAViT detector or segmentor checkpoint on the test set of '
                    "its config with mmengine's Runner and the config's test_evaluator.")
    parser.add_argument('config', help='config file the checkpoint was trained with')
    parser.add_argument('checkpoint', help='checkpoint file (.pth) to evaluate')
    parser.add_argument('--work-dir', help='folder for the log and the metrics JSON '
                        "(default: the config's work_dir, else ./work_dirs/<config name>)")
    parser.add_argument('--out', metavar='PATH',
                        help='also save the predictions: detection - a .pkl file of the '
                             'raw results for offline evaluation; segmentation - a folder '
                             'that receives one predicted label PNG per image')
    parser.add_argument('--show-dir', metavar='DIR',
                        help='draw predictions on the images and save them: detection - '
                             'under <work-dir>/<timestamp>/DIR (DIR itself if absolute); '
                             'segmentation - under DIR/vis_data/vis_image/')
    parser.add_argument('--show', action='store_true',
                        help='also show each drawn prediction in a window (needs a display)')
    parser.add_argument('--wait-time', type=float, default=2.0, metavar='SECONDS',
                        help='with --show: how long each image stays (default: 2)')
    parser.add_argument('--tta', action='store_true',
                        help="test-time augmentation: the config's tta_model and tta_pipeline "
                             "(mmseg's ADE20K: flips at six scales; mmdet: image and flip, "
                             'boxes only)')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions,
                        metavar='KEY=VALUE', help=runner_setup.CFG_OPTIONS_HELP)
    parser.add_argument('--launcher', choices=runner_setup.LAUNCHERS, default='none',
                        help=runner_setup.LAUNCHER_HELP)
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0,
                        help=runner_setup.LOCAL_RANK_HELP)
    args = parser.parse_args(argv)
    runner_setup.export_local_rank(args.local_rank)
    return args


def prepare_config(args: argparse.Namespace):
    cfg = load_config(args.config, args.cfg_options)
    cfg.launcher = args.launcher
    runner_setup.set_work_dir(cfg, args.work_dir, args.config)
    runner_setup.configure_dist_backend(cfg)
    cfg.load_from = args.checkpoint
    cfg.resume = False
    if args.tta:
        runner_setup.configure_tta(cfg)
    if args.show_dir or args.show:
        runner_setup.configure_visualization(cfg, args.show_dir, args.show, args.wait_time)
    preflight.check_test_outputs(cfg, args.out, args.show_dir)
    preflight.check_for_testing(cfg, args.checkpoint)
    if args.out:    # (creates the folder a segmentor's maps go to: after the checks)
        runner_setup.configure_prediction_output(cfg, args.out)
    return cfg


def main(argv=None) -> dict:
    """Evaluate; returns the metrics, e.g. {'coco/bbox_mAP': ..., ...} or {'mIoU': ...}."""
    args = parse_args(argv)
    cfg = prepare_config(args)
    runner = runner_setup.build_runner(cfg)
    if args.out:
        runner_setup.attach_prediction_dump(runner, cfg, args.out)
    metrics = runner.test()
    runner_setup.close_process_group()
    return metrics


if __name__ == '__main__':
    try:
        main()
    except ConfigCheckError as error:
        print(f'test.py: error: {error}', file=sys.stderr)
        sys.exit(2)     # as argparse ends a bad command line, and the other tools
    runner_setup.exit_if_distributed()
