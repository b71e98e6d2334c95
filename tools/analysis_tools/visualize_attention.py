"""Draw what MAViT's attention variants attend to: the score maps of one query
token over an image (as in the MALA paper's Figs. 3-4), and the paper's Fig. 2
(one query scaled by a = 1, 2, 4).

Image mode: the image goes through the config's backbone up to the chosen
block; that block's own q and k projections then give every requested
variant's scores for the query token, computed by mavit_mm.ops.attention_scores
(the reference the model's attention is tested against). All variants see the
same q and k, so the maps differ only in the formula. Without --checkpoint the
backbone has random weights (said so on stdout and in the figure); it never
needs the config's pretrained file. --checkpoint takes a trained detector or
segmentor checkpoint (its backbone.* weights), a backbone checkpoint or a
published MAViT one. Writes DIR/attention_grid.png (the image with the query
marked, then one panel per variant), DIR/attention_<variant>.png and
DIR/summary.json (per variant: max, min, sum and, where all scores are
positive, entropy of the query's scores).

Fig. 2 mode (--fig2, no image or config needed): one synthetic query and 16
keys; the query is scaled by each --scales factor (relu kernel, so
phi(a q) = a phi(q)) and the score distributions of softmax, linear attention
and MALA are drawn for each: softmax and MALA get spikier with a, linear
attention does not change. Writes DIR/fig2_query_scaling.png and
DIR/fig2_summary.json.

Stages and blocks count from 0, as in the state dict (layers.S.blocks.B.attn);
in the published model stages 0-1 are MALA and 2-3 softmax. --query ROW COL is
a token of that stage's feature map (stride 4 * 2**S); default its centre.

Examples:
  python tools/analysis_tools/visualize_attention.py demo.jpg \\
      --config configs/sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py \\
      --checkpoint iter_80000.pth --stage 0 --block 1 --query 40 60 --out-dir vis/attn
  python tools/analysis_tools/visualize_attention.py demo.jpg --config CONFIG --attn-types mala linear softmax \\
      --out-dir vis/attn           # random weights
  python tools/analysis_tools/visualize_attention.py --fig2 --out-dir vis/fig2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from mavit_mm.tooling.cli import ConfigOptions, image_side  # noqa: E402

FIG2_TYPES = ('softmax', 'linear', 'mala')
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('image', nargs='?', help='input image (not needed with --fig2)')
    parser.add_argument('--config', help='a MAViT detection / segmentation config (its '
                                         'model.backbone is used)')
    parser.add_argument('--checkpoint', help='trained weights; without it: random weights')
    parser.add_argument('--stage', type=int, default=0,
                        help='stage index from 0 (default 0, the first MALA stage)')
    parser.add_argument('--block', type=int, default=-1,
                        help='block index within the stage from 0; -1 = last (default)')
    parser.add_argument('--query', type=int, nargs=2, metavar=('ROW', 'COL'),
                        help="query token in the stage's feature map (default: centre)")
    parser.add_argument('--attn-types', nargs='+', default=None,
                        help='variants to draw (default: all of mavit_mm.ops.ATTN_TYPES)')
    parser.add_argument('--kernel-function', default=None,
                        help="phi of the linear variants (default: the config's, else 'elu')")
    parser.add_argument('--head', type=int, default=None,
                        help='one attention head (default: the mean over heads)')
    parser.add_argument('--size', type=image_side, nargs=2, metavar=('H', 'W'),
                        help='resize the image to H x W first (default: as it is)')
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random weights / synthetic data (default 0)')
    parser.add_argument('--fig2', action='store_true',
                        help="the paper's Fig. 2: a synthetic query scaled by --scales")
    parser.add_argument('--scales', type=float, nargs='+', default=[1.0, 2.0, 4.0],
                        help='query scales of --fig2 (default: 1 2 4)')
    parser.add_argument('--cfg-options', nargs='+', action=ConfigOptions, default={},
                        help='override config entries, key=value (mmengine syntax)')
    parser.add_argument('--out-dir', required=True, help='where the PNGs and JSON go')
    args = parser.parse_args(argv)
    if not args.fig2 and (args.image is None or args.config is None):
        parser.error('an IMAGE and --config are needed (or --fig2 for the synthetic figure)')
    return args


# -- image mode -------------------------------------------------------------------------
def build_backbone(cfg, checkpoint, seed: int):
    """The config's MAViT backbone, never with its pretrained file: random
    (seeded) weights, or those of ``checkpoint``."""
    import torch
    from mmengine.logging import MMLogger

    from mavit_mm.models import MAViT
    from mavit_mm.models.checkpoint import load_pretrained_backbone

    backbone_cfg = dict(cfg.model.backbone)
    if backbone_cfg.pop('type', 'MAViT') != 'MAViT':
        raise ValueError(f'{cfg.filename}: the backbone is not MAViT')
    backbone_cfg['init_cfg'] = None
    backbone_cfg.pop('pretrained', None)
    norm_cfg = dict(backbone_cfg.get('norm_cfg') or dict(type='BN'))
    if norm_cfg.get('type') == 'SyncBN':   # same parameters; one process here
        norm_cfg['type'] = 'BN'
    backbone_cfg['norm_cfg'] = norm_cfg
    torch.manual_seed(seed)
    model = MAViT(**backbone_cfg)
    # mmengine logs every parameter's init at INFO: keep stdout to what matters.
    logger = MMLogger.get_current_instance()
    level = logger.level
    logger.setLevel('WARNING')
    try:
        model.init_weights()
    finally:
        logger.setLevel(level)
    if checkpoint is None:
        return model, 'random weights'
    report = load_pretrained_backbone(model, checkpoint)
    print(f'loaded {len(report["loaded"])} tensors from {checkpoint}'
          + (f'; {len(report["missing"])} missing (kept random): '
             f'{", ".join(report["missing"][:4])}' if report['missing'] else '')
          + (f'; {len(report["unexpected"])} not in this backbone (left out: a checkpoint of '
             f'another variant or head?): {", ".join(report["unexpected"][:4])}'
             if report['unexpected'] else ''))
    return model, f'weights of {Path(checkpoint).name}'


def load_image(path: str, size, cfg):
    import cv2
    import numpy as np
    import torch

    bgr = cv2.imread(path, cv2.IMREAD_COLOR)
    if bgr is None:
        raise FileNotFoundError(f'no readable image at {path}')
    if size is not None:
        bgr = cv2.resize(bgr, (size[1], size[0]), interpolation=cv2.INTER_LINEAR)
    rgb = bgr[:, :, ::-1].copy()
    preprocessor = cfg.model.get('data_preprocessor') or {}
    mean = np.array(preprocessor.get('mean', IMAGENET_MEAN), dtype=np.float32)
    std = np.array(preprocessor.get('std', IMAGENET_STD), dtype=np.float32)
    pixels = rgb if preprocessor.get('bgr_to_rgb', True) else bgr
    tensor = torch.from_numpy((pixels.astype(np.float32) - mean) / std).permute(2, 0, 1)
    return rgb, tensor[None]


def capture_query_key(model, image, stage: int, block: int):
    """q, k (B, heads, N, d) and the rotary tables of the chosen block's attention."""
    import torch

    if not 0 <= stage < len(model.layers):
        raise ValueError(f'--stage {stage}: the model has stages 0..{len(model.layers) - 1}')
    blocks = model.layers[stage].blocks
    if not -len(blocks) <= block < len(blocks):
        raise ValueError(f'--block {block}: stage {stage} has blocks 0..{len(blocks) - 1}')
    attn = blocks[block].attn
    seen = {}

    def grab(module, inputs):
        x, rope = inputs
        seen['qk'] = module.query_key(x)
        seen['rope'] = rope

    handle = attn.register_forward_pre_hook(grab)
    try:
        with torch.no_grad():
            model.eval()(image)
    finally:
        handle.remove()
    return (*seen['qk'], seen['rope'], block % len(blocks))


