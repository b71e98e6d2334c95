"""The lean bf16 forward as a contract, counted without a clock.

Counted by the rule in ``devtools/op_census.py`` (its module
docstring): the steady-state forward (the second, in a fresh bf16 autocast
context) of MAViT-T with the fused MALA op and the fused depthwise stages
under Triton's interpreter, one 128x256 image. The targets: no mixed-dtype
elementwise op, no mixed-layout one (the gates ``o * (...)``, whose operand
is a channel slice of the qkvo map, were the last: the fused LePE stage reads
it in place), at most 10 weight casts, at most 220 non-view ops. The first
forward also fills the caches later ones reuse (RoPE tables, folded and cast
weights).

Under bf16 autocast the activations stay bf16: a norm computes in fp32 inside
its one op, fp32 layer scales do not promote the residual stream, and the
stages return bf16 as Swin's do.

A count reads no values: in the counted forwards the fused ops launch no
kernel (``fused_launches_skipped``), so the interpreter does not spend a
minute on numbers nobody looks at. The custom ops are dispatched all the same,
and counted once a call; their numerics are the op tests', and the compile
test below runs the real MALA kernels.
"""
from __future__ import annotations

import pytest
import torch
from helpers.models import needs_downstream

from devtools.op_census import (
    CENSUS_SIZE,
    LARGE_OPERAND,
    OpCensus,
    first_and_steady,
    forward_census,
    fused_launches_skipped,
    listing,
    mavit_t,
)
from devtools.op_log import OpLog
from mavit_mm.models import MAViT
from mavit_mm.models.mavit import MAViTBlock, MAViTStage

pytest.importorskip('triton')

HEIGHT, WIDTH = CENSUS_SIZE
MAX_MIXED_DTYPE = 0
MAX_MIXED_LAYOUT = 0
MAX_WEIGHT_CASTS = 10
MAX_NON_VIEW_OPS = 220


def image() -> torch.Tensor:
    return torch.randn(1, 3, HEIGHT, WIDTH, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope='module')
def censuses(one_torch_thread):
    """MAViT-T's first forward's census and the steady one's."""
    with fused_launches_skipped():
        return first_and_steady(mavit_t(), image())


def test_no_mixed_dtype_elementwise_ops(censuses):
    steady = censuses[1]
    assert len(steady.mixed_dtype) <= MAX_MIXED_DTYPE, '\n' + listing(steady.mixed_dtype)


def test_no_mixed_layout_elementwise_ops(censuses):
    steady = censuses[1]
    assert len(steady.mixed_layout) <= MAX_MIXED_LAYOUT, '\n' + listing(steady.mixed_layout)


def test_weight_casts(censuses):
    steady = censuses[1]
    assert len(steady.weight_casts) <= MAX_WEIGHT_CASTS, '\n' + listing(steady.weight_casts)


def test_non_view_ops_per_forward(censuses):
    steady = censuses[1]
    assert steady.total <= MAX_NON_VIEW_OPS, dict(steady.ops.most_common())


def test_the_fused_ops_run_every_block(censuses):
    for census in censuses:
        assert census.ops['mala'] == 4, census.summary()   # MAViT-T's MALA blocks, one op each
        for stage in ('position_norm', 'gated_lepe'):
            assert census.ops[stage] == 12, census.summary()       # one of each per block
        # Off by default: measured slower than GELU and the folded convolution (fast_paths).
        assert census.ops['ffn_middle'] == 0, census.summary()


def test_only_the_image_is_cast(censuses):
    """What remains is the image: fp32 in, cast once where it is made channels_last."""
    for census in censuses:
        assert [(cast.operands[0].shape, cast.note) for cast in census.activation_casts] == [
            ((1, 3, HEIGHT, WIDTH), 'float32 -> bfloat16')], listing(census.activation_casts)


def test_blocks_and_stages_return_bf16(one_torch_thread):
    """(The PyTorch MALA path here; the compile test below runs the fused op's
    kernels and checks its stage outputs' dtype.)"""
    torch.manual_seed(0)
    model = MAViT('tiny', mala_impl='torch').eval()
    dtypes = {}

    def record(name):
        def hook(module, args, output):
            dtypes[name] = output[0].dtype if isinstance(output, tuple) else output.dtype
        return hook

    handles = [module.register_forward_hook(record(name)) for name, module in
               model.named_modules() if isinstance(module, (MAViTBlock, MAViTStage))]
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        outputs = model(image()[:, :, :64, :64])
    for handle in handles:
        handle.remove()
    assert len(dtypes) == sum(model.depths) + len(model.depths)
    assert set(dtypes.values()) == {torch.bfloat16}, dtypes
    assert [out.dtype for out in outputs] == [torch.bfloat16] * 4


