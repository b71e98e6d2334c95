"""2D RoPE: the rotation tables, their cache, their device and dtype."""
from __future__ import annotations

import pytest
import torch

from mavit_mm.models import MAViT
from mavit_mm.ops import attention
from mavit_mm.ops.mala import mala_attention
from mavit_mm.ops.rope2d import RoPE2d, RotaryTables, apply_rope, rope_angles
from mavit_mm.tooling.mala_inputs import mala_inputs

HEIGHT, WIDTH = 6, 10


def channel_contiguous_heads(batch=2, heads=2, head_dim=32, dtype=torch.float32, seed=0):
    """(B, heads, N, d) views of a channels_last map, as the backbone makes them."""
    return mala_inputs(batch, heads, HEIGHT, WIDTH, head_dim, dtype=dtype, seed=seed)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('layout', ['heads', 'contiguous', 'nchw'])
def test_rotate_equals_the_table_formula_with_gradients(dtype, layout):
    rope = RoPE2d(32).to(dtype)(HEIGHT, WIDTH)
    q, _, _ = channel_contiguous_heads(dtype=dtype)
    if layout == 'contiguous':
        q = q.contiguous()
    elif layout == 'nchw':                                 # channel stride N: no complex view
        q = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    q = q.detach().requires_grad_()
    q_ref = q.detach().clone().requires_grad_()
    out = rope.rotate(q)
    expected = apply_rope(q_ref, *rope.tables(dtype))
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
