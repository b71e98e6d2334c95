"""The GPU benchmark scripts, checked without a GPU: imports, plans, arguments."""
import functools
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip('triton')

from helpers.paths import REPO_ROOT  # noqa: E402

from mavit_mm.tooling.run_script import run_script as run_repository_script  # noqa: E402

# The benchmarks run from the repository root, as the README runs them.
run_script = functools.partial(run_repository_script, cwd=REPO_ROOT, timeout=600)


def test_gpu_check_dry_run_checks_the_plan(tmp_path):
    result = run_script('benchmarks/gpu_check.py', '--dry-run', '--out', str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert 'plan: env, kernel-tests, model-tests, profile, bench, sdpa' in result.stdout
    assert 'layout channels_last' in result.stdout
    assert 'part 1: env kernel-tests model-tests profile bench sdpa (at most 6.95 min, 8 files)' \
        in result.stdout
    assert ('part 2: env sweep model-profile upernet-fps tune-bh16 tune-bh1 '
            '(at most 7.00 min, 8 files)') in result.stdout
    assert 'part 3' not in result.stdout
    # The whole check is two 8-minute commands, and the dry run says it fits them.
    assert ('whole check: 2 commands of at most 8 min (13.95 min of budgets; the longest '
            'part 7.00, planned to 7.00, limit 7.50), so it fits 2 commands') in result.stdout
    # The op's calls in MAViT-T at 512x2048, from the preset.
    assert ('stage 1 batch 1 heads 1 128x512 d 64; stage 2 batch 1 heads 2 64x256 d 64; '
            'stage 1 batch 8 heads 1 128x512 d 64; stage 2 batch 8 heads 2 64x256 d 64'
            ) in result.stdout
    # No problem: the child processes (bench_mala, tune_mala, benchmark_fps --modes)
    # take the arguments the steps give them.
    assert 'problem:' not in result.stdout
    # The tuning candidates it would time: the query kernel's only.
    assert 'd=64 query: 24 candidates' in result.stdout and 'd=64 output:' not in result.stdout


def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path):
    result = run_script('benchmarks/gpu_check.py', '--out', str(tmp_path),
                        '--steps', 'env')
    if result.returncode == 0:
        pytest.skip('a CUDA GPU is present')
    assert result.returncode == 2
    assert '--dry-run' in result.stdout


def test_bench_mala_times_the_torch_path_on_cpu(tmp_path):
    output = tmp_path / 'bench.json'
    result = run_script('benchmarks/bench_mala.py', '--device', 'cpu', '--dtypes', 'fp32',
                        '--batch-heads', '2', '--tokens', '256', '--head-dims', '32',
                        '--layout', 'contiguous', '--output', str(output))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report['environment']['device_type'] == 'cpu'
    rows = report['results']
    assert rows and all(row['impl'] == 'torch' for row in rows)
    assert {row['layout'] for row in rows} == {'contiguous'}    # --layout, by name
    assert all(row['time_ms'] > 0 and row['bandwidth_gbps'] > 0 for row in rows)
    # The yardstick is the copy bandwidth measured in the same run (CUDA only).
    assert report['complete'] and report['environment']['copy_bandwidth_tbps'] is None
    assert all(row['percent_of_copy'] is None for row in rows)


def test_speed_vs_swin_writes_json_and_plot(tmp_path):
    output = tmp_path / 'speed.json'
    result = run_script('benchmarks/speed_vs_swin.py', '--device', 'cpu', '--sizes', '64x96',
                        '--tasks', 'backbone-forward', 'backbone-train', '--repeats', '2',
                        '--warmup', '0', '--out', str(output))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report['device_type'] == 'cpu' and report['versions']['torch']
    assert [row['task'] for row in report['results']] == ['backbone-forward', 'backbone-train']
    for row in report['results']:
        assert row['shape'] == [64, 96]
        assert len(row['times_ms']['MAViT-T']) == len(row['times_ms']['Swin-T']) == 2
        assert row['ratio'] > 0
    assert output.with_suffix('.png').stat().st_size > 10_000
    assert 'about' in result.stdout and 's left' in result.stdout   # progress with an estimate


