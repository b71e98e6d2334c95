"""The fused depthwise stages against their plain PyTorch formulas.

Without a GPU the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``
from tests/conftest.py), which is slow: maps stay tiny, with odd sizes that
fill no tile (37 pixels a row against tiles of 32, 24 or 80 channels against
tiles of 64) and batch 2. Every output and every gradient is compared, in
fp32 and bf16, on the layouts the model passes: channels_last maps, and v and
the gate as channel slices of one qkvo map.
"""
import warnings

import pytest
import torch

pytest.importorskip('triton')

from helpers import depthwise_stages  # noqa: E402
from helpers.depthwise_stages import ffn_middle, gated_lepe, position_norm  # noqa: E402

from mavit_mm.ops import depthwise  # noqa: E402
from mavit_mm.ops.depthwise import (  # noqa: E402
    ffn_middle_reference,
    gated_lepe_reference,
    position_norm_reference,
)

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
BATCH, HEIGHT, WIDTH = 2, 3, 37
# fp32: elementwise, the kernels sum in another order. bf16 (against the
# formula in fp32 on the same inputs): the largest error over the tensor's
# largest value, since the backward rounds its intermediate maps to bf16 as
# PyTorch's own bf16 backward does.
FP32_TOLERANCE = dict(atol=2e-5, rtol=2e-5)
BF16_RELATIVE_ERROR = 1.5e-2


def channels_last(*shape, dtype=torch.float32, seed=0, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=generator) * scale
    return t.to(DEVICE, dtype).contiguous(memory_format=torch.channels_last).requires_grad_()


def parameters(channels, ksize, seed=1):
    """fp32 depthwise weight and bias, and norm weight and bias, as the model has them."""
    generator = torch.Generator().manual_seed(seed)
    make = lambda *shape: (torch.randn(*shape, generator=generator) * 0.3).to(DEVICE)  # noqa: E731
    return [make(*shape).requires_grad_() for shape in
            ((channels, 1, ksize, ksize), (channels,), (channels,), (channels,))]


def grads(outputs, upstream, inputs):
    total = sum((out.float() * up).sum() for out, up in zip(outputs, upstream))
    return torch.autograd.grad(total, inputs)


