"""The attention variants (MALA paper Tables 1, 9-11, Figs. 2-4; the
InLine slides): the papers' properties on ``attention_scores``, the model's
linear-time path against ``scores @ v`` with gradients, and MAViT with every
variant and kernel function. Comparisons in float64."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from mavit_mm.models import MAViT
from mavit_mm.models import mavit as mavit_module
from mavit_mm.models.mavit import GatedAttention
from mavit_mm.models.options import MAViTOptions
from mavit_mm.ops import (
    ATTN_TYPES,
    KERNEL_FUNCTIONS,
    LINEAR_ATTN_TYPES,
    SOFTMAX_ATTN_TYPES,
    attention,
    attention_scores,
)
from mavit_mm.ops import attention_variants as attention_module
from mavit_mm.ops.rope2d import RoPE2d, apply_rope
from mavit_mm.tooling.complexity import count_complexity

# One torch thread for the module (tests/conftest.py: small models run faster so).
pytestmark = pytest.mark.usefixtures('one_torch_thread')

F64 = torch.float64
HEIGHT, WIDTH, HEAD_DIM = 3, 4, 8
TOKENS = HEIGHT * WIDTH
EPS = 1e-6
# (attn_type, kernel_function) pairs that differ: softmax variants have no kernel.
CASES = ([(t, kf) for t in LINEAR_ATTN_TYPES for kf in KERNEL_FUNCTIONS]
         + [(t, 'elu') for t in SOFTMAX_ATTN_TYPES])


def case_id(case) -> str:
    return '-'.join(case)


def rope_tables(head_dim: int = HEAD_DIM, height: int = HEIGHT, width: int = WIDTH):
    return RoPE2d(head_dim)(height, width)


def random_qkv(seed: int = 0, batch: int = 2, heads: int = 2, tokens: int = TOKENS,
               head_dim: int = HEAD_DIM, shift: float = 0.5):
    """q, k, v in float64; q and k shifted so that relu(q) . mean relu(k) is
    nowhere near 0 (the sum-to-1 tolerance below relies on z >> eps)."""
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, tokens, head_dim, generator=generator, dtype=F64)
               for _ in range(3))
    return q + shift, k + shift, v


# -- an independent reference: the papers' formulas, one term at a time ------------
PAPER_PHI = {'elu': lambda x: F.elu(x) + 1, 'relu': torch.relu, 'exp': torch.exp}


def paper_scores(q, k, attn_type, kernel_function, rope=None):
    """Scores from the papers' notation (sums over m rather than z), written
    separately from the package: phi(q).phi(k) carries the (d^-1/2 / N) factor
    of MALA's published code; the normalisers use phi(q).phi(k) before RoPE,
    the numerators after it."""
    num_tokens, head_dim = q.shape[-2:]
    scale = head_dim ** -0.5
    rotate = (lambda t: t) if rope is None else (lambda t: apply_rope(t, *rope.tables(t.dtype)))
    if attn_type in SOFTMAX_ATTN_TYPES:
        if attn_type == 'softmax_qnorm':
            q = q / q.norm(dim=-1, keepdim=True)
        logits = scale * rotate(q) @ rotate(k).transpose(-1, -2)
        return logits.exp() / logits.exp().sum(-1, keepdim=True)
    phi = PAPER_PHI[kernel_function]
    fq, fk = phi(q), phi(k)
    plain = (scale / num_tokens) * fq @ fk.transpose(-1, -2)             # before RoPE
    sim = (scale / num_tokens) * rotate(fq) @ rotate(fk).transpose(-1, -2)
    total = plain.sum(-1, keepdim=True)                                # sum_m phi(q).phi(k_m)
    beta = 1 + 1 / (total + EPS)
    gamma = total / num_tokens
    return {'mala': beta * sim - gamma,
            'mala_no_beta': sim - gamma,
            'mala_no_gamma': beta * sim,
            'linear': sim / total,
            'inline': sim - total / num_tokens + 1 / num_tokens}[attn_type]


@pytest.mark.parametrize('case', CASES, ids=case_id)
@pytest.mark.parametrize('with_rope', [False, True], ids=['no-rope', 'rope'])
def test_scores_follow_the_papers_formulas(case, with_rope):
    attn_type, kernel_function = case
    q, k, _ = random_qkv(1)
    rope = rope_tables() if with_rope else None
    ours = attention_scores(q, k, attn_type, rope, kernel_function)
    assert ours.shape == (2, 2, TOKENS, TOKENS) and ours.dtype == F64
    expected = paper_scores(q, k, attn_type, kernel_function, rope)
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=1e-14)


# -- each query's scores sum to 1 (without RoPE) -----------------------------------
@pytest.mark.parametrize('case', [c for c in CASES if c[0] not in ('mala_no_beta',
                                                                   'mala_no_gamma')],
                         ids=case_id)
def test_scores_sum_to_one_without_rope(case):
    attn_type, kernel_function = case
    q, k, _ = random_qkv(2)
    sums = attention_scores(q, k, attn_type, None, kernel_function).sum(-1)
    # MALA's sum is z / (z + eps); z here is far above 1e-2.
    z = (q.shape[-1] ** -0.5) * (PAPER_PHI[kernel_function](q)
                                 @ PAPER_PHI[kernel_function](k).mean(-2).unsqueeze(-1))
    assert z.min() > 1e-2
    tolerance = 1e-4 if attn_type == 'mala' else 1e-12
    torch.testing.assert_close(sums, torch.ones_like(sums), rtol=0, atol=tolerance)


def test_ablated_mala_rows_do_not_sum_to_one():
    """Without beta the rows sum to 0, without gamma to z + 1: why they break."""
    q, k, _ = random_qkv(3)
    z = (HEAD_DIM ** -0.5) * ((F.elu(q) + 1) @ (F.elu(k) + 1).mean(-2).unsqueeze(-1))
    no_beta = attention_scores(q, k, 'mala_no_beta').sum(-1)
    no_gamma = attention_scores(q, k, 'mala_no_gamma').sum(-1)
    torch.testing.assert_close(no_beta, torch.zeros_like(no_beta), rtol=0, atol=1e-12)
    torch.testing.assert_close(no_gamma, z.squeeze(-1) + 1, rtol=1e-5, atol=0)


@pytest.mark.parametrize('attn_type', LINEAR_ATTN_TYPES)
def test_normaliser_is_taken_before_rope(attn_type):
    """z before RoPE (MALA's published code): with RoPE the rows of the linear
    variants no longer sum to their RoPE-free value; softmax's still do."""
    q, k, _ = random_qkv(4)
    rope = rope_tables()
    plain = attention_scores(q, k, attn_type).sum(-1)
    rotated = attention_scores(q, k, attn_type, rope).sum(-1)
    assert (plain - rotated).abs().max() > 1e-3
    softmax = attention_scores(q, k, 'softmax', rope).sum(-1)
    torch.testing.assert_close(softmax, torch.ones_like(softmax), rtol=0, atol=1e-12)


# -- query magnitude (MALA Sec. 3.2-3.3, Fig. 2) -----------------------------------
def entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * p.log()).sum(-1)


