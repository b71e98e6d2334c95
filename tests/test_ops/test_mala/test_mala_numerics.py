"""The fused Triton MALA's outputs and gradients against the PyTorch
reference (``mala_naive`` in float64 on the same inputs): layouts and dtypes,
the default plans real feature maps get, the combine kernel, the backbone.

Without a GPU the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``
from tests/conftest.py), which is slow: shapes stay tiny.
"""

import pytest
import torch

pytest.importorskip('triton')

from helpers.mala_cases import (  # noqa: E402
    COMBINE_BLOCKS,
    COMBINE_CASES,
    DEVICE,
    HEIGHT,
    SMALL_BLOCKS,
    WIDTH,
    check_against_reference,
    combine_case_plan,
    fused_with_grads,
    make_qkv,
    random_like,
    reference,
    relative_error,
)

from devtools.mala_inputs import mala_inputs  # noqa: E402
from mavit_mm import MAViT  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402


def token_major(t: torch.Tensor) -> bool:
    """Whether a (B, heads, N, d) tensor is (B, N, heads, d) in memory."""
    return t.transpose(1, 2).is_contiguous()



def token_contiguous(t: torch.Tensor) -> bool:
    """Whether a (B, heads, N, d) tensor is (B, heads, d, N) in memory."""
    return t.transpose(-1, -2).is_contiguous()



# --------------------------------------------------------------------------
# Outputs and gradients against the float64 reference
# --------------------------------------------------------------------------
@pytest.mark.parametrize('head_dim,layout', [(16, 'channels_last'), (48, 'nchw'),
                                             (64, 'channels_last'), (96, 'channels_last')])
def test_fp32_matches_reference_on_backbone_layouts(head_dim, layout):
    q, k, v = make_qkv(batch=2, heads=2, head_dim=head_dim, layout=layout)
    rope = RoPE2d(head_dim)(HEIGHT, WIDTH)
    out, grads = check_against_reference(q, k, v, rope, tolerance=1e-4, **SMALL_BLOCKS)
    # Results and gradients are dense in the inputs' order of dimensions, so
    # the backbone's merge of the heads (and the conv's backward) copies nothing.
    dense_in_input_order = token_major if layout == 'channels_last' else token_contiguous
    assert dense_in_input_order(out) and all(dense_in_input_order(g) for g in grads)



@pytest.mark.parametrize('expanded', ['q', 'k'])
def test_an_expanded_input_gets_its_own_gradient(expanded):
    """A q (or k) of batch 1 expanded to batch 2, as broadcasting gives it:
    stride 0 over the batch, channels contiguous. Its gradient is a dense
    buffer of its own whose channels stay contiguous, so the kernels' whole-pair
    stores land where they belong (they used to follow the input's channel
    stride into a gradient whose channels were strided: garbage)."""
    q, k, v = (t.detach() for t in make_qkv(batch=2, heads=1, head_dim=16, layout='contiguous'))
    inputs = dict(q=q, k=k, v=v)
    inputs[expanded] = inputs[expanded][:1].expand(2, -1, -1, -1)
    q, k, v = (inputs[name].requires_grad_() for name in ('q', 'k', 'v'))
    rope = RoPE2d(16)(HEIGHT, WIDTH)
    _, grads = check_against_reference(q, k, v, rope, tolerance=1e-4, **SMALL_BLOCKS)
    assert all(g.stride(-1) == 1 for g in grads)



def test_fp32_matches_reference_on_contiguous_layout_with_default_plan():
    q, k, v = mala_inputs(1, 3, HEIGHT, WIDTH, 32, layout='contiguous', device=DEVICE,
                          requires_grad=True, seed=3)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    out, _ = check_against_reference(q, k, v, rope, tolerance=1e-4)
    assert out.is_contiguous()



@pytest.mark.parametrize('head_dim', [48, 64])
def test_fp16_matches_reference(head_dim):
    q, k, v = make_qkv(batch=1, heads=2, head_dim=head_dim, dtype=torch.float16)
    rope = RoPE2d(head_dim)(HEIGHT, WIDTH)
    check_against_reference(q, k, v, rope, tolerance=1e-2, **SMALL_BLOCKS)