def assert_all_close(actual, expected, dtype, what):
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f'{what}[{i}]: shape {tuple(a.shape)} != {tuple(e.shape)}'
        if dtype == torch.float32:
            torch.testing.assert_close(a, e, **FP32_TOLERANCE,
                                       msg=lambda m, i=i: f'{what}[{i}]: {m}')
        else:
            error = ((a.float() - e.float()).abs().max() / e.float().abs().max()).item()
            assert error < BF16_RELATIVE_ERROR, f'{what}[{i}]: relative error {error:.2e}'


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
@pytest.mark.parametrize('channels', [24, 80])
def test_position_norm_outputs_and_gradients(dtype, channels):
    x = channels_last(BATCH, channels, HEIGHT, WIDTH, dtype=dtype)
    weight, bias, norm_weight, norm_bias = parameters(channels, 3)
    stream, normed = position_norm(x, weight, bias, norm_weight, norm_bias, 1e-6, impl='triton')
    assert stream.dtype == normed.dtype == dtype
    assert stream.is_contiguous(memory_format=torch.channels_last)
    assert normed.is_contiguous(memory_format=torch.channels_last)
    inputs = (x, weight, bias, norm_weight, norm_bias)
    ref_inputs = [t.detach().float().requires_grad_() for t in inputs]
    expected = position_norm_reference(*ref_inputs, 1e-6)
    assert_all_close((stream, normed), expected, dtype, 'outputs')
    upstream = [torch.randn(stream.shape, device=DEVICE) for _ in range(2)]
    assert_all_close(grads((stream, normed), upstream, inputs),
                     grads(expected, upstream, ref_inputs), dtype, 'gradients')


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
def test_gated_lepe_reads_v_and_the_gate_in_place_in_the_qkvo_map(dtype, monkeypatch):
    channels = 24
    qkvo = channels_last(BATCH, 4 * channels, HEIGHT, WIDTH, dtype=dtype)
    attention = channels_last(BATCH, channels, HEIGHT, WIDTH, dtype=dtype, seed=2)
    weight, bias, _, _ = parameters(channels, 5)
    v, gate = qkvo[:, 2 * channels:3 * channels], qkvo[:, 3 * channels:]
    tensors = []
    record_launches(monkeypatch, run_kernels=True, tensors=tensors)
    out = gated_lepe(v, weight, bias, attention, gate, impl='triton')
    # The forward kernel gets the slices themselves (their memory), no copies.
    [(name, forward_tensors)] = tensors
    assert name == 'forward'
    assert {v.data_ptr(), gate.data_ptr()} <= {t.data_ptr() for t in forward_tensors}
    assert out.dtype == dtype and out.is_contiguous(memory_format=torch.channels_last)
    ref_qkvo, ref_attention, ref_weight, ref_bias = [
        t.detach().float().requires_grad_() for t in (qkvo, attention, weight, bias)]
    expected = gated_lepe_reference(ref_qkvo[:, 2 * channels:3 * channels], ref_weight,
                                    ref_bias, ref_attention, ref_qkvo[:, 3 * channels:])
    assert_all_close((out,), (expected,), dtype, 'output')
    upstream = [torch.randn(out.shape, device=DEVICE)]
    assert_all_close(grads((out,), upstream, (qkvo, attention, weight, bias)),
                     grads((expected,), upstream, (ref_qkvo, ref_attention, ref_weight,
                                                   ref_bias)), dtype, 'gradients')


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16], ids=['fp32', 'bf16'])
def test_ffn_middle_outputs_and_gradients(dtype):
    channels = 80
    h = channels_last(BATCH, channels, HEIGHT, WIDTH, dtype=dtype, scale=2.0)
    weight, bias, _, _ = parameters(channels, 3)
    out = ffn_middle(h, weight, bias, impl='triton')
    assert out.dtype == dtype and out.is_contiguous(memory_format=torch.channels_last)
    ref_inputs = [t.detach().float().requires_grad_() for t in (h, weight, bias)]
    expected = ffn_middle_reference(*ref_inputs)
    assert_all_close((out,), (expected,), dtype, 'output')
    upstream = [torch.randn(out.shape, device=DEVICE)]
    assert_all_close(grads((out,), upstream, (h, weight, bias)),
                     grads((expected,), upstream, ref_inputs), dtype, 'gradients')


def test_the_ops_take_the_kernel_tap_major():
    """Each tap's channels contiguous: (k * k, C), channel c's tap (i, j) at
    row i * k + j, so that a kernel reads a tap in one vector load."""
    weight = parameters(8, 3)[0].detach()
    taps = depthwise.tap_major(weight)
    assert taps.shape == (9, 8) and taps.is_contiguous()
    assert torch.equal(taps[1 * 3 + 2], weight[:, 0, 1, 2])


def test_an_nchw_map_gives_the_same_result():
    """A map of another layout is read through a channels_last copy."""
    h = channels_last(1, 8, 4, 5).detach()
    weight, bias, _, _ = parameters(8, 3)
    torch.testing.assert_close(ffn_middle(h.contiguous(), weight, bias, impl='triton'),
                               ffn_middle_reference(h, weight, bias), atol=2e-5, rtol=2e-5)