def test_gpu_check_parts_fit_a_gpu_command(monkeypatch):
    """The whole check is two GPU commands; a command runs for at most 8 minutes
    and returns at most 8 files: every step but env is in exactly one part (env
    in both), each step's budget is at most 5 minutes, each part's budgets stay
    under 7.5 (planned to 7: a GPU session has 15 minutes, the machine's start
    included) and its files (one per step, summary, log) under 8."""
    from benchmarks import gpu_check
    assert len(gpu_check.PARTS) == gpu_check.COMMANDS == 2
    assert sorted(gpu_check.PARTS) == [1, 2]
    # Each step in one part, budgets, commands, files and the tunings' order
    # (B*heads 16 first: the second finds the candidates compiled): plan_problems.
    assert gpu_check.plan_problems() == []
    assert all(steps[0] == 'env' for steps in gpu_check.PARTS.values())
    assert gpu_check.STEP_LIMIT_MIN == 5 and gpu_check.COMMAND_FILES == 8
    assert gpu_check.PART_AIM_MIN <= gpu_check.PART_LIMIT_MIN < gpu_check.COMMAND_LIMIT_MIN <= 8
    for part, steps in gpu_check.PARTS.items():
        minutes = sum(gpu_check.STEP_BUDGET_MIN[step] for step in steps)
        assert minutes <= gpu_check.PART_AIM_MIN + 1e-9
        assert gpu_check.part_minutes(part) == round(minutes, 2)
    # The check fails a plan that breaks any of these.
    monkeypatch.setitem(gpu_check.PARTS, 3, ['env', 'sweep'])
    monkeypatch.setitem(gpu_check.PARTS, 1, gpu_check.PARTS[1] + ['model-profile', 'tune-bh1'])
    monkeypatch.setitem(gpu_check.PARTS, 2, [step for step in gpu_check.PARTS[2]
                                             if step not in ('tune-bh16', 'tune-bh1')])
    monkeypatch.setitem(gpu_check.STEP_BUDGET_MIN, 'upernet-fps', 6.0)
    assert gpu_check.plan_problems() == [
        'step upernet-fps has a budget of 6.0 min (limit 5.0)',
        'step sweep is in parts 2, 3', 'step model-profile is in parts 1, 2',
        'step tune-bh16 is in no part', 'the check takes 3 commands (limit 2)',
        'part 1 runs tune-bh1 without tune-bh16 before it',
        'part 1 needs 8.2 min (limit 7.5)', 'part 1 writes 10 files (a GPU command returns 8)',
        'part 2 needs 8.65 min (limit 7.5)']


def test_gpu_md_parts_table_is_the_plan():
    """docs/gpu.md's table of the parts names each part's steps in order with
    their budgets and sums, as gpu_check.py plans them."""
    from benchmarks import gpu_check
    text = (REPO_ROOT / 'docs' / 'gpu.md').read_text()
    table = text[text.index('| part | step | budget, min |'):].split('\n\n')[0]
    parts, part = {}, None
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip('|').split('|')]
        if cells[0]:
            part = int(cells[0].split(':')[0])
        if cells[1] == '*sum*':
            assert float(cells[2].strip('*')) == gpu_check.part_minutes(part)
        else:
            parts.setdefault(part, []).append((cells[1].strip('`'), float(cells[2])))
    assert parts == {part: [(step, gpu_check.STEP_BUDGET_MIN[step]) for step in steps]
                     for part, steps in gpu_check.PARTS.items()}


def test_gpu_check_measures_the_training_step_at_512x2048_batch_2():
    """The backbone step is gone: the sweep's training step (forward, backward,
    AdamW, peak memory) is MAViT-T against Swin-T at 512x2048, batch 2, and the
    sweep is in a part."""
    import inspect

    from benchmarks import gpu_check
    assert 'backbone' not in gpu_check.STEPS and not hasattr(gpu_check, 'step_backbone')
    defaults = inspect.signature(gpu_check.step_sweep).parameters
    assert defaults['train_size'].default == (512, 2048) and defaults['train_batch'].default == 2
    assert any('sweep' in steps for steps in gpu_check.PARTS.values())


