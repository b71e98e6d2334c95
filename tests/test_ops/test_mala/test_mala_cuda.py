"""The fused MALA on a real NVIDIA GPU: the whole matrix of dtypes, head dims,
layouts, launch plans and batch x heads, forward and q/k/v gradients against
the float64 PyTorch reference, and the backbone at full resolution.

Skipped without CUDA (the CPU interpreter covers a subset in
``test_mala_numerics.py``); ``benchmarks/gpu_check.py`` runs it on a GPU.
"""
import dataclasses

import pytest
import torch

pytest.importorskip('triton')
if not torch.cuda.is_available():
    pytest.skip('needs a CUDA GPU', allow_module_level=True)

from devtools.mala_inputs import MALA_LAYOUTS, mala_inputs  # noqa: E402
from mavit_mm import MAViT  # noqa: E402
from mavit_mm.ops.mala import dispatch as mala_dispatch  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import mala_attention, mala_naive  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402

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
    """q, k, v on the GPU from the one factory (``devtools.mala_inputs``):
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
def test_default_split_grid_fills_whole_waves_on_this_gpu(head_dim):
    """The split-N grid of stage 1's case at B*heads 16 fills whole waves of
    RESIDENT_PROGRAMS_PER_SM programs on each of this GPU's SMs."""
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    assert mala_function.sm_count(DEVICE) == sms
    batch_heads = 16
    plan = mala_function.make_launch_plan(128 * 512, batch_heads, head_dim, torch.bfloat16,
                                          DEVICE)
    slots = mala_function.RESIDENT_PROGRAMS_PER_SM * sms
    programs = plan.num_chunks * batch_heads
    assert programs <= slots or programs % slots == 0, (programs, slots)


class SharedMemoryOf:
    """A kernel of the launch table whose launches note the shared memory the
    compiled kernel takes (Triton's CompiledKernel.metadata.shared)."""

    def __init__(self, name, kernel, shared):
        self.name, self.kernel, self.shared = name, kernel, shared

    def __getitem__(self, grid):
        def run(*args, **meta):
            compiled = self.kernel[grid](*args, **meta)
            self.shared[self.name] = max(self.shared.get(self.name, 0), compiled.metadata.shared)
            return compiled
        return run


@pytest.mark.parametrize('dtype_name', sorted(DTYPES))
@pytest.mark.parametrize('head_dim', [64, 128])
def test_the_static_gpu_check_covers_the_compiled_kernels(monkeypatch, head_dim, dtype_name):
    """dispatch.TRITON_SHARED_BYTES (forward, backward per padded head dim) is
    no less than what the kernels compiled for this GPU take, and this GPU
    passes the check."""
    for backward in (False, True):
        assert mala_dispatch._gpu_shortfall(DEVICE, head_dim, backward) is None
    shared = {}
    launch_table = mala_function.launch_table

    def noting(*args, **kwargs):
        return {name: (SharedMemoryOf(name, kernel, shared), meta)
                for name, (kernel, meta) in launch_table(*args, **kwargs).items()}
    monkeypatch.setattr(mala_function, 'launch_table', noting)
    q, k, v = make_qkv(1, 2, (16, 24), head_dim, DTYPES[dtype_name], 'channels_last')
    angle = RoPE2d(head_dim).angle.to(DEVICE)
    plan = mala_function.make_launch_plan(16 * 24, 2, head_dim, q.dtype, DEVICE)
    out, stats = mala_function.mala_forward(q, k, v, angle, 24, plan)
    mala_function.mala_backward(torch.ones_like(out), q, k, v, angle, stats, 24, plan)
    assert set(shared) == {*mala_function.FORWARD_KERNELS, *mala_function.BACKWARD_KERNELS}
    forward_bytes, backward_bytes = mala_dispatch.TRITON_SHARED_BYTES[head_dim]
    assert max(shared[name] for name in mala_function.FORWARD_KERNELS) <= forward_bytes, shared
    assert max(shared[name] for name in mala_function.BACKWARD_KERNELS) <= backward_bytes, shared


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
            if hasattr(module, 'options'):
                module.options = dataclasses.replace(module.options, mala_impl='torch')
        reference = model(images)
    for index, (a, b) in enumerate(zip(fused, reference)):
        assert relative_error(a.float(), b.float()) <= 5e-2, f'stage {index}'
