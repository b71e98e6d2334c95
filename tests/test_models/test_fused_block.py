"""The block with its fused depthwise stages and its 1x1 convolutions as
matrix products: the same model as its modules, and what each switch changes.

The fused stages run where the depthwise kernels run: ``depthwise_impl='triton'``
under Triton's CPU interpreter here (``'auto'`` on CUDA). The interpreter is
slow, so the model is a small one with MAViT's structure (every stage, MALA
and softmax blocks, layer scale) on a 32x32 image.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers.paths import REPO_ROOT, child_environment

from devtools.op_census import fused_launches_skipped
from devtools.op_log import OpLog
from mavit_mm.models import MAViT
from mavit_mm.ops.fast_paths import ALL_ON, FAST_PATHS, INFERENCE
from mavit_mm.ops.pointwise_conv import pointwise_conv

pytest.importorskip('triton')

SMALL = dict(arch=None, embed_dims=[16, 32, 32, 64], depths=[1, 1, 1, 1],
             num_heads=[1, 2, 2, 4], mlp_ratios=[2, 2, 2, 2], layer_init_values=[0.5] * 4,
             drop_path_rate=0.0, mala_impl='torch')
DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
FUSED_OPS = {'fused_position_norm': 'position_norm', 'fused_lepe_gate': 'gated_lepe',
             'fused_ffn_middle': 'ffn_middle'}


def small_model(depthwise_impl: str, seed: int = 0, **kwargs) -> MAViT:
    torch.manual_seed(seed)
    return MAViT(depthwise_impl=depthwise_impl, **SMALL, **kwargs).to(DEVICE)


def before_a_batch_norm(name: str) -> bool:
    """A bias whose gradient is exactly 0 up to noise: it feeds a batch norm
    in training mode (the stem's and the downsamplings' convolutions)."""
    return name.endswith('bias') and ('patch_embed' in name or 'downsample' in name)


def image(size=(32, 32)) -> torch.Tensor:
    return torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1)).to(DEVICE)


def training_step(model: MAViT) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    """The outputs and the parameters' gradients of a training step (batch norms
    in training mode) on ``image()``, each output weighted by fixed noise."""
    outputs = model.train()(image())
    upstream = [torch.randn(out.shape, generator=torch.Generator().manual_seed(i)).to(DEVICE)
                for i, out in enumerate(outputs)]
    sum((out * up).sum() for out, up in zip(outputs, upstream)).backward()
    return outputs, {name: p.grad for name, p in model.named_parameters()}


@pytest.fixture(scope='module')
def all_on_step(one_torch_thread):
    """(model, its weights before, its training step) with every fast path on:
    two tests compare against it, and in Triton's interpreter it is the slow
    part of each."""
    model = small_model('triton', fast_paths=ALL_ON)
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    return model, initial, training_step(model)


def test_the_fused_stages_compute_the_modules_model(all_on_step):
    """All three fused stages (the FFN's middle too, off by default): fp32
    outputs and every gradient of a training step (batch norms in training
    mode), and bf16 autocast outputs, against the modules."""
    fused, initial, (outputs, fused_grads) = all_on_step
    modules = small_model('torch')
    modules.load_state_dict(initial, strict=True)
    expected, grads = training_step(modules)
    for ours, reference in zip(outputs, expected):
        # fp32 sums in another order: 1.1e-5 with cuDNN's algorithms on the
        # H100 (benchmarks/results/gpu-h100-2026-11-27), under 1e-5 on the CPU.
        error = ((ours - reference).norm() / reference.norm()).item()
        assert error < 3e-5, error
    for name, reference in grads.items():
        if before_a_batch_norm(name):
            continue
        scale = reference.abs().max()
        error = ((fused_grads[name] - reference).abs().max() / scale).item()
        assert error < 1e-4, (name, error)
    x = image()
    halves = []
    for model in (modules, fused):
        model.eval()
        with torch.no_grad(), torch.autocast(DEVICE.type, dtype=torch.bfloat16):
            halves.append(model(x))
    for ours, reference in zip(*halves):
        assert ours.dtype == torch.bfloat16
        error = (ours.float() - reference.float()).norm() / reference.float().norm()
        assert error < 0.03, error


@pytest.mark.parametrize('switch', list(FUSED_OPS))
def test_each_fused_switch_replaces_its_modules_with_one_op(switch):
    counts = {}
    for name, fast_paths in (('on', {switch: True}), ('off', {switch: False})):
        model = small_model('triton', fast_paths=fast_paths).eval()
        with torch.no_grad(), fused_launches_skipped(), OpLog() as log:
            model(image())
        counts[name] = log.ops
    blocks = sum(SMALL['depths'])
    op = FUSED_OPS[switch]
    assert counts['on'][op] == blocks and counts['off'][op] == 0
    # The modules' own depthwise convolution, one a block, is what the op replaces.
    assert counts['off']['convolution'] - counts['on']['convolution'] == blocks


@pytest.mark.parametrize('switch', list(FUSED_OPS))
def test_a_fused_stage_set_to_inference_runs_only_where_no_gradient_flows(switch):
    """``'inference'``: the fused op in a forward without gradients (eval under
    no_grad, and with frozen weights), the modules in a training forward, also
    where only the stage's bias trains."""
    def ops(fast_paths, grad: bool, trainable=lambda name: True):
        model = small_model('triton', fast_paths={switch: fast_paths})
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(trainable(name))
        with torch.set_grad_enabled(grad), fused_launches_skipped(), OpLog() as log:
            model.train(grad)(image())
        return log.ops[FUSED_OPS[switch]]
    blocks = sum(SMALL['depths'])
    assert ops(INFERENCE, grad=False) == blocks
    assert ops(INFERENCE, grad=True, trainable=lambda name: False) == blocks
    assert ops(INFERENCE, grad=True) == 0
    # Only the stage's own bias trains: the first block's inputs need no gradient.
    bias = {'fused_position_norm': '.pos.bias', 'fused_lepe_gate': '.lepe.bias',
            'fused_ffn_middle': '.dwconv.bias'}[switch]
    assert ops(INFERENCE, grad=True, trainable=lambda name: name.endswith(bias)) == 0
    assert ops(True, grad=True) == blocks and ops(False, grad=False) == 0


def test_tap_major_weights_off_reads_the_parameters_in_place(all_on_step):
    """Switch ``tap_major_weights`` off: the kernels read each depthwise kernel
    as a view of its parameter (a channel stride of k * k), no copy; the same
    outputs and gradients as tap-major."""
    _, _, (expected, grads) = all_on_step
    model = small_model('triton', fast_paths=ALL_ON.without('tap_major_weights'))
    outputs, view_grads = training_step(model)
    for ours, reference in zip(outputs, expected):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    for name, reference in grads.items():
        # (The loss weights every output by noise of scale 1: the floor scales
        # with each gradient's largest entry.)
        floor = 1e-7 * max(1.0, reference.abs().max().item())
        torch.testing.assert_close(view_grads[name], reference, rtol=1e-4, atol=floor, msg=name)
    conv = model.layers[0].blocks[0].pos
    view, kept = conv.depthwise_taps(False), conv.depthwise_taps(True)
    assert view.data_ptr() == conv.weight.data_ptr() and view.stride() == (1, 9)
    assert kept.is_contiguous() and torch.equal(kept, view)


def test_depthwise_impl_auto_runs_the_modules_off_cuda():
    with torch.no_grad(), OpLog() as log:
        small_model('auto').cpu().eval()(image().cpu())
    assert not set(FUSED_OPS.values()) & set(log.ops)


def test_a_bad_depthwise_impl_is_an_error():
    with pytest.raises(ValueError, match=r"depthwise_impl must be one of \('auto', 'torch', "
                                         r"'triton'\), got 'cuda'"):
        MAViT('tiny', depthwise_impl='cuda')


def test_checkpoints_keep_their_keys():
    """The fused stages and the matrix products read the modules' own
    parameters: the state dict is the published one whatever runs."""
    assert (MAViT('tiny').state_dict().keys()
            == MAViT('tiny', depthwise_impl='triton', fast_paths=dict(matmul_1x1=False))
            .state_dict().keys())


def test_a_1x1_convolution_compiles_to_a_matrix_product_with_the_bias_inside():
    from torch._dynamo.testing import CompileCounterWithBackend
    x = torch.randn(2, 16, 5, 7).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(24, 16, 1, 1), torch.randn(24)
    counter = CompileCounterWithBackend('aot_eager')
    torch._dynamo.reset()
    out = torch.compile(pointwise_conv, backend=counter, fullgraph=True)(x, weight, bias)
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, weight, bias),
                               rtol=1e-5, atol=1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last)
    targets = [str(node.target) for graph in counter.graphs for node in graph.graph.nodes]
    assert 'aten.addmm.default' in targets or any('addmm' in t for t in targets), targets
    # Eager on the CPU: oneDNN's convolution, which adds the bias inside.
    with OpLog() as log:
        pointwise_conv(x, weight, bias)
    assert log.ops['convolution'] == 1 and log.ops['addmm'] == 0