def test_gpu_check_kills_a_step_at_its_budget_and_keeps_its_output(tmp_path):
    from benchmarks import gpu_check
    log = tmp_path / 'step.log'
    run = gpu_check._run_child(
        [sys.executable, '-c', "print('measured so far', flush=True); import time; time.sleep(60)"],
        budget_s=3, log=log)
    assert run['timed_out'] and run['returncode'] is None and run['seconds'] < 30
    assert 'measured so far' in log.read_text() and 'killed at its budget' in log.read_text()
    counts = gpu_check._log_summary('..F.s [ 50%]\n.. [100%]\nFAILED tests/x.py::t - boom\n')
    assert (counts['passed'], counts['failed'], counts['skipped']) == (5, 1, 1)
    assert counts['failures'] == ['FAILED tests/x.py::t - boom']


def test_tune_mala_survives_failing_candidates_and_saves_as_it_goes(tmp_path, monkeypatch):
    """A tile that does not fit fails while its launches are built: the sweep
    records it and goes on, and the JSON on disk is valid after every candidate."""
    import triton.testing

    from benchmarks import tune_mala
    case = tune_mala.Case(torch.float32, 2, 256, 32, torch.device('cpu'))
    built = []

    def kernel_step(kernel, plan):
        tile = getattr(plan, kernel)
        built.append((kernel, tile.block_n))
        if tile.block_n == 64:
            raise RuntimeError('out of resource: shared memory')
        return lambda: None
    monkeypatch.setattr(case, 'kernel_step', kernel_step)
    monkeypatch.setattr(case, 'launches', lambda plan: (_Stub(), _Stub()))
    monkeypatch.setattr(case, 'pass_step', lambda plan, backward: (lambda: None))
    monkeypatch.setattr(triton.testing, 'do_bench',
                        lambda step, **kwargs: (step(), 0.01 * (1 + len(built) % 3))[1])
    output = tmp_path / 'tune.json'
    results = tune_mala.Results(output, {'device': 'cpu'})
    record = results.start({'dtype': 'fp32'})
    snapshots = []

    def save():
        results.save()
        snapshots.append(json.loads(output.read_text()))
    tune_mala.tune_shape(case, ['partials'], 1, record, save)
    timings = record['kernels']['partials']['timings']
    assert len(timings) == len(tune_mala.tile_candidates('partials', 32))
    assert all((t['ms'] is None) == (t['tile'][0] == 64) for t in timings)
    assert record['kernels']['partials']['best']['tile'][0] != 64
    assert len(snapshots) >= len(timings)
    assert len(snapshots[0]['results'][0]['kernels']['partials']['timings']) == 1
    assert not snapshots[-1]['complete']


class _Stub:
    def __getattr__(self, name):
        return lambda: None


def test_gpu_check_model_steps_run_on_cpu_and_write_their_json(tmp_path):
    """The model steps (SDPA kernels, the sweep against Swin-T with its training
    step, the host/kernel split), run on the CPU at small sizes: what they
    write a GPU run writes."""
    from benchmarks import gpu_check
    result = gpu_check.step_sdpa(tmp_path, 600, device='cpu', sizes=((64, 96),))
    sdpa = json.loads((tmp_path / 'sdpa.json').read_text())
    assert result['failed'] == 0 and sdpa['complete'] and not sdpa['math_path_seen']
    assert [(row['precision'], row['allowed']) for row in sdpa['results']] == [
        ('fp32', 'flash+efficient'), ('bf16', 'flash+efficient'), ('bf16', 'flash')]
    # Each forward ran SDPA's flash op (the CPU's fast kernel), never the math one.
    assert all(row['ok'] and any('flash' in op for op in row['sdpa_ops'])
               for row in sdpa['results'])

    gpu_check.step_sweep(tmp_path, 600, device='cpu', sizes=((64, 96),), train_size=(64, 64),
                         train_batch=2)
    sweep = json.loads((tmp_path / 'sweep.json').read_text())
    assert sweep['complete']
    assert [(row['model'][:7], row['precision']) for row in sweep['forward']] == [
        ('MAViT-T', 'fp32'), ('Swin-T ', 'fp32'), ('MAViT-T', 'bf16'), ('Swin-T ', 'bf16')]
    for row in sweep['forward'] + sweep['training']:
        assert 'error' not in row, row
        assert row['time_ms'] > 0
        if row['model'].startswith('MAViT'):
            assert row['time_vs_swin'] > 0
    assert {row['batch'] for row in sweep['training']} == {2}
    # The training step in both precisions, MAViT-T against Swin-T, with peak memory
    # (None on a CPU) and MAViT-T's time over Swin-T's.
    assert [(row['model'][:7], row['precision'], row['pass_name'])
            for row in sweep['training']] == [
        ('MAViT-T', 'fp32', 'train step'), ('Swin-T ', 'fp32', 'train step'),
        ('MAViT-T', 'bf16', 'train step'), ('Swin-T ', 'bf16', 'train step')]
    assert all('peak_memory_mib' in row for row in sweep['training'])

    # MAViT-T's two MALA stages at 64x128 (16x32 and 8x16 maps, 1 and 2 heads).
    shapes = gpu_check.mala_model_shapes(size=(64, 128), batches=(1,))
    gpu_check.step_profile(tmp_path, 600, device='cpu', shapes=shapes, layout='nchw')
    profile = json.loads((tmp_path / 'profile.json').read_text())
    assert profile['complete'] and profile['impl'] == 'torch' and profile['layout'] == 'nchw'
    assert [(row['stage'], row['heads'], row['pass_name']) for row in profile['results']] == [
        (1, 1, 'fwd'), (1, 1, 'fwd+bwd'), (2, 2, 'fwd'), (2, 2, 'fwd+bwd')]
    # The layout each row names is the one of the tensors it timed (layout_of).
    assert {row['layout'] for row in profile['results']} == {'nchw'}
    assert all(row['wall_us'] > 0 and row['host_issue_us'] > 0
               and row['host_issue_us_tritons_launch_path'] > 0 for row in profile['results'])
    for row in profile['results']:
        functions = [entry['function'] for entry in row['host_python']]
        assert len(functions) == 15 and all(entry['own_us'] >= 0 for entry in row['host_python'])


