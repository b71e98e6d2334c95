"""The backbone's speed features behind their switches (``mavit_mm.ops.fast_paths``).

Each switch, turned off, must give the same model (outputs and gradients), and
must change what runs: a switch that changes nothing measures nothing on a GPU.
What runs is read op by op with a dispatch mode, without a clock. Here, on the
CPU in eager mode, are the switches that act there; the others act only where
the depthwise kernels run or under compile, and are compared where they act
(``COMPARED_ELSEWHERE``).
"""
from __future__ import annotations

import json

import pytest
import torch
from helpers.paths import REPO_ROOT

from devtools.op_census import first_and_steady, listing
from devtools.op_log import OpLog
from mavit_mm.models import MAViT
from mavit_mm.ops.fast_paths import (
    ALL_ON,
    CPU,
    DEFAULTS,
    DEFAULTS_MEASURED_BY,
    FAST_PATHS,
    FUSED_STAGES,
    INFERENCE,
    NO_MEASURABLE_EFFECT,
    FastPaths,
    on_in,
)

IMAGE = (2, 3, 64, 96)


def image(seed: int = 1) -> torch.Tensor:
    return torch.randn(*IMAGE, generator=torch.Generator().manual_seed(seed))


def model_with(fast_paths=None, seed: int = 0, **kwargs) -> MAViT:
    torch.manual_seed(seed)
    kwargs.setdefault('depths', [1, 1, 2, 1])
    return MAViT('tiny', drop_path_rate=0.0, mala_impl='torch', fast_paths=fast_paths,
                 **kwargs).eval()


def relative_error(ours: torch.Tensor, reference: torch.Tensor) -> float:
    return ((ours.double() - reference.double()).norm() / reference.double().norm()).item()


# -- the argument ------------------------------------------------------------------

def test_fast_paths_default_to_what_was_measured_faster_and_take_a_dict():
    """The defaults of DEFAULTS_MEASURED_BY (fast_paths.py's docstring): the
    fused FFN middle off, the fused position norm and LePE
    gate on where no gradient flows, the one-write channel split on the CPU."""
    assert MAViT('tiny').options.fast_paths == FastPaths() == DEFAULTS
    assert [name for name, on in DEFAULTS.as_dict().items() if on is False] == [
        'fused_ffn_middle']
    assert DEFAULTS.channel_split == CPU
    assert [name for name, on in DEFAULTS.as_dict().items() if on == INFERENCE] == [
        'fused_position_norm', 'fused_lepe_gate']
    assert all(on is True for on in ALL_ON.as_dict().values())
    assert (REPO_ROOT / DEFAULTS_MEASURED_BY).is_file()
    every_one = dict.fromkeys(['channel_split', *FUSED_STAGES], True)
    assert MAViT('tiny', fast_paths=every_one).options.fast_paths == ALL_ON
    model = MAViT('tiny', fast_paths=dict(cached_weights=False, fused_ffn_middle=INFERENCE))
    assert not model.options.fast_paths.cached_weights and model.options.fast_paths.matmul_1x1
    assert model.options.fast_paths.fused_ffn_middle == INFERENCE
    assert FastPaths().without('matmul_1x1', 'fused_lepe_gate') == FastPaths(
        matmul_1x1=False, fused_lepe_gate=False)
    assert [on_in(setting, training, device) for setting in (True, INFERENCE, CPU, False)
            for training in (False, True) for device in ('cpu', 'cuda')] == [
        True, True, True, True, True, True, False, False, True, False, True, False,
        False, False, False, False]


def _binding_rows(run_file) -> list[tuple[str, str, str, float]]:
    """(switch, mode, pass, off over all on) of each one-switch row of the
    ablations in ``run_file`` and of its run's compiled ablations where they
    are a file of their own (ablations-compile.json) that judges a default,
    by the modes users run: inference by its forwards under a CUDA graph and
    compiled, training by its eager training steps timed against the all-on
    model in the same rounds (``all_on_ms``; eager rows timed apart drifted)."""
    rows = json.loads(run_file.read_text())['results']
    run = run_file.parents[1]
    for compiled in sorted([*run.glob('ablations-compile.json'),
                            *run.glob('*/ablations-compile.json')]):
        rows += json.loads(compiled.read_text())['results']
    return [(row['switches_off'][0], row['mode'], row['pass_name'], row['time_vs_all_on'])
            for row in rows if len(row['switches_off']) == 1 and 'time_vs_all_on' in row
            and ((row['pass_name'] == 'fwd' and row['mode'] != 'eager')
                 or (row['pass_name'] == 'fwd+bwd' and 'all_on_ms' in row))]


