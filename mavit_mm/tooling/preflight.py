"""Checks a config before the Runner is built, so that a wrong path or value
fails at once with a message naming it, not after the model and datasets are
built or deep inside a registry traceback: data roots, annotation files, image /
label folders, MAViT backbone sizes, and every checkpoint the run will read.
Remote paths (``s3://``, ``http://`` ...) are left to the file backends. A
checkpoint that replaces every weight (a test's, a resumed run's) is checked
against the config's model (:func:`check_checkpoint_fits`).
"""
from __future__ import annotations

import json
import os
import os.path as osp

from ..errors import UnreadableCheckpointError
from .config import ConfigCheckError, iter_dataset_cfgs

# Parse JSON annotation files up to this size; beyond it (full COCO train is
# ~450 MB) only the first and last bytes are checked, to stay fast.
MAX_JSON_BYTES_TO_PARSE = 64 * 1024 * 1024
# The keys of a dataset's data_prefix that name folders.
_DATASET_DIR_KEYS = ('img', 'img_path', 'seg_map_path', 'seg', 'ann')


def is_remote(path: str) -> bool:
    return '://' in str(path)


def is_local_file_path(checkpoint: str) -> bool:
    """Whether mmengine reads ``checkpoint`` from the local disk (not a URL or
    one of its model-zoo schemes)."""
    return not (is_remote(checkpoint)
                or str(checkpoint).startswith(('open-mmlab:', 'torchvision:', 'mmcls:')))


def _join(data_root: str | None, path: str) -> str:
    if not data_root or osp.isabs(path) or is_remote(path):
        return path
    return osp.join(data_root, path)


def check_annotation_file(path: str, where: str, type_name: str | None = None) -> None:
    """The file exists, and a JSON one parses (is not truncated or garbage); one
    read by a COCO type (``type_name``: the dataset's or evaluator's) has an
    'images' list. A remote path is left to the file backends."""
    if is_remote(path):
        return
    if not osp.exists(path):
        raise ConfigCheckError(f'{where}: annotation file not found: {path}')
    if not osp.isfile(path):
        raise ConfigCheckError(f'{where}: annotation file is not a file: {path}')
    if not path.endswith('.json'):
        return
    size = osp.getsize(path)
    if size == 0:
        raise ConfigCheckError(f'{where}: annotation file is empty: {path}')
    if size <= MAX_JSON_BYTES_TO_PARSE:
        try:
            with open(path, 'rb') as f:
                content = json.load(f)
        except (ValueError, UnicodeDecodeError) as error:
            raise ConfigCheckError(f'{where}: annotation file is not valid JSON: {path} '
                                   f'({error})') from None
        if not isinstance(content, dict):
            raise ConfigCheckError(f'{where}: annotation file {path} holds a '
                                   f'{type(content).__name__}, expected a JSON object')
        if 'coco' in str(type_name).lower() and not isinstance(content.get('images'), list):
            raise ConfigCheckError(f"{where}: annotation file {path} has no 'images' list; "
                                   'is it a COCO-format annotation file?')
        return
    with open(path, 'rb') as f:
        head = f.read(64).lstrip()
        f.seek(max(0, size - 64))
        tail = f.read().rstrip()
    if not (head.startswith(b'{') and tail.endswith(b'}')):
        raise ConfigCheckError(f'{where}: annotation file is not valid JSON (truncated?): {path}')


def check_dataset_cfg(dataset_cfg: dict, where: str) -> None:
    """Data root, annotation file and image / label folders of one dataset config."""
    backend = (dataset_cfg.get('backend_args') or {}).get('backend', 'local')
    if backend not in ('local', 'disk'):
        return
    data_root = dataset_cfg.get('data_root') or ''
    if data_root and not is_remote(data_root) and not osp.isdir(data_root):
        raise ConfigCheckError(f'{where}: data_root not found: {data_root} '
                               f'(absolute: {osp.abspath(data_root)})')
    if dataset_cfg.get('ann_file'):
        check_annotation_file(_join(data_root, dataset_cfg['ann_file']), where,
                              dataset_cfg.get('type'))
    prefixes = dataset_cfg.get('data_prefix') or {}
    for key in _DATASET_DIR_KEYS:
        folder = prefixes.get(key) if isinstance(prefixes, dict) else None
        if not folder:
            continue
        path = _join(data_root, folder)
        if not is_remote(path) and not osp.isdir(path):
            raise ConfigCheckError(f'{where}: data_prefix.{key} folder not found: {path}')


