"""The MAViT backbone against the published model: keys, shapes, numerics,
mmdet backbone conventions and input validation."""
import json
import re
import subprocess
import sys

import pytest
import torch
from helpers.paths import REPO_ROOT
from torch import nn

import mavit_mm
from mavit_mm.models import MAViT, layers
from mavit_mm.models import mavit as mavit_module
from mavit_mm.ops import rope2d

SIZES = ['t', 's', 'b', 'l']


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).norm() / expected.norm()).item()


def reference_shapes(reference_dir, size):
    return json.loads((reference_dir / f'mavit_{size}_state_dict_shapes.json').read_text())


@pytest.fixture(scope='module')
def parity_model(parity_data):
    model = MAViT(arch=None, **parity_data['config']).double().eval()
    model.load_state_dict(parity_data['state_dict'], strict=True)
    return model


# -- the published contract ----------------------------------------------------

@pytest.mark.parametrize('size', SIZES)
def test_state_dict_matches_published_keys_and_shapes(reference_dir, size):
    reference = reference_shapes(reference_dir, size)
    model = MAViT(arch=size)
    ours = [(key, list(value.shape)) for key, value in model.state_dict().items()]
    assert ours == list(reference['state_dict'].items())
    assert sum(p.numel() for p in model.parameters()) == reference['num_params']


@pytest.mark.parametrize('size', SIZES)
def test_published_state_dict_loads_strictly(reference_dir, size):
    reference = reference_shapes(reference_dir, size)
    generator = torch.Generator().manual_seed(0)
    published = {key: torch.randn(shape, generator=generator, dtype=torch.float64).float()
                 if shape else torch.tensor(7)
                 for key, shape in reference['state_dict'].items()}
    model = MAViT(arch=size)
    model.load_state_dict(published, strict=True)
    for key, value in model.state_dict().items():
        assert torch.equal(value, published[key].to(value.dtype)), key


@pytest.mark.parametrize('size', SIZES)
def test_preset_matches_published_config(reference_dir, size):
    config = reference_shapes(reference_dir, size)['config']
    model = MAViT(arch=size)
    assert model.embed_dims == config['embed_dims']
    assert model.depths == config['depths']
    assert model.num_heads == config['num_heads']
    assert model.mlp_ratios == config['mlp_ratios']
    assert model.layer_init_values == config['layer_init_values']
    assert model.drop_path_rate == pytest.approx(config['drop_path_rate'])
    gammas = [block.gamma_1 for stage in model.layers for block in stage.blocks]
    expected = [v for v, depth in zip(config['layer_init_values'], config['depths'])
                for _ in range(depth)]
    assert [g.flatten()[0].item() for g in gammas] == pytest.approx(expected)


def test_stage_outputs_match_published(parity_model, parity_data):
    with torch.no_grad():
        outputs = parity_model(parity_data['input'])
    assert len(outputs) == len(parity_data['outputs']) == 4
    for ours, published in zip(outputs, parity_data['outputs']):
        assert ours.shape == published.shape
        assert relative_error(ours, published) <= 1e-8


def test_attention_module_matches_published(parity_model, parity_data):
    record = parity_data['attention']
    assert record['module'] == 'layers.0.blocks.0.attn'
    attn = parity_model.get_submodule(record['module'])
    x = record['input']
    with torch.no_grad():
        out = attn(x, parity_model.layers[0].RoPE(x.shape[2], x.shape[3]))
    assert relative_error(out, record['output']) <= 1e-8


def test_arch_aliases_and_explicit_overrides():
    assert MAViT('tiny').embed_dims == MAViT('T').embed_dims == [64, 128, 256, 512]
    model = MAViT('small', depths=[1, 1, 1, 1], drop_path_rate=0.0)
    assert model.embed_dims == [64, 128, 320, 512] and model.depths == [1, 1, 1, 1]
    assert model.drop_path_rate == 0.0
    assert MAViT('t', projection=1024).embed_dims == [64, 128, 256, 512]


# -- behaviour -------------------------------------------------------------------

def conv_out(size: int) -> int:
    """Spatial size after a 3x3, stride-2, padding-1 conv."""
    return (size - 1) // 2 + 1


@pytest.mark.parametrize('height,width', [(97, 131), (64, 64), (33, 50)])
def test_any_input_size(height, width):
    model = MAViT('t', depths=[1, 1, 1, 1]).eval()
    with torch.no_grad():
        outputs = model(torch.randn(2, 3, height, width))
    expected_h, expected_w = conv_out(conv_out(height)), conv_out(conv_out(width))
    for out, dim in zip(outputs, model.embed_dims):
        assert out.shape == (2, dim, expected_h, expected_w)
        assert torch.isfinite(out).all()
        expected_h, expected_w = conv_out(expected_h), conv_out(expected_w)


