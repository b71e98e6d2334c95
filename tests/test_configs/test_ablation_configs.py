"""The ablation configs (configs/ablations/): one per attention
variant and kernel function, for MAViT-T Semantic FPN 80k and Mask R-CNN 1x.
Each is a thin child of the published config that changes the backbone's
attention settings and nothing else; every one builds, keeps the published
backbone keys (InLine's residual aside) and is listed in docs/attention.md."""
from __future__ import annotations

import functools

import pytest
import torch
from helpers.models import build_model, det_batch, load_config, needs_downstream, seg_batch
from helpers.paths import CONFIG_DIR, REPO_ROOT

# One torch thread for the module (tests/conftest.py: small models run faster so).
pytestmark = pytest.mark.usefixtures('one_torch_thread')

ABLATION_DIR = CONFIG_DIR / 'ablations'
PARENTS = {
    'fpn': 'sem_fpn/fpn_mavit-t_8xb2-80k_ade20k-512x512.py',
    'mask-rcnn': 'mask_rcnn/mask-rcnn_mavit-t_fpn_1x_coco.py',
}
NAMES = {
    'fpn': 'fpn_mavit-t_{}_8xb2-80k_ade20k-512x512.py',
    'mask-rcnn': 'mask-rcnn_mavit-t_{}_fpn_1x_coco.py',
}
PUBLISHED = ('mala', 'mala', 'softmax', 'softmax')


def stages_1_2(attn_type):
    return (attn_type, attn_type, 'softmax', 'softmax')


# slug -> the backbone settings it must have (the rest is the published model's).
VARIANTS = {
    'attn-mala': dict(attn_types=PUBLISHED, kernel_function='elu'),
    'attn-softmax': dict(attn_types=stages_1_2('softmax')),
    'attn-softmax-qnorm': dict(attn_types=stages_1_2('softmax_qnorm')),
    'attn-linear': dict(attn_types=stages_1_2('linear')),
    'attn-inline': dict(attn_types=stages_1_2('inline')),
    'attn-inline-res': dict(attn_types=stages_1_2('inline'), inline_residual=True),
    'attn-mala-no-beta': dict(attn_types=stages_1_2('mala_no_beta')),
    'attn-mala-no-gamma': dict(attn_types=stages_1_2('mala_no_gamma')),
    'kernel-relu': dict(kernel_function='relu'),
    'kernel-exp': dict(kernel_function='exp'),
}
ATTENTION_KEYS = ('attn_types', 'kernel_function', 'inline_residual')
ABLATIONS = [(pipe, slug) for pipe in PARENTS for slug in VARIANTS]


def ablation_path(pipe: str, slug: str) -> str:
    return 'ablations/' + NAMES[pipe].format(slug)


def ablation_id(param) -> str:
    return '{}-{}'.format(*param)


def test_one_config_per_variant_and_pipeline():
    present = sorted(p.name for p in ABLATION_DIR.glob('*.py'))
    assert present == sorted(NAMES[pipe].format(slug) for pipe, slug in ABLATIONS)


@pytest.mark.parametrize('ablation', ABLATIONS, ids=ablation_id)
def test_ablation_is_a_thin_child_changing_only_the_attention(ablation):
    pipe, slug = ablation
    text = (CONFIG_DIR / ablation_path(pipe, slug)).read_text()
    assert f"_base_ = '../{PARENTS[pipe]}'" in text
    child = load_config(ablation_path(pipe, slug)).to_dict()
    parent = load_config(PARENTS[pipe]).to_dict()
    backbone = child['model']['backbone']
    expected = VARIANTS[slug]
    for key in ATTENTION_KEYS:
        if key in expected:
            value = backbone.pop(key)
            assert (tuple(value) if key == 'attn_types' else value) == expected[key], key
        else:
            assert key not in backbone, key
    assert child == parent


@functools.cache
def parent_backbone_keys(pipe: str):
    torch.manual_seed(0)
    model = build_model(load_config(PARENTS[pipe]))
    return [(k, tuple(v.shape)) for k, v in model.backbone.state_dict().items()]


@needs_downstream
@pytest.mark.parametrize('ablation', ABLATIONS, ids=ablation_id)
def test_ablation_builds_the_variant_with_the_published_keys(ablation):
    pipe, slug = ablation
    expected = VARIANTS[slug]
    model = build_model(load_config(ablation_path(pipe, slug)))
    backbone = model.backbone
    attn_types = expected.get('attn_types', PUBLISHED)
    assert [b.attn.attn_type for stage in backbone.layers for b in stage.blocks] == \
        [t for t, depth in zip(attn_types, backbone.depths) for _ in range(depth)]
    assert backbone.options.kernel_function == expected.get('kernel_function', 'elu')
    keys = [(k, tuple(v.shape)) for k, v in backbone.state_dict().items()]
    residual = [k for k, _ in keys if '.attn.residual.' in k]
    if expected.get('inline_residual'):
        # Every block of stages 1-2 (2 + 2 in MAViT-T): 2 convs, weight and bias.
        assert len(residual) == 4 * 4
        assert {k.split('.blocks.')[0] for k in residual} == {'layers.0', 'layers.1'}
    else:
        assert residual == []
    assert [k for k in keys if k[0] not in residual] == parent_backbone_keys(pipe)


@needs_downstream
@pytest.mark.parametrize('pipe', list(PARENTS))
def test_inline_residual_ablation_has_a_loss_and_gradients(pipe):
    """The one ablation with new parameters: loss and backward through the
    whole model, every backbone parameter (the residual's too) gets a gradient."""
    cfg = load_config(ablation_path(pipe, 'attn-inline-res'))
    torch.manual_seed(0)
    model = build_model(cfg, cpu_test=True)
    model.train()
    batch = seg_batch() if cfg.default_scope == 'mmseg' else det_batch(with_mask=True)
    data = model.data_preprocessor(batch, training=True)
    loss, _ = model.parse_losses(model(**data, mode='loss'))
    assert torch.isfinite(loss)
    loss.backward()
    no_grad = [n for n, p in model.backbone.named_parameters() if p.grad is None]
    assert not no_grad, no_grad[:5]
    residual = model.backbone.layers[0].blocks[0].attn.residual[2].weight.grad
    assert torch.isfinite(residual).all() and residual.abs().sum() > 0


def test_docs_list_every_ablation_config():
    page = (REPO_ROOT / 'docs' / 'attention.md').read_text()
    missing = [ablation_path(*a) for a in ABLATIONS
               if f'configs/{ablation_path(*a)}' not in page]
    assert not missing, missing