def query_maps(q, k, rope, attn_types, kernel_function, query, head):
    """{variant: (H, W) float64 numpy map of the query's scores}."""
    from mavit_mm.ops import attention_scores

    height, width = rope.height, rope.width
    row, col = query if query is not None else (height // 2, width // 2)
    if not (0 <= row < height and 0 <= col < width):
        raise ValueError(f'--query {row} {col} is outside the {height}x{width} token grid '
                         'of this stage')
    if head is not None and not 0 <= head < q.shape[1]:
        raise ValueError(f'--head {head}: this block has heads 0..{q.shape[1] - 1}')
    index = row * width + col
    maps = {}
    for attn_type in attn_types:
        scores = attention_scores(q.double(), k.double(), attn_type, rope, kernel_function,
                                  queries=[index])[0, :, 0]          # (heads, N)
        scores = scores.mean(0) if head is None else scores[head]
        maps[attn_type] = scores.reshape(height, width).numpy()
    return maps, (row, col)


def describe(values) -> dict:
    import numpy as np

    flat = np.asarray(values, dtype=np.float64).ravel()
    info = dict(max=float(flat.max()), min=float(flat.min()), sum=float(flat.sum()))
    if (flat > 0).all():
        p = flat / flat.sum()
        info['entropy'] = float(-(p * np.log(p)).sum())
    return info


def draw_image_mode(rgb, maps, query, grid_hw, title, out_dir: Path):
    import cv2
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    height, width = rgb.shape[:2]
    stride_y, stride_x = height / grid_hw[0], width / grid_hw[1]
    marker = ((query[1] + 0.5) * stride_x, (query[0] + 0.5) * stride_y)

    def overlay(ax, name, values):
        up = cv2.resize(values, (width, height), interpolation=cv2.INTER_NEAREST)
        ax.imshow(rgb)
        shown = ax.imshow(up, cmap='jet', alpha=0.55)
        ax.plot(*marker, marker='s', markersize=7, markerfacecolor='none',
                markeredgecolor='white', markeredgewidth=2)
        ax.set_title(f'{name}\nmax {values.max():.3g}, min {values.min():.3g}', fontsize=9)
        ax.axis('off')
        return shown

    files = {}
    for name, values in maps.items():
        fig, ax = plt.subplots(figsize=(5, 5 * height / width + 0.6))
        fig.colorbar(overlay(ax, name, values), ax=ax, fraction=0.046, pad=0.04)
        fig.suptitle(title, fontsize=8)
        fig.tight_layout()
        path = out_dir / f'attention_{name}.png'
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files[name] = str(path)

    panels = len(maps) + 1
    cols = min(4, panels)
    rows = (panels + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.6 * rows * height / width + 0.8),
                             squeeze=False)
    axes = axes.ravel()
    axes[0].imshow(rgb)
    axes[0].plot(*marker, marker='s', markersize=7, markerfacecolor='none',
                 markeredgecolor='red', markeredgewidth=2)
    axes[0].set_title(f'query token {query[0]}, {query[1]}', fontsize=9)
    axes[0].axis('off')
    for ax, (name, values) in zip(axes[1:], maps.items()):
        fig.colorbar(overlay(ax, name, values), ax=ax, fraction=0.046, pad=0.04)
    for ax in axes[panels:]:
        ax.axis('off')
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    grid = out_dir / 'attention_grid.png'
    fig.savefig(grid, dpi=100)
    plt.close(fig)
    return str(grid), files


