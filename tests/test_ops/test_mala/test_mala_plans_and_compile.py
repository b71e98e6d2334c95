"""The fused Triton MALA's launch plans and compiled kernels: the split-N
grid, tiles and resources against the sm_90 compile, the combine kernel's
blocks, the ``mavit_mm::mala`` operator under ``torch.compile``, and the host
path (plans made once per case, output layouts, host overhead). Off CUDA
the launches run in Triton's CPU interpreter, as in test_mala_numerics.py.
"""
import ast
import os
import re
import subprocess
import sys

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
    make_qkv,
    plain_qkv,
    random_like,
    relative_error,
)
from helpers.paths import REPO_ROOT  # noqa: E402

from mavit_mm import MAViT  # noqa: E402
from mavit_mm.ops.mala import dispatch as mala_dispatch  # noqa: E402
from mavit_mm.ops.mala import function as mala_function  # noqa: E402
from mavit_mm.ops.mala import mala_attention  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402


# --------------------------------------------------------------------------
# Launch plans: the split-N grid and resident programs per SM
# --------------------------------------------------------------------------
# With 2 programs resident per SM (the expected counts are for it; the
# default, RESIDENT_PROGRAMS_PER_SM, follows the kernels' compile).
@pytest.mark.parametrize('sm_count,batch_heads,num_tokens,expected_programs', [
    (132, 16, 65536, 256),   # one wave: chunks of whole 64-token query tiles give
                             # 16 x 16 programs of 4096 tokens, or 32 x 16 in two
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
        granule = max(plan.partials.block_n, plan.query.block_n)
        assert mala_function.fastest_chunking(num_tokens, batch_heads, slots, granule) == \
            plan.tokens_per_chunk
        assert plan.tokens_per_chunk % granule == 0
        if resident == 2:
            assert programs == expected_programs
    # The default is RESIDENT_PROGRAMS_PER_SM.
    assert mala_function.make_launch_plan(num_tokens, batch_heads, 64, torch.bfloat16,
                                          DEVICE) == plan



@pytest.mark.parametrize('batch_heads,output_tiles,key_tiles', [
    (1, 2, 4),     # MAViT-T's first stage at 512x2048: key programs take twice the tiles
    (16, 16, 16),  # many heads: both at MAX_TILES_PER_PROGRAM
])
def test_tiles_per_program_are_the_timed_ones(monkeypatch, batch_heads, output_tiles,
                                              key_tiles):
    # An H200 (132 SMs), N = 65,536, d = 64: tiles per program within 8% of
    # the fastest in both H200 tunings (TOKEN_PROGRAMS_PER_SM).
    monkeypatch.setattr(mala_function, 'sm_count', lambda device: 132)
    plan = mala_function.make_launch_plan(65536, batch_heads, 64, torch.bfloat16, DEVICE)
    assert plan.output_tokens_per_program == output_tiles * plan.output.block_n
    assert plan.key_tokens_per_program == key_tiles * plan.key.block_n
    # An override sets both kernels alike (what the tuning times).
    plan = mala_function.make_launch_plan(65536, batch_heads, 64, torch.bfloat16, DEVICE,
                                          tokens_per_program=256)
    assert plan.output_tokens_per_program == plan.key_tokens_per_program == 256



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
    from devtools.gpu_compile_report import KernelResources, resident_blocks
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
# The kernels as compiled: sm_90 resources, tiles, launch options
# --------------------------------------------------------------------------
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
    # tiles of 32 rows compiled to mma.sync). The query kernel's tile was timed
    # fastest though it spills (KERNEL_TILES): a little, and no more.
    usage = {name: ast.literal_eval(line[line.index('{'):]) for name, line in lines.items()}
    assert all(u['stack_bytes'] == 0 for name, u in usage.items()
               if name != 'backward_query'), usage
    assert usage['backward_query']['stack_bytes'] <= 512, usage
    assert all(usage[name]['wgmma'] > 0 for name in
               ('forward_partials', 'forward_output', 'backward_query', 'backward_key')), usage
    # fp32 (exact products, FP32_TILES): no spills either, with the Triton
    # installed (3.6, 3.7 and 3.9 checked: FP32_TILES' comment).
    fp32_stack = {line.split()[0]: ast.literal_eval(line[line.index('{'):])['stack_bytes']
                  for line in fp32_report.splitlines() if '_kernel' in line}
    assert len(fp32_stack) == 5 and not any(fp32_stack.values()), fp32_stack



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
# The combine kernel's chunk blocks
# --------------------------------------------------------------------------
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
# MAViT-T's widths and heads with one block a stage, two in the third (one
# block feeding another): every block type at a third of the full depth's
# time in Triton's interpreter; nothing asserted depends on the depth.
DEPTHS = [1, 1, 2, 1]


@pytest.mark.parametrize('impl,backend', [('triton', 'aot_eager'), ('torch', 'eager')])
def test_torch_compile_fullgraph_matches_eager_accuracy(impl, backend):
    torch.manual_seed(0)
    model = MAViT(arch='tiny', depths=DEPTHS, mala_impl=impl).to(DEVICE).eval()
    image = torch.randn(1, 3, 64, 96, device=DEVICE)
    # The float64 eager reference (the PyTorch path: the kernels have no fp64).
    reference_model = MAViT(arch='tiny', depths=DEPTHS, mala_impl='torch').to(DEVICE).double().eval()
    reference_model.load_state_dict(model.state_dict())
    image64 = image.double().requires_grad_()
    outputs64 = reference_model(image64)
    loss64 = sum((out * torch.linspace(-1, 1, out.numel(), dtype=torch.float64,
                                       device=DEVICE).view_as(out)).sum() for out in outputs64)
    (grad64,) = torch.autograd.grad(loss64, image64)

    eager = _model_error(model, image, outputs64, grad64)
    torch._dynamo.reset()
    from torch._dynamo.testing import CompileCounterWithBackend
    counter = CompileCounterWithBackend(backend)
    compiled_model = torch.compile(model, fullgraph=True, backend=counter)
    compiled = _model_error(compiled_model, image, outputs64, grad64)
    # The compiled graph calls the path asked for: the fused op (not the
    # PyTorch formula a compile once fell back to), or none of it.
    targets = {str(node.target) for graph in counter.graphs for node in graph.graph.nodes}
    assert any('mavit_mm.mala' in target for target in targets) == (impl == 'triton'), targets
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
    # input's strides, for every order (is_contiguous passes over size-1
    # dimensions, whose strides move no byte); an expanded one outermost.
    import itertools
    for order in itertools.permutations(range(4)):
        # A buffer laid out in ``order``, outermost first, seen as (B, heads, N, d).
        x = torch.empty([shape[dim] for dim in order]).permute([order.index(d) for d in range(4)])
        out = mala_function.empty_like_layout(x)
        assert out.shape == x.shape, order
        assert out.permute(order).is_contiguous(), (order, out.stride())
    # Tied strides (size-1 dimensions) keep the logical order: a contiguous
    # input gives contiguous strides, not those of another order of the ties.
    if 0 not in shape:
        assert mala_function.empty_like_layout(torch.empty(shape)).stride() == \
            torch.empty(shape).stride()
    # An expanded dimension (stride 0) goes outermost, the others as they lie.
    if shape[0] > 1 and 0 not in shape:
        x = torch.empty(1, *shape[1:]).transpose(2, 3).expand(shape[0], -1, -1, -1)
        out = mala_function.empty_like_layout(x)
        assert out.shape == x.shape and out.permute(0, 1, 3, 2).is_contiguous(), out.stride()



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

