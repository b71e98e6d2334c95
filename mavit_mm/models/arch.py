"""MAViT's sizes: the published presets, and the per-stage settings a
:class:`~mavit_mm.models.MAViT` is built from, checked."""
from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Number, Real

from ..ops.attention_variants import check_attn_type

# Published sizes (reference README). drop_path_rate is the detection /
# segmentation one.
ARCH_SETTINGS = {
    'tiny': dict(embed_dims=[64, 128, 256, 512], depths=[2, 2, 6, 2],
                 num_heads=[1, 2, 4, 8], mlp_ratios=[3.5] * 4,
                 layer_init_values=[1, 1, 1, 1], drop_path_rate=0.1),
    'small': dict(embed_dims=[64, 128, 320, 512], depths=[3, 5, 9, 3],
                  num_heads=[1, 2, 5, 8], mlp_ratios=[3.5] * 4,
                  layer_init_values=[1, 1, 1, 1], drop_path_rate=0.15),
    'base': dict(embed_dims=[96, 192, 384, 512], depths=[4, 6, 12, 6],
                 num_heads=[1, 2, 6, 8], mlp_ratios=[3.5] * 4,
                 layer_init_values=[1, 1, 1e-6, 1e-6], drop_path_rate=0.4),
    'large': dict(embed_dims=[96, 192, 448, 640], depths=[4, 7, 19, 8],
                  num_heads=[1, 2, 7, 10], mlp_ratios=[3.5] * 4,
                  layer_init_values=[1e-6] * 4, drop_path_rate=0.55),
}
ARCH_ALIASES = {'t': 'tiny', 's': 'small', 'b': 'base', 'l': 'large'}
NUM_STAGES = 4   # the paper's four stages, as every preset has them
# The settings a preset gives, which MAViT's arguments of the same names override.
PRESET_KEYS = ('embed_dims', 'depths', 'num_heads', 'mlp_ratios', 'drop_path_rate',
               'layer_init_values')


def resolve_arch(arch: str) -> dict:
    """The preset of ``arch`` ('tiny'|'small'|'base'|'large' or t|s|b|l)."""
    key = ARCH_ALIASES.get(str(arch).lower(), str(arch).lower())
    if key not in ARCH_SETTINGS:
        choices = sorted(ARCH_SETTINGS) + sorted(ARCH_ALIASES)
        raise ValueError(f'unknown MAViT arch {arch!r}; choose one of {choices}')
    return {name: list(value) if isinstance(value, list) else value
            for name, value in ARCH_SETTINGS[key].items()}


def per_stage(name: str, value, kind=None) -> list:
    """Expand a scalar (of type ``kind``) to every stage, or check a list has
    one entry per stage; the error names the setting."""
    if kind is not None and isinstance(value, kind):
        return [value] * NUM_STAGES
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ValueError(f'{name} must be a list with one entry per stage ({NUM_STAGES}), '
                         f'got {value!r}')
    if len(value) != NUM_STAGES:
        raise ValueError(f'{name} must have {NUM_STAGES} entries (one per stage), '
                         f'got {len(value)}: {list(value)}')
    return list(value)


def whole_number(name: str, value, minimum: int) -> int:
    """``value`` as an int: a whole number (``64`` or ``64.0``; not ``2.5``,
    not a bool, not text), at least ``minimum``."""
    whole = isinstance(value, Integral) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole or value < minimum:
        raise ValueError(f'{name} must be a whole number >= {minimum}, got {value!r}')
    return int(value)


def stage_settings(arch: str | None, *, layerscales, attn_types, **given) -> dict:
    """The settings of a MAViT, each per-stage one a list with an entry per
    stage: the preset of ``arch`` (none for ``None``) with the ``given``
    entries that are not ``None`` over it (``PRESET_KEYS``)."""
    preset = resolve_arch(arch) if arch is not None else {}
    settings = {**preset, **{k: v for k, v in given.items() if v is not None}}
    missing = [k for k in PRESET_KEYS if k not in settings]
    if missing:
        raise ValueError(f'without an arch preset MAViT needs {missing}')
    stages = dict(
        depths=[whole_number(f'depths[{i}]', d, 0)     # 0: a stage of no block
                for i, d in enumerate(per_stage('depths', settings['depths']))],
        embed_dims=[whole_number(f'embed_dims[{i}]', d, 1)
                    for i, d in enumerate(per_stage('embed_dims', settings['embed_dims']))],
        num_heads=[whole_number(f'num_heads[{i}]', h, 1)
                   for i, h in enumerate(per_stage('num_heads', settings['num_heads']))],
        mlp_ratios=per_stage('mlp_ratios', settings['mlp_ratios'], Number),
        layer_init_values=per_stage('layer_init_values', settings['layer_init_values'], Number),
        layerscales=per_stage('layerscales', True if layerscales is None else layerscales, bool),
        attn_types=per_stage('attn_types', attn_types, str),
        drop_path_rate=float(settings['drop_path_rate']))
    for i, (dim, ratio) in enumerate(zip(stages['embed_dims'], stages['mlp_ratios'])):
        if isinstance(ratio, bool) or not isinstance(ratio, Real) or int(dim * ratio) < 1:
            raise ValueError(f'mlp_ratios[{i}] must be a number that gives the FFN at least '
                             f'one hidden channel (embed_dims {dim}), got {ratio!r}')
    if not 0 <= stages['drop_path_rate'] < 1:
        raise ValueError(f"drop_path_rate must lie in [0, 1), got {stages['drop_path_rate']}")
    for i, (dim, heads) in enumerate(zip(stages['embed_dims'], stages['num_heads'])):
        if heads <= 0 or dim % heads != 0:
            raise ValueError(f'stage {i}: embed_dims {dim} is not divisible by '
                             f'num_heads {heads}')
        if (dim // heads) % 4 != 0:
            raise ValueError(f'stage {i}: head dim {dim // heads} (embed_dims {dim} / '
                             f'num_heads {heads}) must be divisible by 4 for 2D RoPE')
    for i, attn_type in enumerate(stages['attn_types']):
        check_attn_type(attn_type, name=f'attn_types[{i}]')
    return stages


__all__ = ['ARCH_SETTINGS', 'ARCH_ALIASES', 'NUM_STAGES', 'resolve_arch', 'per_stage',
           'stage_settings', 'whole_number']