def test_bf16_matches_reference():
    # Triton 3.9's interpreter handles bf16 (its fp32 -> bf16 cast truncates,
    # hence the tolerance of a couple of bf16 ulps).
    q, k, v = make_qkv(batch=1, heads=2, head_dim=64, dtype=torch.bfloat16)
    rope = RoPE2d(64)(HEIGHT, WIDTH)
    check_against_reference(q, k, v, rope, tolerance=2e-2, **SMALL_BLOCKS)



def test_fp16_large_activations_stay_finite():
    # q, k ~ 1e3: z ~ 1e6 and KV ~ 1e3 overflow fp16 if kept in half. v and
    # dout are small so that the exact results themselves fit in fp16.
    q, k, v = make_qkv(batch=1, heads=2, head_dim=64, dtype=torch.float16,
                           qk_scale=1e3, v_scale=1e-2)
    rope = RoPE2d(64)(HEIGHT, WIDTH)
    dout = random_like(q, 1e-2)
    expected_out, expected_grads = reference(q, k, v, dout, rope)
    fp16_max = torch.finfo(torch.float16).max
    assert all(t.abs().max() < fp16_max / 2 for t in (expected_out, *expected_grads))
    out, grads = fused_with_grads(q, k, v, dout, rope, **SMALL_BLOCKS)
    for name, t in zip(('out', 'dq', 'dk', 'dv'), (out, *grads)):
        assert torch.isfinite(t).all(), name
    assert relative_error(out, expected_out) <= 1e-2
    assert max(relative_error(g, e) for g, e in zip(grads, expected_grads)) <= 1e-2



# --------------------------------------------------------------------------
# The backbone
# --------------------------------------------------------------------------
def test_mavit_with_triton_mala_matches_published_outputs(parity_data, monkeypatch):
    calls = []
    fused = mala_function.fused_mala

    def counting_fused(*args, **kwargs):
        calls.append(args[0].shape)
        return fused(*args, **kwargs)
    monkeypatch.setattr(mala_function, 'fused_mala', counting_fused)

    model = MAViT(**parity_data['config'], mala_impl='triton')
    model.load_state_dict({key: value.float() for key, value in parity_data['state_dict'].items()})
    model.to(DEVICE).eval()
    with torch.no_grad():
        outputs = model(parity_data['input'].float().to(DEVICE))
    assert calls, 'the Triton path was not used'
    for index, (output, expected) in enumerate(zip(outputs, parity_data['outputs'])):
        assert relative_error(output.cpu(), expected) <= 1e-4, f'stage {index}'



# --------------------------------------------------------------------------
# The default plans that real feature maps get (several chunks, several tiles per
# program), as a GPU would choose them: the SM count is what decides.
# --------------------------------------------------------------------------
FP32, BF16 = (torch.float32, 1e-4), (torch.bfloat16, 2e-2)



@pytest.fixture
def eight_sms(monkeypatch, fresh_plans):
    """A GPU of 8 SMs, whatever DEVICE is: on the CPU (1 "SM") and on a real
    GPU the default plans of the small maps below would differ."""
    monkeypatch.setattr(mala_function, 'sm_count', lambda device: 8)



# Each map size, dtype and layout twice. The maps, and their 2 heads, are as
# few as keep every path of a full-size map (with 8 SMs: 3 split-N chunks, the
# last one partial at 40x40; 2-4 tiles per output / key program, the last
# program partial at 30x56): the interpreter's time grows with the tokens.
@pytest.mark.parametrize('height,width,head_dim,dtype,tolerance,layout', [
    (40, 40, 32, *FP32, 'channels_last'), (40, 40, 32, *BF16, 'contiguous'),
    (30, 56, 64, *FP32, 'contiguous'), (30, 56, 64, *BF16, 'channels_last')])