def test_gpu_check_sdpa_step_reports_a_math_fallback(tmp_path, monkeypatch):
    # Break the layout the flash kernel needs (the bug of the layout issue):
    # the restricted forward+backward must then fail, and the step say so.
    from benchmarks import gpu_check
    from mavit_mm.models import mavit
    original = mavit.GatedAttention.split_heads

    def strided_heads(self, x):
        heads = original(self, x)
        return heads.transpose(-1, -2).contiguous().transpose(-1, -2)   # last stride != 1
    monkeypatch.setattr(mavit.GatedAttention, 'split_heads', strided_heads)
    result = gpu_check.step_sdpa(tmp_path, 600, device='cpu', sizes=((64, 96),))
    assert result['failed'] == 3
    rows = json.loads((tmp_path / 'sdpa.json').read_text())['results']
    assert all(not row['ok'] and 'No available kernel' in row['error'] for row in rows)


def test_ncu_mala_needs_a_gpu_and_says_so():
    result = run_script('benchmarks/ncu_mala.py', '--batch-heads', '1')
    if result.returncode == 0:
        pytest.skip('a CUDA GPU is present')
    assert result.returncode == 2 and 'needs a CUDA GPU' in result.stdout
    assert 'cudaProfilerStart' in run_script('benchmarks/ncu_mala.py', '--help').stdout


def test_gpu_check_cuda_graphs_need_cuda(tmp_path):
    from benchmarks import gpu_check
    with pytest.raises(ValueError, match='CUDA graphs need a CUDA device'):
        gpu_check.step_sweep(tmp_path, 60, device='cpu', sizes=((64, 96),), cuda_graphs=True)


