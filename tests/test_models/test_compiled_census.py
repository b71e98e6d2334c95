"""What inductor compiles MAViT-T into, as a contract, counted without a clock.

Counted by the rule in ``devtools/compiled_census.py`` (its module
docstring): fp32 on the CPU, one 128x512 image, one eager call first, the
output code only (``run=False``: the C++ kernels are neither compiled nor
run, and the fused ops launch nothing in the eager call). The contract: one
graph; at most 10 extern convolutions (the stem's 4 and the 3 downsamplings:
the block's 1x1 convolutions are GEMMs, its depthwise stages fused ops) plus
the FFN's depthwise convolution of each block, whose fused stage is off by
default (measured slower: mavit_mm/ops/fast_paths.py); one SDPA call per
softmax block, one ``mavit_mm::mala`` call per MALA block, one call of each
fused depthwise stage that is on per block, and no other extern call.
"""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from devtools.compiled_census import (
    COMPILED_CENSUS_SIZE,
    census_of_code,
    compiled_census,
    extern_kind,
)
from devtools.op_census import fused_launches_skipped, mavit_t

# A wrapper as inductor writes it for the CPU (torch 2.13), cut down.
OUTPUT_CODE = '''
cpp_fused_add_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r\'\'\'
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) { /* extern_kernels.mm(x) */ }
\'\'\')
cpp_fused_gelu_1 = async_compile.cpp_pybinding(['float*'], r\'\'\'
extern "C" void kernel(float* in_out_ptr0) {}
\'\'\')
async_compile.wait(globals())

class Runner:
    def call(self, args):
        arg0_1, arg1_1 = args
        args.clear()
        assert_size_stride(arg0_1, (1, 8), (8, 1), 'input')
        buf0 = empty_strided_cpu((1, 8), (8, 1), torch.float32)
        cpp_fused_add_0(arg0_1, buf0)
        # Original ATen: [aten.convolution] extern_kernels.convolution(not, a, call)
        buf1 = extern_kernels.convolution(buf0, arg1_1, None, stride=(1, 1))
        buf2 = extern_kernels.addmm(arg1_1, buf1, reinterpret_tensor(buf0, (8, 1), (1, 8), 0))
        buf3 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf2, buf2, buf2)
        buf4 = torch.ops.mavit_mm.mala.default(buf2, buf2, buf2, arg0_1, 8, block_n=0)
        cpp_fused_gelu_1(buf1)
        cpp_fused_add_0(buf1, buf0)
        buf5 = torch.ops.aten.index.Tensor(buf1, [buf0])
        return (buf0, )

def benchmark_compiled_module(times=10, repeat=10):
    arg0_1 = rand_strided((1, 8), (8, 1), device='cpu', dtype=torch.float32)
    extern_kernels.mm(arg0_1, arg0_1)
'''


def test_the_census_counts_launches_in_the_call_function():
    """Kernel calls and extern calls in ``call`` only: not the kernels'
    definitions, comments, helpers, or the benchmark harness after it."""
    census = census_of_code([OUTPUT_CODE, OUTPUT_CODE])
    assert census.graphs == 2
    assert census.fused_kernels == {'cpp_fused_add_0': 4, 'cpp_fused_gelu_1': 2}
    assert census.externs_by_kind == {'convolution': 2, 'gemm': 2, 'sdpa': 2,
                                      'mavit_mm::mala': 2, 'other': 2}
    assert census.launches == 6 + 10


def test_extern_kinds():
    assert extern_kind('extern_kernels.bmm') == 'gemm'
    assert extern_kind('torch.ops.mkldnn._convolution_pointwise.default') == 'convolution'
    assert extern_kind('torch.ops.aten._scaled_dot_product_efficient_attention.default') == 'sdpa'
    assert extern_kind('torch.ops.aten.index.Tensor') == 'other'
    assert extern_kind('torch.ops.mavit_mm.mala_backward.default') == 'mavit_mm::mala_backward'


def test_the_census_reads_inductors_real_output_code(one_torch_thread):
    """A small model through inductor, code only: the parser follows the
    installed release's output."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GELU(), torch.nn.Flatten(),
                                torch.nn.Linear(8 * 6 * 6, 4), torch.nn.ReLU()).eval()
    census = compiled_census(model, torch.randn(2, 3, 8, 8), run=False)
    assert census.graphs == 1
    assert census.externs_by_kind == {'convolution': 1, 'gemm': 1}, census.details()
    assert census.fused_launches >= 1, census.details()


@pytest.fixture(scope='module')
def mavit_census(one_torch_thread):
    pytest.importorskip('triton')
    model = mavit_t()
    image = torch.randn(1, 3, *COMPILED_CENSUS_SIZE, generator=torch.Generator().manual_seed(0))
    with fused_launches_skipped():
        return model, compiled_census(model, image, run=False)


MAX_EXTERN_CONVOLUTIONS = 10
FUSED_STAGES = ('mavit_mm::position_norm', 'mavit_mm::gated_lepe', 'mavit_mm::ffn_middle')
FUSED_BY_DEFAULT = FUSED_STAGES[:2]      # fused_ffn_middle is off by default


def test_mavit_t_compiles_its_blocks_without_a_convolution(mavit_census):
    model, census = mavit_census
    blocks = Counter()                  # attention type -> blocks
    for attn_type, depth in zip(model.attn_types, model.depths):
        blocks[attn_type] += depth
    kinds = census.externs_by_kind
    assert census.graphs == 1
    assert kinds['convolution'] <= MAX_EXTERN_CONVOLUTIONS + sum(model.depths), census.summary()
    assert kinds['gemm'] == 4 * sum(model.depths), census.summary()   # qkvo, proj, fc1, fc2
    assert kinds['sdpa'] == blocks['softmax'], census.summary()
    assert kinds['mavit_mm::mala'] == blocks['mala'], census.summary()
    for stage in FUSED_STAGES:
        expected = sum(model.depths) if stage in FUSED_BY_DEFAULT else 0
        assert kinds[stage] == expected, census.summary()
    assert set(kinds) <= {'convolution', 'sdpa', 'gemm', 'mavit_mm::mala', *FUSED_STAGES}, \
        census.details()
