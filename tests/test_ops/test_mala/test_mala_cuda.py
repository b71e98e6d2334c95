"""The fused MALA on a real NVIDIA GPU: the whole matrix of dtypes, head dims,
layouts, launch plans and batch x heads, forward and q/k/v gradients against
the float64 PyTorch reference, and the backbone at full resolution.

Skipped without CUDA (the CPU interpreter covers a subset in
``test_mala_triton.py``); ``benchmarks/gpu_check.py`` runs it on a GPU.
"""
import pytest
import torch

pytest.importorskip('triton')
if not torch.cuda.is_available():
    pytest.skip('needs a CUDA GPU', allow_module_level=True)

from mavit_mm import MAViT  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import launches as mala_launches  # noqa: E402
from mavit_mm.ops.mala import mala_attention, mala_naive  # noqa: E402
from mavit_mm.ops.mala import plan as mala_plan  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402
from mavit_mm.tooling.mala_inputs import MALA_LAYOUTS, mala_inputs  # noqa: E402

DEVICE = torch.device('cuda')
DTYPES = {'fp32': torch.float32, 'fp16': torch.float16, 'bf16': torch.bfloat16}
# Relative to the largest reference value. fp32 has exact fp32 dots; the half
# types use tf32 dots and are rounded to a 10- / 7-bit mantissa on output.
TOLERANCE = {'fp32': 1e-4, 'fp16': 1e-2, 'bf16': 2e-2}
HEAD_DIMS = [16, 32, 48, 64, 96, 128]
# 'default': the plan real feature maps get (several chunks, aligned N);
# 'small': forced small tiles, many chunks and programs, odd N.
PLANS = {
    'default': dict(size=(48, 80), batch=1, heads=3, overrides={}),
    'small': dict(size=(37, 29), batch=3, heads=1,
                  overrides=dict(block_n=16, tokens_per_chunk=80, tokens_per_program=48)),
}


def make_qkv(batch, heads, size, head_dim, dtype, layout, seed=0):
    """q, k, v on the GPU from the one factory (``mavit_mm.tooling.mala_inputs``):
    'channels_last' (what the model passes), 'nchw' or 'contiguous'."""
    height, width = size
    return mala_inputs(batch, heads, height, width, head_dim, layout=layout, dtype=dtype,
                       device=DEVICE, requires_grad=True, seed=seed)


def dense_in_order_of(t: torch.Tensor, like: torch.Tensor) -> bool:
    """Whether ``t`` is dense with its dimensions in memory in ``like``'s order."""
    order = sorted(range(4), key=lambda dim: (-like.stride(dim), dim))
    return t.permute(order).is_contiguous()


def relative_error(actual, expected):
    expected = expected.double()
    return ((actual.double() - expected).abs().max() / expected.abs().max()).item()


def compare_with_reference(q, k, v, size, dtype_name, **overrides):
    height, width = size
    head_dim = q.shape[-1]
    rope = RoPE2d(head_dim).to(DEVICE)(height, width)
    generator = torch.Generator().manual_seed(1)
    dout = torch.randn(q.shape, generator=generator, dtype=torch.float64).to(q)
    out = mala_function.fused_mala(q, k, v, rope.angle, width, **overrides)
    grads = torch.autograd.grad(out, (q, k, v), dout)

    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    expected = mala_naive(q64, k64, v64, *rope.tables(torch.float64, q64.device))
    expected_grads = torch.autograd.grad(expected, (q64, k64, v64), dout.double())
    errors = {'out': relative_error(out, expected)}
    errors.update({name: relative_error(g, e)
                   for name, g, e in zip(('dq', 'dk', 'dv'), grads, expected_grads)})
    for name, tensor in zip(('out', 'dq', 'dk', 'dv'), (out, *grads)):
        assert torch.isfinite(tensor).all(), f'{name} has inf or NaN'
    assert max(errors.values()) <= TOLERANCE[dtype_name], errors
    return out, grads


@pytest.mark.parametrize('plan', sorted(PLANS))
@pytest.mark.parametrize('layout', MALA_LAYOUTS)
@pytest.mark.parametrize('dtype_name', sorted(DTYPES))
@pytest.mark.parametrize('head_dim', HEAD_DIMS)
def test_matches_fp64_reference(head_dim, dtype_name, layout, plan):
    setting = PLANS[plan]
    q, k, v = make_qkv(setting['batch'], setting['heads'], setting['size'], head_dim,
                       DTYPES[dtype_name], layout)
    out, grads = compare_with_reference(q, k, v, setting['size'], dtype_name,
                                        **setting['overrides'])
    # Results keep the inputs' layout, so the backbone's merge of heads is free.
    assert dense_in_order_of(out, q) and all(dense_in_order_of(g, q) for g in grads)


@pytest.mark.parametrize('batch,heads', [(1, 1), (1, 2), (2, 8), (8, 8)])
@pytest.mark.parametrize('size', [(64, 64), (37, 53)], ids=['aligned', 'odd'])
@pytest.mark.parametrize('dtype_name', ['bf16', 'fp32'])
def test_batch_heads_from_1_to_64(batch, heads, size, dtype_name):
    q, k, v = make_qkv(batch, heads, size, 64, DTYPES[dtype_name], 'channels_last', seed=batch)
    compare_with_reference(q, k, v, size, dtype_name)


@pytest.mark.parametrize('head_dim', [64, 96])
def test_stage_one_resolution_bf16(head_dim):
    """N = 65536 (stage 1 at 512x2048) with one head: the most chunks per head."""
    q, k, v = make_qkv(1, 1, (128, 512), head_dim, torch.bfloat16, 'channels_last')
    compare_with_reference(q, k, v, (128, 512), 'bf16')


