"""The fused Triton MALA against the PyTorch reference, and the dispatch.

Without a GPU the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``
from tests/conftest.py), which is slow: shapes stay tiny. The reference is
``mala_naive`` in float64 on the same inputs.
"""
import ast
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

pytest.importorskip('triton')

from helpers.paths import REPO_ROOT  # noqa: E402

from mavit_mm import MAViT  # noqa: E402
from mavit_mm.ops import triton_support  # noqa: E402
from mavit_mm.ops.mala import dispatch as mala_dispatch  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import mala_attention, mala_naive  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d, RotaryTables  # noqa: E402
from mavit_mm.tooling.mala_inputs import mala_inputs  # noqa: E402

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
HEIGHT, WIDTH = 5, 7          # odd N = 35, not a multiple of any block
SMALL_BLOCKS = dict(block_n=16, tokens_per_chunk=16)   # 3 chunks, the last partial


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.double()
    return ((actual.double() - expected).abs().max() / expected.abs().max()).item()


def make_qkv(batch, heads, head_dim, dtype=torch.float32, qk_scale=1.0, v_scale=1.0,
             seed=0, layout='channels_last', height=HEIGHT, width=WIDTH):
    """q, k, v requiring grad on DEVICE, from the one factory
    (``mavit_mm.tooling.mala_inputs``): 'channels_last' (the model's, (B, N,
    heads, d) memory), 'nchw' (token-contiguous) or 'contiguous'."""
    return mala_inputs(batch, heads, height, width, head_dim, layout=layout, dtype=dtype,
                       device=DEVICE, requires_grad=True, seed=seed, qk_scale=qk_scale,
                       v_scale=v_scale)


def token_major(t: torch.Tensor) -> bool:
    """Whether a (B, heads, N, d) tensor is (B, N, heads, d) in memory."""
    return t.transpose(1, 2).is_contiguous()


def token_contiguous(t: torch.Tensor) -> bool:
    """Whether a (B, heads, N, d) tensor is (B, heads, d, N) in memory."""
    return t.transpose(-1, -2).is_contiguous()