# Representative CUDA kernel names (as torch.profiler reports them on H100s).
KERNEL_NAMES = {
    '_forward_partials_kernel': 'mala',
    '_backward_query_kernel': 'mala',
    'void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, '
    'cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t> >, false, '
    'false, false, false, true, true, false, false>(FLASH_NAMESPACE::Flash_fwd_params)': 'sdpa',
    'fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, '
    'cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)': 'sdpa',
    'cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0':
        'sdpa',
    'sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_'
    'warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn': 'conv',
    'void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, false, false, int, '
    '__nv_bfloat16, __nv_bfloat16, float, float>(cudnn::cnn::GroupedDirectFpropParams, '
    '__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, float, float)': 'conv',
    'void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, '
    'int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, '
    'int, float, float, int, float const*, float const*, bool, int, int)': 'conv',
    'void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, float, int>('
    'at::GenericPackedTensorAccessor<float const, 4ul>)': 'conv',
    'nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT': 'gemm',
    'sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_'
    'segment_k_off_kernel__5x_cublas': 'gemm',
    'void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>('
    'cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)': 'gemm',
    'ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn': 'gemm',
    'void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, '
    'false>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, '
    'float*, float*, c10::BFloat16*)': 'norm',
    'void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float, float, '
    'cudnnTensorStruct, float const*, float const*, float*, float const*)': 'norm',
    'void at::native::batch_norm_transform_input_channels_last_kernel<float, float, float, 4>('
    'float const*, float const*, float const*, float const*, float const*, float*, int, int, bool)':
        'norm',
    'void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda('
    'at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() '
    'const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned '
    'int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, '
    'at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda('
    'at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() '
    'const::{lambda(float)#1}, std::array<char*, 2ul>)': 'copy',
    'void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<'
    'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
    'const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, '
    'at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() '
    'const::{lambda()#12}::operator()() const::{lambda(c10::BFloat16)#1} const&)::{lambda(int)#1}>('
    'int, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda>)': 'copy',
    'Memcpy DtoD (Device -> Device)': 'copy',
    'void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<at::native::(anonymous '
    'namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::'
    'OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::'
    '(anonymous namespace)::OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous '
    'namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)': 'copy',
    'void cudnn::ops::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, false, true, '
    '(cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, __nv_bfloat16 const*, '
    '__nv_bfloat16*)': 'copy',
    'void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, '
    'std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)':
        'elementwise',
    'void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl('
    'at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()'
    '#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, '
    'at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}'
    '::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, '
    'std::array<char*, 2ul>)': 'elementwise',
    'void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t'
    '<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::'
    '{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, '
    'at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()('
    'at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)': 'other',
    'void at::native::(anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, '
    'float, 7, false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, '
    'int, bool)': 'other',
}


@pytest.mark.parametrize('name, category', KERNEL_NAMES.items(),
                         ids=[f'{category}-{index}' for index, category in
                              enumerate(KERNEL_NAMES.values())])
def test_kernel_category_of_real_cuda_kernel_names(name, category):
    from benchmarks import gpu_check
    assert gpu_check.kernel_category(name) == category


def test_mala_kernels_are_the_kernels_the_op_launches():
    """The names the profile looks for are the kernels of ops/mala's launch table."""
    from benchmarks import gpu_check
    from mavit_mm.ops.mala.launches import launch_table
    from mavit_mm.ops.mala.plan import make_launch_plan
    plan = make_launch_plan(4096, 2, 64, torch.bfloat16, torch.device('cpu'))
    launched = {kernel.__name__ for kernel, _ in launch_table(plan).values()}
    assert gpu_check.mala_kernel_names() == launched and len(launched) == 5


def test_gpu_time_by_category_adds_up():
    from benchmarks import gpu_check
    kernels = [(name, 10.0 * (index + 1), index % 3 + 1)
               for index, name in enumerate(KERNEL_NAMES)]
    summary = gpu_check.gpu_time_by_category(kernels, top=3)
    categories = summary['categories']
    assert list(categories) == list(gpu_check.CATEGORY_ORDER)
    assert summary['gpu_time_us'] == pytest.approx(sum(us for _, us, _ in kernels))
    assert summary['kernel_count'] == sum(count for _, _, count in kernels)
    for category in categories:
        expected = [(us, count) for name, us, count in kernels if KERNEL_NAMES[name] == category]
        assert categories[category]['time_us'] == pytest.approx(sum(us for us, _ in expected))
        assert categories[category]['kernels'] == sum(count for _, count in expected)
    assert sum(entry['share'] for entry in categories.values()) == pytest.approx(1, abs=1e-3)
    assert [row['time_us'] for row in summary['top_kernels']] == [
        10.0 * len(kernels), 10.0 * (len(kernels) - 1), 10.0 * (len(kernels) - 2)]


