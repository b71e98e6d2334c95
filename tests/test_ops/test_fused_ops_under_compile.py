"""Both fused ops (MALA, the depthwise stages) under ``torch.compile`` and
``torch.export``: a compiled graph holds the op as one node; an exported graph
holds the plain formula, since no exported format holds a Triton kernel.

Off CUDA the kernels run in Triton's interpreter (``TRITON_INTERPRET=1`` from
tests/conftest.py), so the maps are tiny.
"""
import pytest
import torch

pytest.importorskip('triton')

from helpers.depthwise_stages import ffn_middle  # noqa: E402

from mavit_mm.ops.mala import mala_attention  # noqa: E402
from mavit_mm.ops.rope2d import RoPE2d  # noqa: E402

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
HEIGHT, WIDTH, HEAD_DIM = 3, 5, 16


class MALAStep(torch.nn.Module):
    op = 'mavit_mm.mala.default'

    def __init__(self):
        super().__init__()
        self.rope = RoPE2d(HEAD_DIM)

    def forward(self, x):     # x: (1, 1, H * W, 3 * d), q, k and v side by side
        q, k, v = x.split(HEAD_DIM, dim=-1)
        return mala_attention(q, k, v, self.rope(HEIGHT, WIDTH), impl='triton')

    @staticmethod
    def example():
        return torch.randn(1, 1, HEIGHT * WIDTH, 3 * HEAD_DIM, device=DEVICE)


class FFNMiddleStep(torch.nn.Module):
    op = 'mavit_mm.ffn_middle.default'

    def __init__(self, channels=8):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(channels, 1, 3, 3) * 0.3)
        self.bias = torch.nn.Parameter(torch.randn(channels))

    def forward(self, x):
        return ffn_middle(x, self.weight, self.bias, impl='triton')

    @staticmethod
    def example():
        return torch.randn(1, 8, HEIGHT, WIDTH, device=DEVICE).contiguous(
            memory_format=torch.channels_last)


STEPS = [pytest.param(MALAStep, id='mala'), pytest.param(FFNMiddleStep, id='depthwise')]


def called_targets(graphs) -> set[str]:
    return {str(node.target) for graph in graphs for node in graph.graph.nodes
            if node.op == 'call_function'}


def is_exporting_as_torch_2_11_traces_it(monkeypatch):
    """torch 2.11's Dynamo folds ``torch.compiler.is_exporting()`` to True in
    every trace (2.13 reads the flag): a stand-in that Dynamo inlines to True
    under ``torch.compile``, and that answers truly when run as Python."""
    real = torch.compiler.is_exporting
    monkeypatch.setattr(torch.compiler, 'is_exporting',
                        lambda: torch.compiler.is_dynamo_compiling() or real())


@pytest.mark.parametrize('torch_2_11', [False, True], ids=['as-installed', 'as-torch-2.11'])
@pytest.mark.parametrize('step_class', STEPS)
def test_a_compiled_graph_holds_the_fused_op(step_class, torch_2_11, monkeypatch):
    """On the H100 (torch 2.11) both ops were missing from compiled graphs:
    the export check, traced, said every compile was an export."""
    if torch_2_11:
        is_exporting_as_torch_2_11_traces_it(monkeypatch)
    from torch._dynamo.testing import CompileCounterWithBackend
    step = step_class().to(DEVICE)
    x = step.example()
    counter = CompileCounterWithBackend('eager')
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(step, backend=counter, fullgraph=True)(x), step(x))
    assert step.op in called_targets(counter.graphs), called_targets(counter.graphs)


@pytest.mark.parametrize('step_class', STEPS)
def test_an_exported_graph_holds_the_plain_formula(step_class):
    step = step_class().to(DEVICE)
    x = step.example()
    exported = torch.export.export(step, (x,))
    targets = called_targets([exported.graph_module])
    assert not any(target.startswith('mavit_mm.') for target in targets), targets
    torch.testing.assert_close(exported.module()(x), step(x), atol=1e-5, rtol=1e-5)