def reference(q, k, v, dout, rope: RotaryTables):
    """Float64 output and grads of the PyTorch reference."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = mala_naive(q64, k64, v64, *rope.tables(torch.float64, q64.device))
    grads = torch.autograd.grad(out, (q64, k64, v64), dout.double())
    return out, grads


def fused_with_grads(q, k, v, dout, rope: RotaryTables, **plan):
    out = mala_function.fused_mala(q, k, v, rope.angle_on(q.device), rope.width, **plan)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return out, grads


def random_like(t: torch.Tensor, scale: float = 1.0, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(t.shape, generator=generator, dtype=torch.float64) * scale).to(t)


def check_against_reference(q, k, v, rope, tolerance, dout_scale=1.0, **plan):
    dout = random_like(q, dout_scale)
    out, grads = fused_with_grads(q, k, v, dout, rope, **plan)
    expected_out, expected_grads = reference(q, k, v, dout, rope)
    errors = {'out': relative_error(out, expected_out)}
    errors.update({name: relative_error(g, e) for name, g, e in
                   zip(('dq', 'dk', 'dv'), grads, expected_grads)})
    assert max(errors.values()) <= tolerance, errors
    return out, grads


# --------------------------------------------------------------------------
# Numerics
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
# Dispatch
# --------------------------------------------------------------------------
@pytest.fixture
def fresh_fallback_warnings(monkeypatch):
    monkeypatch.setattr(mala_dispatch.MALA_DISPATCH, '_warned', set())


def plain_qkv(head_dim, dtype=torch.float32, device=DEVICE):
    return mala_inputs(1, 2, HEIGHT, WIDTH, head_dim, layout='contiguous', dtype=dtype,
                       device=device)


def rope_for(head_dim):
    # RoPE2d refuses head dims that are not multiples of 4: build the tables directly.
    return RotaryTables(torch.ones(head_dim // 2), HEIGHT, WIDTH)


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the CPU fallback')
def test_auto_on_cpu_uses_torch_path_silently(monkeypatch, fresh_fallback_warnings):
    # On a CPU the PyTorch path is the best there is: no warning, even with the
    # interpreter on ('auto' never runs the interpreter).
    def no_triton(*args):
        raise AssertionError("'auto' must not run the kernels on CPU")
    monkeypatch.setattr(mala_dispatch, '_triton_mala', no_triton)
    q, k, v = plain_qkv(32)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        outs = [mala_attention(q, k, v, rope, impl='auto') for _ in range(3)]
    assert not [w for w in caught if 'falls back' in str(w.message)]
    expected = mala_attention(q, k, v, rope, impl='torch')
    assert all(torch.equal(out, expected) for out in outs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_auto_on_cuda_falls_back_once_per_reason(fresh_fallback_warnings):
    wide = plain_qkv(132)
    double = plain_qkv(32, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for _ in range(3):
            mala_attention(*wide, rope_for(132), impl='auto')
            mala_attention(*double, RoPE2d(32)(HEIGHT, WIDTH), impl='auto')
    assert len([w for w in caught if 'falls back' in str(w.message)]) == 2


def test_triton_rejects_head_dim_130():
    q, k, v = plain_qkv(130)
    with pytest.raises(ValueError, match='head dim 130'):
        mala_attention(q, k, v, rope_for(130), impl='triton')


def test_triton_rejects_float64():
    q, k, v = plain_qkv(32, dtype=torch.float64)
    with pytest.raises(ValueError, match='float64'):
        mala_attention(q, k, v, RoPE2d(32)(HEIGHT, WIDTH), impl='triton')


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setattr(triton_support, 'triton_interpreter_enabled', lambda: False)
    q, k, v = plain_qkv(32, device='cpu')
    with pytest.raises(RuntimeError, match='CUDA'):
        mala_attention(q, k, v, RoPE2d(32)(HEIGHT, WIDTH), impl='triton')


def test_unknown_impl_is_rejected():
    q, k, v = plain_qkv(32)
    with pytest.raises(ValueError, match='mala_impl'):
        mala_attention(q, k, v, RoPE2d(32)(HEIGHT, WIDTH), impl='cuda')


def test_triton_rejects_unpaired_rope_angles():
    q, k, v = plain_qkv(32)
    rope = RotaryTables(torch.arange(16, dtype=torch.float32), HEIGHT, WIDTH)
    with pytest.raises(ValueError, match='repeat each frequency'):
        mala_attention(q, k, v, rope, impl='triton')


def test_import_and_fallback_without_triton():
    script = (
        "import sys, warnings\n"
        "sys.modules['triton'] = None\n"          # makes `import triton` fail
        "import torch, mavit_mm\n"
        "from mavit_mm.ops.mala import mala_attention\n"
        "from mavit_mm.ops.rope2d import RoPE2d\n"
        "assert not any(m.startswith('triton') for m in sys.modules if sys.modules[m])\n"
        "q = k = v = torch.randn(1, 1, 12, 16)\n"
        "rope = RoPE2d(16)(3, 4)\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    mala_attention(q, k, v, rope, impl='auto')\n"
        "try:\n"
        "    mala_attention(q, k, v, rope, impl='triton')\n"
        "except RuntimeError as exc:\n"
        "    assert 'triton is not available' in str(exc) or 'CUDA' in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('no error without triton')\n"
    )
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


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
# The default plans that real feature maps get (several chunks, several tiles
# per program), as a GPU would choose them: the SM count is what decides.
# --------------------------------------------------------------------------
FP32, BF16 = (torch.float32, 1e-4), (torch.bfloat16, 2e-2)


@pytest.fixture
def fresh_plans():
    """The op's plan cache, empty, and emptied again afterwards: its plans may
    come from a patched SM count or tile table. (A plan is a function of the
    case's sizes, and of the SM count, which is fixed per device.)"""
    mala_function.cached_launch_plan.cache_clear()
    yield mala_function.cached_launch_plan
    mala_function.cached_launch_plan.cache_clear()


@pytest.fixture
def eight_sms(monkeypatch, fresh_plans):
    """A GPU of 8 SMs, whatever DEVICE is: on the CPU (1 "SM") and on a real
    GPU the default plans of the small maps below would differ."""
    monkeypatch.setattr(mala_function, 'sm_count', lambda device: 8)


# Each map size, dtype and layout twice. The maps are as small as keeps every
# path of a full-size map (with 8 SMs: 3 split-N chunks, the last one partial
# at 40x40; 3 tiles per output / key program, the last program partial at
# 30x56): the interpreter's time grows with the tokens.
@pytest.mark.parametrize('height,width,head_dim,dtype,tolerance,layout', [
    (40, 40, 32, *FP32, 'channels_last'), (40, 40, 32, *BF16, 'contiguous'),
    (30, 56, 64, *FP32, 'contiguous'), (30, 56, 64, *BF16, 'channels_last')])
def test_default_plan_with_chunks_and_token_loops_matches_reference(
        eight_sms, height, width, head_dim, dtype, tolerance, layout):
    # 8 SMs: the default plan splits N into several chunks and has each output /
    # key program loop over several tiles, the paths full-size maps take on a GPU.
    q, k, v = make_qkv(1, 3, head_dim, dtype, layout=layout, height=height, width=width)
    plan = mala_function.make_launch_plan(height * width, 3, head_dim, dtype, DEVICE)
    assert plan.num_chunks > 1
    assert plan.output_tokens_per_program > plan.output.block_n
    assert plan.key_tokens_per_program > plan.key.block_n
    rope = RoPE2d(head_dim)(height, width)
    check_against_reference(q, k, v, rope, tolerance)
    assert mala_function.cached_launch_plan.cache_info().currsize == 1   # the plan above
    assert mala_function.cached_launch_plan(height * width, 3, head_dim, dtype, DEVICE) == plan


# With 2 programs resident per SM (the expected counts are for it; the
# default, RESIDENT_PROGRAMS_PER_SM, follows the kernels' compile).
@pytest.mark.parametrize('sm_count,batch_heads,num_tokens,expected_programs', [
    (132, 16, 65536, 528),   # two whole waves of 264 programs, not 17 x 16 in three
    (132, 1, 65536, 128),    # B*heads = 1: 512-token chunks, one program per SM
    (132, 3, 64 * 64, 24),   # small maps: at least 512 tokens per chunk
])
def test_split_n_grid_fills_whole_waves(monkeypatch, sm_count, batch_heads, num_tokens,
                                        expected_programs):
    monkeypatch.setattr(mala_function, 'sm_count', lambda device: sm_count)
    for resident in (2, mala_function.RESIDENT_PROGRAMS_PER_SM):
        plan = mala_function.make_launch_plan(num_tokens, batch_heads, 64, torch.bfloat16,
                                              DEVICE, resident_per_sm=resident)
        slots = resident * sm_count
        programs = plan.num_chunks * batch_heads
        assert programs <= slots or programs % slots == 0, (resident, programs)
        assert plan.tokens_per_chunk >= mala_function.MIN_TOKENS_PER_CHUNK
        assert mala_function.fastest_chunk_count(num_tokens, batch_heads, slots) == \
            plan.num_chunks
        if resident == 2:
            assert programs == expected_programs
    # The default is RESIDENT_PROGRAMS_PER_SM.
    assert mala_function.make_launch_plan(num_tokens, batch_heads, 64, torch.bfloat16,
                                          DEVICE) == plan


@pytest.mark.parametrize('registers,shared_kib,num_warps,expected', [
    (124, 40, 8, 2),    # 8 warps of 124 registers: 128 x 256 = 32K each, 2 in 64K
    (255, 40, 8, 1),    # 256 x 256 fills the 64K registers
    (32, 100, 4, 2),    # shared memory binds: 2 x (100 + 1 reserved) KiB of 228
    (32, 0, 4, 16),     # tiny blocks: threads (2048 / 128) and the block limit
    (255, 0, 16, 1),    # never below 1
])
def test_resident_blocks_follow_the_tightest_sm_limit(registers, shared_kib, num_warps,
                                                      expected):
    # The rule behind the compile report's resident_per_sm, which
    # RESIDENT_PROGRAMS_PER_SM follows (test_default_resident_count_..._sm90_compile).
    from mavit_mm.tooling.gpu_compile_report import KernelResources, resident_blocks
    assert resident_blocks(KernelResources(registers, shared_kib * 1024, num_warps)) == expected


def test_resident_count_shapes_the_split_grid(monkeypatch):
    # 132 SMs, B*heads = 16, N = 65536: whole waves whatever the SM holds.
    monkeypatch.setattr(mala_function, 'sm_count', lambda device: 132)
    chunks = {}
    for resident in (1, 2, 3):
        plan = mala_function.make_launch_plan(65536, 16, 64, torch.bfloat16, DEVICE,
                                              resident_per_sm=resident)
        slots = resident * 132
        programs = plan.num_chunks * 16
        assert programs <= slots or programs % slots == 0, (resident, programs)
        chunks[resident] = plan.num_chunks
    assert len(set(chunks.values())) > 1, chunks   # the count does change the grid


# --------------------------------------------------------------------------
# The PyTorch operator: mavit_mm::mala, torch.compile, no host syncs
# --------------------------------------------------------------------------
def test_custom_op_passes_opcheck():
    q, k, v = make_qkv(batch=1, heads=2, head_dim=32)
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    angle = RoPE2d(32).angle.to(DEVICE)
    args = (q, k, v, angle, WIDTH, 16, 16, 0)
    torch.library.opcheck(torch.ops.mavit_mm.mala.default, args)
    out, stats = torch.ops.mavit_mm.mala(*args)
    dout = random_like(out)
    # No double backward: the backward op is checked on inputs without grad.
    backward_args = (dout, q.detach(), k.detach(), v.detach(), angle, stats.detach(), WIDTH,
                     16, 16, 0)
    torch.library.opcheck(torch.ops.mavit_mm.mala_backward.default, backward_args)


def _model_error(model, image, expected_out, expected_grad):
    image = image.clone().requires_grad_()
    outputs = model(image)
    loss = sum((out * torch.linspace(-1, 1, out.numel(), device=out.device, dtype=out.dtype)
                .view_as(out)).sum() for out in outputs)
    (grad,) = torch.autograd.grad(loss, image)
    out_error = max(relative_error(out, ref) for out, ref in zip(outputs, expected_out))
    return out_error, relative_error(grad, expected_grad)


# The Triton path goes through AOT autograd (the op's fake and autograd
# registrations). The PyTorch path is traced by dynamo the same way (fullgraph:
# no graph break) and run eagerly: under aot_eager (torch 2.13, CPU) its
# backward fails with "view size is not compatible", a reshape of a q/k/v
# gradient traced as a view whose real strides differ from the fake ones.
@pytest.mark.parametrize('impl,backend', [('triton', 'aot_eager'), ('torch', 'eager')])
def test_torch_compile_fullgraph_matches_eager_accuracy(impl, backend):
    torch.manual_seed(0)
    model = MAViT(arch='tiny', mala_impl=impl).to(DEVICE).eval()
    image = torch.randn(1, 3, 64, 96, device=DEVICE)
    # The float64 eager reference (the PyTorch path: the kernels have no fp64).
    reference_model = MAViT(arch='tiny', mala_impl='torch').to(DEVICE).double().eval()
    reference_model.load_state_dict(model.state_dict())
    image64 = image.double().requires_grad_()
    outputs64 = reference_model(image64)
    loss64 = sum((out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64,
                                       device=DEVICE).view_as(out)).sum() for out in outputs64)
    (grad64,) = torch.autograd.grad(loss64, image64)

    eager = _model_error(model, image, outputs64, grad64)
    torch._dynamo.reset()
    compiled_model = torch.compile(model, fullgraph=True, backend=backend)
    compiled = _model_error(compiled_model, image, outputs64, grad64)
    # As close to float64 as eager fp32 is (fp32 round-off, not a different result).
    for name, eager_error, compiled_error in zip(('out', 'grad'), eager, compiled):
        assert compiled_error <= max(2 * eager_error, 1e-5), (name, eager, compiled)


