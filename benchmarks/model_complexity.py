"""Parameters of every published config and of the four backbone sizes, and
the MACs of the paper's complexity cases, as one JSON for the model zoo tables.

Counted on the CPU with ``mavit_mm.tooling.complexity.count_complexity`` (what
``tools/analysis_tools/get_flops.py`` prints): "layer MACs" are convolutions
and linear layers (the paper's convention), "attention MACs" the attention
products those counters leave out. The figures do not depend on the machine.

  python benchmarks/model_complexity.py            # all configs, a few minutes
  python benchmarks/model_complexity.py --out FILE

Default output: ``benchmarks/results/model-complexity-<date>.json``;
``benchmarks/readme_tables.py --write`` puts it into README.md and docs/.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

# The published recipes, by folder (every config in them is counted).
PUBLISHED = ('mask_rcnn', 'retinanet', 'cascade_rcnn', 'sem_fpn', 'upernet')
ARCHS = ('tiny', 'small', 'base', 'large')
# The paper's complexity cases: (name, config or None for the backbone alone, H, W).
FLOP_CASES = (
    ('MAViT-T backbone', None, 800, 1280),
    ('Mask R-CNN + MAViT-T', 'configs/mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py', 800, 1280),
    ('UperNet + MAViT-T', 'configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py',
     512, 2048),
)


def count_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def measure(configs=None) -> dict:
    import torch

    import mavit_mm  # noqa: F401  (registers MAViT)
    from mavit_mm.models import MAViT
    from mavit_mm.tooling.complexity import count_complexity
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.model_builder import build_model, dummy_forward_inputs

    torch.manual_seed(0)
    backbones = {arch: count_params(MAViT(arch=arch)) for arch in ARCHS}
    print('backbones:', {a: f'{p / 1e6:.2f}M' for a, p in backbones.items()}, flush=True)
    if configs is None:
        configs = sorted(path.relative_to(REPO_ROOT).as_posix() for folder in PUBLISHED
                         for path in (REPO_ROOT / 'configs' / folder).glob('*.py'))
    params = {}
    for config in configs:
        model = build_model(load_config(REPO_ROOT / config))
        params[config] = count_params(model)
        print(f'{config}: {params[config] / 1e6:.2f}M', flush=True)
        del model
    flops = []
    for name, config, height, width in FLOP_CASES:
        if config is None:
            model = MAViT(arch='tiny').eval()
            image = torch.randn(1, 3, height, width)
            with torch.no_grad():
                figures = count_complexity(model, lambda: model(image))
        else:
            cfg = load_config(REPO_ROOT / config)
            model = build_model(cfg).eval()
            inputs, samples = dummy_forward_inputs(cfg, height, width)
            with torch.no_grad():
                figures = count_complexity(model, lambda: model(inputs, samples, mode='tensor'))
        flops.append(dict(name=name, config=config, shape=[height, width],
                          params=figures.params, layer_macs=figures.layer_macs,
                          attention_macs=figures.attention_macs))
        print(f'{name} {height}x{width}: {figures.layer_macs / 1e9:.1f} + '
              f'{figures.attention_macs / 1e9:.1f} GMACs', flush=True)
    return dict(backbone_params=backbones, config_params=params, flops=flops)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--out', type=Path, default=None,
                        help='JSON path (default benchmarks/results/model-complexity-<date>.json)')
    parser.add_argument('--configs', nargs='+', default=None,
                        help='count these configs only (default: every published config)')
    args = parser.parse_args(argv)
    import torch

    from devtools.checkout import git_commit
    started = time.time()
    report = dict(benchmark='model-complexity', commit=git_commit() or 'unknown',
                  date=time.strftime('%Y-%m-%dT%H:%M:%S%z'),
                  versions=dict(python=platform.python_version(), torch=torch.__version__),
                  **measure(args.configs))
    report['seconds'] = round(time.time() - started, 1)
    out = args.out or (REPO_ROOT / 'benchmarks' / 'results' /
                       f'model-complexity-{time.strftime("%Y-%m-%d")}.json')
    from mavit_mm.tooling.results_file import write_json
    write_json(out, report)
    print(f'wrote {out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
