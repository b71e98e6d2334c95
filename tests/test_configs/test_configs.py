"""The 24 published-recipe configs: they load, keep the published recipe, build
models of the published size, compute a training loss and its gradients, and
predict on CPU.

Parameter targets are the paper's table (reference README), in millions. The
recipes are the published configs' (github.com/qhfan/MALA, detect/configs and
segmentation/configs), where the reference README is silent too.
"""
from __future__ import annotations

import math

import pytest
import torch
from helpers.models import (
    IMG_H,
    IMG_W,
    build_model,
    count_params,
    det_batch,
    load_config,
    needs_downstream,
    seg_batch,
)
from helpers.paths import CONFIG_DIR

from mavit_mm.models import resolve_arch

# One torch thread for the module (tests/conftest.py: small models run faster so).
pytestmark = pytest.mark.usefixtures('one_torch_thread')

SIZES = ('t', 's', 'b', 'l')
ARCH = dict(t='tiny', s='small', b='base', l='large')
# Published sizes (reference README): embed_dims and det/seg drop_path_rate.
EMBED_DIMS = dict(t=[64, 128, 256, 512], s=[64, 128, 320, 512],
                  b=[96, 192, 384, 512], l=[96, 192, 448, 640])
DROP_PATH = dict(t=0.1, s=0.15, b=0.4, l=0.55)

PIPELINES = {
    'mask_rcnn_1x': 'mask_rcnn/mask-rcnn_mavit-{}_fpn_1x_coco.py',
    'mask_rcnn_3x': 'mask_rcnn/mask-rcnn_mavit-{}_fpn_ms-3x_coco.py',
    'retinanet_1x': 'retinanet/retinanet_mavit-{}_fpn_1x_coco.py',
    'cascade_3x': 'cascade_rcnn/cascade-mask-rcnn_mavit-{}_fpn_ms-3x_coco.py',
    'sem_fpn_80k': 'sem_fpn/fpn_mavit-{}_8xb2-80k_ade20k-512x512.py',
    'upernet_160k': 'upernet/upernet_mavit-{}_8xb2-160k_ade20k-512x512.py',
}
CONFIGS = [(pipe, size) for pipe in PIPELINES for size in SIZES]
# Recipes that train another recipe's model (the 3x schedule changes the data,
# the schedule and, for L, the optimizer: not the model,
# test_twin_recipes_train_the_same_model): the model tests build the model
# once, under the recipe it twins, and check this recipe's optimizer on it.
MODEL_TWIN_OF = {'mask_rcnn_3x': 'mask_rcnn_1x'}
MODEL_CONFIGS = [(pipe, size) for pipe, size in CONFIGS if pipe not in MODEL_TWIN_OF]


def config_path(pipe: str, size: str) -> str:
    return PIPELINES[pipe].format(size)


def config_id(param) -> str:
    return config_path(*param).split('/')[-1][:-3]


# Total parameters in M: (target, tolerance).
_MASK_RCNN = dict(t=33, s=44, b=67, l=114)  # the 3x model is the 1x model
PARAMS_M = {
    'mask_rcnn_1x': (_MASK_RCNN, 0.6),
    'mask_rcnn_3x': (_MASK_RCNN, 0.6),
    'retinanet_1x': (dict(t=24, s=34, b=57, l=104), 0.6),
    # No paper number for T (71.32M: the published heads on MAViT-T).
    'cascade_3x': (dict(t=71.3, s=82, b=105, l=152), 0.6),
    'sem_fpn_80k': (dict(t=18, s=28, b=51, l=98), 0.6),
    'upernet_160k': (dict(t=44, s=55, b=77, l=125), 0.6),
}

# The published recipes (reference README; the published configs). amp: the
# loss scale of mixed precision ('dynamic' or static), None for fp32. no_decay:
# the published paramwise_cfg, 'keys' (Swin's custom_keys: parameters named
# '*norm*'), 'keys+norms' (those and norm_decay_mult=0), None (no paramwise_cfg).
_DET = dict(scope='mmdet', batch=2, train_loop='EpochBasedTrainLoop', warmup_end=500,
            warmup_start=0.001, betas=(0.9, 0.999), amp='dynamic', no_decay='keys')