def test_default_plan_with_chunks_and_token_loops_matches_reference(
        eight_sms, height, width, head_dim, dtype, tolerance, layout):
    # 8 SMs: the default plan splits N into several chunks and has each output /
    # key program loop over several tiles, the paths full-size maps take on a GPU.
    q, k, v = make_qkv(1, 2, head_dim, dtype, layout=layout, height=height, width=width)
    plan = mala_function.make_launch_plan(height * width, 2, head_dim, dtype, DEVICE)
    assert plan.num_chunks > 1
    assert plan.output_tokens_per_program > plan.output.block_n
    assert plan.key_tokens_per_program > plan.key.block_n
    rope = RoPE2d(head_dim)(height, width)
    check_against_reference(q, k, v, rope, tolerance)
    # The op's one cached plan is the plan above: its own lookup hits it.
    before = mala_function.cached_launch_plan.cache_info()
    assert before.currsize == 1
    assert mala_function._case_plan(q, 0, 0, 0) == plan
    assert mala_function.cached_launch_plan.cache_info().hits == before.hits + 1



# --------------------------------------------------------------------------
# The combine kernel: chunks summed a block at a time (tl.sum over the block)
# --------------------------------------------------------------------------
@pytest.fixture
def combine_tile(monkeypatch, fresh_plans):
    """Sets the default combine tile of the case's head width (fused_mala takes
    no tile overrides), with a fresh plan cache so no other test sees it."""

    def use(head_dim, tile):
        if tile is not None:
            family = mala_function.tile_family(head_dim)
            tiles = {name: dict(table) for name, table in mala_function.KERNEL_TILES.items()}
            tiles[family]['combine'] = tile
            monkeypatch.setattr(mala_function, 'KERNEL_TILES', tiles)
    return use



def reference_stats(k, v, rope):
    """The forward's saved stats in float64, (B*heads, d + 3, d): the centred
    KVc = (s/N) kr^T (v - vm), then mean ka, mean kr, mean v."""
    k64, v64 = k.detach().double(), v.detach().double()
    num_tokens, head_dim = k.shape[-2:]
    ka = torch.nn.functional.elu(k64) + 1
    kr = rope.rotate(ka.contiguous())
    vm = v64.mean(-2, keepdim=True)
    kv = (head_dim ** -0.5 / num_tokens) * kr.transpose(-1, -2) @ (v64 - vm)
    means = torch.stack([ka.mean(-2), kr.mean(-2), vm.squeeze(-2)], dim=-2)
    return torch.cat([kv, means], dim=-2).flatten(0, 1)



@pytest.mark.parametrize('name', list(COMBINE_CASES))
def test_combine_stats_match_float64(name):
    # The stats the combine kernel writes, each part against float64 (errors
    # ~1e-7 here). v has a mean 50x its spread and k one of 3: uncentred, the
    # sums are 100-240x KVc and their fp32 rounding alone would be ~1e-5 of it,
    # so the centring must survive the blocked sums.
    height, width, head_dim, _, _ = COMBINE_CASES[name]
    plan = combine_case_plan(name)
    q, k, v = (t.detach() for t in make_qkv(1, 1, head_dim, height=height, width=width,
                                              seed=4))
    k, v = k + 3.0, v + 50.0
    rope = RoPE2d(head_dim)(height, width)
    _, stats = mala_function.mala_forward(q, k, v, rope.angle_on(DEVICE), width, plan)
    expected = reference_stats(k, v, rope)
    for part, rows in (('KVc', slice(0, head_dim)), ('km', head_dim), ('krm', head_dim + 1),
                       ('vm', head_dim + 2)):
        assert relative_error(stats[:, rows], expected[:, rows]) <= 2e-6, part



@pytest.mark.parametrize('name', list(COMBINE_CASES))
def test_combine_blocks_give_reference_outputs_and_grads(name, combine_tile):
    height, width, head_dim, tokens_per_chunk, tile = COMBINE_CASES[name]
    combine_tile(head_dim, tile)
    plan = mala_function.make_launch_plan(height * width, 1, head_dim, torch.float32, DEVICE,
                                          block_n=16, tokens_per_chunk=tokens_per_chunk)
    assert (plan.num_chunks, *mala_function.combine_chunk_blocks(plan)) == COMBINE_BLOCKS[name]
    # B * heads = 1, the case the blocked combine is for.
    q, k, v = make_qkv(1, 1, head_dim, height=height, width=width, seed=5)
    rope = RoPE2d(head_dim)(height, width)
    check_against_reference(q, k, v, rope, tolerance=1e-4, block_n=16,
                            tokens_per_chunk=tokens_per_chunk)