def test_gpu_check_model_profile_writes_categories_per_model(tmp_path, monkeypatch):
    """The model-profile step's plumbing on the CPU (whose profile has no GPU
    kernels): each backbone's forward is profiled after warm-up, and what the
    profile holds is categorised into model-profile.json."""
    from benchmarks import gpu_check
    profiled = []

    def kernels(prof):
        profiled.append(sum(event.count for event in prof.key_averages()
                            if event.key == 'aten::conv2d'))
        return [('nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT', 30.0, 2),
                ('_forward_output_kernel', 10.0, 1)]
    monkeypatch.setattr(gpu_check, '_profiled_kernels', kernels)
    result = gpu_check.step_model_profile(tmp_path, 600, device='cpu', size=(64, 96), warmup=2)
    report = json.loads((tmp_path / 'model-profile.json').read_text())
    assert result == {'rows': 2, 'complete': True, 'errors_recorded': 0} and report['complete']
    assert [row['model'][:7] for row in report['results']] == ['MAViT-T', 'Swin-T ']
    # One forward each was profiled (MAViT-T's stem alone has four convolutions).
    assert len(profiled) == 2 and profiled[0] >= 4
    for row in report['results']:
        assert row['forward_ms'] > 0 and row['kernel_count'] == 3
        assert row['categories']['gemm'] == dict(time_us=30.0, kernels=2, share=0.75)
        assert row['categories']['mala']['kernels'] == 1
    assert sorted(tmp_path.iterdir()) == [tmp_path / 'model-profile.json']


def test_mala_model_shapes_are_the_calls_mavit_t_makes(monkeypatch):
    """The op's shapes the profile step times are the ones a MAViT-T forward
    passes to it (stages 1 and 2, channels_last head views)."""
    from benchmarks import gpu_check
    from mavit_mm.models import mavit
    from mavit_mm.tooling.mala_inputs import layout_of
    calls = []
    original = mavit.attention

    def recording(q, k, v, attn_type, *args, **kwargs):
        if attn_type == 'mala':
            calls.append((*q.shape, layout_of(q)))
        return original(q, k, v, attn_type, *args, **kwargs)
    monkeypatch.setattr(mavit, 'attention', recording)
    model = mavit.MAViT(arch='tiny', mala_impl='torch').eval()
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 160))
    shapes = gpu_check.mala_model_shapes(size=(64, 160), batches=(2,))
    # Each stage's two blocks call the op with the same shape.
    assert calls == [(s['batch'], s['heads'], s['tokens'], s['head_dim'], 'channels_last')
                     for s in shapes for _ in range(2)]
    assert [(s['stage'], s['heads'], s['height'], s['width'], s['batch_heads'])
            for s in shapes] == [(1, 1, 16, 40, 2), (2, 2, 8, 20, 4)]
    # At 512x2048: 128x512 and 64x256 maps; B*heads 1 and 2 at batch 1, 8 and 16 at batch 8.
    full = gpu_check.mala_model_shapes()
    assert [(s['height'], s['width'], s['tokens'], s['batch_heads']) for s in full] == [
        (128, 512, 65536, 1), (64, 256, 16384, 2), (128, 512, 65536, 8), (64, 256, 16384, 16)]