@pytest.fixture(scope='module')
def scaled_queries():
    """One positive-ish query and 16 keys, no RoPE; relu kernel, so that
    phi(a q) = a phi(q) exactly. Returns {attn_type: [scores for a = 1, 2, 4]}."""
    generator = torch.Generator().manual_seed(5)
    q = 0.05 * (1 + torch.rand(1, 1, 1, 16, generator=generator, dtype=F64))
    k = 1 + torch.randn(1, 1, 16, 16, generator=generator, dtype=F64).abs()
    q = q.expand(1, 1, 16, 16).contiguous()   # attention_scores wants N queries: repeat it
    return {t: [attention_scores(a * q, k, t, None, 'relu')[0, 0, 0] for a in (1.0, 2.0, 4.0)]
            for t in ATTN_TYPES}


def test_query_scaling_leaves_linear_attention_exactly_unchanged(scaled_queries):
    base, twice, four = scaled_queries['linear']
    assert torch.equal(base, twice) and torch.equal(base, four)


@pytest.mark.parametrize('attn_type', ['mala', 'softmax'])
def test_query_scaling_sharpens_mala_and_softmax(scaled_queries, attn_type):
    rows = scaled_queries[attn_type]
    assert all((row > 0).all() for row in rows)   # entropy needs positive scores
    maxima = [row.max().item() for row in rows]
    entropies = [entropy(row).item() for row in rows]
    assert maxima[0] < maxima[1] < maxima[2], maxima
    assert entropies[0] > entropies[1] > entropies[2], entropies
    # The key it favours most stays the favourite (MALA: p_m > p, Eq. 12).
    assert len({int(row.argmax()) for row in rows}) == 1