def test_forward_does_not_look_at_the_angle_values(monkeypatch):
    # The paired-angle check happens when RoPE2d is built or loaded: a forward
    # that compared the buffer would sync with the GPU (and break CUDA graphs).
    rope_module = RoPE2d(32).to(DEVICE)
    rope = rope_module(HEIGHT, WIDTH)
    q, k, v = plain_qkv(32)

    def no_equal(*args, **kwargs):
        raise AssertionError('torch.equal in the forward')
    monkeypatch.setattr(torch, 'equal', no_equal)
    mala_attention(q, k, v, rope, impl='triton')


def test_loading_unpaired_angles_is_caught_at_load_time():
    rope_module = RoPE2d(32)
    rope_module.load_state_dict({'angle': torch.arange(16, dtype=torch.float32)})
    assert not rope_module.angles_paired
    q, k, v = plain_qkv(32)
    with pytest.raises(ValueError, match='repeat each frequency'):
        mala_attention(q, k, v, rope_module(HEIGHT, WIDTH), impl='triton')
    rope_module.load_state_dict(RoPE2d(32).state_dict())
    assert rope_module.angles_paired
    mala_attention(q, k, v, rope_module.to(DEVICE)(HEIGHT, WIDTH), impl='triton')


# --------------------------------------------------------------------------
# Resource and version safety
# --------------------------------------------------------------------------
def out_of_resources():
    return mala_function.OutOfResources(300000, 232448, 'shared memory')