def test_the_residual_adds_never_write_into_the_block_input(monkeypatch):
    """In place only into a map the block made itself: a variant whose
    position step returned its input must not overwrite the previous stage's
    output."""
    from mavit_mm.models.mavit import MAViTBlock
    monkeypatch.setattr(MAViTBlock, 'position', lambda self, x: (x, self.norm1(x)))
    model = small_model('torch').eval()
    block, rope = model.layers[0].blocks[0], model.layers[0].RoPE(8, 8)
    x = torch.randn(1, 16, 8, 8, device=DEVICE).contiguous(memory_format=torch.channels_last)
    kept = x.clone()
    with torch.no_grad():
        out = block(x, rope)
    assert torch.equal(x, kept)
    assert not torch.equal(out, kept)


FRESH_COMPILE = r'''
import json, sys
import torch
from mavit_mm.models import MAViT

graphs = []


def recording_backend(graph_module, example_inputs):
    graphs.append(graph_module)
    return graph_module.forward


assert 'mavit_mm.ops.depthwise.function' not in sys.modules
torch.manual_seed(0)
# Every fused stage on; the switches that stand aside under compile off, so that
# eager runs what the compiled graph runs.
model = MAViT(depthwise_impl='triton', **SMALL, fast_paths=dict(
    fused_ffn_middle=True, folded_residual_conv=False, joint_qk_rotation=False)).eval()
x = torch.randn(1, 3, 32, 32)
with torch.no_grad():
    compiled = torch.compile(model, fullgraph=True, backend=recording_backend)(x)
    imported = 'mavit_mm.ops.depthwise.function' in sys.modules
    eager = model(x)
targets = [str(node.target) for graph in graphs for node in graph.graph.nodes]
print(json.dumps(dict(
    imported=imported, graphs=len(graphs),
    fused={name: sum(f'mavit_mm.{name}' in t for t in targets)
           for name in ('position_norm', 'gated_lepe', 'ffn_middle')},
    max_difference=max((a - b).abs().max().item() for a, b in zip(compiled, eager)))))
'''