def test_query_scaling_changes_inline_and_not_softmax_qnorm(scaled_queries):
    base, twice, four = scaled_queries['inline']
    assert (base - twice).abs().max() > 1e-4 and (twice - four).abs().max() > 1e-4
    # Q / ||Q|| discards the magnitude, as linear attention does (Table 1).
    base, twice, four = scaled_queries['softmax_qnorm']
    torch.testing.assert_close(twice, base, rtol=1e-14, atol=0)
    torch.testing.assert_close(four, base, rtol=1e-14, atol=0)


# -- InLine's injectivity (the slides' example) ------------------------------------
def _rows(attn_type, queries, k, kernel_function):
    """Scores of each query in ``queries`` (n, d) over the keys k (N, d)."""
    q = torch.stack([queries[i].expand_as(k) for i in range(len(queries))])[:, None]
    return attention_scores(q, k.expand(len(queries), 1, *k.shape), attn_type, None,
                            kernel_function)[:, 0, 0]


@pytest.mark.parametrize('kernel_function', ['relu', 'elu'])
def test_inline_separates_queries_linear_attention_confuses(kernel_function):
    """Four keys (the slides' 2x2 grid) and four queries whose phi(q) point the
    same way with growing length: linear attention gives all four one
    distribution, InLine four different ones (and so does softmax)."""
    generator = torch.Generator().manual_seed(6)
    keys = torch.randn(4, 4, generator=generator, dtype=F64)
    base = torch.rand(4, generator=generator, dtype=F64) + 0.1      # positive
    # phi(q_c) = c * phi(base): relu is homogeneous; elu(x)+1 = x+1 for x > 0.
    if kernel_function == 'relu':
        queries = torch.stack([c * base for c in (1, 2, 3, 4)])
    else:
        queries = torch.stack([c * (base + 1) - 1 for c in (1, 2, 3, 4)])
    assert len({tuple(q.tolist()) for q in queries}) == 4
    linear = _rows('linear', queries, keys, kernel_function)
    for row in linear[1:]:
        torch.testing.assert_close(row, linear[0], rtol=1e-13, atol=1e-15)
    for attn_type in ('inline', 'softmax'):
        rows = _rows(attn_type, queries, keys, kernel_function)
        for i, j in itertools.combinations(range(4), 2):
            assert (rows[i] - rows[j]).abs().max() > 1e-3, (attn_type, i, j)


# -- the linear-time path equals scores @ v, with gradients ------------------------
@pytest.mark.parametrize('case', CASES, ids=case_id)
@pytest.mark.parametrize('with_rope', [False, True], ids=['no-rope', 'rope'])
def test_attention_equals_scores_times_v_with_gradients(case, with_rope):
    attn_type, kernel_function = case
    q, k, v = (t.requires_grad_() for t in random_qkv(7, shift=0.0))
    rope = rope_tables() if with_rope else None
    upstream = torch.randn(q.shape, generator=torch.Generator().manual_seed(8), dtype=F64)

    fast = attention(q, k, v, attn_type, rope, kernel_function)
    reference = attention_scores(q, k, attn_type, rope, kernel_function) @ v
    torch.testing.assert_close(fast, reference, rtol=1e-10, atol=1e-12)
    grads_fast = torch.autograd.grad((fast * upstream).sum(), (q, k, v))
    grads_ref = torch.autograd.grad((reference * upstream).sum(), (q, k, v))
    for name, a, b in zip('qkv', grads_fast, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11, msg=lambda m, name=name: f'd{name}: {m}')