def test_outputs_are_contiguous_nchw_for_mmcv_roi_align():
    """mmcv's RoIAlign reads raw memory as NCHW and ignores strides. An FPN
    lateral 1x1 conv keeps its input's memory format, so a channels_last
    backbone output (a permuted LayerNorm view) gave Mask R-CNN's RoI head
    scrambled features while the conv-only RPN still learned: every output
    is contiguous NCHW."""
    torch.manual_seed(0)
    model = MAViT('t', depths=[1, 1, 1, 1]).eval()
    with torch.no_grad():
        outputs = model(torch.randn(2, 3, 64, 96))
        for level, out in enumerate(outputs):
            assert out.is_contiguous(), f'output {level} is not contiguous NCHW: {out.stride()}'


def test_out_indices_subset_has_no_unused_parameters():
    model = MAViT('t', depths=[1, 1, 1, 1], out_indices=(1, 2, 3))
    assert sorted(model.extra_norms) == ['1', '2', '3']
    outputs = model(torch.randn(1, 3, 64, 64))
    assert [o.shape[1] for o in outputs] == [128, 256, 512]
    sum(o.sum() for o in outputs).backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert unused == []


def test_stages_after_the_last_returned_one_do_not_run_and_take_no_gradient():
    """Their weights stay (published checkpoints load strictly) but no output
    depends on them: no compute, and under DDP no parameter without a
    gradient."""
    torch.manual_seed(0)
    full = MAViT('t', depths=[1, 1, 1, 1], drop_path_rate=0.0).eval()
    early = MAViT('t', depths=[1, 1, 1, 1], drop_path_rate=0.0, out_indices=(0, 2)).eval()
    assert early.state_dict().keys() - full.state_dict().keys() == set()
    early.load_state_dict({k: v for k, v in full.state_dict().items() if k in early.state_dict()})
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        expected = full(x)
    ran = []
    for module in (early.layers[2].downsample, early.layers[3]):
        module.register_forward_hook(lambda *args: ran.append(args[0]))
    outputs = early(x)                  # eval mode (the batch norms' running statistics)
    assert ran == []
    for ours, reference in zip(outputs, (expected[0], expected[2])):
        assert torch.allclose(ours, reference, atol=1e-5)
    sum(out.sum() for out in outputs).backward()
    idle = [name for name, p in early.named_parameters() if not p.requires_grad]
    assert idle == [name for name, _ in early.named_parameters()
                    if name.startswith(('layers.2.downsample.', 'layers.3.'))]
    assert all(p.grad is not None for p in early.parameters() if p.requires_grad)


def test_frozen_stages_and_norm_eval():
    model = MAViT('t', depths=[1, 1, 1, 1], frozen_stages=2, norm_eval=True)
    model.train()
    frozen = [model.patch_embed, model.layers[0], model.layers[1],
              model.extra_norms['0'], model.extra_norms['1']]
    for module in frozen:
        assert not module.training
        assert all(not p.requires_grad for p in module.parameters())
    assert all(p.requires_grad for p in model.layers[2].parameters())
    assert model.layers[2].training
    batch_norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert batch_norms and all(not bn.training for bn in batch_norms)


def test_with_cp_gives_same_outputs_and_gradients():
    torch.manual_seed(0)
    plain = MAViT('t', depths=[1, 1, 1, 1], drop_path_rate=0.0, norm_eval=True).double()
    checkpointed = MAViT('t', depths=[1, 1, 1, 1], drop_path_rate=0.0, norm_eval=True,
                         with_cp=True).double()
    checkpointed.load_state_dict(plain.state_dict())
    x = torch.randn(1, 3, 48, 64, dtype=torch.float64)
    grads = []
    for model in (plain, checkpointed):
        model.train()
        model.zero_grad()
        inp = x.clone().requires_grad_()
        loss = sum((o ** 2).mean() for o in model(inp))
        loss.backward()
        grads.append((loss.detach(), inp.grad, model.layers[0].blocks[0].attn.qkvo.weight.grad))
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_rope_tables_are_built_once_per_stage_and_size(monkeypatch):
    builds = []
    original = rope2d._angles_theta

    def counting_theta(angle, height, width):
        builds.append((height, width))
        return original(angle, height, width)

    monkeypatch.setattr(rope2d, '_angles_theta', counting_theta)
    model = MAViT('t', depths=[2, 2, 2, 2], mala_impl='torch').eval()
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 96))
        assert builds == [(16, 24), (8, 12), (4, 6), (2, 3)]
        model(torch.randn(1, 3, 64, 96))          # same sizes: the cached tables
        assert len(builds) == 4
        model(torch.randn(1, 3, 32, 32))          # a new size: built once more per stage
        assert builds[4:] == [(8, 8), (4, 4), (2, 2), (1, 1)]
        model.load_state_dict(model.state_dict())  # a load may change the angles
        model(torch.randn(1, 3, 64, 96))
        assert builds[8:] == [(16, 24), (8, 12), (4, 6), (2, 3)]