def test_out_of_resources_falls_back_under_auto(monkeypatch, fresh_fallback_warnings):
    def too_big(*args, **kwargs):
        raise out_of_resources()
    monkeypatch.setattr(mala_function, 'mala_forward', too_big)
    q, k, v = plain_qkv(32)
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        out = mala_dispatch._triton_or_fallback(q, k, v, rope, 'auto')
        mala_dispatch._triton_or_fallback(q, k, v, rope, 'auto')
    messages = [str(w.message) for w in caught if 'falls back' in str(w.message)]
    assert len(messages) == 1 and 'do not fit' in messages[0] and 'shared memory' in messages[0]
    assert torch.equal(out, mala_attention(q, k, v, rope, impl='torch'))
    with pytest.raises(RuntimeError, match="mala_impl='triton'.*do not fit"):
        mala_attention(q, k, v, rope, impl='triton')


def test_head_offsets_past_int32_are_refused():
    q = torch.empty_strided((1, 1, 65536, 64), (0, 0, 1, 2 ** 26), device='meta')
    reason = mala_dispatch._int32_offset_overflow(q, q, q)
    assert reason is not None and 'int32' in reason
    small = torch.empty_strided((1, 1, 65536, 64), (0, 0, 1, 65536), device='meta')
    assert mala_dispatch._int32_offset_overflow(small, small, small) is None


