"""2D RoPE: the rotation tables, their cache, their device and dtype."""
from __future__ import annotations

import pytest
import torch

from devtools.mala_inputs import mala_inputs
from devtools.op_log import OpLog
from mavit_mm.models import MAViT
from mavit_mm.ops import attention
from mavit_mm.ops.mala import mala_attention
from mavit_mm.ops.rope2d import (
    RoPE2d,
    RotaryTables,
    apply_rope,
    rope_angles,
    rotary_pair_weights,
    rotated_bias_table,
    rotated_projection,
)

HEIGHT, WIDTH = 6, 10


def channel_contiguous_heads(batch=2, heads=2, head_dim=32, dtype=torch.float32, seed=0):
    """(B, heads, N, d) views of a channels_last map, as the backbone makes them."""
    return mala_inputs(batch, heads, HEIGHT, WIDTH, head_dim, dtype=dtype, seed=seed)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('layout', ['heads', 'contiguous', 'nchw'])
def test_rotate_equals_the_table_formula_with_gradients(dtype, layout):
    """The complex multiply against the table formula; with a channel stride
    of N (nchw) rotate takes the table formula itself, so there it is held
    to the complex multiply of the same values laid out channel-contiguous."""
    rope = RoPE2d(32).to(dtype)(HEIGHT, WIDTH)
    q, _, _ = channel_contiguous_heads(dtype=dtype)
    if layout == 'contiguous':
        q = q.contiguous()
    elif layout == 'nchw':                                 # channel stride N: no complex view
        q = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    q = q.detach().requires_grad_()
    q_ref = q.detach().clone().requires_grad_()
    out = rope.rotate(q)
    expected = (rope.rotate(q_ref.contiguous()) if layout == 'nchw'
                else apply_rope(q_ref, *rope.tables(dtype)))
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(out, expected, **tol)
    grad = torch.randn_like(out)
    out.backward(grad)
    expected.backward(grad)
    torch.testing.assert_close(q.grad, q_ref.grad, **tol)
    if layout == 'heads':
        assert out.stride(-1) == 1                          # still channel-contiguous for SDPA


def test_rotate_takes_the_table_formula_for_unpaired_angles_and_half_inputs(monkeypatch):
    calls = []
    import mavit_mm.ops.rope2d as rope2d
    original = rope2d.apply_rope
    monkeypatch.setattr(rope2d, 'apply_rope', lambda *a: calls.append(a[0].dtype) or original(*a))
    q, _, _ = channel_contiguous_heads()
    unpaired = RotaryTables(torch.arange(16, dtype=torch.float32) / 16, HEIGHT, WIDTH)
    unpaired.rotate(q)
    RoPE2d(32)(HEIGHT, WIDTH).rotate(q.to(torch.bfloat16))
    RoPE2d(32)(HEIGHT, WIDTH).rotate(q)                    # paired fp32: complex multiply
    assert calls == [torch.float32, torch.bfloat16]


def test_tables_follow_the_device_asked_for():
    """A CPU angle serving meta tensors: any op that mixed the angle's device
    with the inputs' would raise here (as CUDA inputs would on a GPU)."""
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    cos, signed_sin = rope.tables(torch.float32, 'meta')
    assert cos.device.type == signed_sin.device.type == 'meta'
    assert rope.angle.device.type == 'cpu'
    q, k, v = (t.to('meta') for t in channel_contiguous_heads())
    assert rope.rotate(q).device.type == 'meta'
    assert mala_attention(q, k, v, rope, impl='torch').device.type == 'meta'
    for attn_type in ('softmax', 'linear', 'inline'):
        assert attention(q, k, v, attn_type, rope).device.type == 'meta'
    assert rope.angle_on('meta') is rope.angle_on('meta')  # moved once


def test_tables_are_cached_per_dtype_and_device():
    rope = RotaryTables(rope_angles(32), HEIGHT, WIDTH)
    cos, signed_sin = rope.tables(torch.float32)
    assert cos.shape == signed_sin.shape == (HEIGHT * WIDTH, 32)
    assert rope.tables(torch.float32)[0] is cos
    assert rope.tables(torch.float32, 'cpu')[0] is cos
    assert rope.tables(torch.float64)[0].dtype == torch.float64