def test_bf16_weights_are_read_as_they_are_and_fp32_gradients_stay_fp32(monkeypatch):
    h = channels_last(1, 8, 4, 5, dtype=torch.bfloat16)
    weight, bias, _, _ = parameters(8, 3)
    out = ffn_middle(h, weight, bias, impl='triton')
    dweight, dbias = torch.autograd.grad(out.float().sum(), (weight, bias))
    assert dweight.dtype == dbias.dtype == torch.float32
    tensors = []
    record_launches(monkeypatch, run_kernels=True, tensors=tensors)
    half = ffn_middle(h, weight.detach().bfloat16(), bias.detach().bfloat16(), impl='triton')
    assert_all_close((half,), (out,), torch.bfloat16, 'bf16 weights')
    # The kernel reads the bf16 taps and bias (its tensors after the map), not
    # fp32 copies of them.
    [(name, forward_tensors)] = tensors
    kernel_taps, kernel_bias = forward_tensors[1:3]
    assert name == 'forward' and kernel_taps.shape == (9, 8) and kernel_bias.shape == (8,)
    assert kernel_taps.dtype == kernel_bias.dtype == torch.bfloat16, (kernel_taps.dtype,
                                                                      kernel_bias.dtype)


def test_the_ops_pass_torch_library_opcheck():
    """Schema, fake implementations, autograd registration: what torch.compile
    and CUDA graphs rely on."""
    from mavit_mm.ops.depthwise import function
    x = channels_last(1, 8, 3, 5)
    weight, bias, norm_weight, norm_bias = parameters(8, 3)
    weight5, _, _, _ = parameters(8, 5)
    attention, gate = channels_last(1, 8, 3, 5, seed=3), channels_last(1, 8, 3, 5, seed=4)
    tests = ('test_schema', 'test_autograd_registration', 'test_faketensor')
    # The ops take the kernel tap-major, (k * k, C).
    taps, taps5 = (depthwise.tap_major(w.detach()).requires_grad_() for w in (weight, weight5))
    torch.library.opcheck(function.position_norm_op,
                          (x, taps, bias, norm_weight, norm_bias, 1e-6), test_utils=tests)
    torch.library.opcheck(function.gated_lepe_op, (x, taps5, bias, attention, gate, True),
                          test_utils=tests)
    torch.library.opcheck(function.ffn_middle_op, (x, taps, bias), test_utils=tests)


def called_targets(graphs) -> list[str]:
    """What the captured graphs call, in order (placeholders and outputs apart)."""
    return [str(node.target) for graph in graphs for node in graph.graph.nodes
            if node.op == 'call_function']


def test_compiles_to_one_graph_with_the_ops_as_nodes():
    from torch._dynamo.testing import CompileCounterWithBackend
    x = channels_last(1, 8, 3, 5).detach()
    weight, bias, norm_weight, norm_bias = [p.detach() for p in parameters(8, 3)]

    def stages(x):
        stream, normed = position_norm(x, weight, bias, norm_weight, norm_bias, 1e-6,
                                       impl='triton')
        return stream + ffn_middle(normed, weight, bias, impl='triton')

    counter = CompileCounterWithBackend('eager')
    torch._dynamo.reset()
    compiled = torch.compile(stages, backend=counter, fullgraph=True)
    torch.testing.assert_close(compiled(x), stages(x))
    assert counter.frame_count == 1
    targets = called_targets(counter.graphs)
    # On the H100 (torch 2.11, benchmarks/results/gpu-h100-2026-11-27) the ops
    # were missing from the graph (torch 2.11's Dynamo said every compile was
    # an export: test_fused_ops_under_compile.py); the message names the calls.
    assert {'mavit_mm.position_norm.default', 'mavit_mm.ffn_middle.default'} <= set(targets), \
        targets


@pytest.mark.parametrize('impl', ['auto', 'torch'])
def test_auto_off_cuda_and_torch_take_the_plain_formula(impl, monkeypatch):
    if DEVICE.type == 'cuda' and impl == 'auto':
        pytest.skip('auto takes the kernels on CUDA')
    calls = []
    # any kernel call would fail
    monkeypatch.setattr(depthwise.dispatch.DEPTHWISE_DISPATCH, '_function', None)
    monkeypatch.setattr(depthwise_stages, 'ffn_middle_reference',
                        lambda *args: calls.append(args) or ffn_middle_reference(*args))
    h = channels_last(1, 8, 3, 5).detach()
    weight, bias, _, _ = parameters(8, 3)
    ffn_middle(h, weight, bias, impl=impl)
    assert len(calls) == 1