def test_unsupported_triton_version_is_refused_with_its_reason():
    script = (
        "import triton\n"
        "triton.__version__ = '3.11.0'\n"
        "import torch\n"
        "from mavit_mm.ops.mala import mala_attention\n"
        "from mavit_mm.ops.rope2d import RoPE2d\n"
        "q = k = v = torch.randn(1, 1, 12, 16)\n"
        "try:\n"
        "    mala_attention(q, k, v, RoPE2d(16)(3, 4), impl='triton')\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, '-c', script], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=120, env={**os.environ, 'TRITON_INTERPRET': '1'})
    assert result.returncode == 0, result.stderr[-2000:]
    assert 'triton 3.11.0 is outside the versions' in result.stdout


def test_no_gpu_check_off_cuda():
    # The CPU (the interpreter) has no GPU to be short of.
    for head_dim in (16, 64, 96, 128):
        for backward in (False, True):
            assert mala_dispatch._gpu_shortfall(torch.device('cpu'), head_dim,
                                                backward) is None


@pytest.mark.skipif(DEVICE.type == 'cuda', reason='compiles for sm_90 ahead of time on a CPU')
def test_default_resident_count_and_shared_memory_are_the_sm90_compile(tmp_path):
    # RESIDENT_PROGRAMS_PER_SM (the plans' programs per SM) must be what the
    # CUDA occupancy rules give for the sm_90 compile of the d = 64 split-N
    # forward kernel, and dispatch's TRITON_SHARED_BYTES (the static GPU check)
    # no less than what each d = 64 kernel's sm_90 compile takes.
    env = {key: value for key, value in os.environ.items() if key != 'TRITON_INTERPRET'}
    env['TRITON_CACHE_DIR'] = str(tmp_path / 'triton-cache')
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'bench_mala.py'), '--compile-report',
         '90', '--dtypes', 'bf16', 'fp32', '--head-dims', '64'],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    bf16_report, fp32_report = result.stdout.split('sm_90 fp32 d=64')
    lines = {name: next(line for line in bf16_report.splitlines() if f'_{name}_kernel' in line)
             for name in ('forward_partials', 'forward_combine', 'forward_output',
                          'backward_query', 'backward_key')}
    assert not [line for line in lines.values() if 'FAILED' in line], result.stdout
    partials = lines['forward_partials']
    assert f"'resident_per_sm': {mala_function.RESIDENT_PROGRAMS_PER_SM}," in partials, partials
    shared = {name: int(re.search(r"'shared_bytes': (\d+)", line).group(1))
              for name, line in lines.items()}
    forward_bytes, backward_bytes = mala_dispatch.TRITON_SHARED_BYTES[64]
    assert max(shared[name] for name in shared if name.startswith('forward')) <= forward_bytes, \
        shared
    assert max(shared[name] for name in shared if name.startswith('backward')) <= backward_bytes, \
        shared
    # The kernels' design on the model's layout: no spills, and every token
    # pass a Hopper warp-group product (the channel-order tiles; the pair-split
    # tiles of 32 rows compiled to mma.sync).
    usage = {name: ast.literal_eval(line[line.index('{'):]) for name, line in lines.items()}
    assert all(u['stack_bytes'] == 0 for u in usage.values()), usage
    assert all(usage[name]['wgmma'] > 0 for name in
               ('forward_partials', 'forward_output', 'backward_query', 'backward_key')), usage
    # fp32 (exact products, FP32_TILES): no spills either.
    fp32_usage = [ast.literal_eval(line[line.index('{'):]) for line in fp32_report.splitlines()
                  if '_kernel' in line]
    assert len(fp32_usage) == 5 and all(u['stack_bytes'] == 0 for u in fp32_usage), fp32_usage