def test_gpu_check_upernet_fps_gathers_its_runs_within_the_budget(tmp_path, monkeypatch):
    """benchmark_fps.py children (stood in for by a script writing rows as its
    JSON): run in order, the most wanted first, their rows gathered with
    MAViT-T / Swin-T ratios, runs past the budget recorded as cut."""
    from benchmarks import gpu_check
    fake = (
        "import json, sys, time; run = json.loads(sys.argv[1]); time.sleep(run['sleep'])\n"
        "rows = [dict(config=config, mode=mode, dtype=run['dtype'], height=run['height'], "
        "width=run['width'], fps=30.0 if 'mavit' in config else 20.0) for mode in run['modes'] "
        "for config in run['configs']]\n"
        "open(sys.argv[2], 'w').write(json.dumps(dict(results=rows)))\n")
    commands = []

    def fps_command(run, output):
        commands.append(run)
        sleep = 60 if run['modes'] == ['compile'] else 0
        return ['-c', fake, json.dumps(dict(run, sleep=sleep)), str(output)]
    monkeypatch.setattr(gpu_check, 'fps_command', fps_command)
    monkeypatch.setattr(gpu_check, 'FPS_MIN_RUN_S', 2)
    result = gpu_check.step_upernet_fps(tmp_path, 8)
    report = json.loads((tmp_path / 'upernet-fps.json').read_text())
    runs = report['runs']
    mavit, swin = (Path(config).stem[:13] for config in gpu_check.UPERNET_CONFIGS)
    # The most wanted first: eager and graphs in bf16 at 512x2048, then its compiles,
    # then eager and graphs at the other sizes and dtypes, then their compiles.
    assert [(run['modes'], run['dtype'], run['height'],
             [Path(config).stem[:13] for config in run['configs']]) for run in runs] == [
        (['eager', 'cuda-graph'], 'bf16', 512, [mavit, swin]),
        (['compile'], 'bf16', 512, [mavit]), (['compile'], 'bf16', 512, [swin]),
        (['eager', 'cuda-graph'], 'bf16', 1024, [mavit, swin]),
        (['eager', 'cuda-graph'], 'fp32', 512, [mavit, swin]),
        (['eager', 'cuda-graph'], 'fp32', 1024, [mavit, swin]),
        (['compile'], 'bf16', 1024, [mavit]), (['compile'], 'bf16', 1024, [swin]),
        (['compile'], 'fp32', 512, [mavit]), (['compile'], 'fp32', 512, [swin]),
        (['compile'], 'fp32', 1024, [mavit]), (['compile'], 'fp32', 1024, [swin])]
    assert all(run['width'] == 2048 for run in runs)
    assert runs[0]['returncode'] == 0
    # The first compile run is killed at the budget; the rest are never started.
    assert runs[1]['timed_out'] and all(run['skipped'] for run in runs[2:])
    assert len(commands) == 2 and not report['complete'] and result['runs_cut_or_skipped'] == 11
    rows = report['results']
    assert len(rows) == 4 and {row['mode'] for row in rows} == {'eager', 'cuda-graph'}
    assert [row['fps_vs_swin'] for row in rows if 'mavit' in row['config']] == [1.5] * 2
    assert all('fps_vs_swin' not in row for row in rows if 'swin' in row['config'])
    assert sorted(tmp_path.iterdir()) == [tmp_path / 'logs.txt', tmp_path / 'upernet-fps.json']


def test_gpu_check_passes_the_layout_to_the_op_steps(tmp_path, monkeypatch):
    """--layout reaches bench_mala.py and tune_mala.py, which take it."""
    from benchmarks import bench_mala, gpu_check, tune_mala
    commands = []

    def run_child(command, budget_s, log):
        commands.append(command)
        return dict(returncode=0, timed_out=False, output='', seconds=0)
    monkeypatch.setattr(gpu_check, '_run_child', run_child)
    args = gpu_check.parse_args(['--layout', 'nchw', '--steps', 'bench', 'tune-bh1'])
    assert gpu_check.parse_args([]).layout == 'channels_last'
    assert gpu_check.run_step('bench', tmp_path, args)['layout'] == 'nchw'
    assert gpu_check.run_step('tune-bh1', tmp_path, args)['layout'] == 'nchw'
    bench, tune = commands
    assert bench_mala.parse_args(bench[2:]).layout == 'nchw'
    assert tune_mala.parse_args(tune[2:]).layout == 'nchw'
    assert tune_mala.parse_args(tune[2:]).batch_heads == [1]


@pytest.mark.parametrize('layout', ['channels_last', 'nchw', 'contiguous'])
def test_tune_mala_cases_are_built_in_their_layout(layout):
    from benchmarks import tune_mala
    from mavit_mm.tooling.mala_inputs import layout_of
    assert tune_mala.parse_args([]).layout == 'channels_last'
    assert tune_mala.parse_args(['--layout', layout]).layout == layout
    case = tune_mala.Case(torch.float32, 2, 256, 32, torch.device('cpu'), layout)
    assert case.layout == layout and {layout_of(t) for t in case.views} == {layout}


def test_ncu_mala_builds_its_inputs_in_the_layout_asked(monkeypatch):
    from benchmarks import ncu_mala
    assert ncu_mala.parse_args([]).layout == 'channels_last'
    asked = []

    class Built(Exception):
        pass

    def inputs(*args, layout, **kwargs):
        asked.append(layout)
        raise Built
    monkeypatch.setattr(ncu_mala, 'mala_case_inputs', inputs)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    with pytest.raises(Built):
        ncu_mala.main(['--layout', 'contiguous'])
    assert asked == ['contiguous']