def test_triton_names_what_it_cannot_run():
    h = channels_last(1, 8, 3, 5).detach()
    weight, bias, norm_weight, norm_bias = parameters(8, 3)
    with pytest.raises(ValueError, match=r'dtype torch.float64 is not supported'):
        ffn_middle(h.double(), weight, bias, impl='triton')
    with pytest.raises(ValueError, match=r'depthwise \(8, 1, k, k\) kernel of odd k for the '
                                         r"map's 8 channels, got \(8, 1, 2, 2\)"):
        ffn_middle(h, weight[..., :2, :2], bias, impl='triton')
    with pytest.raises(ValueError, match=r"\(8, 1, k, k\) kernel .* got \(4, 1, 3, 3\)"):
        ffn_middle(h, weight[:4], bias, impl='triton')
    with pytest.raises(ValueError, match=r'take \(B, C, H, W\) maps, got shape \(8, 3, 5\)'):
        ffn_middle(h[0], weight, bias, impl='triton')
    gate = channels_last(1, 8, 3, 5, seed=2)
    with pytest.raises(ValueError, match=r'maps must share one shape, got \(1, 8, 3, 5\) and '
                                         r'\(1, 8, 1, 1\)'):
        gated_lepe(h, weight, bias, h, gate[..., :1, :1], impl='triton')
    with pytest.raises(ValueError, match='depthwise_impl must be one of'):
        depthwise.check_depthwise_impl('cuda')


def test_the_fused_ops_refuse_operands_not_shaped_for_the_map():
    """The kernels index every operand by the map's shape: a kernel, bias,
    norm parameter or map of another shape would be read out of bounds, so
    the ops themselves name it (for callers that skip ``kernels_run``)."""
    h = channels_last(1, 8, 3, 5).detach()
    weight, bias, norm_weight, norm_bias = parameters(8, 3)
    taps = depthwise.tap_major(weight)
    cases = [
        (lambda: depthwise.fused_ffn_middle(h, depthwise.tap_major(weight[:4]), bias),
         r'taps must be the \(k \* k, 8\) kernel .* got \(9, 4\)'),
        (lambda: depthwise.fused_ffn_middle(h, taps[:8], bias), r'got \(8, 8\)'),
        (lambda: depthwise.fused_ffn_middle(h, taps, bias[:4]), r'must be \(8,\), got \(4,\)'),
        (lambda: depthwise.fused_position_norm(h, taps, bias, norm_weight[:4], norm_bias, 1e-6),
         r'must be \(8,\), got \(4,\)'),
        (lambda: depthwise.fused_gated_lepe(h, depthwise.tap_major(parameters(8, 5)[0]), bias, h,
                                            h[..., :1, :1]),
         r'maps must share one shape, got \(1, 8, 3, 5\) and \(1, 8, 1, 1\)'),
        (lambda: depthwise.fused_ffn_middle(h[0], taps, bias), r'\(B, C, H, W\) maps'),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match):
            call()


def test_a_slice_reaching_past_int32_in_its_image_is_refused(monkeypatch):
    """v and the gate are channel slices of the qkvo map, 4C channels a pixel:
    a slice reaches four times as far into its image as its own elements do.
    Here v has fewer than 2**31 elements an image but reaches past 2**31
    (strides as the qkvo map gives them; meta tensors, nothing allocated)."""
    monkeypatch.setenv('TRITON_INTERPRET', '1')     # the device check passes on the CPU
    channels, height, width = 64, 1025, 8192        # about 2**29 elements an image
    qkvo = torch.empty_strided((1, 4 * channels, height, width),
                               (4 * channels * height * width, 1, 4 * channels * width,
                                4 * channels), device='meta')
    x = torch.empty(1, channels, height, width, device='meta').contiguous(
        memory_format=torch.channels_last)
    v, gate = qkvo[:, 2 * channels:3 * channels], qkvo[:, 3 * channels:]
    weight = torch.empty(channels, 1, 5, 5, device='meta')
    reach = sum((size - 1) * stride for size, stride in zip(v.shape[1:], v.stride()[1:]))
    assert v[0].numel() < 2 ** 31 <= reach
    assert depthwise.dispatch.kernels_unsupported(x, weight=weight, allow_interpreter=True) is None
    reason, error = depthwise.dispatch.kernels_unsupported(v, x, gate, weight=weight,
                                                           allow_interpreter=True)
    assert error is ValueError and 'index an image in int32' in reason