RECIPES = {
    'mask_rcnn_1x': dict(_DET, model='MaskRCNN', lr=4e-4, wd=0.05, max_epochs=12,
                         milestones=[8, 11], multiscale=False, metric=['bbox', 'segm']),
    'mask_rcnn_3x': dict(_DET, model='MaskRCNN', lr=4e-4, wd=0.05, max_epochs=36,
                         milestones=[27, 33], multiscale=True, metric=['bbox', 'segm']),
    'retinanet_1x': dict(_DET, model='RetinaNet', lr=4e-4, wd=1e-4, max_epochs=12,
                         milestones=[8, 11], multiscale=False, metric=['bbox'],
                         no_decay=None, amp=512.),
    'cascade_3x': dict(_DET, model='CascadeRCNN', lr=4e-4, wd=0.05, max_epochs=36,
                       no_decay='keys+norms',
                       milestones=[27, 33], multiscale=True, metric=['bbox', 'segm']),
    'sem_fpn_80k': dict(scope='mmseg', batch=2, train_loop='IterBasedTrainLoop',
                        model='EncoderDecoder', head='FPNHead', lr=1e-4, wd=1e-4,
                        betas=(0.9, 0.999), max_iters=80000, warmup_end=None, poly_power=0.9,
                        eta_min=1e-6, amp=None, no_decay=None),
    'upernet_160k': dict(scope='mmseg', batch=2, train_loop='IterBasedTrainLoop',
                         model='EncoderDecoder', head='UPerHead', lr=6e-5, wd=0.01,
                         betas=(0.9, 0.999), max_iters=160000, warmup_end=1500,
                         poly_power=1.0, eta_min=0.0, amp=512., no_decay='keys'),
}
# The published MAViT-L 3x detectors: 1 image per GPU, half the lr (8 GPUs).
LARGE_3X = {('mask_rcnn_3x', 'l'), ('cascade_3x', 'l')}
SWIN_NO_DECAY_KEYS = {'absolute_pos_embed': dict(decay_mult=0.),
                      'relative_position_bias_table': dict(decay_mult=0.),
                      'norm': dict(decay_mult=0.)}
DETR_SCALES = [(s, 1333) for s in range(480, 801, 32)]


def _transform(pipeline, type_name):
    found = [t for t in pipeline if t['type'] == type_name]
    assert len(found) == 1, f'expected one {type_name} in {[t["type"] for t in pipeline]}'
    return found[0]


# -- files ---------------------------------------------------------------------
def test_all_published_configs_exist():
    expected = {config_path(*c) for c in CONFIGS}
    folders = {path.split('/')[0] for path in PIPELINES.values()}
    present = {str(p.relative_to(CONFIG_DIR)) for folder in folders
               for p in (CONFIG_DIR / folder).glob('*.py')}
    assert present == expected