def contradictions(rows, defaults: FastPaths) -> list[tuple[str, str, str, float]]:
    """The rows (``_binding_rows``) that a default contradicts: a switch on
    there (``on_in``, on a GPU: the rows' device) whose plain formula was
    measurably faster, or off there whose plain formula was measurably slower
    (``NO_MEASURABLE_EFFECT``)."""
    found = []
    for name, mode, pass_name, off_over_on in rows:
        on = on_in(getattr(defaults, name), training=pass_name == 'fwd+bwd', device_type='cuda')
        if (off_over_on < 1 - NO_MEASURABLE_EFFECT) if on else \
                (off_over_on > 1 + NO_MEASURABLE_EFFECT):
            found.append((name, mode, pass_name, off_over_on))
    return found


def test_no_default_contradicts_the_measurement_it_cites():
    rows = _binding_rows(REPO_ROOT / DEFAULTS_MEASURED_BY)
    assert {name for name, *_ in rows} == set(FAST_PATHS), 'a switch without a row'
    assert contradictions(rows, DEFAULTS) == []


# The CPU's measurement behind channel_split='cpu': the tree whose GPU default
# (off) also ran on the CPU, over the one before, a CPU training step at 512x512.
CHANNEL_SPLIT_OFF_ON_THE_CPU = ('benchmarks/results/'
                                'backbone-ab-cpu-2026-11-28-08f71e3-vs-6a1cf71-train.json')


def test_channel_split_is_on_for_the_cpu_where_it_measured_faster():
    report = json.loads((REPO_ROOT / CHANNEL_SPLIT_OFF_ON_THE_CPU).read_text())
    assert report['results']['train']['ratio_median'] > 1 + NO_MEASURABLE_EFFECT
    assert on_in(DEFAULTS.channel_split, training=True, device_type='cpu')
    assert not on_in(DEFAULTS.channel_split, training=True, device_type='cuda')


def test_the_defaults_test_reads_the_rows_that_bind(tmp_path):
    """An eager forward does not judge a default, nor a training step under a
    CUDA graph; an eager training step timed in rounds does, compiled rows of
    the run join in; the rule catches a default that its rows contradict."""
    def row(mode, pass_name, off, ratio, **extra):
        return dict(mode=mode, pass_name=pass_name, switches_off=[off],
                    time_vs_all_on=ratio, **extra)
    part = tmp_path / 'gpu-x' / 'part-2'
    part.mkdir(parents=True)
    (part / 'ablations.json').write_text(json.dumps(dict(results=[
        row('cuda-graph', 'fwd', 'a', 1.07), row('eager', 'fwd', 'a', 0.5, all_on_ms=1.0),
        row('eager', 'fwd+bwd', 'a', 0.94, all_on_ms=1.0), row('eager', 'fwd+bwd', 'b', 0.5),
        row('cuda-graph', 'fwd+bwd', 'a', 1.3),
        dict(mode='cuda-graph', pass_name='fwd', switches_off=[], time_vs_all_on=1.0)])))
    (tmp_path / 'gpu-x' / 'part-7').mkdir()
    (tmp_path / 'gpu-x' / 'part-7' / 'ablations-compile.json').write_text(json.dumps(dict(
        results=[row('compile', 'fwd', 'b', 1.2)])))
    rows = _binding_rows(part / 'ablations.json')
    assert rows == [('a', 'cuda-graph', 'fwd', 1.07), ('a', 'eager', 'fwd+bwd', 0.94),
                    ('b', 'compile', 'fwd', 1.2)]
    # 'a' wins forwards and loses training steps: only INFERENCE fits it.
    renamed = [('fused_lepe_gate', *rest) for name, *rest in rows if name == 'a']
    assert contradictions(renamed, FastPaths(fused_lepe_gate=INFERENCE)) == []
    assert contradictions(renamed, FastPaths(fused_lepe_gate=True)) == [
        ('fused_lepe_gate', 'eager', 'fwd+bwd', 0.94)]
    assert contradictions(renamed, FastPaths(fused_lepe_gate=False)) == [
        ('fused_lepe_gate', 'cuda-graph', 'fwd', 1.07)]


