"""The lean bf16 forward as a contract, counted without a clock.

Under bf16 autocast the activations stay bf16: a norm computes in fp32 inside
its one op, fp32 layer scales do not promote the residual stream, and the
stages return bf16 as Swin's do. Counted as ``mavit_mm.tooling.op_census``
counts (non-view aten ops; the fused MALA op under Triton's interpreter is one
op, as one launch on CUDA), at 128x256, batch 1.

Per forward means the steady state, a forward after the first: the first one
also fills the caches the later ones reuse (RoPE tables per size, the folded
depthwise kernels per weight value), and both counts are checked.

A count reads no values: in the counted forwards the fused op's kernel
launches are skipped (its pass returns zeroed buffers of the real layout), so
the interpreter does not spend a minute on numbers nobody looks at. The
custom op is dispatched all the same, and counted once a call; its numerics
are the op tests', and the compile test below runs the real kernels.
"""
from __future__ import annotations

import pytest
import torch
from helpers.models import needs_downstream

from mavit_mm.models import MAViT
from mavit_mm.models.mavit import MAViTBlock, MAViTStage
from mavit_mm.tooling.op_census import OpCensus, forward_census

pytest.importorskip('triton')

from mavit_mm.ops.mala import function as mala_function  # noqa: E402

HEIGHT, WIDTH = 128, 256
MAX_ACTIVATION_CASTS = 12
MAX_OPS_PER_FORWARD = 450


def image() -> torch.Tensor:
    return torch.randn(1, 3, HEIGHT, WIDTH, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope='module')
def mavit_t():
    torch.manual_seed(0)
    return MAViT('tiny', mala_impl='triton').eval()


def _launchless_forward(q, k, v, angle, width, plan, compiled=None):
    """The fused forward's outputs, laid out as the kernels write them, unlaunched."""
    from mavit_mm.ops.mala.launches import ForwardLaunches
    launches = ForwardLaunches(q, k, v, angle, width, plan)
    return launches.out.zero_(), launches.stats.zero_()


@pytest.fixture(scope='module')
def censuses(mavit_t, one_torch_thread):
    """The first forward's census and a later one's."""
    x = image()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mala_function, 'mala_forward', _launchless_forward)
        return forward_census(mavit_t, x), forward_census(mavit_t, x)


def test_only_the_image_is_cast(censuses):
    first, steady = censuses
    for census in censuses:
        assert len(census.activation_casts) <= MAX_ACTIVATION_CASTS, census.activation_casts
    # What remains is the image: fp32 in, cast once where it is made channels_last.
    assert [cast[1:] for cast in steady.activation_casts] == [
        ((1, 3, HEIGHT, WIDTH), 'torch.float32', 'torch.bfloat16')]


def test_ops_per_forward(censuses):
    first, steady = censuses
    assert steady.total <= MAX_OPS_PER_FORWARD, steady.summary()
    assert steady.ops['mala'] == 4, steady.summary()   # the fused op runs MAViT-T's MALA blocks
    # What the first forward adds is filling caches: the folded depthwise
    # kernels (a sum and a cast each, 24 layers) and two stages' RoPE tables.
    assert first.total - steady.total <= 2 * 24 + 2 * 15, (first.summary(), steady.summary())


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


def test_training_forward_keeps_bf16_and_learns(one_torch_thread):
    """With gradients the residual adds are not in place and the folded kernels
    are rebuilt each call; the stream stays bf16 and every parameter gets a
    gradient."""
    torch.manual_seed(0)
    model = MAViT('tiny', depths=[1, 1, 1, 1], mala_impl='torch', drop_path_rate=0.1).train()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        outputs = model(image()[:, :, :64, :64])
        assert [out.dtype for out in outputs] == [torch.bfloat16] * 4
        loss = sum(out.float().square().mean() for out in outputs)
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert not missing


@needs_downstream
def test_fewer_ops_than_mmdets_swin_t(censuses, one_torch_thread):
    from mmdet.models.backbones import SwinTransformer
    torch.manual_seed(0)
    swin = SwinTransformer(convert_weights=False)
    swin.eval()   # mmdet's Swin.train returns None, so no chaining
    x = image()
    forward_census(swin, x)
    swin_steady = forward_census(swin, x)
    assert censuses[1].total < swin_steady.total, (censuses[1].summary(), swin_steady.summary())


def test_census_counts_activation_casts_by_provenance():
    """A cast of a weight is not an activation cast, whatever its size; a cast
    of anything computed from the input is."""
    weight = torch.randn(64, 64, 3, 3)
    x = torch.randn(1, 64, 8, 8)
    with OpCensus(inputs=(x,)) as census:
        weight.to(torch.bfloat16)
        (x * 2).to(torch.bfloat16)
        x.permute(0, 2, 3, 1)
    assert census.report.casts == 2
    assert [cast[1] for cast in census.report.activation_casts] == [(1, 64, 8, 8)]
    assert census.report.ops == {'_to_copy': 2, 'mul': 1}   # the view is not counted


def test_lean_forward_compiles_whole_with_the_fused_op(one_torch_thread):
    """``torch.compile(fullgraph=True)`` traces the bf16 inference forward
    without a graph break (the caches and in-place adds step aside while
    compiling) and gives the eager result."""
    torch.manual_seed(0)
    model = MAViT('tiny', mala_impl='triton').eval()
    x = image()[:, :, :64, :96]
    torch._dynamo.reset()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        expected = model(x)
        outputs = torch.compile(model, fullgraph=True, backend='aot_eager')(x)
    for out, ref in zip(outputs, expected):
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out, ref, rtol=0, atol=0)