def _scopes(node):
    """Every ``_scope_`` in a config dict."""
    if isinstance(node, dict):
        if '_scope_' in node:
            yield node['_scope_']
        for value in node.values():
            yield from _scopes(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _scopes(value)


@pytest.mark.parametrize('pipe,size', CONFIGS, ids=[config_id(c) for c in CONFIGS])
def test_package_bases_keep_the_config_scope(pipe, size):
    """The bases come from mmdet (`mmdet::...`) or mmseg, and mmengine marks what
    they define with that package's scope: one package per config, the one of
    its default_scope, so every type resolves where it did with our own bases."""
    cfg = load_config(config_path(pipe, size))
    assert cfg.default_scope == RECIPES[pipe]['scope']
    assert set(_scopes(cfg.to_dict())) == {cfg.default_scope}


# -- recipe --------------------------------------------------------------------
@pytest.mark.parametrize('pipe,size', CONFIGS, ids=[config_id(c) for c in CONFIGS])
def test_config_keeps_published_recipe(pipe, size):
    cfg = load_config(config_path(pipe, size))
    recipe = RECIPES[pipe]
    dims = EMBED_DIMS[size]

    assert cfg.default_scope == recipe['scope']
    assert cfg.custom_imports == dict(imports=['mavit_mm', 'mavit_mm.deploy'],
                                      allow_failed_imports=False)

    # Model: MAViT of the right size, SyncBN, ImageNet weights, neck/head widths.
    assert cfg.model.type == recipe['model']
    backbone = cfg.model.backbone
    assert backbone.type == 'MAViT'
    assert backbone.arch == ARCH[size]
    # One source of truth: the arch preset holds the published det/seg rate.
    assert backbone.get('drop_path_rate') is None
    assert resolve_arch(backbone.arch)['drop_path_rate'] == DROP_PATH[size]
    assert backbone.norm_cfg.type == 'SyncBN'
    assert backbone.init_cfg == dict(type='Pretrained',
                                     checkpoint=f'pretrained/mavit_{size}_in1k.pth')
    out_indices = list(backbone.out_indices)
    if pipe == 'upernet_160k':
        assert out_indices == [0, 1, 2, 3]
        assert cfg.model.decode_head.in_channels == dims
        assert cfg.model.decode_head.channels == 512
        aux = cfg.model.auxiliary_head
        assert aux.type == 'FCNHead' and aux.in_index == 2 and aux.in_channels == dims[2]
        assert aux.loss_decode.loss_weight == 0.4
    else:
        assert cfg.model.neck.type == 'FPN'
        assert cfg.model.neck.in_channels == [dims[i] for i in out_indices]
    assert out_indices == [0, 1, 2, 3]
    if pipe == 'retinanet_1x':
        # As published: stage 1's output unused (its norm keeps the published keys).
        assert cfg.model.neck.start_level == 1
        assert cfg.model.neck.add_extra_convs == 'on_input'
        assert cfg.model.neck.num_outs == 5
    assert cfg.get('find_unused_parameters', False) == (pipe == 'retinanet_1x')
    if pipe == 'sem_fpn_80k':
        assert cfg.model.decode_head.type == 'FPNHead'
        assert cfg.model.decode_head.channels == 128
        assert cfg.model.neck.out_channels == 256
    if pipe == 'cascade_3x':
        heads = cfg.model.roi_head.bbox_head
        assert len(heads) == 3
        for head in heads:
            assert head.type == 'ConvFCBBoxHead'
            assert (head.num_shared_convs, head.num_shared_fcs) == (4, 1)
            assert head.norm_cfg is not None
            assert head.loss_bbox.type == 'GIoULoss' and head.reg_decoded_bbox
            assert head.reg_class_agnostic is False

    # Optimizer: AdamW, lr / wd / betas, the published no-decay rule, mixed
    # precision where published (mmengine's AmpOptimWrapper with a dynamic loss
    # scale wherever it can run, through engine.amp's AmpWhereAvailableOptimWrapper).
    large_3x = (pipe, size) in LARGE_3X
    optim = cfg.optim_wrapper
    if recipe['amp'] is not None:
        assert optim.type == 'AmpWhereAvailableOptimWrapper'
        assert optim.loss_scale == recipe['amp']
    else:
        assert optim.type == 'OptimWrapper'
    assert optim.optimizer.type == 'AdamW'
    assert math.isclose(optim.optimizer.lr, recipe['lr'] / 2 if large_3x else recipe['lr'])
    assert math.isclose(optim.optimizer.weight_decay, recipe['wd'])
    assert tuple(optim.optimizer.get('betas', (0.9, 0.999))) == recipe['betas']
    paramwise = optim.get('paramwise_cfg') or {}
    if recipe['no_decay'] is None:
        assert paramwise == {}
    else:
        assert paramwise['custom_keys'] == SWIN_NO_DECAY_KEYS
        assert paramwise.get('norm_decay_mult') == (
            0 if recipe['no_decay'] == 'keys+norms' else None)
    assert cfg.auto_scale_lr.base_batch_size == (8 if large_3x else 16)

    # Schedule.
    assert cfg.train_cfg.type == recipe['train_loop']
    schedulers = {s['type']: s for s in cfg.param_scheduler}
    if recipe['warmup_end'] is not None:
        warmup = schedulers['LinearLR']
        assert not warmup.by_epoch and warmup.begin == 0
        assert warmup.end == recipe['warmup_end']
    else:
        assert 'LinearLR' not in schedulers
    if recipe['scope'] == 'mmdet':
        assert cfg.train_cfg.max_epochs == recipe['max_epochs']
        assert math.isclose(schedulers['LinearLR'].start_factor, recipe['warmup_start'])
        step = schedulers['MultiStepLR']
        assert step.by_epoch and step.milestones == recipe['milestones']
        assert step.gamma == 0.1 and step.end == recipe['max_epochs']
    else:
        assert cfg.train_cfg.max_iters == recipe['max_iters']
        poly = schedulers['PolyLR']
        assert poly.power == recipe['poly_power'] and poly.eta_min == recipe['eta_min']
        assert poly.end == recipe['max_iters'] and not poly.by_epoch
        assert poly.begin == (recipe['warmup_end'] or 0)

    # Data: 2 images per GPU (MAViT-L 3x: 1), published augmentation and test resolution.
    assert cfg.train_dataloader.batch_size == (1 if large_3x else recipe['batch'])
    train_pipeline = cfg.train_dataloader.dataset.pipeline
    test_pipeline = cfg.test_dataloader.dataset.pipeline
    if recipe['scope'] == 'mmdet':
        assert cfg.train_dataloader.dataset.data_root == 'data/coco/'
        resize = _transform(test_pipeline, 'Resize')
        assert tuple(resize.scale) == (1333, 800) and resize.keep_ratio
        if recipe['multiscale']:
            choice = _transform(train_pipeline, 'RandomChoice')
            plain, crop = choice.transforms
            assert [tuple(s) for s in plain[0].scales] == DETR_SCALES
            assert [t['type'] for t in crop] == ['RandomChoiceResize', 'RandomCrop',
                                                 'RandomChoiceResize']
            assert [tuple(s) for s in crop[0].scales] == [(400, 1333), (500, 1333),
                                                          (600, 1333)]
            assert crop[1].crop_type == 'absolute_range'
            assert tuple(crop[1].crop_size) == (384, 600)
            assert [tuple(s) for s in crop[2].scales] == DETR_SCALES
        else:
            resize = _transform(train_pipeline, 'Resize')
            assert tuple(resize.scale) == (1333, 800) and resize.keep_ratio
        metric = cfg.val_evaluator.metric
        assert cfg.val_evaluator.type == 'CocoMetric'
        assert ([metric] if isinstance(metric, str) else list(metric)) == recipe['metric']
        assert cfg.test_evaluator == cfg.val_evaluator
    else:
        assert cfg.train_dataloader.dataset.data_root.rstrip('/') == \
            'data/ade/ADEChallengeData2016'
        assert cfg.model.decode_head.num_classes == 150
        random_resize = _transform(train_pipeline, 'RandomResize')
        assert tuple(random_resize.scale) == (2048, 512)
        assert tuple(random_resize.ratio_range) == (0.5, 2.0)
        assert tuple(_transform(train_pipeline, 'RandomCrop').crop_size) == (512, 512)
        resize = _transform(test_pipeline, 'Resize')
        assert tuple(resize.scale) == (2048, 512) and resize.keep_ratio
        assert cfg.val_evaluator.type == 'IoUMetric'
        assert list(cfg.val_evaluator.iou_metrics) == ['mIoU']
        assert cfg.model.test_cfg.mode == 'whole'


def _synthetic_loaded_sample(scope: str) -> dict:
    """A 480x640 sample as the Load* transforms would leave it."""
    import numpy as np

    rng = np.random.RandomState(0)
    img = rng.randint(0, 256, size=(480, 640, 3), dtype=np.uint8)
    sample = dict(img=img, img_shape=(480, 640), ori_shape=(480, 640), img_id=0,
                  img_path='<synthetic>.jpg')
    if scope == 'mmseg':
        seg = np.zeros((480, 640), dtype=np.uint8)
        seg[100:300, 200:500] = 7
        seg[:20] = 255
        sample.update(gt_seg_map=seg, seg_fields=['gt_seg_map'], reduce_zero_label=True)
        return sample
    from mmdet.structures.bbox import HorizontalBoxes
    from mmdet.structures.mask import BitmapMasks
    boxes = np.array([[10, 10, 300, 200], [200, 100, 600, 400]], dtype=np.float32)
    masks = np.zeros((2, 480, 640), dtype=np.uint8)
    for mask, (x1, y1, x2, y2) in zip(masks, boxes.astype(int)):
        mask[y1:y2, x1:x2] = 1
    sample.update(gt_bboxes=HorizontalBoxes(boxes), gt_bboxes_labels=np.array([1, 2]),
                  gt_ignore_flags=np.array([False, False]),
                  gt_masks=BitmapMasks(masks, 480, 640))
    return sample


@needs_downstream
@pytest.mark.parametrize('pipe', list(PIPELINES))
def test_data_pipelines_run(pipe):
    """The train / test transforms (after loading) build and run: random
    multi-scale / crop augmentation and the published test resolution."""
    from mmengine.dataset import Compose

    from mavit_mm.tooling.model_builder import scope_registry

    cfg = load_config(config_path(pipe, 't'))
    scope_registry(cfg)

    def after_loading(pipeline):
        return Compose([t for t in pipeline if not t['type'].startswith('Load')])

    train = after_loading(cfg.train_dataloader.dataset.pipeline)
    test = after_loading(cfg.test_dataloader.dataset.pipeline)
    for _ in range(4):
        out = train(_synthetic_loaded_sample(cfg.default_scope))
        height, width = out['inputs'].shape[1:]
        if cfg.default_scope == 'mmseg':
            # Crops of at most 512x512 (the data preprocessor pads to 512x512).
            assert height <= 512 and width <= 512
            assert out['data_samples'].gt_sem_seg.shape == (height, width)
        else:
            assert min(height, width) <= 800 and max(height, width) <= 1333
            assert len(out['data_samples'].gt_instances) >= 1
    out = test(_synthetic_loaded_sample(cfg.default_scope))
    # 480x640 kept in ratio: COCO shorter side 800 (<= 1333); ADE20K 512 x 683.
    expected = (512, 683) if cfg.default_scope == 'mmseg' else (800, 1067)
    assert tuple(out['inputs'].shape[1:]) == expected


# -- models --------------------------------------------------------------------
@pytest.mark.parametrize('twin', sorted(MODEL_TWIN_OF))
@pytest.mark.parametrize('size', SIZES)
def test_twin_recipes_train_the_same_model(twin, size):
    model = load_config(config_path(twin, size)).model
    assert model == load_config(config_path(MODEL_TWIN_OF[twin], size)).model


@pytest.fixture(scope='module', params=MODEL_CONFIGS, ids=config_id)
def built(request):
    """(pipeline, size, config, model), built once per model config (not again
    for a MODEL_TWIN_OF recipe); the tests below are grouped per config so only
    one model is alive at a time."""
    pipe, size = request.param
    cfg = load_config(config_path(pipe, size))
    torch.manual_seed(0)
    model = build_model(cfg, cpu_test=True)
    yield pipe, size, cfg, model
    del model


def _batch(cfg, pipe):
    if cfg.default_scope == 'mmseg':
        return seg_batch()
    return det_batch(with_mask=pipe != 'retinanet_1x')


@needs_downstream
def test_param_count(built):
    pipe, size, _, model = built
    targets, tol = PARAMS_M[pipe]
    millions = count_params(model) / 1e6
    assert abs(millions - targets[size]) <= tol, (
        f'{pipe} {size}: {millions:.2f}M parameters, expected {targets[size]} +- {tol}M')


@needs_downstream
def test_meta_state_dict_is_the_models_without_data(built):
    """What the pre-flight check and the converter fit checkpoints to, built
    on the meta device (no constructor of ours may read a tensor's values)."""
    from mavit_mm.tooling.model_builder import meta_state_dict

    _, _, cfg, model = built
    expected = model.state_dict()
    meta = meta_state_dict(cfg)
    assert list(meta) == list(expected)
    assert all(t.is_meta for t in meta.values())
    assert [(t.shape, t.dtype) for t in meta.values()] == \
        [(t.shape, t.dtype) for t in expected.values()]


@needs_downstream
def test_meta_state_dict_builds_swin_on_the_cpu():
    """mmdet's Swin reads a tensor's values in its constructor (``.item()``),
    which the meta device cannot give: the model is built on the CPU instead."""
    from mavit_mm.tooling.model_builder import meta_state_dict

    state = meta_state_dict(load_config(str(CONFIG_DIR / 'baselines/mask-rcnn_swin-t_fpn_1x_coco.py')))
    assert 'backbone.stages.0.blocks.0.attn.w_msa.relative_position_bias_table' in state
    assert not any(t.is_meta for t in state.values())


@needs_downstream
def test_loss_and_backward(built):
    pipe, _, cfg, model = built
    torch.manual_seed(0)
    model.train()
    model.zero_grad(set_to_none=True)
    data = model.data_preprocessor(_batch(cfg, pipe), training=True)
    losses = model(**data, mode='loss')
    loss, log_vars = model.parse_losses(losses)
    assert any('loss' in k for k in log_vars)
    for key, value in log_vars.items():
        assert torch.isfinite(torch.as_tensor(value).detach()).all(), f'{key} = {value}'
    assert torch.isfinite(loss) and loss.item() > 0
    loss.backward()
    no_grad = [n for n, p in model.backbone.named_parameters()
               if p.requires_grad and p.grad is None]
    # RetinaNet's FPN starts at stage 2, as published: stage 1's output norm
    # alone gets no gradient (what the config's find_unused_parameters is for).
    unused = ['extra_norms.0.norm.weight', 'extra_norms.0.norm.bias']
    assert no_grad == (unused if pipe == 'retinanet_1x' else []), (
        f'backbone parameters without gradient: {no_grad[:5]}')
    grads = [p.grad for p in model.backbone.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum().item() for g in grads) > 0
    model.zero_grad(set_to_none=True)


@needs_downstream
def test_predict(built):
    pipe, _, cfg, model = built
    model.eval()
    with torch.no_grad():
        data = model.data_preprocessor(_batch(cfg, pipe), training=False)
        results = model(**data, mode='predict')
    assert len(results) == 2
    if cfg.default_scope == 'mmseg':
        from mmseg.structures import SegDataSample
        for result in results:
            assert isinstance(result, SegDataSample)
            assert result.pred_sem_seg.data.shape == (1, IMG_H, IMG_W)
            assert result.seg_logits.data.shape == (150, IMG_H, IMG_W)
            labels = result.pred_sem_seg.data
            assert labels.min() >= 0 and labels.max() < 150
        return
    from mmdet.structures import DetDataSample
    for result in results:
        assert isinstance(result, DetDataSample)
        pred = result.pred_instances
        num = len(pred)
        assert 0 < num <= 20  # score_thr 0: an untrained model still detects
        assert pred.bboxes.shape == (num, 4) and torch.isfinite(pred.bboxes).all()
        assert pred.scores.shape == (num,) and pred.labels.shape == (num,)
        assert pred.labels.min() >= 0 and pred.labels.max() < 80
        if pipe == 'retinanet_1x':
            assert 'masks' not in pred
        else:
            assert tuple(pred.masks.shape) == (num, IMG_H, IMG_W)


@needs_downstream
def test_weight_decay_follows_the_published_rule(built):
    """Which parameters the config's optimizer decays, as mmengine builds it
    from the config's own wrapper (an fp32 OptimWrapper on a CPU, an
    AmpOptimWrapper on a GPU): the published configs' rule (RECIPES' no_decay)."""
    pipe, size, cfg, model = built
    _check_weight_decay(pipe, cfg, model)
    for twin in (twin for twin, of in MODEL_TWIN_OF.items() if of == pipe):
        _check_weight_decay(twin, load_config(config_path(twin, size)), model)


def _check_weight_decay(pipe, cfg, model):
    from mmengine.optim import build_optim_wrapper
    wrapper = build_optim_wrapper(model, cfg.optim_wrapper.copy())
    decay = {id(p): group['weight_decay'] for group in wrapper.optimizer.param_groups
             for p in group['params']}
    wd = cfg.optim_wrapper.optimizer.weight_decay
    rule = RECIPES[pipe]['no_decay']

    def decay_of(module):
        return {decay[id(p)] for p in module.parameters(recurse=False)}

    backbone = model.backbone
    # MAViT's LayerNorms and downsampling BatchNorms are named '*norm*'.
    for norm in (backbone.layers[0].blocks[0].norm1.norm, backbone.layers[0].downsample.norm,
                 backbone.get_submodule('extra_norms.3.norm')):
        assert decay_of(norm) == ({wd} if rule is None else {0})
    # The stem's BatchNorms are not: only norm_decay_mult=0 exempts them.
    assert decay_of(backbone.patch_embed.proj[1]) == ({0} if rule == 'keys+norms' else {wd})
    assert decay_of(backbone.patch_embed.proj[0]) == {wd}
    assert decay_of(backbone.layers[0].blocks[0].attn.qkvo) == {wd}
    if pipe == 'upernet_160k':  # the heads' BatchNorms (`bn`) too
        assert decay_of(model.decode_head.bottleneck.bn) == {wd}
    if pipe == 'cascade_3x':
        assert decay_of(model.roi_head.bbox_head[0].shared_convs[0].bn) == {0}