@pytest.mark.parametrize('value, error, match', [
    (dict(dense_rop=False), ValueError, r"unknown fast_paths switch\(es\) \['dense_rop'\]"),
    (dict(dense_rope=0), ValueError, 'take True or False'),
    (dict(dense_rope=INFERENCE), ValueError, r"fused_lepe_gate 'inference', .*channel_split 'cpu' too; "
                                             r"got \{'dense_rope'"),
    (dict(channel_split=INFERENCE), ValueError, "got {'channel_split': 'inference'}"),
    (FastPaths(channel_split=CPU).as_dict() | dict(cached_weights=CPU), ValueError,
     "got {'cached_weights': 'cpu'}"),
    (dict(fused_lepe_gate='training'), ValueError, "got {'fused_lepe_gate': 'training'}"),
    (['dense_rope'], TypeError, 'must be a dict'),
])
def test_a_bad_switch_is_an_error_that_names_it(value, error, match):
    with pytest.raises(error, match=match):
        MAViT('tiny', fast_paths=value)


def test_configs_reach_the_switches():
    from mmengine.registry import MODELS

    import mavit_mm  # noqa: F401 (registers MAViT)
    backbone = MODELS.build(dict(type='MAViT', arch='tiny',
                                 fast_paths=dict(in_place_residual=False)))
    assert backbone.options.fast_paths == FastPaths(in_place_residual=False)


# -- every switch computes the same model --------------------------------------------

# The switches that change nothing in this file's CPU eager model (the
# PyTorch depthwise path, convolutions in eager mode), and where each is
# compared with its plain formula instead.
COMPARED_ELSEWHERE = {
    'fused_position_norm': 'test_fused_block.py::test_the_fused_stages_compute_the_modules_model',
    'fused_lepe_gate': 'test_fused_block.py::test_the_fused_stages_compute_the_modules_model',
    'fused_ffn_middle': 'test_fused_block.py::test_the_fused_stages_compute_the_modules_model',
    'tap_major_weights': 'test_fused_block.py::test_tap_major_weights_off_reads_the_parameters_'
                         'in_place',
    'matmul_1x1': 'test_fused_block.py::test_a_1x1_convolution_compiles_to_a_matrix_product_'
                  'with_the_bias_inside',
}
ACTING_HERE = [name for name in FAST_PATHS if name not in COMPARED_ELSEWHERE]


def test_the_switches_compared_elsewhere_change_nothing_here():
    """What keeps the comparison below from passing by comparing a model with
    itself: each switch it leaves out runs the same ops here, on and off, in
    fp32 and under bf16 autocast, forward and backward."""
    forward_on = {half: _forward_ops(ALL_ON, half).ops for half in (False, True)}
    backward_on = _backward_ops(ALL_ON).ops
    for switch in COMPARED_ELSEWHERE:
        for half in (False, True):
            assert _forward_ops(ALL_ON.without(switch), half).ops == forward_on[half], (switch,
                                                                                         half)
        assert _backward_ops(ALL_ON.without(switch)).ops == backward_on, switch


@pytest.fixture(scope='module')
def reference_run():
    """All switches on: fp32 outputs and gradients, and bf16 outputs."""
    model = model_with(ALL_ON).train()
    state = {name: t.clone() for name, t in model.state_dict().items()}
    x = image()
    outputs = model(x)                     # (updates the batch norms' running stats)
    sum(out.square().mean() for out in outputs).backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.eval()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        model(x)
        half = model(x)
    return state, [out.detach() for out in outputs], grads, half


