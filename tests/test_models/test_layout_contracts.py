"""The backbone's memory layout as a contract, checked without a clock.

Inside, MAViT keeps channels_last maps, so that q, k, v are channel-contiguous
head views (what SDPA's flash kernels need) and nothing is copied between the
convolutions, norms and attention; its outputs are contiguous NCHW, since
mmcv's RoIAlign reads raw memory as NCHW (docs/architecture.md, "Memory
layout"). A regression here made the backbone 2.2x slower on a CPU: SDPA fell
back to its math path and nothing noticed.
"""
from collections import Counter

import pytest
import torch
from helpers.threads import torch_threads
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from devtools.mala_inputs import mala_inputs
from mavit_mm.models import MAViT
from mavit_mm.ops import ATTN_TYPES, LINEAR_ATTN_TYPES, attention
from mavit_mm.ops.rope2d import RoPE2d

BATCH, HEIGHT, WIDTH = 1, 256, 384
LAYOUTS = {'nchw': torch.contiguous_format, 'channels_last': torch.channels_last}
SDPA_MATH = 'aten::_scaled_dot_product_attention_math'
SDPA_FLASH_CPU = 'aten::_scaled_dot_product_flash_attention_for_cpu'


@pytest.fixture(scope='module', autouse=True)
def onednn_convolutions():
    """The contract is oneDNN's: with one thread PyTorch sends 1x1
    convolutions to its THNN path, which reads NCHW only (a copy in, an NCHW
    result out: 67 feature-map copies a forward instead of 19). Under
    ``make test`` a worker has one thread, so this module takes two."""
    with torch_threads(max(2, torch.get_num_threads())):
        yield


def tiny_model(attn_type: str = 'softmax', **kwargs) -> MAViT:
    """MAViT-T's published depths, every stage with ``attn_type`` (default:
    the published MALA / softmax stages when None)."""
    if attn_type is not None:
        kwargs['attn_types'] = [attn_type] * 4
    torch.manual_seed(0)
    return MAViT('tiny', drop_path_rate=0.0, mala_impl='torch', **kwargs)


def image(layout: str = 'nchw', requires_grad: bool = False,
          size: tuple[int, int] = (HEIGHT, WIDTH)) -> torch.Tensor:
    x = torch.randn(BATCH, 3, *size).contiguous(memory_format=LAYOUTS[layout])
    return x.requires_grad_(requires_grad)


def profiled(run) -> list:
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as trace:
        run()
    return list(trace.events())


def feature_map_copies(events, model: MAViT) -> Counter:
    """Copies of whole feature maps in a trace: ``aten::copy_`` into a tensor
    of the batch (first dim) at least as large as the smallest stage output."""
    height, width = HEIGHT // 4, WIDTH // 4
    sizes = []
    for dim in model.embed_dims:
        sizes.append(BATCH * dim * height * width)
        height, width = (height + 1) // 2, (width + 1) // 2
    smallest = min(sizes)
    copies = Counter()
    for event in events:
        if event.name != 'aten::copy_' or not event.input_shapes or not event.input_shapes[0]:
            continue
        shape = event.input_shapes[0]
        if shape[0] == BATCH and torch.Size(shape).numel() >= smallest:
            copies[tuple(shape)] += 1
    return copies


def expected_forward_copies(model: MAViT) -> int:
    """The copies the design makes (docs/architecture.md, "Memory layout"):
    the image, once, into the stem's layout; one per output, into contiguous
    NCHW; one per block: v, a channel slice of the qkvo map, made dense for
    the LePE depthwise convolution; and one per multi-head block of a linear
    variant on the PyTorch path, whose matmul returns head-major results."""
    multi_head_linear = sum(depth for depth, heads, attn_type in
                            zip(model.depths, model.num_heads, model.attn_types)
                            if heads > 1 and attn_type in LINEAR_ATTN_TYPES)
    return 1 + len(model.out_indices) + sum(model.depths) + multi_head_linear


# -- SDPA runs its flash kernel --------------------------------------------------

def test_forward_and_backward_run_with_only_flash_attention_allowed():
    model = tiny_model(None).train()
    x = image(requires_grad=True)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        outputs = model(x)
        sum(out.mean() for out in outputs).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert all(p.grad is not None for p in model.layers[3].parameters())