def _small_model(seed=0) -> MAViT:
    torch.manual_seed(seed)
    return MAViT('t', depths=[1, 1, 1, 1], drop_path_rate=0.0, mala_impl='torch').eval()


def _perturbed(state: dict, seed: int) -> dict:
    generator = torch.Generator().manual_seed(seed)
    return {key: value + 0.05 * torch.randn(value.shape, generator=generator)
            if value.is_floating_point() and key.endswith('weight') else value
            for key, value in state.items()}


@pytest.mark.parametrize('autocast', [False, True])
def test_eval_forward_follows_every_weight_change(monkeypatch, autocast):
    """Folded depthwise kernels (and, where the norm kernel needs them, half
    copies of the norm weights) are kept while no gradient flows: a load, an
    optimizer step, an in-place edit and a move must all reach the next forward.
    The CUDA rule (norm weights cast to the input's dtype) is forced on the CPU."""
    monkeypatch.setattr(layers, '_MIXED_LAYER_NORM_DEVICES', ())
    x = torch.randn(1, 3, 64, 64)

    def run(model):
        with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
            return model(x)

    def same_as_fresh(model):
        fresh = _small_model()
        fresh.load_state_dict(model.state_dict())
        for ours, expected in zip(run(model), run(fresh)):
            assert torch.equal(ours, expected)

    model = _small_model()
    run(model)                                             # fills the caches
    model.load_state_dict(_perturbed(model.state_dict(), 1))
    same_as_fresh(model)
    model.train()
    loss = sum(out.square().mean() for out in model(x))
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    model.eval()
    same_as_fresh(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, layers.DepthwiseResidualConv):
                module.weight.mul_(1.5)
            if isinstance(module, nn.LayerNorm):
                module.weight.add_(0.25)
    same_as_fresh(model)
    # A move: the next forward runs in the new dtype (a kept fp32 kernel
    # would meet float64 maps), then back, each against a fresh model.
    model.double()
    fresh = _small_model().double()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        for ours, expected in zip(model(x.double()), fresh(x.double())):
            assert ours.dtype == torch.float64 and torch.equal(ours, expected)
    model.float()
    same_as_fresh(model)


def test_inference_mode_built_or_only_run():
    """Caches keyed on version counters step aside for inference tensors (a
    model built inside ``torch.inference_mode``, which keep none): same outputs
    as under ``no_grad``, call after call."""
    x = torch.randn(1, 3, 64, 64)
    with torch.inference_mode():
        built_inside = _small_model()
        first, second = built_inside(x), built_inside(x)
    model = _small_model()
    with torch.no_grad():
        expected = model(x)
    with torch.inference_mode():
        run_inside = [model(x) for _ in range(2)]
    for outputs in (first, second, *run_inside):
        for ours, reference in zip(outputs, expected):
            assert torch.equal(ours, reference)


@pytest.mark.parametrize('autocast', [False, True], ids=['fp32', 'autocast-bf16'])
def test_a_forward_in_inference_mode_keeps_nothing_a_later_backward_cannot_use(autocast):
    """What a forward under ``torch.inference_mode`` keeps for later calls (the
    rotary tables, folded kernels, half weights) serves the calls that
    record gradients after it: a training step, a frozen model asked for its
    input's gradient (autograd cannot save inference tensors)."""
    x = torch.randn(1, 3, 64, 64)

    def backward(model, frozen):
        if not frozen:
            model.train()             # (which also clears the folded kernels and half weights)
        image = x.clone().requires_grad_(frozen)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
            sum(out.float().square().mean() for out in model(image)).backward()
        return [image.grad] if frozen else [p.grad for p in model.parameters()]

    for frozen in (True, False):
        model, fresh = _small_model(), _small_model()
        if frozen:
            model.requires_grad_(False)
            fresh.requires_grad_(False)
        with torch.inference_mode(), torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
            model.eval()(x)                                 # fills the caches
        for ours, expected in zip(backward(model, frozen), backward(fresh, frozen)):
            assert torch.equal(ours, expected)