def image_mode(args) -> dict:
    from mavit_mm.ops import ATTN_TYPES
    from mavit_mm.ops.attention_variants import check_attn_type, check_kernel_function
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.results_file import write_json

    if not Path(args.image).is_file():
        raise FileNotFoundError(f'no image at {args.image}')
    attn_types = list(args.attn_types or ATTN_TYPES)
    for attn_type in attn_types:
        check_attn_type(attn_type, name='--attn-types entries')
    cfg = load_config(args.config, args.cfg_options)
    kernel_function = check_kernel_function(
        args.kernel_function or cfg.model.backbone.get('kernel_function', 'elu'))
    model, weights = build_backbone(cfg, args.checkpoint, args.seed)
    if args.checkpoint is None:
        pretrained = (cfg.model.backbone.get('init_cfg') or {}).get('checkpoint')
        print('no --checkpoint: the backbone has RANDOM weights (seed '
              f'{args.seed}); the maps show the formulas on untrained q and k'
              + (f" (the config's pretrained file {pretrained} is not used)" if pretrained
                 else ''))
    rgb, image = load_image(args.image, args.size, cfg)
    q, k, rope, block = capture_query_key(model, image, args.stage, args.block)
    maps, query = query_maps(q, k, rope, attn_types, kernel_function, args.query, args.head)
    heads = 'mean of heads' if args.head is None else f'head {args.head}'
    title = (f'{Path(args.config).name}: layers.{args.stage}.blocks.{block}.attn, '
             f'{rope.height}x{rope.width} tokens, {heads}, kernel {kernel_function}, {weights}')
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    grid, files = draw_image_mode(rgb, maps, query, (rope.height, rope.width), title, out_dir)
    summary = dict(config=args.config, checkpoint=args.checkpoint, weights=weights,
                   stage=args.stage, block=block, query=list(query),
                   grid=[rope.height, rope.width], head=args.head,
                   kernel_function=kernel_function,
                   scores={name: describe(values) for name, values in maps.items()},
                   grid_png=grid, variant_pngs=files)
    write_json(out_dir / 'summary.json', summary)
    for name, info in summary['scores'].items():
        print(f'{name:>14}: max {info["max"]:.4g}  min {info["min"]:.4g}  sum {info["sum"]:.4g}')
    print(f'wrote {grid} and {len(files)} per-variant PNGs to {out_dir}')
    return dict(summary, maps=maps)