def test_fp32_takes_its_own_tiles_where_half_tiles_would_spill():
    for head_dim, family in ((64, 'narrow'), (96, 'wide')):
        half = mala_function.make_launch_plan(4096, 2, head_dim, torch.bfloat16, DEVICE)
        full = mala_function.make_launch_plan(4096, 2, head_dim, torch.float32, DEVICE)
        for name in mala_function.KERNEL_NAMES:
            expected = mala_function.FP32_TILES[family].get(
                name, mala_function.KERNEL_TILES[family][name])
            assert getattr(full, name) == mala_function.KernelTile(*expected)
            assert getattr(half, name) == mala_function.KernelTile(
                *mala_function.KERNEL_TILES[family][name])
    assert mala_function.FP32_TILES['narrow']   # the override is not empty


def test_every_launch_says_its_fp_fusion():
    # The kernels ask for fused multiply-adds themselves (function.FP_FUSION),
    # so Triton 3.9 has no default to warn about and 3.10's new default
    # changes nothing.
    for head_dim in (32, 96):
        plan = mala_function.make_launch_plan(HEIGHT * WIDTH, 2, head_dim, torch.bfloat16, DEVICE)
        table = mala_function.launch_table(plan, whole_q_pairs=False, whole_k_pairs=True)
        assert set(table) == set(mala_function.FORWARD_KERNELS + mala_function.BACKWARD_KERNELS)
        assert all(meta['enable_fp_fusion'] is mala_function.FP_FUSION is True
                   for _, meta in table.values())
        assert table['output'][1]['WHOLE_PAIRS'] is False   # q's layout
        assert table['key'][1]['WHOLE_PAIRS'] is True       # k's layout


# --------------------------------------------------------------------------
# The host path: plans made once per case, the cache bounded
# --------------------------------------------------------------------------
def plan_of(q, block_n=0, tokens_per_chunk=0, tokens_per_program=0):
    """The plan the op takes for ``q`` (forward and backward alike)."""
    return mala_function._case_plan(q, block_n, tokens_per_chunk, tokens_per_program)


def test_a_layer_plans_once_and_stays_exact(fresh_plans):
    # New tensors (new addresses, new values) of the same case: the one plan of
    # its forward and backward is made on the first call only, and results
    # stay exact.
    rope = RoPE2d(32)(HEIGHT, WIDTH)
    for seed in range(3):
        q, k, v = make_qkv(batch=1, heads=2, head_dim=32, seed=seed)
        check_against_reference(q, k, v, rope, tolerance=1e-4, **SMALL_BLOCKS)
        info = fresh_plans.cache_info()
        assert (info.misses, info.currsize) == (1, 1), info
    assert info.hits == 2 * 3 - 1, info     # a lookup per forward and per backward


def test_another_case_makes_another_plan(fresh_plans):
    q = torch.randn(1, 2, HEIGHT * WIDTH, 32, device=DEVICE)
    first = plan_of(q)
    misaligned = torch.randn(q.numel() + 1, device=DEVICE)[1:].view(q.shape)
    assert misaligned.data_ptr() % 16 != 0
    # What the kernels read (strides, alignment, the map's width) is no part
    # of a plan: Triton specialises its launches on them itself.
    same = {
        'new tensors': torch.randn_like(q),
        'strides': q.transpose(-1, -2).contiguous().transpose(-1, -2),
        'channels_last': q.transpose(1, 2).contiguous().transpose(1, 2),
        'alignment': misaligned,
        'batch x heads': torch.randn(2, 1, HEIGHT * WIDTH, 32, device=DEVICE),
    }
    for name, other in same.items():
        assert plan_of(other) is first, name
    assert fresh_plans.cache_info().misses == 1
    others = {
        'batch': lambda: plan_of(torch.randn(2, 2, HEIGHT * WIDTH, 32, device=DEVICE)),
        'tokens': lambda: plan_of(torch.randn(1, 2, 48, 32, device=DEVICE)),
        'head dim': lambda: plan_of(torch.randn(1, 2, HEIGHT * WIDTH, 48, device=DEVICE)),
        'dtype': lambda: plan_of(q.half()),
        'block_n': lambda: plan_of(q, block_n=16),
        'tokens_per_chunk': lambda: plan_of(q, tokens_per_chunk=16),
        'tokens_per_program': lambda: plan_of(q, tokens_per_program=32),
    }
    for name, plan in others.items():
        made = fresh_plans.cache_info().misses
        assert plan() is not first, name                          # a new case: planned
        assert fresh_plans.cache_info().misses == made + 1, name
        plan()
        assert fresh_plans.cache_info().misses == made + 1, name  # and then cached
    assert plan_of(q, block_n=16).output.block_n == 16
    assert plan_of(q, tokens_per_chunk=16).num_chunks == 3
    assert plan_of(q.half()).dot_precision == 'tf32' and first.dot_precision == 'ieee'