def test_bf16_forward_matches_fp32_forward():
    """The lean bf16 forward (half norms, bf16 residual stream, cached folded
    kernels) stays close to the fp32 one, with gradients and without."""
    model = _small_model()
    x = torch.randn(1, 3, 64, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x)
    for grad in (False, True):
        with torch.set_grad_enabled(grad), torch.autocast('cpu', dtype=torch.bfloat16):
            outputs = model(x)
        for ours, reference in zip(outputs, expected):
            assert ours.dtype == torch.bfloat16
            assert relative_error(ours.float(), reference) < 0.05


def test_softmax_stages_use_sdpa(monkeypatch):
    calls = []
    original = mavit_module.F.scaled_dot_product_attention

    def counting_sdpa(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(mavit_module.F, 'scaled_dot_product_attention', counting_sdpa)
    model = MAViT('t', depths=[1, 1, 3, 2]).eval()
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 64))
    # stages 3-4 are softmax: 3 + 2 blocks, heads 4 and 8, N = 4*4 and 2*2.
    assert calls == [(1, 4, 16, 64)] * 3 + [(1, 8, 4, 64)] * 2


def test_rotary_tables_are_broadcast_not_copied():
    tables = rope2d.RotaryTables(rope2d.rope_angles(32), 6, 10)
    cos, signed_sin = tables.tables(torch.float32)
    assert cos.shape == signed_sin.shape == (60, 32)
    assert tables.tables(torch.float32)[0] is cos


# -- pretrained weights ------------------------------------------------------------

def test_init_cfg_pretrained_loads_classification_checkpoint(tmp_path):
    source = MAViT('t', depths=[1, 1, 1, 1])
    classification = {k: v for k, v in source.state_dict().items()
                      if not k.startswith('extra_norms')}
    classification['head.weight'] = torch.zeros(1000, 512)
    path = tmp_path / 'mavit_t_in1k.pth'
    torch.save({'model': classification}, path)
    model = MAViT('t', depths=[1, 1, 1, 1],
                  init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    model.init_weights()
    for key, value in classification.items():
        if key != 'head.weight':
            assert torch.equal(model.state_dict()[key], value), key


def test_init_cfg_pretrained_from_detector_checkpoint(tmp_path):
    source = MAViT('t', depths=[1, 1, 1, 1])
    detector = {f'backbone.{k}': v for k, v in source.state_dict().items()}
    detector['neck.lateral_convs.0.conv.weight'] = torch.zeros(256, 64, 1, 1)
    path = tmp_path / 'mask_rcnn.pth'
    torch.save({'state_dict': detector, 'meta': {}}, path)
    model = MAViT('t', depths=[1, 1, 1, 1], pretrained=str(path))
    model.init_weights()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


def test_init_cfg_pretrained_of_another_size_is_an_error(tmp_path):
    """Same policy as tools/model_converters/convert_checkpoint.py: a shape mismatch is never
    skipped silently (the model would train from a half-random backbone)."""
    path = tmp_path / 'mavit_s.pth'
    torch.save({'model': MAViT('s', depths=[1, 1, 1, 1]).state_dict()}, path)
    model = MAViT('t', depths=[1, 1, 1, 1], init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=r'does not fit this MAViT \(\d+ tensors differ in shape: '
                                         r'layers\.1\.downsample'):
        model.init_weights()


def test_missing_pretrained_checkpoint_names_the_path(tmp_path):
    missing = tmp_path / 'nowhere' / 'mavit_t.pth'
    model = MAViT('t', depths=[1, 1, 1, 1], init_cfg=dict(type='Pretrained', checkpoint=str(missing)))
    with pytest.raises(FileNotFoundError, match='nowhere/mavit_t.pth'):
        model.init_weights()
    # Not initialised by the failed load: once the file is there, a retry loads it.
    source = MAViT('t', depths=[1, 1, 1, 1])
    missing.parent.mkdir()
    torch.save(source.state_dict(), missing)
    model.init_weights()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


def test_pretrained_checkpoint_of_other_input_channels_names_them(tmp_path):
    path = tmp_path / 'rgb.pth'
    torch.save(MAViT('t', depths=[1, 1, 1, 1]).state_dict(), path)
    model = MAViT('t', depths=[1, 1, 1, 1], in_channels=4,
                  init_cfg=dict(type='Pretrained', checkpoint=str(path)))
    with pytest.raises(ValueError, match=r'its stem takes 3-channel images, this MAViT 4 '
                                         r'\(in_channels\)'):
        model.init_weights()


def test_pretrained_checkpoint_that_is_a_folder_says_so(tmp_path):
    model = MAViT('t', depths=[1, 1, 1, 1], init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path)))
    with pytest.raises(IsADirectoryError, match=rf'a folder, not a file: {tmp_path}'):
        model.init_weights()