def check_datasets(cfg, mode: str) -> None:
    """The batch sizes, datasets and evaluator files of the dataloaders a
    ``mode`` ('train'|'test') run reads: a training run validates only with
    both val_cfg and val_dataloader."""
    names = [f'{mode}_dataloader']
    if mode == 'train' and cfg.get('val_cfg') is not None \
            and cfg.get('val_dataloader') is not None:
        names.append('val_dataloader')
    for name in names:
        loader = cfg.get(name)
        if loader is None:
            raise ConfigCheckError(f'the config has no {name}, which a {mode} run needs')
        # torch's DataLoader refuses another only once the Runner builds it.
        size = loader.get('batch_size')
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ConfigCheckError(f'{name}.batch_size must be a whole number >= 1, got {size!r}')
        for dataset_cfg, where in iter_dataset_cfgs(loader.get('dataset'), f'{name}.dataset'):
            check_dataset_cfg(dataset_cfg, where)
        check_evaluator_files(cfg, name.replace('_dataloader', '_evaluator'))


def check_evaluator_files(cfg, name: str) -> None:
    """An evaluator's own annotation file (CocoMetric's ann_file) exists and parses."""
    evaluators = cfg.get(name)
    for i, evaluator in enumerate(evaluators if isinstance(evaluators, list) else [evaluators]):
        ann_file = evaluator.get('ann_file') if isinstance(evaluator, dict) else None
        if ann_file:
            where = f'{name}[{i}]' if isinstance(evaluators, list) else name
            check_annotation_file(ann_file, where, evaluator.get('type'))


def _iter_typed_cfgs(node, path: str = 'model'):
    if isinstance(node, dict):
        if 'type' in node:
            yield node, path
        for key, value in node.items():
            yield from _iter_typed_cfgs(value, f'{path}.{key}')
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            yield from _iter_typed_cfgs(value, f'{path}[{i}]')


def check_mavit_backbones(cfg, check_pretrained: bool) -> None:
    """Every MAViT in the model builds from its settings (a known size, valid
    stages, depths, ...), and its pretrained checkpoint exists, reads and fits
    it. The backbone is built with no data (meta tensors): a moment, and no
    memory, in every process of a data-parallel run."""
    import torch

    from ..models import MAViT
    from ..models.arch import resolve_arch
    for node, path in _iter_typed_cfgs(cfg.get('model')):
        type_name = node.get('type')
        if not (isinstance(type_name, str) and type_name.split('.')[-1] == 'MAViT'):
            continue
        arch = node.get('arch', 'tiny')
        if arch is not None:
            try:
                resolve_arch(arch)
            except ValueError as error:
                raise ConfigCheckError(f'{path}.arch: {error}') from None
        settings = {key: value for key, value in node.items()
                    if key != 'type' and not key.startswith('_')}
        settings.update(init_cfg=None, pretrained=None)
        try:
            with torch.device('meta'):
                backbone = MAViT(**settings)
        except (ValueError, TypeError) as error:
            raise ConfigCheckError(f'{path}: {error}') from None
        init_cfg = node.get('init_cfg')
        checkpoint, prefix = node.get('pretrained'), None
        for entry in init_cfg if isinstance(init_cfg, (list, tuple)) else [init_cfg]:
            if isinstance(entry, dict) and entry.get('type') == 'Pretrained':
                checkpoint, prefix = entry.get('checkpoint'), entry.get('prefix')
        if check_pretrained and checkpoint:
            what = f'{path}.init_cfg.checkpoint (pretrained backbone)'
            check_checkpoint(checkpoint, what,
                             hint=f'set {path}.init_cfg=None to train from scratch, '
                                  'or put the published weights there')
            check_backbone_checkpoint_fits(backbone, checkpoint, prefix, what)


def check_backbone_checkpoint_fits(backbone, checkpoint: str, prefix: str | None,
                                   what: str) -> None:
    """The pretrained checkpoint reads and fits ``backbone`` as MAViT's loader
    will load it (:func:`~mavit_mm.models.checkpoint.fit_backbone`)."""
    from ..models import checkpoint as checkpoints
    if not is_local_file_path(checkpoint):
        return
    try:
        loaded = checkpoints.read_checkpoint(osp.expanduser(checkpoint))
        checkpoints.fit_backbone(
            backbone.state_dict(),
            checkpoints.backbone_state_dict(checkpoints.extract_state_dict(loaded), prefix),
            checkpoint)
    except ValueError as error:     # UnreadableCheckpointError among them
        raise ConfigCheckError(f'{what}: {error}') from None