@pytest.mark.parametrize('switch', ACTING_HERE)
def test_each_switch_off_gives_the_same_outputs_and_gradients(reference_run, switch):
    state, expected, expected_grads, expected_half = reference_run
    model = model_with(ALL_ON.without(switch))
    model.load_state_dict(state)
    model.train()
    x = image()
    outputs = model(x)
    sum(out.square().mean() for out in outputs).backward()
    for ours, reference in zip(outputs, expected):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    for name, p in model.named_parameters():
        # (atol: the stem's first weights, under batch norms, get gradients
        # of 1e-8 that are mostly cancellation noise.)
        torch.testing.assert_close(p.grad, expected_grads[name], rtol=1e-4, atol=1e-7,
                                   msg=name)
    model.eval()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        model(x)
        half = model(x)
    for ours, reference in zip(half, expected_half):
        assert ours.dtype == torch.bfloat16
        # bf16 rounds at other places (a folded kernel, a cast weight): the
        # whole-model difference is what bf16 against fp32 gives.
        assert relative_error(ours, reference) < 0.03, switch


# -- every switch changes what runs --------------------------------------------------

def _forward_ops(fast_paths, half: bool, **kwargs) -> OpLog:
    """The ops of a steady-state eval forward (the second one), without gradients."""
    model = model_with(fast_paths, **kwargs)
    x = image()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16, enabled=half):
        model(x)
        with OpLog() as log:
            model(x)
    return log


def _backward_ops(fast_paths) -> OpLog:
    model = model_with(fast_paths).train()
    outputs = model(image())
    loss = sum(out.square().mean() for out in outputs)
    with OpLog() as log:
        loss.backward()
    return log


def _training_step_ops(fast_paths, half: bool) -> dict:
    """The ops of a training step's forward (train mode, with gradients) and
    backward, after one step (the cached weights' first build out of it)."""
    model = model_with(fast_paths).train()

    def step():
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=half):
            outputs = model(image())
        sum(out.float().square().mean() for out in outputs).backward()
    step()
    with OpLog() as log:
        step()
    return log.ops


@pytest.mark.parametrize('half', [False, True], ids=['fp32', 'bf16-autocast'])
def test_inference_only_switches_change_nothing_in_a_training_step(half):
    """INFERENCE_ONLY: what the GPU check ablates on a forward alone (its
    eager training rows leave them out). The other switches that act here
    do change a training step, so the op log sees a change where one is.
    (The switches that act only where the depthwise kernels run or under
    compile are not compared here; each of them acts with gradients too.)"""
    from mavit_mm.ops.fast_paths import INFERENCE_ONLY
    on = _training_step_ops(ALL_ON, half)
    for switch in ACTING_HERE:
        same = _training_step_ops(ALL_ON.without(switch), half) == on
        assert same == (switch in INFERENCE_ONLY), (switch, half)


def test_cached_weights_drop_every_weight_cast_from_a_steady_forward():
    """Counted as the op census counts them (``devtools.op_census``)."""
    casts = {}
    for name, fast_paths in (('on', None), ('off', dict(cached_weights=False))):
        model = model_with(fast_paths)
        _, steady = first_and_steady(model, image())
        casts[name] = steady.weight_casts
        convolutions = sum(isinstance(m, torch.nn.Conv2d) for m in model.modules())
    assert casts['on'] == []
    # Uncached, every convolution casts its weight and bias at every call (as
    # autocast's own casts did), and more: the layer scales, the folded kernels.
    assert len(casts['off']) >= 2 * convolutions, listing(casts['off'])


def test_folded_residual_conv_saves_an_add_per_depthwise_residual():
    model = model_with()
    residual_convs = 2 * sum(model.depths)          # the position conv and the FFN's
    on = _forward_ops(None, half=False)
    off = _forward_ops(dict(folded_residual_conv=False), half=False)
    assert off.ops['add'] - on.ops['add'] == residual_convs
    assert off.ops['convolution'] == on.ops['convolution']


def test_channel_split_writes_one_gradient_instead_of_a_concatenation():
    """On, and by default on the CPU ('cpu')."""
    on, off = _backward_ops(dict(channel_split=True)), _backward_ops(dict(channel_split=False))
    assert _backward_ops(None).ops == on.ops
    blocks = sum(model_with().depths)
    assert on.ops['cat'] + blocks <= off.ops['cat'], (on.ops['cat'], off.ops['cat'])