# -- bad input ---------------------------------------------------------------------

class _NotAllowListed:
    """A class no weights-only load may build."""


def test_unreadable_pretrained_checkpoint_says_why_not_how_to_unsafely_load_it(tmp_path):
    """torch's own message opens with 'Re-running torch.load with weights_only
    set to False will likely succeed': the error keeps only its reason."""
    from mavit_mm.errors import UnreadableCheckpointError

    text = tmp_path / 'notes.pth'
    text.write_text('not a checkpoint\n')
    pickled = tmp_path / 'pickled.pth'
    torch.save({'state_dict': MAViT('t', depths=[1, 1, 1, 1]).state_dict(),
                'meta': _NotAllowListed()}, pickled)
    empty = tmp_path / 'empty.pth'
    empty.write_bytes(b'')
    safetensors = tmp_path / 'mavit_t.safetensors'      # 8 bytes of header length, the header
    header = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    safetensors.write_bytes(len(header).to_bytes(8, 'little') + header + bytes(4))
    for path, reason in (
            (text, r"not a PyTorch checkpoint: neither torch's zip format nor a pickle"),
            (empty, r'an empty file'),
            (safetensors, r'a safetensors file, which this loader does not read: load it with '
                          r'safetensors.torch.load_file'),
            (pickled, r'torch.load with weights_only=True refused it: Unsupported global: '
                      r'GLOBAL .*_NotAllowListed')):
        model = MAViT('t', depths=[1, 1, 1, 1], init_cfg=dict(type='Pretrained', checkpoint=str(path)))
        with pytest.raises(UnreadableCheckpointError) as error:
            model.init_weights()
        assert re.search(rf'cannot read .*{path.name} as a checkpoint \({reason}', str(error.value)), \
            error.value
        assert 'weights_only` set to False' not in str(error.value)


def test_pretrained_checkpoint_path_may_start_with_home(tmp_path, monkeypatch):
    """'~/...' as mmengine's own loader takes it."""
    monkeypatch.setenv('HOME', str(tmp_path))
    source = MAViT('t', depths=[1, 1, 1, 1])
    torch.save({'model': source.state_dict()}, tmp_path / 'mavit_t.pth')
    model = MAViT('t', depths=[1, 1, 1, 1],
                  init_cfg=dict(type='Pretrained', checkpoint='~/mavit_t.pth'))
    model.init_weights()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


def test_init_cfg_layer_conv2d_reaches_every_convolution():
    """mmengine matches ``layer='Conv2d'`` against a module's class and its
    direct bases by name: MAViT's convolution classes must answer to it."""
    model = MAViT('t', depths=[1, 1, 1, 1],
                  init_cfg=dict(type='Constant', layer='Conv2d', val=0.5, bias=0.25))
    model.init_weights()
    convs = {name: m for name, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert {'layers.0.blocks.0.attn.qkvo', 'layers.0.blocks.0.attn.lepe',
            'layers.0.blocks.0.ffn.fc1', 'layers.0.blocks.0.pos'} <= set(convs)
    for name, conv in convs.items():
        assert bool((conv.weight == 0.5).all()), name
        assert conv.bias is None or bool((conv.bias == 0.25).all()), name


def test_init_cfg_list_loads_its_checkpoint_over_the_other_initialisers(tmp_path):
    source = MAViT('t', depths=[1, 1, 1, 1])
    classification = {k: v for k, v in source.state_dict().items()
                      if not k.startswith('extra_norms')}
    path = tmp_path / 'mavit_t_in1k.pth'
    torch.save({'model': classification}, path)
    model = MAViT('t', depths=[1, 1, 1, 1], init_cfg=[
        dict(type='Constant', layer='LayerNorm', val=2.0, bias=0.0),
        dict(type='Pretrained', checkpoint=str(path))])
    model.init_weights()
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in classification.items())
    # What the checkpoint lacks keeps the list's other initialiser.
    assert bool((state['extra_norms.0.norm.weight'] == 2.0).all())