def test_training_forward_keeps_bf16_and_every_parameter_gets_a_gradient(one_torch_thread):
    """With gradients the residual adds are not in place (autograd needs their
    inputs); the stream stays bf16 and every parameter gets a gradient."""
    torch.manual_seed(0)
    model = MAViT('tiny', depths=[1, 1, 1, 1], mala_impl='torch', drop_path_rate=0.1).train()
    with torch.autocast('cpu', dtype=torch.bfloat16), OpLog() as log:
        outputs = model(image()[:, :, :64, :64])
        assert [out.dtype for out in outputs] == [torch.bfloat16] * 4
        loss = sum(out.float().square().mean() for out in outputs)
    residuals = 2 * sum(model.depths)
    # Each residual a new map (one addcmul), none written into the stream
    # (addcmul_, as without gradients: test_fast_paths.py).
    assert log.ops['addcmul'] == residuals, log.ops
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing


@needs_downstream
def test_fewer_ops_and_bytes_than_swin_t(censuses, one_torch_thread):
    """Against the census's Swin-T (mmseg's, the UperNet baseline's backbone)."""
    from devtools.op_census import swin_t
    swin_steady = first_and_steady(swin_t(), image())[1]
    steady = censuses[1]
    assert steady.total < swin_steady.total, (steady.summary(), swin_steady.summary())
    assert steady.bytes_moved < swin_steady.bytes_moved, (steady.summary(),
                                                           swin_steady.summary())


# -- the counting rule on hand-made cases ---------------------------------------

def _census(*inputs, model=None):
    return OpCensus(inputs=inputs, model=model)


def test_a_strided_slice_times_a_dense_map_is_mixed_layout():
    qkvo = torch.randn(1, 256, 16, 16).to(memory_format=torch.channels_last)
    gate, dense = qkvo[:, 192:], torch.randn(1, 64, 16, 16).to(memory_format=torch.channels_last)
    with _census(qkvo) as census:
        gate * dense                        # the gate: a channel slice, not dense
        dense + dense                       # one layout, dense
        dense[:, :8] * dense[:, :8]         # not dense, but small: 2,048 elements
    assert [(r.op, r.note) for r in census.report.mixed_layout] == [('mul', 'not dense')]
    assert 8 * 16 * 16 <= LARGE_OPERAND < 64 * 16 * 16


def test_dense_maps_of_different_layouts_are_mixed_layout():
    nchw = torch.randn(1, 64, 16, 16)
    nhwc = nchw.contiguous(memory_format=torch.channels_last)
    with _census(nchw) as census:
        nchw + nhwc
        nhwc.contiguous()                   # a conversion: the result is not an operand
        nhwc.permute(0, 2, 3, 1) * nhwc.permute(0, 2, 3, 1)   # permuted, dense, alike
    assert [(r.op, r.note) for r in census.report.mixed_layout] == [('add', 'layouts differ')]


def test_a_broadcast_table_is_judged_on_the_dims_it_has():
    """A (N, d) table against (B, heads, N, d) maps: only N and d are compared,
    so a token-major map (N outside heads, as the model's head views) meets
    the table in one layout; a table stored (d, N) does not."""
    table = torch.randn(128, 64)
    token_major = torch.randn(1, 128, 8, 64).transpose(1, 2)      # dense, (B, N, h, d) memory
    transposed_table = torch.randn(64, 128).t()
    with _census(token_major) as census:
        token_major * table
        token_major * transposed_table
    assert [(r.op, r.note) for r in census.report.mixed_layout] == [('mul', 'layouts differ')]
    assert census.report.mixed_layout[0].operands[1].stride == (1, 128)


def test_unary_ops_on_a_strided_view_are_mixed_layout():
    """Unary elementwise ops count too: ``flip`` (untagged, but it moves
    elements one to one) and the strided copy ``.contiguous()`` of a view that
    is not dense; neither of a dense tensor."""
    qk = torch.randn(1, 1024, 8, 16).to(memory_format=torch.channels_last)[:, :512]
    heads = qk.reshape(1, -1, 64, 128).transpose(-1, -2)             # (1, 8, 128, 64), not dense
    dense = torch.randn(1, 8, 128, 64)
    with _census(qk) as census:
        heads.reshape(1, 8, 128, 32, 2).flip(-1)
        heads.contiguous()
        dense.reshape(1, 8, 128, 32, 2).flip(-1)
        dense.transpose(1, 2).contiguous()
    assert [(r.op, r.note) for r in census.report.mixed_layout] == [('flip', 'not dense'),
                                                                     ('clone', 'not dense')]