def test_dispatch_auto_takes_the_kernels_on_cuda(monkeypatch):
    calls = []
    fused = mala_function.fused_mala

    def counting(*args, **kwargs):
        calls.append(args[0].dtype)
        return fused(*args, **kwargs)
    monkeypatch.setattr(mala_function, 'fused_mala', counting)
    q, k, v = make_qkv(1, 2, (16, 16), 64, torch.bfloat16, 'channels_last')
    rope = RoPE2d(64).to(DEVICE)(16, 16)
    mala_attention(q, k, v, rope, impl='auto')
    assert calls == [torch.bfloat16]


@pytest.mark.parametrize('head_dim', [64, 96])
def test_split_grid_from_the_compiled_kernels_occupancy(head_dim):
    """On a GPU the split-N grid fills whole waves by what the compiled
    partials / query kernels leave room for, read from their own metadata."""
    size, batch_heads = (128, 512), 16
    q, k, v = make_qkv(1, batch_heads, size, head_dim, torch.bfloat16, 'channels_last')
    angle = RoPE2d(head_dim).angle.to(DEVICE)
    width = size[1]
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    limits = mala_plan.sm_limits(torch.cuda.current_device())
    assert mala_plan.resource_shortfall(q, k, v, width, backward=True) is None
    forward_plan = mala_plan.plan_for(q, k, v, angle, width)
    forward = mala_launches.ForwardLaunches(q, k, v, angle, width, forward_plan, allocate=False)
    stats = torch.empty(batch_heads, head_dim + mala_launches.kernels.STATS_EXTRA_ROWS.value,
                        head_dim, device=DEVICE)
    backward_plan = mala_plan.plan_for(q, k, v, angle, width, dout=q, stats=stats)
    backward = mala_launches.BackwardLaunches(q, q, k, v, angle, stats, width, backward_plan,
                                              allocate=False)
    for plan, launches, name in ((forward_plan, forward, 'partials'),
                                 (backward_plan, backward, 'query')):
        resources = mala_plan.compiled_resources(launches, name)
        assert resources is not None, "this Triton release hides the compiled kernel's registers"
        assert resources.registers > 0 and resources.num_warps == getattr(plan, name).num_warps
        slots = mala_plan.resident_blocks(resources, limits) * sms
        programs = plan.num_chunks * batch_heads
        assert programs <= slots or programs % slots == 0, (name, resources, programs, slots)


def test_backbone_bf16_forward_backward_at_512x2048_is_finite():
    torch.manual_seed(0)
    model = MAViT(arch='tiny', mala_impl='triton').to(DEVICE).train()
    images = torch.randn(1, 3, 512, 2048, device=DEVICE, requires_grad=True)
    with torch.autocast('cuda', dtype=torch.bfloat16):
        outputs = model(images)
    assert [tuple(o.shape[-2:]) for o in outputs] == [(128, 512), (64, 256), (32, 128), (16, 64)]
    loss = sum(o.float().square().mean() for o in outputs)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(images.grad).all()
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            assert torch.isfinite(parameter.grad).all(), name

    # Pure bf16 weights as well (inference in half precision).
    model_bf16 = MAViT(arch='tiny', mala_impl='triton').to(DEVICE, torch.bfloat16).eval()
    with torch.no_grad():
        outputs = model_bf16(images.detach().bfloat16())
    assert all(torch.isfinite(o).all() for o in outputs)


def test_backbone_triton_and_torch_paths_agree_in_bf16():
    torch.manual_seed(0)
    model = MAViT(arch='tiny', mala_impl='triton').to(DEVICE).eval()
    images = torch.randn(1, 3, 512, 1024, device=DEVICE)
    with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
        fused = model(images)
        for module in model.modules():
            if hasattr(module, 'mala_impl'):
                module.mala_impl = 'torch'
        reference = model(images)
    for index, (a, b) in enumerate(zip(fused, reference)):
        assert relative_error(a.float(), b.float()) <= 5e-2, f'stage {index}'


def test_direct_launches_match_tritons_path(monkeypatch):
    """After a case's first launches, its compiled kernels are launched directly
    (CompiledLaunches): on this Triton release the direct path is taken for all
    five kernels and gives bit-identical results to Triton's launch path."""
    monkeypatch.setattr(mala_plan, '_plans', mala_plan._LRUCache(mala_plan.PLAN_CACHE_SIZE))
    q, k, v = make_qkv(1, 4, (32, 48), 64, torch.bfloat16, 'channels_last')
    rope = RoPE2d(64).to(DEVICE)(32, 48)
    dout = torch.randn(q.shape, device=DEVICE, dtype=q.dtype)

    def forward_backward():
        out = mala_attention(q, k, v, rope, impl='triton')
        return (out, *torch.autograd.grad(out, (q, k, v), dout))

    monkeypatch.setattr(mala_launches, 'DIRECT_LAUNCH', False)
    expected = forward_backward()
    monkeypatch.setattr(mala_launches, 'DIRECT_LAUNCH', True)
    for _ in range(2):
        for name, actual, wanted in zip(('out', 'dq', 'dk', 'dv'), forward_backward(), expected):
            assert torch.equal(actual, wanted), name
    cases = list(mala_plan._plans._entries.values())
    kernels = mala_launches.ForwardLaunches.KERNELS + mala_launches.BackwardLaunches.KERNELS
    assert len(cases) == 2
    assert all(case.compiled.direct(name) for case in cases
               for name in case.compiled._kernels), \
        {name: case.compiled.direct(name) for case in cases for name in case.compiled._kernels}
    assert sorted(name for case in cases for name in case.compiled._kernels) == sorted(kernels)