def test_a_failed_plan_is_not_cached(fresh_plans):
    q = torch.randn(1, 2, HEIGHT * WIDTH, 32, device=DEVICE)
    for _ in range(2):
        with pytest.raises(ValueError, match='block_n'):
            plan_of(q, block_n=24)
    info = fresh_plans.cache_info()
    assert (info.misses, info.currsize) == (2, 0), info


def test_plan_cache_is_bounded_and_drops_the_least_recent(fresh_plans):
    size = mala_function.PLAN_CACHE_SIZE
    assert fresh_plans.cache_info().maxsize == size

    def plan(num_tokens):
        return plan_of(torch.empty(1, 1, num_tokens, 32, device=DEVICE))

    for num_tokens in range(1, size + 1):
        plan(num_tokens)
    plan(1)                        # now the most recently used
    plan(size + 1)                 # one case too many: 2 goes
    info = fresh_plans.cache_info()
    assert (info.currsize, info.misses) == (size, size + 1), info
    plan(1)
    plan(size + 1)
    assert fresh_plans.cache_info().misses == size + 1
    plan(2)
    assert fresh_plans.cache_info().misses == size + 2
    for num_tokens in range(size + 2, size + 22):
        plan(num_tokens)
    assert fresh_plans.cache_info().currsize == size


@pytest.mark.parametrize('shape', [(2, 3, 5, 4), (1, 2, 5, 4), (2, 1, 1, 4), (2, 3, 0, 4)])
def test_output_layouts_follow_the_input_stride_order(shape):
    # Results are dense with their dimensions in memory in the order of the
    # input's strides (ties, size-1 dimensions, in the logical order; an
    # expanded one outermost), for every order: what permuting a buffer laid
    # out that way gives.
    import itertools
    for order in itertools.permutations(range(4)):
        x = torch.empty([shape[dim] for dim in order]).permute([order.index(d) for d in range(4)])
        expected_order = sorted(range(4), key=lambda dim: (x.stride(dim) != 0, -x.stride(dim), dim))
        expected = x.new_empty([x.shape[dim] for dim in expected_order]).permute(
            [expected_order.index(dim) for dim in range(4)])
        out = mala_function.empty_like_layout(x)
        assert (out.shape, out.stride()) == (expected.shape, expected.stride()), order
        assert out.permute(expected_order).is_contiguous(), order


def test_dynamic_shapes_compile_the_op_with_symbolic_layouts(monkeypatch):
    # Under torch.compile(dynamic=True) the fake op lays its results out from
    # symbolic sizes and strides, and the compiled graph gives the eager
    # results and layouts for two token counts.
    symbolic = []
    empty_like_layout = mala_function.empty_like_layout

    def recording(x):
        symbolic.append(any(isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())))
        return empty_like_layout(x)
    monkeypatch.setattr(mala_function, 'empty_like_layout', recording)
    angle = RoPE2d(32).angle.to(DEVICE)

    def mala(x):
        q, k, v = x.unbind(0)
        return mala_function.fused_mala(q, k, v, angle, WIDTH, **SMALL_BLOCKS) * 2

    torch._dynamo.reset()
    compiled = torch.compile(mala, dynamic=True, fullgraph=True, backend='aot_eager')
    for height in (HEIGHT, HEIGHT + 1):
        # (3, B, heads, N, d): q, k, v channel-contiguous, as the backbone's
        x = torch.randn(3, 1, height * WIDTH, 2, 32, device=DEVICE).transpose(2, 3)
        out, expected = compiled(x), mala(x)
        assert out.stride() == expected.stride() and torch.allclose(out, expected)
    assert any(symbolic)


@pytest.mark.parametrize('launch', [
    'stub-kernels',
    # On a GPU, gpu_check's profile step measures the real launch path, and its
    # compiles for the stub would eat the model-tests step's budget.
    pytest.param('stub-driver', marks=pytest.mark.skipif(
        DEVICE.type == 'cuda', reason="a CPU benchmark of Triton's launch path"))])