def test_an_fp32_weight_meeting_a_bf16_map_is_mixed_dtype():
    conv = torch.nn.Conv2d(8, 8, 1)
    scale = torch.nn.Parameter(torch.ones(1, 8, 1, 1))
    x = torch.randn(1, 8, 4, 4, dtype=torch.bfloat16)
    with torch.no_grad(), _census(x) as census:
        x * scale                                        # fp32 weight, bf16 map
        x.clone().addcmul_(x, scale)                     # in place too
        x * torch.tensor(2.0)                            # a 0-dim tensor is a scalar
        x * scale.to(torch.bfloat16)                     # one dtype
        conv.weight.float() + 1                          # one dtype (no cast either)
    assert [r.op for r in census.report.mixed_dtype] == ['mul', 'addcmul_']
    assert {o.dtype for o in census.report.mixed_dtype[0].operands} == {'bfloat16', 'float32'}


def test_casts_of_weights_and_of_activations_by_provenance():
    """A cast of a parameter, a buffer, or what is computed from them alone is
    a weight cast (named after its parameter); a cast of anything computed
    from the input is an activation cast, whatever its size."""
    model = torch.nn.Sequential(torch.nn.Conv2d(64, 64, 3), torch.nn.BatchNorm2d(64))
    conv, norm = model
    x = torch.randn(1, 64, 8, 8)
    with torch.no_grad(), _census(x, model=model) as census:
        conv.weight.to(torch.bfloat16)
        (conv.weight + 1).to(torch.bfloat16)
        norm.running_mean.to(torch.float16)
        (x * conv.bias[:, None, None]).to(torch.bfloat16)
        conv.weight.to(memory_format=torch.channels_last)  # no dtype change: no cast
        torch.empty(64, dtype=torch.bfloat16).copy_(conv.bias)   # a copy across dtypes
        x.permute(0, 2, 3, 1)
    report = census.report
    assert [r.source for r in report.weight_casts] == ['0.weight', '0.weight',
                                                        '1.running_mean', '0.bias']
    assert [r.operands[0].shape for r in report.activation_casts] == [(1, 64, 8, 8)]
    assert report.weight_cast_bytes == (64 * 64 * 9 * (4 + 2) * 2 + 64 * (4 + 2)
                                        + 64 * (4 + 2))   # weights, running mean, bias
    assert report.ops == {'_to_copy': 5, 'add': 1, 'mul': 1, 'empty': 1, 'copy_': 1}   # no view


def test_bytes_read_and_written():
    """Operands read, results written, elements as held in memory (a broadcast
    dimension once); an in-place op reads and writes ``self``; an allocation
    moves nothing; a view moves nothing."""
    a, b = torch.randn(64, 64), torch.randn(64, 1)
    with _census(a) as census:
        a * b.expand(64, 64)              # reads 64 * 64 + 64, writes 64 * 64
        a.add_(1.0)                       # reads and writes 64 * 64
        torch.empty(1000)
        a.t()
    assert census.report.bytes_read == 4 * (2 * 64 * 64 + 64)
    assert census.report.bytes_written == 4 * 2 * 64 * 64


def test_forward_census_counts_the_call_in_its_own_autocast_context():
    """Autocast reuses its casts of a parameter within one context; each
    census opens its own, so every forward counts them."""
    model = torch.nn.Conv2d(3, 8, 1)
    x = torch.randn(1, 3, 8, 8)
    first, steady = first_and_steady(model, x)
    assert len(first.weight_casts) == len(steady.weight_casts) == 2   # weight and bias
    assert forward_census(model, x, autocast_dtype=None).casts == 0


def test_lean_forward_compiles_whole_with_the_fused_op(one_torch_thread):
    """``torch.compile(fullgraph=True)`` traces the bf16 inference forward
    without a graph break (the caches, in-place adds, the dense and joint
    rotations and the folded residual convolutions step aside while compiling:
    inductor fuses the plain formulas) and gives the eager result of those
    plain formulas exactly, and the default eager result up to bf16
    rounding."""
    torch.manual_seed(0)
    # (MAViT-T's stages, a block or two each: every kind of block, less to trace.)
    model = MAViT('tiny', depths=[1, 1, 2, 1], mala_impl='triton').eval()
    plain = MAViT('tiny', depths=[1, 1, 2, 1], mala_impl='triton',
                  fast_paths=dict(dense_rope=False, joint_qk_rotation=False,
                                  folded_residual_conv=False)).eval()
    plain.load_state_dict(model.state_dict())
    x = image()[:, :, :64, :96]
    torch._dynamo.reset()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        eager, expected = model(x), plain(x)
        outputs = torch.compile(model, fullgraph=True, backend='aot_eager')(x)
    for out, ref, default in zip(outputs, expected, eager):
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
        error = (out.float() - default.float()).norm() / default.float().norm()
        assert error < 0.03, error