def test_only_mala_with_elu_goes_to_the_mala_dispatch(monkeypatch):
    """'mala' + 'elu' (with RoPE) is the fused-kernel dispatch, as before; every
    other case takes the PyTorch path of ops.attention_variants."""
    calls = []
    original = attention_module.mala_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get('impl'))
        return original(*args, **kwargs)

    monkeypatch.setattr(attention_module, 'mala_attention', spy)
    q, k, v = random_qkv(9)
    rope = rope_tables()
    for attn_type, kernel_function in CASES:
        attention(q, k, v, attn_type, rope, kernel_function, impl='torch')
    assert calls == ['torch']


def test_mala_with_elu_runs_the_fused_kernels():
    """The Triton kernels (CPU interpreter in CI) give scores @ v."""
    pytest.importorskip('triton')
    if not torch.cuda.is_available():
        from mavit_mm.ops.mala import triton_interpreter_enabled
        if not triton_interpreter_enabled():
            pytest.skip('needs CUDA or TRITON_INTERPRET=1')
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    q, k, v = (t.float().to(device) for t in random_qkv(10, batch=1, heads=1, head_dim=16))
    rope = RoPE2d(16).to(device)(HEIGHT, WIDTH)
    fused = attention(q, k, v, 'mala', rope, 'elu', impl='triton')
    reference = attention_scores(q.double(), k.double(), 'mala', rope) @ v.double()
    torch.testing.assert_close(fused.double(), reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('attn_type', ['linear', 'inline', 'mala'])
def test_half_precision_is_computed_in_fp32(attn_type):
    q, k, v = random_qkv(11)
    rope = rope_tables()
    reference = attention(q, k, v, attn_type, rope, 'relu')
    half = attention(*(t.bfloat16() for t in (q, k, v)), attn_type, rope, 'relu')
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.double(), reference, rtol=2e-2, atol=2e-2)
    # Against the formula on the bf16-rounded inputs in float64, the output's
    # own rounding and no more: computed in fp32 the error was 0.16-0.29% of
    # the largest value (seeds 11-15), the same formula in bf16 0.55-1.9%.
    rounded = attention(*(t.bfloat16().double() for t in (q, k, v)), attn_type, rope, 'relu')
    error = ((half.double() - rounded).abs().max() / rounded.abs().max()).item()
    assert error < 4e-3, error
    with torch.autocast('cpu', dtype=torch.bfloat16):
        inside = attention(q.float(), k.float(), v.float(), attn_type, rope, 'relu')
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside.double(), reference, rtol=1e-5, atol=1e-6)


# -- bad input ---------------------------------------------------------------------
def test_bad_names_and_shapes_are_clear_errors():
    q, k, v = random_qkv(12)
    rope = rope_tables()
    with pytest.raises(ValueError, match=r"attn_type must be one of \('mala', 'softmax', "
                                         r"'linear', 'inline'.*got 'flash'"):
        attention(q, k, v, 'flash', rope)
    with pytest.raises(ValueError, match=r"attn_type must be one of .*got 'flash'"):
        attention_scores(q, k, 'flash')
    with pytest.raises(ValueError, match=r"kernel_function must be one of \('elu', 'relu', "
                                         r"'exp'\), got 'gelu'"):
        attention(q, k, v, 'linear', rope, 'gelu')
    with pytest.raises(ValueError, match="kernel_function must be one of"):
        attention_scores(q, k, 'mala', rope, 'gelu')
    with pytest.raises(ValueError, match='mala_impl must be one of'):
        attention(q, k, v, 'linear', rope, impl='cuda')
    with pytest.raises(ValueError, match="fused kernels cannot run MALA with kernel_function "
                                         "'relu'"):
        attention(q, k, v, 'mala', rope, 'relu', impl='triton')
    with pytest.raises(ValueError, match='q, k and v must all be'):
        attention(q, k, v[..., :4], 'inline', rope)
    with pytest.raises(ValueError, match='q and k must both be'):
        attention_scores(q, k[:, :1], 'inline')
    with pytest.raises(ValueError, match='12 tokens do not fill the 2x4 feature map'):
        attention(q, k, v, 'linear', rope_tables(height=2))