def test_joint_qk_rotation_rotates_q_and_k_in_one_multiply():
    model = model_with()
    softmax_blocks = sum(d for d, t in zip(model.depths, model.attn_types) if t == 'softmax')
    on = _forward_ops(None, half=False)
    off = _forward_ops(dict(joint_qk_rotation=False), half=False)
    # (The MALA stages' PyTorch path rotates q and k apart, both times.)
    assert off.complex_muls - on.complex_muls == softmax_blocks


def test_dense_rope_replaces_the_flip_in_half_precision():
    model = model_with()
    softmax_blocks = sum(d for d, t in zip(model.depths, model.attn_types) if t == 'softmax')
    on = _forward_ops(dict(dense_rope=True), half=True)
    off = _forward_ops(dict(dense_rope=False), half=True)
    assert on.ops['flip'] == 0 and off.ops['flip'] == softmax_blocks
    # One matrix product a block (the MALA stages' PyTorch path has its own).
    assert on.ops['bmm'] - off.ops['bmm'] == softmax_blocks
    # fp32 keeps its one complex multiply either way.
    fp32_on = _forward_ops(dict(dense_rope=True), half=False)
    fp32_off = _forward_ops(dict(dense_rope=False), half=False)
    assert fp32_on.ops == fp32_off.ops


def test_in_place_residual_writes_into_the_stream_without_gradients():
    model = model_with()
    residuals = 2 * sum(model.depths)
    on = _forward_ops(None, half=False)
    off = _forward_ops(dict(in_place_residual=False), half=False)
    assert on.ops['addcmul_'] - off.ops['addcmul_'] == residuals
    assert off.ops['addcmul'] - on.ops['addcmul'] == residuals


def test_scaled_residual_is_the_plain_formula_and_refuses_a_scale_of_another_dtype():
    from mavit_mm.ops.residual import scaled_residual
    x, branch, scale = torch.randn(2, 4, 3, 5), torch.randn(2, 4, 3, 5), torch.randn(1, 4, 1, 1)
    torch.testing.assert_close(scaled_residual(x, branch, scale), x + scale * branch)
    written = x.clone()
    assert scaled_residual(written, branch, scale, in_place=True) is written
    torch.testing.assert_close(written, x + scale * branch)
    with pytest.raises(TypeError, match=r'scale \(torch.float32\) must have the map.s dtype '
                                        r'\(torch.bfloat16\)'):
        scaled_residual(x.bfloat16(), branch.bfloat16(), scale)


# -- caches against weight updates ----------------------------------------------------

@pytest.mark.parametrize('half', [False, True], ids=['fp32', 'bf16-autocast'])
def test_training_sees_every_weight_update(half):
    """Eval forwards fill the caches between training steps (as a validation
    during training does): each step's weights reach the next eval forward
    and the next training step, compared with a model that caches nothing."""
    model = model_with()
    uncached = model_with(dict(cached_weights=False))
    uncached.load_state_dict(model.state_dict())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, uncached)]
    x = image()
    for _ in range(3):
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=half):
            for m in (model, uncached):
                m.eval()
                with torch.no_grad():
                    evaluated = m(x)
                if m is model:
                    cached_eval = evaluated
            for ours, reference in zip(cached_eval, evaluated):
                assert torch.equal(ours, reference)
            losses = []
            for m, optimizer in zip((model, uncached), optimizers):
                m.train()
                optimizer.zero_grad()
                loss = sum(out.float().square().mean() for out in m(x))
                loss.backward()
                optimizer.step()
                losses.append(loss.detach())
        assert torch.equal(losses[0], losses[1])


def test_edits_through_data_reach_the_forward_after_a_mode_change():
    """mmengine's EMAHook swaps weights in through ``param.data``, which no
    version counter sees, and the runner then sets the model's mode."""
    model = model_with()
    x = image()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        model(x)
        for p in model.parameters():
            p.data.copy_(p.data * 1.5)
        model.eval()
        outputs = model(x)
    fresh = model_with()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        for ours, expected in zip(outputs, fresh(x)):
            assert torch.equal(ours, expected)