def test_flash_only_refuses_token_contiguous_heads():
    """The check above can fail: heads cut from an NCHW map (channel stride N),
    the layout of the regression, have no flash kernel."""
    rope = RoPE2d(64)(8, 12)
    q, k, v = mala_inputs(1, 1, 8, 12, 64, layout='nchw')
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]), pytest.raises(RuntimeError,
                                                                   match='No available kernel'):
        attention(q, k, v, 'softmax', rope)


@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_profile_of_a_forward_has_no_sdpa_math_path(layout):
    model = tiny_model(None).eval()
    with torch.no_grad():
        names = Counter(event.name for event in profiled(lambda: model(image(layout))))
    assert names[SDPA_MATH] == 0
    assert names[SDPA_FLASH_CPU] == sum(model.depths[2:])   # the softmax stages


# -- outputs: contiguous NCHW ------------------------------------------------------

# The smallest image whose every stage output is at least 2x2 (2x3: no size-1
# dimension, whose stride is_contiguous ignores): how the outputs lie in memory
# does not depend on the size, and a 16x smaller map costs a fraction of the time.
SMALL_IMAGE = (64, 96)


@pytest.mark.parametrize('attn_type', ATTN_TYPES)
@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_outputs_are_contiguous_nchw(attn_type, layout):
    model = tiny_model(attn_type, depths=[1, 1, 1, 1])
    for training in (False, True):
        model.train(training)
        with torch.set_grad_enabled(training):
            outputs = model(image(layout, size=SMALL_IMAGE))
        assert min(min(out.shape[-2:]) for out in outputs) >= 2   # (the premise above)
        for level, out in enumerate(outputs):
            assert out.is_contiguous(), (attn_type, layout, training, level, out.stride())


def test_the_rcnn_heads_read_the_roi_features_the_neck_computed():
    """The demo Mask R-CNN as built from its config: mmcv's RoIAlign, which
    reads raw memory as NCHW whatever the strides, gives the R-CNN heads the
    RoI features of the maps the neck computed (a channels_last view would
    scramble them; trained, the head then sat at "background for
    everything" while the RPN learned: tests/test_tools/test_detector_learns.py,
    under make test-slow)."""
    pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed for RoIAlign')
    pytest.importorskip('mmdet.models')
    from helpers.paths import REPO_ROOT
    from helpers.shared_runs import MASK_RCNN_CONFIG

    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.model_builder import build_model
    torch.manual_seed(0)
    model = build_model(load_config(REPO_ROOT / MASK_RCNN_CONFIG)).eval()
    with torch.no_grad():
        features = model.extract_feat(torch.randn(1, 3, 96, 128))
        # (batch index, x1, y1, x2, y2) in image pixels: boxes on every FPN level.
        rois = torch.tensor([[0, 4., 6., 40., 30.], [0, 10., 8., 120., 90.],
                             [0, 0., 0., 128., 96.]])
        for name in ('bbox_roi_extractor', 'mask_roi_extractor'):
            extractor = getattr(model.roi_head, name)
            maps = features[:extractor.num_inputs]
            assert all(m.is_contiguous() for m in maps), (name, [m.stride() for m in maps])
            torch.testing.assert_close(extractor(maps, rois),
                                       extractor([m.contiguous() for m in maps], rois),
                                       rtol=0, atol=0)


# -- copies ----------------------------------------------------------------------

@pytest.mark.parametrize('attn_type', ATTN_TYPES)
@pytest.mark.parametrize('layout', sorted(LAYOUTS))
def test_forward_copies_no_feature_map_it_does_not_have_to(attn_type, layout):
    model = tiny_model(attn_type).eval()
    with torch.no_grad():
        copies = feature_map_copies(profiled(lambda: model(image(layout))), model)
    assert sum(copies.values()) == expected_forward_copies(model), copies


def test_published_stages_copy_as_designed():
    """The published mix (MALA in stages 1-2, softmax in 3-4)."""
    model = tiny_model(None).eval()
    with torch.no_grad():
        copies = feature_map_copies(profiled(lambda: model(image())), model)
    assert sum(copies.values()) == expected_forward_copies(model), copies