def check_checkpoint(checkpoint: str, what: str, hint: str = '') -> None:
    if not is_local_file_path(checkpoint):
        return
    checkpoint = osp.expanduser(checkpoint)     # '~/...', as mmengine's loader takes it
    if not osp.exists(checkpoint):
        raise ConfigCheckError(f'{what}: checkpoint not found: {checkpoint}'
                               + (f' ({hint})' if hint else ''))
    if not osp.isfile(checkpoint):
        raise ConfigCheckError(f'{what}: checkpoint is not a file: {checkpoint}')


def resume_checkpoint(cfg) -> str | None:
    """The checkpoint ``resume=True`` reads: ``load_from`` (an explicit file)
    or the work dir's latest, as mmengine finds it (``None``: none yet, the
    run starts afresh)."""
    if cfg.get('load_from'):
        return cfg.load_from
    pointer = osp.join(cfg.work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            return f.read().strip() or None
    return None


def check_resume(cfg) -> str | None:
    """``resume=True`` with ``load_from`` (an explicit file) or the work dir's
    latest; returns the checkpoint it will read (:func:`resume_checkpoint`)."""
    if cfg.get('load_from'):
        check_checkpoint(cfg.load_from, 'resume')
        return cfg.load_from
    # Auto-resume: mmengine reads <work_dir>/last_checkpoint; a stale pointer
    # would otherwise fail only after everything is built.
    latest = resume_checkpoint(cfg)
    if latest and not is_remote(latest) and not osp.isfile(latest):
        pointer = osp.join(cfg.work_dir, 'last_checkpoint')
        raise ConfigCheckError(f'resume: {pointer} points to a checkpoint that does not '
                               f'exist: {latest}')
    return latest


def check_checkpoint_fits(cfg, checkpoint: str, what: str) -> None:
    """A checkpoint that replaces every weight of the config's model (a test,
    a resumed run) holds exactly its tensors where mmengine's loader reads
    them (the policy of ``tools/demo.py`` and the converter:
    :func:`~mavit_mm.models.checkpoint.fit_whole_model`). mmengine alone
    loads what fits, logs the rest and goes on with a part-random model. The
    model is built here, with no data (meta tensors), before the Runner.
    Remote checkpoints are left to mmengine."""
    if not is_local_file_path(checkpoint):
        return
    from ..models.checkpoint import (
        extract_state_dict,
        fit_whole_model,
        mmengine_load_from_tensors,
        read_checkpoint,
    )
    from .model_builder import meta_state_dict

    # The model the checkpoint's keys name: inside --tta's wrapper, as
    # mmengine's own loader unwraps it.
    model_cfg = cfg.model
    while model_cfg.get('module') is not None:
        model_cfg = model_cfg.module
    expected = meta_state_dict(cfg, model_cfg)
    try:
        # Memory-mapped: every process of a data-parallel run reads the shapes
        # of a file that may hold the optimizer too.
        loaded = read_checkpoint(osp.expanduser(checkpoint))
    except UnreadableCheckpointError as error:
        raise ConfigCheckError(f'{what}: {error}') from None
    try:
        # What mmengine's loader takes: 'state_dict' or the top level, 'module.' stripped.
        fit_whole_model(expected, mmengine_load_from_tensors(loaded), source=checkpoint,
                        strip_wrappers=False)
    except ValueError as error:
        hint = ('a checkpoint of another config? an mmdet 2.x / mmseg 0.x one converts with '
                'tools/model_converters/convert_checkpoint.py --config')
        try:      # where the converter and tools/demo.py look too
            fit_whole_model(expected, extract_state_dict(loaded))
            hint = ("its tensors fit the model, but not where mmengine's loader reads them: "
                    "under 'state_dict' or at the top level, with no prefix but 'module.'; "
                    'tools/model_converters/convert_checkpoint.py --config writes them so')
        except ValueError:
            pass
        raise ConfigCheckError(f'{what}: {error} ({hint})') from None


def check_load_from_fits(cfg, checkpoint: str) -> None:
    """``load_from`` reads, and some of its tensors are the model's as
    mmengine will load them: it loads what fits and starts the rest afresh
    (fine-tuning with other heads), so a file that shares no tensor with the
    model would train from scratch without a word (a backbone checkpoint,
    whose keys lack ``backbone.``)."""
    if not is_local_file_path(checkpoint):
        return
    from ..models import checkpoint as checkpoints
    from .model_builder import meta_state_dict
    try:
        state_dict = checkpoints.mmengine_load_from_tensors(
            checkpoints.read_checkpoint(osp.expanduser(checkpoint)))
    except ValueError as error:     # UnreadableCheckpointError among them
        raise ConfigCheckError(f'load_from: {error}') from None
    expected = meta_state_dict(cfg)
    if checkpoints.count_shared(expected, state_dict) == 0:
        hint = ("its tensors are a backbone's: a backbone checkpoint goes in "
                "model.backbone.init_cfg=dict(type='Pretrained', checkpoint=...)"
                if checkpoints.count_shared(expected, state_dict, 'backbone.')
                else 'a checkpoint of another model, or one whose tensors mmengine does not '
                     "find: under 'state_dict' or at the top, names as the model's")
        raise ConfigCheckError(f'load_from: no tensor of {checkpoint} is one of the '
                               f"config's model (same name and shape) ({hint})")


def check_output_folder(path: str, what: str) -> None:
    """A folder the run will write into, made where missing: neither it nor a
    folder above it may be a file, and the nearest one there must be
    writable (mmengine would fail on it after the model and data are built,
    a test's --out only once the whole test has run)."""
    if not path or is_remote(path):
        return
    folder = osp.abspath(path)      # as mmengine takes it: '~' is no home folder there
    while not osp.exists(folder):
        folder = osp.dirname(folder)
    if not osp.isdir(folder):
        raise ConfigCheckError(f'{what}: {folder} is a file, not a folder')
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigCheckError(f'{what}: cannot write into {folder}')


def check_test_outputs(cfg, out: str | None, show_dir: str | None) -> None:
    """``tools/test.py``'s --work-dir, --out and --show-dir can be written."""
    check_output_folder(cfg.work_dir, f'work_dir {cfg.work_dir}')
    if out and cfg.default_scope == 'mmdet':     # a pickle file
        if osp.isdir(out):
            raise ConfigCheckError(f'--out {out}: is a folder; give the pickle file to write')
        check_output_folder(osp.dirname(out) or '.', f'--out {out}')
    elif out:                                    # mmseg: a folder of label maps
        if out.endswith(('.pkl', '.pickle', '.json')):
            raise ConfigCheckError(f'--out {out}: a segmentor writes one label PNG per image '
                                   'into a folder; give the folder')
        check_output_folder(out, f'--out {out}')
    if show_dir and (cfg.default_scope == 'mmseg' or osp.isabs(show_dir)):
        check_output_folder(show_dir, f'--show-dir {show_dir}')   # mmdet's: under <work_dir>/<timestamp>/


def check_for_training(cfg) -> None:
    """Everything ``tools/train.py`` reads and writes, checked before the Runner is built."""
    check_output_folder(cfg.work_dir, f'work_dir {cfg.work_dir}')
    check_mavit_backbones(cfg, check_pretrained=True)
    resumed = None
    if cfg.get('resume'):
        resumed = check_resume(cfg)
    elif cfg.get('load_from'):
        check_checkpoint(cfg.load_from, 'load_from')
    check_datasets(cfg, 'train')
    # Last: they build the model. (load_from may fit in part: fine-tuning
    # with other heads is what it is for.)
    if resumed:
        check_checkpoint_fits(cfg, resumed, 'resume')
    elif cfg.get('load_from'):
        check_load_from_fits(cfg, cfg.load_from)


def check_for_testing(cfg, checkpoint: str) -> None:
    """Everything ``tools/test.py`` reads, checked before the Runner is built
    (what it writes: :func:`check_test_outputs`)."""
    check_checkpoint(checkpoint, 'test checkpoint')
    # The test checkpoint replaces all weights: a missing pretrained file is fine.
    check_mavit_backbones(cfg, check_pretrained=False)
    check_datasets(cfg, 'test')
    check_checkpoint_fits(cfg, checkpoint, 'test checkpoint')     # last: it builds the model