def test_exports_take_the_plain_formula():
    h = channels_last(1, 8, 3, 5).detach()
    weight, bias = [p.detach() for p in parameters(8, 3)[:2]]
    traced = torch.jit.trace(lambda t: ffn_middle(t, weight, bias, impl='triton'), (h,))
    kinds = {node.kind() for node in traced.graph.nodes()}
    assert 'aten::_convolution' in kinds or 'aten::conv2d' in kinds
    assert not any(kind.startswith('mavit_mm::') for kind in kinds)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        torch.testing.assert_close(traced(h), ffn_middle_reference(h, weight, bias))


def test_compiled_training_step_gives_the_eager_gradients():
    """AOT autograd traces the ops' backward ops (aot_eager: the graphs run
    as traced, so the comparison is exact)."""
    x = channels_last(1, 8, 3, 5)
    attention, gate = channels_last(1, 8, 3, 5, seed=3), channels_last(1, 8, 3, 5, seed=4)
    weight, bias, norm_weight, norm_bias = parameters(8, 3)
    weight5, _, _, _ = parameters(8, 5)
    inputs = (x, attention, gate, weight, bias, norm_weight, norm_bias, weight5)

    def loss(x, attention, gate, weight, bias, norm_weight, norm_bias, weight5):
        stream, normed = position_norm(x, weight, bias, norm_weight, norm_bias, 1e-6,
                                       impl='triton')
        gated = gated_lepe(normed, weight5, bias, attention, gate, impl='triton')
        return (stream * ffn_middle(gated, weight, bias, impl='triton')).sum()

    from torch._dynamo.testing import CompileCounterWithBackend
    expected = torch.autograd.grad(loss(*inputs), inputs)
    torch._dynamo.reset()
    counter = CompileCounterWithBackend('aot_eager')
    compiled = torch.compile(loss, backend=counter, fullgraph=True)
    for ours, reference in zip(torch.autograd.grad(compiled(*inputs), inputs), expected):
        torch.testing.assert_close(ours, reference, rtol=0, atol=0,
                                   msg=lambda m: f'{m}\ngraph calls: {called_targets(counter.graphs)}')


class LaunchRecorder:
    """Stands in for a kernel, ``kernel[grid](...)``: records each launch's
    ``(kernel, BLOCK_W, BLOCK_C, num_warps)`` (Triton's default warps where it
    passes none), and its tensor arguments where asked to, and runs the real
    kernel where it is given one."""

    def __init__(self, name, kernel, launches, tensors=None):
        self.name, self.kernel, self.launches, self.tensors = name, kernel, launches, tensors

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((self.name, kwargs['BLOCK_W'], kwargs['BLOCK_C'],
                                  kwargs.get('num_warps', TRITON_DEFAULT_WARPS)))
            if self.tensors is not None:
                self.tensors.append((self.name, [a for a in args if isinstance(a, torch.Tensor)]))
            if self.kernel is not None:
                self.kernel[grid](*args, **kwargs)
        return launch


def record_launches(monkeypatch, run_kernels: bool, tensors: list | None = None) -> list:
    from mavit_mm.ops.depthwise import kernels
    launches = []
    for name, short in (('_depthwise_forward_kernel', 'forward'),
                        ('_depthwise_backward_kernel', 'backward'),
                        ('_norm_backward_kernel', 'norm_backward')):
        monkeypatch.setattr(kernels, name, LaunchRecorder(
            short, getattr(kernels, name) if run_kernels else None, launches, tensors))
    return launches