def test_what_a_pretrained_checkpoint_lacks_starts_as_published(tmp_path):
    """An InLine-residual ablation from a MALA checkpoint: its residual convs,
    absent from the file, get the published init (truncated normal of std
    0.02, zero biases), not PyTorch's default (std ~0.07 here, random biases)."""
    source = MAViT('t', depths=[1, 1, 1, 1])
    torch.save({'model': source.state_dict()}, tmp_path / 'mavit_t.pth')
    torch.manual_seed(0)
    model = MAViT('t', depths=[1, 1, 1, 1], attn_types=('inline', 'inline', 'softmax', 'softmax'),
                  inline_residual=True,
                  init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'mavit_t.pth')))
    model.init_weights()
    state = model.state_dict()
    residual = [k for k in state if '.attn.residual.' in k]
    assert residual and not any(k in source.state_dict() for k in residual)
    weights = torch.cat([state[k].flatten() for k in residual if k.endswith('weight')])
    assert 0.017 < weights.std().item() < 0.023
    assert all(not state[k].any() for k in residual if k.endswith('bias'))
    loaded = [k for k in state if k in source.state_dict()]
    assert all(torch.equal(state[k], source.state_dict()[k]) for k in loaded)


def test_init_weights_reads_init_cfg_when_called_and_runs_once(tmp_path):
    """init_cfg as it is at init_weights (a runner or a user may set it after
    the build); a second call changes nothing, as mmengine's BaseModule."""
    source = MAViT('t', depths=[1, 1, 1, 1])
    torch.save({'model': source.state_dict()}, tmp_path / 'mavit_t.pth')
    model = MAViT('t', depths=[1, 1, 1, 1],
                  init_cfg=dict(type='Pretrained', checkpoint=str(tmp_path / 'nowhere.pth')))
    model.init_cfg = (dict(type='Pretrained', checkpoint=str(tmp_path / 'mavit_t.pth')),)
    model.init_weights()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())
    model.init_cfg = dict(type='Constant', layer='Conv2d', val=0.5)
    model.init_weights()
    assert all(torch.equal(v, source.state_dict()[k]) for k, v in model.state_dict().items())


@pytest.mark.parametrize('init_cfg,match', [
    (dict(type='Pretrained'), 'needs a checkpoint'),
    ([dict(type='Pretrained', checkpoint='a.pth'), dict(type='Pretrained', checkpoint='b.pth')],
     '2 Pretrained checkpoints'),
])
def test_pretrained_init_cfg_is_checked_when_built(init_cfg, match):
    with pytest.raises(ValueError, match=match):
        MAViT('t', init_cfg=init_cfg)


def test_pretrained_argument_is_deprecated_and_checked(tmp_path):
    with pytest.warns(DeprecationWarning, match='init_cfg'):
        MAViT('t', depths=[1, 1, 1, 1], pretrained=str(tmp_path / 'x.pth'))
    with pytest.raises(TypeError, match='pretrained must be a checkpoint path'):
        MAViT('t', pretrained=123)


@pytest.mark.parametrize('rate', [-0.1, 1.0])
def test_drop_path_rate_outside_0_1_is_an_error(rate):
    with pytest.raises(ValueError, match=r'drop_path_rate must lie in \[0, 1\)'):
        MAViT('t', drop_path_rate=rate)


@pytest.mark.parametrize('out_indices', [3, ()])
def test_out_indices_must_be_a_sequence_of_stages(out_indices):
    with pytest.raises(TypeError, match='out_indices must be a non-empty sequence'):
        MAViT('t', out_indices=out_indices)


@pytest.mark.parametrize('settings,match', [
    (dict(depths=[-1, 2, 6, 2]), r'depths\[0\] must be a whole number >= 0, got -1'),
    (dict(depths=[2, 2, 6, 2.5]), r'depths\[3\] must be a whole number >= 0, got 2.5'),
    (dict(num_heads=[1, 2, 4, 0]), r'num_heads\[3\] must be a whole number >= 1, got 0'),
    (dict(out_indices=(1.7, 3)), r'out_indices\[0\] must be a whole number >= 0, got 1.7'),
    (dict(out_indices=(4,)), r'out_indices \(4,\) must lie in \[0, 3\]'),
    (dict(mlp_ratios=0), r'mlp_ratios\[0\] must be a number that gives the FFN at least one'),
    (dict(in_channels='3'), r"in_channels must be a whole number >= 1, got '3'"),
], ids=['negative-depth', 'fractional-depth', 'no-heads', 'fractional-index', 'index-5th-stage',
        'no-ffn', 'channels-as-text'])
def test_settings_that_cannot_build_a_mavit_are_named(settings, match):
    """Not an IndexError deep in the build, nor a value quietly rounded."""
    with pytest.raises(ValueError, match=match):
        MAViT('t', **settings)