def test_model_level_misconfigurations_are_clear_errors():
    with pytest.raises(ValueError, match="kernel_function='relu' is phi of the linear "
                                         "attentions.*no stage uses one"):
        MAViT('t', attn_types=['softmax'] * 4, kernel_function='relu')
    with pytest.raises(ValueError, match="inline_residual=True needs an 'inline' stage"):
        MAViT('t', inline_residual=True)
    with pytest.raises(ValueError, match="mala_impl='triton'.*'elu' kernel only, not 'exp'"):
        MAViT('t', kernel_function='exp', mala_impl='triton')
    # The option adds InLine's residual to the 'inline' attentions only.
    assert GatedAttention(16, 2, 'linear', options=MAViTOptions(inline_residual=True)).residual \
        is None


# -- MAViT with every variant ------------------------------------------------------
def small_mavit(**kwargs):
    return MAViT('t', depths=[1, 1, 1, 1], drop_path_rate=0.0, **kwargs)


@pytest.fixture(scope='module')
def published_keys():
    return [(key, tuple(v.shape)) for key, v in MAViT('t').state_dict().items()]


@pytest.mark.parametrize('attn_type', ATTN_TYPES)
def test_every_variant_keeps_the_published_state_dict(attn_type, published_keys):
    kernel = 'relu' if attn_type in LINEAR_ATTN_TYPES else 'elu'
    for attn_types in ([attn_type] * 4, [attn_type, attn_type, 'softmax', 'softmax']):
        model = MAViT('t', attn_types=attn_types, kernel_function=kernel)
        assert [(k, tuple(v.shape)) for k, v in model.state_dict().items()] == published_keys
        assert [b.attn.attn_type for layer in model.layers for b in layer.blocks] == \
            [t for t, depth in zip(attn_types, model.depths) for _ in range(depth)]