def test_compile_from_a_fresh_process_gives_one_graph_with_the_fused_stages():
    env = child_environment(TRITON_INTERPRET='1')
    script = f'SMALL = {SMALL!r}\n' + FRESH_COMPILE
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    blocks = sum(SMALL['depths'])
    assert report['imported'] and report['graphs'] == 1, report
    assert report['fused'] == dict.fromkeys(FUSED_OPS.values(), blocks), report
    assert report['max_difference'] == 0.0, report


# --------------------------------------------------------------------------
# MAViT-T on a GPU: every fused path at the model's real widths and depths
# --------------------------------------------------------------------------
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')
PLAIN = dict(mala_impl='torch', depthwise_impl='torch',
             fast_paths=dict.fromkeys(FAST_PATHS, False))
# 256x512: stage 1 runs MALA over 64x128 tokens, every width and block of MAViT-T.
CUDA_INPUT = (2, 3, 256, 512)


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return ((ours.float() - reference.float()).norm() / reference.float().norm()).item()


def mavit_t(**kwargs) -> MAViT:
    torch.manual_seed(0)   # the same weights for every model built here
    return MAViT('tiny', drop_path_rate=0.0, **kwargs).to(DEVICE)


def projected_loss(outputs) -> torch.Tensor:
    """The outputs against fixed random maps, averaged as a real loss is: the
    outputs' own norms would make a sum of squares constant, and every gradient
    rounding noise; a sum instead of a mean would make each output's gradient
    1, which times a loss scale of 2**16 is past fp16's range."""
    return sum((out.float() * torch.randn(out.shape, generator=torch.Generator().manual_seed(i))
                .to(out.device)).mean() for i, out in enumerate(outputs))