def test_norm_cfg_takes_the_registered_batch_norms_and_names_the_others():
    from mavit_mm.engine.cpu_distributed import CPUSyncBatchNorm
    model = MAViT('t', depths=[1, 1, 1, 1], norm_cfg=dict(type='CPUSyncBN', momentum=0.05))
    norms = [model.patch_embed.proj[1], model.layers[0].downsample.norm]
    assert all(type(norm) is CPUSyncBatchNorm and norm.momentum == 0.05 for norm in norms)
    with pytest.raises(ValueError, match=r"norm_cfg type must be a batch norm: .*got 'GN'"):
        MAViT('t', depths=[1, 1, 1, 1], norm_cfg=dict(type='GN', num_groups=8))


def test_whole_number_settings_may_be_floats_and_a_stage_may_have_no_block():
    model = MAViT('t', embed_dims=[64.0, 128, 256, 512], depths=[1, 1, 0, 1], in_channels=3.0,
                  frozen_stages=1.0).eval()
    assert model.embed_dims[0] == 64 and isinstance(model.embed_dims[0], int)
    assert (model.in_channels, model.frozen_stages) == (3, 1)
    assert all(isinstance(n, int) for n in (model.in_channels, model.frozen_stages))
    with torch.no_grad():
        outs = model(torch.randn(1, 3, 64, 64))
    assert [tuple(out.shape[1:]) for out in outs] == [(64, 16, 16), (128, 8, 8), (256, 4, 4),
                                                     (512, 2, 2)]


def test_input_must_be_4d():
    with pytest.raises(ValueError, match='4-D'):
        MAViT('t', depths=[1, 1, 1, 1])(torch.randn(3, 64, 64))


def test_input_channel_count_is_checked():
    with pytest.raises(ValueError, match='3 input channels, got 4'):
        MAViT('t', depths=[1, 1, 1, 1])(torch.randn(1, 4, 64, 64))


def test_input_must_be_a_floating_point_image():
    with pytest.raises(TypeError, match='floating-point image .*got torch.uint8'):
        MAViT('t', depths=[1, 1, 1, 1])(torch.zeros(1, 3, 64, 64, dtype=torch.uint8))


def test_input_dtype_must_be_the_weights_outside_autocast():
    model = MAViT('t', depths=[1, 1, 1, 1]).eval()
    image = torch.randn(1, 3, 64, 64, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r'torch.bfloat16 input but its weights are torch.float32'):
        model(image)
    # Autocast casts what it runs: the same input is welcome there.
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        assert [out.dtype for out in model(image)] == [torch.bfloat16] * 4


@pytest.mark.parametrize('weights,image,autocast', [
    (torch.float32, torch.float64, torch.bfloat16),
    (torch.float16, torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.bfloat16, torch.float16),
    (torch.float64, torch.float64, torch.bfloat16),
], ids=['fp64-image', 'fp16-model-bf16-autocast', 'bf16-model-fp16-autocast', 'fp64-model'])
def test_what_autocast_cannot_cast_is_named(weights, image, autocast):
    """Autocast casts fp32 and half tensors, never float64, and runs half
    weights of another dtype into mixed-dtype kernel errors."""
    model = MAViT('t', depths=[1, 1, 1, 1]).eval().to(weights)
    with torch.no_grad(), torch.autocast('cpu', dtype=autocast), pytest.raises(
            TypeError, match=rf'under torch.autocast to {autocast}, .* got {weights} weights '
                             rf'and a {image} input'):
        model(torch.randn(1, 3, 64, 64, dtype=image))
    # What it can cast runs: the model's own dtype, or fp32 weights.
    with torch.no_grad(), torch.autocast('cpu', dtype=autocast):
        outputs = model.to(autocast if weights != torch.float32 else weights)(
            torch.randn(1, 3, 64, 64, dtype=torch.float16))
    assert [out.dtype for out in outputs] == [autocast] * 4


@pytest.mark.parametrize('frozen_stages', [-2, 5, 2.5, '1', None, True])
def test_frozen_stages_beyond_the_stages_is_an_error(frozen_stages):
    with pytest.raises(ValueError, match=rf'frozen_stages must lie in \[-1, 4\].*got {frozen_stages!r}'):
        MAViT('t', depths=[1, 1, 1, 1], frozen_stages=frozen_stages)


@pytest.mark.parametrize('autocast', [False, True], ids=['fp32', 'autocast-bf16'])
def test_an_empty_batch_gives_the_maps_of_a_batch_without_images(autocast):
    """As mmdet's ResNet does (mmseg's Swin fails on its reshapes): the shapes,
    dtypes and layout a batch of one gets, at a size that rounds at every
    stride."""
    model = MAViT('t', depths=[1, 1, 1, 1], out_indices=(1, 3)).eval()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
        one = model(torch.randn(1, 3, 65, 77))
        empty = model(torch.randn(0, 3, 65, 77))
    assert [(t.shape[1:], t.dtype, t.is_contiguous()) for t in empty] == \
        [(t.shape[1:], t.dtype, t.is_contiguous()) for t in one]
    assert [t.shape[0] for t in empty] == [0, 0]


