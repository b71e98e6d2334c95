"""Every training config resolves to the dict committed under
tests/data/resolved_configs/: refactoring the bases (inheriting mmdet's and
mmseg's own, sharing fragments) must not change a model, a pipeline, the
optimizer, the schedule, the evaluator or a hook.

A config changed on purpose gets its snapshot rewritten with
    PYTHONPATH=. python tests/test_configs/test_resolved_configs.py --update
which rewrites only the snapshots that differ, and leaves out of them the
allowed additions they did not hold: the diff of the JSON shows, in review,
what the change did and nothing else.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# Run as a script too (--update), without tests/ on sys.path: the folders are
# found from this file (tests/test_configs/), not through helpers.paths.
REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / 'configs'
SNAPSHOT_DIR = REPO_ROOT / 'tests' / 'data' / 'resolved_configs'
# mmdeploy deploy configs are another format; _base_ files are not run alone.
SKIPPED_DIRS = ('_base_', 'deploy')

# What a resolved config may gain; nothing else may be added or differ.
# - `_scope_` equal to the config's default_scope: mmengine marks everything an
#   `mmdet::` / `mmseg::` base defines with that package's scope; it is the
#   scope the registries use anyway, so every type resolves as before.
# - top-level `demo_...`: a demo base's values, named apart because mmengine
#   refuses a key defined by two bases (configs/_base_/demos/); the demo
#   config copies them into the keys the runner reads, compared in full.
# ALLOWED_ADDITIONS: a key (and all below it) and when it may be added:
ALLOWED_ADDITIONS = {
    # The fragment the model bases copy into model.backbone
    # (configs/_base_/models/mavit.py); model.backbone is compared in full.
    'mavit_backbone': lambda value, cfg: True,
    # mmseg's schedules name the optimizer at the top level too; the runner
    # builds optim_wrapper's, compared in full.
    'optimizer': lambda value, cfg: value == cfg['optim_wrapper']['optimizer'],
    # mmseg's R-50 model bases load the ResNet's weights through
    # model.pretrained; None, EncoderDecoder's default, loads nothing.
    'model.pretrained': lambda value, cfg: value is None,
    # mmseg's ADE20K test-time augmentation, read only by test.py --tta (next
    # to the runtime's tta_model, already there).
    'img_ratios': lambda value, cfg: True,
    'tta_pipeline': lambda value, cfg: True,
}


def _allowed_addition(key: str, value, cfg: dict) -> bool:
    """Whether ``key`` (flattened), new in ``cfg`` with ``value``, is allowed."""
    if key.split('.')[-1] == '_scope_':
        return value == cfg.get('default_scope')
    if key.startswith('demo_'):
        return True
    for allowed, rule in ALLOWED_ADDITIONS.items():
        if key == allowed or key.startswith((allowed + '.', allowed + '[')):
            node = cfg
            for part in allowed.split('.'):
                node = node[part]
            return rule(node, cfg)
    return False


def training_configs() -> list:
    return sorted(str(p.relative_to(CONFIG_DIR)) for p in CONFIG_DIR.rglob('*.py')
                  if p.relative_to(CONFIG_DIR).parts[0] not in SKIPPED_DIRS)


def snapshot_path(rel_path: str) -> Path:
    return SNAPSHOT_DIR / (rel_path[:-len('.py')].replace('/', '__') + '.json')


def _plain(value):
    """JSON-ready, keeping tuples apart from lists (a transform may take only one)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {'__tuple__': [_plain(v) for v in value]}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def resolve(rel_path: str) -> dict:
    """The config as the tools load it, as plain JSON data."""
    from mavit_mm.tooling.config import load_config
    return _plain(load_config(CONFIG_DIR / rel_path).to_dict())


def _flatten(value, prefix: str = '') -> dict:
    if isinstance(value, dict) and value and '__tuple__' not in value:
        out = {}
        for key, item in value.items():
            out.update(_flatten(item, f'{prefix}.{key}' if prefix else key))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, item in enumerate(value):
            out.update(_flatten(item, f'{prefix}[{i}]'))
        return out
    return {prefix: value}