def _triton_default_warps() -> int:
    from triton.backends.nvidia.compiler import CUDAOptions
    return CUDAOptions.__dataclass_fields__['num_warps'].default


TRITON_DEFAULT_WARPS = _triton_default_warps()
# Each stage's launches at each width with the tiles of before the tile table
# (function.py at 177648d: BLOCK_W 16, BLOCK_C 64, the norm's NORM_TILE 2048
# over every channel, the 5x5 backward at 32 channels, Triton's default warps).
NORM_BEFORE = {24: (16, 32), 64: (16, 64), 128: (16, 128), 256: (8, 256), 512: (4, 512),
               4096: (1, 4096)}
LAUNCHES_BEFORE = {
    **{('position_norm', c): [('forward', *norm), ('norm_backward', *norm),
                              ('backward', 16, 32 if c == 24 else 64)]
       for c, norm in NORM_BEFORE.items()},
    ('gated_lepe', 24): [('forward', 16, 32), ('backward', 16, 32)],
    **{('gated_lepe', c): [('forward', 16, 64), ('backward', 16, 32)] for c in (64, 128, 256, 512)},
    **{('ffn_middle', c): [('forward', 16, 64), ('backward', 16, 64)]
       for c in (224, 448, 896, 1792)},
}


def run_stage(stage: str, channels: int, x=None, dtype=torch.float32):
    """The stage's forward op and its backward op, on zeros where no ``x`` is
    given (the kernels stood in for)."""
    from mavit_mm.ops.depthwise import function
    ksize = 5 if stage == 'gated_lepe' else 3
    if x is None:
        x = torch.zeros(1, channels, 1, 2, dtype=dtype).contiguous(
            memory_format=torch.channels_last)
    taps, bias = torch.zeros(ksize * ksize, channels), torch.zeros(channels)
    if stage == 'position_norm':
        stream, _, mean, rstd = function.position_norm_op(x, taps, bias, bias, bias, 1e-6)
        function.position_norm_backward_op(x, x, x, stream, mean, rstd, taps, bias, bias)
    elif stage == 'gated_lepe':
        _, total = function.gated_lepe_op(x, taps, bias, x, x, True)
        function.gated_lepe_backward_op(x, x, taps, bias, x, total)
    else:
        function.ffn_middle_op(x, taps, bias)
        function.ffn_middle_backward_op(x, x, taps, bias)


def test_the_default_tiles_are_the_launches_of_before(monkeypatch):
    """Without a tile tried or tuned, every launch of every stage gets the
    tiles and warps it had before the tile table, at MAViT-T's widths and
    the edges of the rules; a TUNED_TILES entry takes over at its width only."""
    from mavit_mm.ops.depthwise import function
    assert TRITON_DEFAULT_WARPS == 4
    launches = record_launches(monkeypatch, run_kernels=False)
    for (stage, channels), expected in LAUNCHES_BEFORE.items():
        launches.clear()
        run_stage(stage, channels)
        assert launches == [(*launch, 4) for launch in expected], (stage, channels)
    monkeypatch.setitem(function.TUNED_TILES, ('ffn_middle.forward', 448),
                        function.DepthwiseTile(8, 128, 8))
    for channels, tile in ((448, (8, 128, 8)), (224, (16, 64, 4))):
        launches.clear()
        run_stage('ffn_middle', channels)
        assert launches == [('forward', *tile), ('backward', 16, 64, 4)]


# Tiles unlike the defaults on the small maps below (24 channels: 16 a block
# leaves a partial one; 11 pixels a row: partial rows of 2, 4 and 8): the
# norm's hold more channels than there are (masked).
TRIED = {'position_norm.forward': (4, 64, 8), 'position_norm.norm_backward': (2, 32, 1),
         'position_norm.backward': (8, 16, 2), 'gated_lepe.forward': (4, 16, 8),
         'gated_lepe.backward': (8, 16, 1), 'ffn_middle.forward': (8, 16, 2),
         'ffn_middle.backward': (4, 16, 8)}