@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16])
def test_half_models_keep_fp32_angles(dtype):
    model = MAViT('t', depths=[1, 1, 1, 1], mala_impl='torch')
    angles = {name: buf.clone() for name, buf in model.named_buffers() if name.endswith('angle')}
    model.to(dtype)
    assert model.layers[0].blocks[0].attn.qkvo.weight.dtype == dtype
    for name, buf in model.named_buffers():
        if name.endswith('angle'):
            assert buf.dtype == torch.float32
            assert torch.equal(buf, angles[name])
    # The tables of a half model are the fp32 tables, rounded once at the end.
    rope = model.layers[0].RoPE(8, 512)
    cos, _ = rope.tables(dtype)
    expected = torch.cos(torch.arange(512, dtype=torch.float64) * angles['layers.0.RoPE.angle'][0].double())
    head_dim = model.layers[0].RoPE.head_dim                # channels head_dim / 2.. are columns
    assert torch.equal(cos.reshape(8, 512, -1)[0, :, head_dim // 2], expected.to(dtype))
    model.double()                                        # fp64 is more, not less
    assert model.layers[0].RoPE.angle.dtype == torch.float64


def test_cached_rotation_follows_in_place_angle_edits():
    module = RoPE2d(32)
    first = module(HEIGHT, WIDTH)
    assert module(HEIGHT, WIDTH) is first
    with torch.no_grad():
        module.angle.mul_(2)
    second = module(HEIGHT, WIDTH)
    assert second is not first
    torch.testing.assert_close(second.tables(torch.float32)[0],
                               RotaryTables(module.angle.clone(), HEIGHT, WIDTH).tables(torch.float32)[0])
    for size in range(RoPE2d.CACHED_SIZES + 2):            # the cache stays small
        module(size + 1, size + 1)
    assert len(module._rotary) == RoPE2d.CACHED_SIZES


# -- the rotated projection of the softmax stages (switch dense_rope) ------------

def _plain_rotated_projection(x, weight, bias, rope):
    """The plain formula: the 1x1 convolution, then apply_rope on its heads."""
    t = torch.nn.functional.conv2d(x, weight, bias)
    head_dim = rope.angle.numel() * 2
    heads = t.flatten(2).unflatten(1, (-1, head_dim)).transpose(-1, -2)      # (B, h, N, d)
    rotated = apply_rope(heads, *rope.tables(x.dtype))
    return rotated.transpose(-1, -2).flatten(1, 2).unflatten(-1, t.shape[2:])


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize('batch, height, width', [(1, 6, 10), (3, 5, 7)])
def test_rotated_projection_equals_the_plain_formula_with_gradients(dtype, batch, height,
                                                                     width):
    """Outputs and the gradients of x, W and b against the plain formula in fp64."""
    generator = torch.Generator().manual_seed(0)
    in_channels, head_dim, heads = 24, 16, 3
    leaves64 = (torch.randn(batch, in_channels, height, width, generator=generator,
                            dtype=torch.float64).contiguous(memory_format=torch.channels_last),
                torch.randn(heads * head_dim, in_channels, 1, 1, generator=generator,
                            dtype=torch.float64),
                torch.randn(heads * head_dim, generator=generator, dtype=torch.float64))
    x, weight, bias = (t.to(dtype).requires_grad_() for t in leaves64)
    angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    rope = RoPE2d(head_dim).to(angle_dtype)(height, width)
    out = rotated_projection(x, rotary_pair_weights(weight),
                             rotated_bias_table(bias, rope, dtype), *rope.tables(dtype))
    reference_leaves = [t.detach().clone().requires_grad_() for t in leaves64]
    expected = _plain_rotated_projection(*reference_leaves,
                                         RoPE2d(head_dim).double()(height, width))
    assert out.shape == expected.shape and out.dtype == dtype
    assert out.is_contiguous(memory_format=torch.channels_last)
    # Relative to the largest value: bf16 rounds the products and the sums.
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    scale = expected.abs().max()
    torch.testing.assert_close(out.double() / scale, expected.detach() / scale, rtol=tol, atol=tol)

    grad = torch.randn(out.shape, generator=generator, dtype=torch.float64)
    out.backward(grad.to(dtype))
    expected.backward(grad)
    grad_tol = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    for ours, reference in zip((x, weight, bias), reference_leaves):
        scale = reference.grad.abs().max()
        torch.testing.assert_close(ours.grad.double() / scale, reference.grad / scale,
                                   rtol=grad_tol, atol=grad_tol)


def test_rotated_projection_runs_on_dense_operands_without_a_flip():
    """What the switch is for: no flip, and every elementwise operand dense."""
    rope = RoPE2d(16)(HEIGHT, WIDTH)
    x = torch.randn(1, 24, HEIGHT, WIDTH).contiguous(memory_format=torch.channels_last)
    weight, bias = torch.randn(48, 24, 1, 1), torch.randn(48)
    tables = rope.tables(torch.float32)
    pair_weights, bias_table = rotary_pair_weights(weight), rotated_bias_table(bias, rope,
                                                                                torch.float32)
    with OpLog(keep_operands=True) as ops:
        rotated_projection(x, pair_weights, bias_table, *tables)
    names = [name for name, _ in ops.calls]
    assert 'flip' not in names and names.count('addcmul') + names.count('addcmul_') == 2
    for name, operands in ops.calls:
        if name.startswith('addcmul'):
            assert all(t.is_contiguous() for t in operands), (name, [t.stride() for t in operands])