# -- Fig. 2 mode --------------------------------------------------------------------------
def fig2_scores(scales, seed: int, num_keys: int = 16, head_dim: int = 16):
    """{attn_type: [scores of the query scaled by a, for a in scales]}: relu
    kernel, no RoPE, positive keys and a small positive query (so MALA's
    scores stay positive, as in the paper's figure)."""
    import torch

    from mavit_mm.ops import attention_scores

    generator = torch.Generator().manual_seed(seed)
    keys = 1 + torch.randn(1, 1, num_keys, head_dim, generator=generator,
                           dtype=torch.float64).abs()
    query = 0.1 * (1 + torch.rand(head_dim, generator=generator, dtype=torch.float64))
    queries = query.expand(1, 1, num_keys, head_dim)    # one query, repeated for N rows
    return {t: [attention_scores(a * queries, keys, t, None, 'relu')[0, 0, 0].numpy()
                for a in scales] for t in FIG2_TYPES}


def fig2_mode(args) -> dict:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    if any(a <= 0 for a in args.scales):
        raise ValueError(f'--scales must be positive, got {args.scales}')
    scores = fig2_scores(args.scales, args.seed)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    order = scores['softmax'][0].argsort()[::-1]        # keys by their a=1 softmax score
    fig, axes = plt.subplots(len(FIG2_TYPES), len(args.scales),
                             figsize=(3.2 * len(args.scales), 2.4 * len(FIG2_TYPES)),
                             sharey='row', squeeze=False)
    names = dict(softmax='Softmax attention', linear='Linear attention', mala='MALA')
    summary = {}
    for row, attn_type in enumerate(FIG2_TYPES):
        summary[attn_type] = {}
        for col, (scale, values) in enumerate(zip(args.scales, scores[attn_type])):
            info = describe(values)
            summary[attn_type][f'{scale:g}'] = info
            ax = axes[row, col]
            ax.bar(range(len(values)), values[order], color=f'C{row}')
            ax.set_title(f'{names[attn_type]}, a = {scale:g}\nmax {info["max"]:.3f}'
                         + (f', entropy {info["entropy"]:.3f}' if 'entropy' in info else ''),
                         fontsize=8)
            ax.set_xticks([])
            if col == 0:
                ax.set_ylabel('score')
    for ax in axes[-1]:
        ax.set_xlabel('keys (by softmax score at a = 1)')
    fig.suptitle("Query magnitude: phi(q) scaled by a (MALA paper, Fig. 2; relu kernel)",
                 fontsize=9)
    fig.tight_layout()
    png = out_dir / 'fig2_query_scaling.png'
    fig.savefig(png, dpi=100)
    plt.close(fig)
    from mavit_mm.tooling.results_file import write_json
    write_json(out_dir / 'fig2_summary.json', summary)
    for attn_type, per_scale in summary.items():
        line = '  '.join(f'a={a}: max {i["max"]:.4f}' for a, i in per_scale.items())
        print(f'{attn_type:>8}: {line}')
    print(f'wrote {png}')
    return dict(png=str(png), summary=summary, scores=scores)


def main(argv=None) -> dict:
    args = parse_args(argv)
    return fig2_mode(args) if args.fig2 else image_mode(args)


if __name__ == '__main__':
    from mavit_mm.tooling.cli import run_tool
    run_tool(main, 'visualize_attention.py')