def test_inline_residual_adds_only_its_keys(published_keys):
    model = MAViT('t', attn_types=['inline', 'inline', 'softmax', 'softmax'],
                  inline_residual=True)
    keys = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    extra = [k for k in keys if '.attn.residual.' in k[0]]
    assert [k for k in keys if k not in extra] == published_keys
    expected = []
    for stage, dim, heads in ((0, 64, 1), (1, 128, 2)):
        for block in range(2):
            prefix = f'layers.{stage}.blocks.{block}.attn.residual'
            expected += [(f'{prefix}.0.weight', (dim, dim // heads, 1, 1)),
                         (f'{prefix}.0.bias', (dim,)),
                         (f'{prefix}.2.weight', (9 * dim, dim // heads, 1, 1)),
                         (f'{prefix}.2.bias', (9 * dim,))]
    assert extra == expected


def test_inline_residual_is_the_3x3_neighbourhood_sum():
    torch.manual_seed(13)
    module = GatedAttention(8, 2, 'inline', options=MAViTOptions(inline_residual=True)).double()
    x = torch.randn(2, 8, 3, 5, dtype=F64)
    v = torch.randn(2, 8, 3, 5, dtype=F64)
    r = module.residual(x.mean(dim=(2, 3), keepdim=True)).reshape(2, 8, 3, 3)
    expected = torch.zeros_like(v)
    padded = F.pad(v, (1, 1, 1, 1))
    for dy, dx in itertools.product(range(3), range(3)):
        expected += r[:, :, dy, dx, None, None] * padded[:, :, dy:dy + 3, dx:dx + 5]
    torch.testing.assert_close(module._local_residual(x, v), expected, rtol=1e-12, atol=1e-14)


def test_gated_attention_has_one_entry_point(monkeypatch):
    calls = []
    original = mavit_module.attention

    def spy(q, k, v, attn_type, rope, kernel_function, impl):
        calls.append((attn_type, kernel_function, impl))
        return original(q, k, v, attn_type, rope, kernel_function, impl)

    monkeypatch.setattr(mavit_module, 'attention', spy)
    model = small_mavit(attn_types=['linear', 'inline', 'mala_no_beta', 'softmax_qnorm'],
                        kernel_function='exp', mala_impl='torch').eval()
    with torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
    assert calls == [('linear', 'exp', 'torch'), ('inline', 'exp', 'torch'),
                     ('mala_no_beta', 'exp', 'torch'), ('softmax_qnorm', 'exp', 'torch')]


MODEL_CASES = ([(t, kf, False) for t, kf in CASES if t != 'inline']
               + [('inline', kf, res) for kf in KERNEL_FUNCTIONS for res in (False, True)])


@pytest.mark.parametrize('case', MODEL_CASES,
                         ids=lambda c: '-'.join([c[0], c[1]] + (['residual'] if c[2] else [])))
def test_mavit_trains_one_step_with_every_variant(case):
    attn_type, kernel_function, residual = case
    torch.manual_seed(14)
    model = small_mavit(attn_types=[attn_type] * 4, kernel_function=kernel_function,
                        inline_residual=residual)
    model.init_weights()
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    outputs = model(torch.randn(2, 3, 48, 64))
    loss = sum((out ** 2).mean() for out in outputs)
    assert torch.isfinite(loss)
    loss.backward()
    unused = [n for n, p in model.named_parameters() if p.grad is None]
    assert not unused, unused[:5]
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    qkvo = 'layers.0.blocks.0.attn.qkvo.weight'
    assert not torch.equal(before[qkvo], model.state_dict()[qkvo])


def test_variants_change_the_output_of_the_same_weights():
    """One set of weights under every variant / kernel: each gives its own
    features, so the configured formula is the one that runs."""
    torch.manual_seed(15)
    reference = small_mavit().double().eval()
    x = torch.randn(1, 3, 32, 48, dtype=F64)
    outputs = {}
    for attn_type, kernel_function in CASES:
        model = small_mavit(attn_types=[attn_type] * 4, kernel_function=kernel_function)
        model = model.double().eval()
        model.load_state_dict(reference.state_dict(), strict=True)
        with torch.no_grad():
            outputs[(attn_type, kernel_function)] = model(x)[0]
    for (a, out_a), (b, out_b) in itertools.combinations(outputs.items(), 2):
        assert (out_a - out_b).abs().max() > 1e-6, (a, b)


# -- complexity counting -----------------------------------------------------------
@pytest.mark.parametrize('attn_type', ATTN_TYPES)
def test_attention_macs_of_every_variant(attn_type):
    model = small_mavit(attn_types=[attn_type] * 4).eval()
    plain = small_mavit().eval()
    x = torch.randn(1, 3, 64, 96)
    figures = count_complexity(model, lambda: model(x))
    expected = 0
    for stage, (dim, heads) in enumerate(zip(model.embed_dims, model.num_heads)):
        tokens = (64 // 2 ** (stage + 2)) * (96 // 2 ** (stage + 2))
        head_dim = dim // heads
        if attn_type in SOFTMAX_ATTN_TYPES:
            per_head = 2 * tokens * tokens * head_dim
            if attn_type == 'softmax_qnorm':
                per_head += tokens * head_dim                       # ||q||
        else:
            per_head = 2 * tokens * head_dim * head_dim + tokens * head_dim
        expected += heads * per_head
    assert figures.attention_macs == expected
    assert figures.per_module_type[f'{attn_type}_attention'] == expected
    assert figures.layer_macs == count_complexity(plain, lambda: plain(x)).layer_macs


def test_inline_residual_macs_are_counted_as_layers():
    attn_types = ['inline', 'softmax', 'softmax', 'softmax']
    with_res = small_mavit(attn_types=attn_types, inline_residual=True).eval()
    without = small_mavit(attn_types=attn_types).eval()
    x = torch.randn(1, 3, 64, 96)
    a = count_complexity(with_res, lambda: with_res(x))
    b = count_complexity(without, lambda: without(x))
    dim, tokens = 64, 16 * 24
    mlp = dim * dim + dim * 9 * dim          # two grouped 1x1 convs, 1 head, one pooled token
    assert a.layer_macs - b.layer_macs == mlp + 9 * tokens * dim
    assert a.per_module_type['inline_residual'] == 9 * tokens * dim
    assert a.attention_macs == b.attention_macs


@pytest.mark.parametrize('attn_type', ['mala', 'linear', 'softmax'])
def test_inputs_no_attention_can_take_are_named(attn_type):
    """Rotary tables of another head dim, q, k and v of mixed dtypes, no
    token at all: each a ValueError naming it on every path (the fused MALA
    kernels would read past the angle table; the PyTorch paths failed on a
    broadcast, a matmul's dtype or a division by zero)."""
    q = torch.randn(1, 2, 6, 32)
    impls = ('torch', 'triton') if attn_type == 'mala' else ('auto',)
    for impl in impls:
        with pytest.raises(ValueError, match=r'rotate a head dim of 16 \(8 angles\), but q and k '
                                             r'have head dim 32'):
            attention(q, q, q, attn_type, RoPE2d(16)(2, 3), impl=impl)
        with pytest.raises(ValueError, match=r'share one dtype and device, got torch.float32 on '
                                             r'cpu, torch.float16 on cpu'):
            attention(q, q.half(), q, attn_type, RoPE2d(32)(2, 3), impl=impl)
        empty = torch.randn(1, 2, 0, 32)
        with pytest.raises(ValueError, match=r'at least one token, got N = 0'):
            attention(empty, empty, empty, attn_type, RoPE2d(32)(0, 3), impl=impl)


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_a_batch_of_no_image_attends_to_nothing(dtype):
    """Batch 0 passes through every variant with the PyTorch paths' rotation
    (half inputs rotate with flipped pairs, which could not reshape an empty map)."""
    q = torch.randn(0, 2, 6, 32, dtype=dtype)
    for attn_type in ('mala', 'linear', 'softmax'):
        out = attention(q, q, q, attn_type, RoPE2d(32)(2, 3), impl='torch' if attn_type == 'mala'
                        else 'auto')
        assert out.shape == q.shape and out.dtype == dtype


def test_a_second_derivative_through_the_fused_kernels_names_the_path_that_has_one():
    """Gradients of gradients (create_graph=True): the PyTorch paths have them,
    the fused ops' backward kernels do not, and say which option to set
    (torch's own error named no way out)."""
    from helpers.depthwise_stages import ffn_middle
    rope = RoPE2d(16)(2, 3)
    q, k, v = (torch.randn(1, 1, 6, 16, requires_grad=True) for _ in range(3))
    h = torch.randn(1, 8, 3, 5).contiguous(memory_format=torch.channels_last).requires_grad_()
    weight, bias = torch.randn(8, 1, 3, 3), torch.randn(8)
    cases = ((lambda impl: attention(q, k, v, 'mala', rope, impl=impl), (q,), 'mala_impl'),
             (lambda impl: ffn_middle(h, weight, bias, impl=impl), (h,), 'depthwise_impl'))
    for run, inputs, option in cases:
        first = torch.autograd.grad(run('torch').square().sum(), inputs, create_graph=True)
        torch.autograd.grad(first[0].sum(), inputs)                  # the PyTorch path has one
        first = torch.autograd.grad(run('triton').square().sum(), inputs, create_graph=True)
        with pytest.raises(RuntimeError, match=rf"no second derivative .* {option}='torch'"):
            torch.autograd.grad(first[0].sum(), inputs)