@cuda_only
def test_mavit_t_with_every_fused_path_is_the_plain_model_on_cuda():
    """fp32 (TF32 off, tests/conftest.py): MALA's and the depthwise stages'
    kernels with every fast path on (the fused FFN middle too, off by default)
    against the PyTorch formulas with every switch off, outputs and every
    parameter's gradient in a training step; then bf16 autocast outputs in
    eval mode."""
    fused, plain = mavit_t(fast_paths=ALL_ON).train(), mavit_t(**PLAIN).train()
    plain.load_state_dict(fused.state_dict(), strict=True)
    x = torch.randn(*CUDA_INPUT, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    results = []
    for model in (fused, plain):
        outputs = model(x)
        projected_loss(outputs).backward()
        results.append((outputs, {name: p.grad for name, p in model.named_parameters()
                                  if p.grad is not None}))
    (outputs, grads), (expected, expected_grads) = results
    for stage, (ours, reference) in enumerate(zip(outputs, expected)):
        assert relative_error(ours, reference) < 1e-4, stage
    assert grads.keys() == expected_grads.keys()
    errors = {name: relative_error(grads[name], reference)
              for name, reference in expected_grads.items() if not before_a_batch_norm(name)}
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-3, (worst, errors[worst])
    halves = []
    for model in (fused.eval(), plain.eval()):
        with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
            halves.append(model(x))
    for stage, (ours, reference) in enumerate(zip(*halves)):
        assert relative_error(ours, reference) < 3e-2, stage
        assert ours.dtype == torch.bfloat16, (stage, ours.dtype)


@cuda_only
@pytest.mark.parametrize('fast_paths', [None, ALL_ON], ids=['defaults', 'all-on'])
def test_fp16_training_with_mmengines_dynamic_loss_scale_on_cuda(fast_paths):
    """What the configs run (AmpWhereAvailableOptimWrapper is mmengine's
    AmpOptimWrapper on CUDA): fp16 autocast and a dynamic loss scale. The
    forward stays finite, a step is taken within the scaler's first halvings,
    and the unscaled gradients of that step are the fp32 ones. With the
    defaults, and with every fast path on (the fused stages' backward too)."""
    from mmengine.optim import AmpOptimWrapper
    model = mavit_t(fast_paths=fast_paths).train()
    x = torch.randn(*CUDA_INPUT, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    parameters = [p for p in model.parameters() if p.requires_grad]
    loss32 = projected_loss(model(x))
    reference = torch.autograd.grad(loss32, parameters, allow_unused=True)
    wrapper = AmpOptimWrapper(optimizer=torch.optim.AdamW(parameters, lr=1e-4),
                              loss_scale='dynamic')
    scales = []
    for _ in range(8):
        wrapper.zero_grad()
        with wrapper.optim_context(model):
            outputs = model(x)
        loss = projected_loss(outputs)
        assert torch.isfinite(loss)
        wrapper.backward(loss)
        wrapper.loss_scaler.unscale_(wrapper.optimizer)
        scales.append(wrapper.loss_scaler.get_scale())
        finite = all(torch.isfinite(p.grad).all() for p in parameters if p.grad is not None)
        before = parameters[0].detach().clone()
        wrapper.step()
        if finite:
            break
    assert finite, f'every step overflowed; loss scales {scales}'
    assert not torch.equal(before, parameters[0].detach()), 'the step was skipped'
    ours = torch.cat([p.grad.flatten() for p, r in zip(parameters, reference) if r is not None])
    expected = torch.cat([r.flatten() for r in reference if r is not None])
    assert relative_error(ours, expected) < 5e-2, scales