def test_host_overhead_benchmark_runs_the_whole_path_with_stub_launches(tmp_path, launch):
    # The host-time benchmark (interpreter off, launches stubbed) checks the
    # launches a call makes: 3 for a forward, 5 for forward + backward. Under
    # the stub driver it runs Triton's launch path (the only one there is).
    env = {key: value for key, value in os.environ.items() if key != 'TRITON_INTERPRET'}
    output = tmp_path / 'host.json'
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'benchmarks' / 'mala_host_overhead.py'), '--calls', '2',
         '--rounds', '1', '--warmup', '1', '--image', '64', '64', '--launch', launch,
         '--output', str(output)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    import json
    report = json.loads(output.read_text())
    assert report['launch'] == launch
    assert {'forward', 'train'} <= set(report['results'])
    assert all(stage['median_us'] > 0 for mode in report['results'].values()
               for stage in mode['stages'])
    # No direct launches any more: one launch path, nothing to compare it with.
    assert 'triton_path' not in report and 'direct_launch_speedup' not in report


# --------------------------------------------------------------------------
# The combine kernel: chunks summed a block at a time (tl.sum over the block)
# --------------------------------------------------------------------------
# name: (height, width, head_dim, tokens per chunk, combine tile or None for the
# default). With the default narrow tile (2 rows, 4 warps) and d = 32, a block
# is 128 chunks for the means and 64 for the KV rows.
COMBINE_CASES = {
    # 225 chunks of one token: 2 mean blocks (128 + 97), 4 KV blocks (64 x 3 + 33).
    'many chunks': (15, 15, 32, 1, None),
    'one chunk': (HEIGHT, WIDTH, 16, 64, None),
    # odd N = 35 in 18 chunks, the last of 1 token; tiny tiles: 2 rows x 64
    # channels (d = 48 padded), 1 warp: mean blocks of 16 (16 + 2), KV blocks of
    # 8 (8 + 8 + 2), 24 programs per head.
    'odd N, tiny tiles': (HEIGHT, WIDTH, 48, 2, (2, 1, 1)),
    # 12 chunks, a KV block of 1 chunk and 32 rows: the second row block is half past d.
    'rows past d': (HEIGHT, WIDTH, 48, 3, (32, 1, 1)),
}
COMBINE_BLOCKS = {'many chunks': (225, 128, 64), 'one chunk': (1, 1, 1),
                  'odd N, tiny tiles': (18, 16, 8), 'rows past d': (12, 16, 1)}


def combine_case_plan(name):
    height, width, head_dim, tokens_per_chunk, tile = COMBINE_CASES[name]
    return mala_function.make_launch_plan(
        height * width, 1, head_dim, torch.float32, DEVICE, block_n=16,
        tokens_per_chunk=tokens_per_chunk, tiles=None if tile is None else {'combine': tile})


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


@pytest.mark.parametrize('name', list(COMBINE_CASES))
def test_combine_chunk_blocks_cover_the_cases(name):
    plan = combine_case_plan(name)
    meta = mala_function.launch_table(plan)['combine'][1]
    num_chunks, mean_chunks, kv_chunks = COMBINE_BLOCKS[name]
    assert (plan.num_chunks, meta['MEAN_CHUNKS'], meta['KV_CHUNKS']) == COMBINE_BLOCKS[name]
    assert mala_function.combine_chunk_blocks(plan) == (mean_chunks, kv_chunks)
    budget = mala_function.COMBINE_VALUES_PER_THREAD * plan.combine.num_warps * 32
    for chunks, values in ((mean_chunks, plan.block_d),
                           (kv_chunks, plan.combine.block_n * plan.block_d)):
        assert chunks & (chunks - 1) == 0                     # a power of two
        assert chunks == 1 or chunks * values <= budget        # the register budget
        assert chunks < 2 * num_chunks                         # no block of mostly padding


def test_combine_chunk_blocks_of_the_default_tiles():
    # One batch x head over 256 chunks: 8 KV rounds for d = 64
    # (32 chunks a block, 32 programs of 2 rows), 32 for d = 96 (8 a block, 24
    # programs of 4 rows).
    for head_dim, blocks, programs in ((64, (64, 32), 32), (96, (32, 8), 24)):
        plan = mala_function.make_launch_plan(256 * 512, 1, head_dim, torch.bfloat16, DEVICE,
                                              tokens_per_chunk=512)
        assert plan.num_chunks == 256
        assert mala_function.combine_chunk_blocks(plan) == blocks
        assert -(-head_dim // plan.combine.block_n) == programs


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