def differences(expected: dict, actual: dict) -> list:
    """One line per leaf key that differs, is missing or is added (less the
    allowed additions)."""
    want, got = _flatten(expected), _flatten(actual)
    lines = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            lines.append(f'  missing  {key} (was {want[key]!r})')
        elif key not in want:
            if _allowed_addition(key, got[key], actual):
                continue
            lines.append(f'  added    {key} = {got[key]!r}')
        elif want[key] != got[key]:
            lines.append(f'  changed  {key}: {want[key]!r} -> {got[key]!r}')
    return lines


def _to_json(value, indent: int = 0) -> str:
    """Sorted keys; a dict or list on one line where it fits in 100 columns."""
    flat = json.dumps(value, sort_keys=True)
    if len(flat) + indent <= 100 or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = ' ' * (indent + 1)
    if isinstance(value, dict):
        items = [f'{pad}{json.dumps(k)}: {_to_json(value[k], indent + 1)}' for k in sorted(value)]
        return '{\n' + ',\n'.join(items) + '\n' + ' ' * indent + '}'
    items = [pad + _to_json(v, indent + 1) for v in value]
    return '[\n' + ',\n'.join(items) + '\n' + ' ' * indent + ']'


def _held(key: str, keys: set) -> bool:
    """Whether ``key`` or anything below it is among the flattened ``keys``."""
    return any(k == key or k.startswith((key + '.', key + '[')) for k in keys)


def _without_new_additions(value, held: set, cfg: dict, prefix: str = ''):
    """``value`` (a resolved config, or a part of it at ``prefix``) less the
    allowed additions that no key of ``held`` (an old snapshot's) reaches."""
    if isinstance(value, dict) and '__tuple__' not in value:
        out = {}
        for key, item in value.items():
            path = f'{prefix}.{key}' if prefix else key
            if not _held(path, held) and _allowed_addition(path, item, cfg):
                continue
            out[key] = _without_new_additions(item, held, cfg, path)
        return out
    if isinstance(value, list):
        return [_without_new_additions(item, held, cfg, f'{prefix}[{i}]')
                for i, item in enumerate(value)]
    return value


def write_snapshot(rel_path: str) -> bool:
    """Rewrite the snapshot of a config that resolves differently (a new one
    in full); whether it was written."""
    path = snapshot_path(rel_path)
    actual = resolve(rel_path)
    if path.exists():
        expected = json.loads(path.read_text())
        if not differences(expected, actual):
            return False
        actual = _without_new_additions(actual, set(_flatten(expected)), actual)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_to_json(actual) + '\n')
    return True


def test_every_config_has_a_snapshot():
    expected = {snapshot_path(p).name for p in training_configs()}
    present = {p.name for p in SNAPSHOT_DIR.glob('*.json')}
    assert expected == present, (
        f'configs without a snapshot: {sorted(expected - present)}; '
        f'snapshots without a config: {sorted(present - expected)}')


@pytest.mark.parametrize('rel_path', training_configs())
def test_config_resolves_as_committed(rel_path):
    expected = json.loads(snapshot_path(rel_path).read_text())
    lines = differences(expected, resolve(rel_path))
    assert not lines, (f'configs/{rel_path} resolves differently from '
                       f'{snapshot_path(rel_path).relative_to(REPO_ROOT)}:\n'
                       + '\n'.join(lines))


if __name__ == '__main__':
    if sys.argv[1:] != ['--update']:
        sys.exit('usage: PYTHONPATH=. python tests/test_configs/test_resolved_configs.py --update')
    written = [config for config in training_configs() if write_snapshot(config)]
    for config in written:
        print(f'rewritten: {snapshot_path(config).relative_to(REPO_ROOT)}')
    print(f'{len(written)} of {len(training_configs())} snapshots rewritten in {SNAPSHOT_DIR}')