def test_an_empty_batch_in_training_gives_every_trainable_weight_a_zero_gradient():
    """As a batch's outputs would (mmdet's ResNet's do): DDP waits for a
    gradient of every parameter from every process."""
    model = MAViT('t', depths=[1, 1, 1, 1], frozen_stages=1).train()
    image = torch.randn(0, 3, 65, 77, requires_grad=True)
    sum(out.sum() for out in model(image)).backward()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert trainable and all(p.grad is not None and not p.grad.any() for p in trainable)
    assert image.grad is not None and image.grad.shape == image.shape
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)


def test_unknown_arch():
    with pytest.raises(ValueError, match="unknown MAViT arch 'huge'"):
        MAViT('huge')


def test_head_dim_must_be_divisible_by_4():
    with pytest.raises(ValueError, match='head dim 18'):
        MAViT('t', embed_dims=[36, 128, 256, 512], num_heads=[2, 2, 4, 8])


def test_embed_dims_divisible_by_num_heads():
    with pytest.raises(ValueError, match='embed_dims 64 is not divisible by num_heads 3'):
        MAViT('t', num_heads=[3, 2, 4, 8])


@pytest.mark.parametrize('name,value', [
    ('depths', [2, 2, 6]),
    ('embed_dims', [64, 128, 256]),
    ('num_heads', [1, 2, 4]),
    ('mlp_ratios', [3.5, 3.5]),
    ('layer_init_values', [1, 1, 1, 1, 1]),
    ('layerscales', [True]),
    ('attn_types', ['mala', 'softmax']),
])
def test_list_arguments_of_wrong_length(name, value):
    with pytest.raises(ValueError, match=f'{name} must have 4 entries'):
        MAViT('t', **{name: value})


def test_unknown_attention_type_and_mala_impl():
    # The message names the stage and lists the choices.
    with pytest.raises(ValueError, match="attn_types\\[1\\] must be one of .*'inline'.*"
                                         "got 'flash'"):
        MAViT('t', attn_types=['mala', 'flash', 'softmax', 'softmax'])
    with pytest.raises(ValueError, match="kernel_function must be one of .*'relu'.*got 'gelu'"):
        MAViT('t', kernel_function='gelu')
    with pytest.raises(ValueError, match='mala_impl'):
        MAViT('t', mala_impl='cuda')


# -- registries --------------------------------------------------------------------

def test_registered_in_mmdet_and_mmseg():
    """Registered once, in mmengine's root MODELS; mmdet's and mmseg's
    registries (children of it) find it, and build it inside their scope."""
    from mmdet.registry import MODELS as DET_MODELS
    from mmengine.registry import DefaultScope
    from mmseg.registry import MODELS as SEG_MODELS
    assert mavit_mm.REGISTERED_IN == ['mmengine.registry']
    assert 'MAViT' not in DET_MODELS.module_dict and 'MAViT' not in SEG_MODELS.module_dict
    for scope, registry in (('mmdet', DET_MODELS), ('mmseg', SEG_MODELS)):
        assert registry.get('MAViT') is MAViT
        with DefaultScope.overwrite_default_scope(scope):
            model = registry.build(dict(type='MAViT', arch='t', depths=[1, 1, 1, 1]))
        assert isinstance(model, MAViT)


def test_core_runs_without_mmcv_mmdet_mmseg():
    """The model code needs torch and mmengine only. The packages are made
    absent as Python's import system defines it, a None in sys.modules:
    importing one raises ModuleNotFoundError and importlib.util.find_spec says
    None, which torch's CUDA builds ask of triton at import (a finder that
    raised instead broke ``import torch`` there, before mavit_mm)."""
    script = '''
import sys
ABSENT = ('mmcv', 'mmdet', 'mmseg', 'triton')
sys.modules.update(dict.fromkeys(ABSENT))
import torch, mavit_mm
assert mavit_mm.REGISTERED_IN == ['mmengine.registry'], mavit_mm.REGISTERED_IN
assert not [m for m, module in sys.modules.items()
            if m.split('.')[0] in ABSENT and module is not None]
out = mavit_mm.MAViT('t', depths=[1, 1, 1, 1])(torch.randn(1, 3, 64, 64))
print([tuple(o.shape) for o in out])
'''
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert '(1, 512, 2, 2)' in result.stdout