@pytest.mark.parametrize('stage', ['position_norm', 'gated_lepe', 'ffn_middle'])
def test_tried_tiles_give_the_results_of_the_defaults(stage, monkeypatch):
    from mavit_mm.ops.depthwise import function
    channels, ksize = 24, 5 if stage == 'gated_lepe' else 3
    x = channels_last(1, channels, 3, 11)
    attention, gate = channels_last(1, channels, 3, 11, seed=2), channels_last(1, channels, 3, 11,
                                                                               seed=3)
    weight, bias, norm_weight, norm_bias = parameters(channels, ksize)
    inputs = {'position_norm': (x, weight, bias, norm_weight, norm_bias),
              'gated_lepe': (x, weight, bias, attention, gate),
              'ffn_middle': (x, weight, bias)}[stage]
    call = {'position_norm': lambda *a: position_norm(*a, 1e-6, impl='triton'),
            'gated_lepe': lambda *a: (gated_lepe(*a, impl='triton'),),
            'ffn_middle': lambda *a: (ffn_middle(*a, impl='triton'),)}[stage]
    launches = record_launches(monkeypatch, run_kernels=True)

    def outputs_and_gradients():
        outputs = call(*inputs)
        upstream = [torch.ones_like(out) * (i + 1) for i, out in enumerate(outputs)]
        return outputs, grads(outputs, upstream, inputs)
    expected = outputs_and_gradients()
    default = list(launches)
    launches.clear()
    tried = {launch: tile for launch, tile in TRIED.items() if launch.startswith(stage + '.')}
    with function.launch_tiles(tried):
        actual = outputs_and_gradients()
    assert sorted(launches) == sorted((launch.split('.')[1], *tile)
                                      for launch, tile in tried.items())
    assert not set(launches) & set(default)
    for what, a, e in zip(('outputs', 'gradients'), actual, expected):
        assert_all_close(a, e, torch.float32, what)
    assert function.launch_tile(f'{stage}.forward', channels, ksize) == (16, 32, 4)   # left


def test_a_tile_a_launch_cannot_run_is_refused(monkeypatch):
    from mavit_mm.ops.depthwise import function
    for tiles, why in (({'ffn_middle.fwd': (16, 64, 4)}, "no depthwise launch 'ffn_middle.fwd'"),
                       ({'ffn_middle.forward': (12, 64, 4)}, 'not powers of two'),
                       ({'gated_lepe.backward': (16, 32, 64)}, 'at most 32 warps'),
                       ({'ffn_middle.forward': (16, 0, 4)}, 'not powers of two')):
        with pytest.raises(ValueError, match=why):
            with function.launch_tiles(tiles):
                pass
    # The norm holds every channel of its pixels in one program, within NORM_TILE
    # values (one pixel a program past it: MAX_NORM_CHANNELS).
    launches = record_launches(monkeypatch, run_kernels=False)
    with function.launch_tiles({'position_norm.forward': (16, 16, 4)}):
        with pytest.raises(ValueError, match=r'position_norm.forward at 24 channels: .* does not '
                                             r'hold every channel of its pixels \(block_c >= 24\)'):
            run_stage('position_norm', 24)
    assert launches == []
    with pytest.raises(ValueError, match=r'within NORM_TILE \(2048\)'):
        function.check_tile('position_norm.norm_backward', (32, 128, 4), 128)
    assert function.check_tile('position_norm.norm_backward', (1, 4096, 8), 4096)
    with pytest.raises(ValueError, match='NORM_TILE'):
        function.check_tile('position_norm.norm_backward', (2, 4096, 8), 4096)
    # A failed try leaves the defaults; every tuned entry is a tile its launch runs.
    assert function.launch_tile('ffn_middle.forward', 224, 3) == (16, 64, 4)
    for (launch, channels), tile in function.TUNED_TILES.items():
        assert function.check_tile(launch, tile, channels) == tile
