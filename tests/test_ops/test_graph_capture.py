"""``recording_graph`` leaves ONNX's own flag out: both ONNX exporters record
the forward under a trace or a compile, which it checks."""
from __future__ import annotations

import pytest
import torch

from mavit_mm.ops.graph_capture import recording_graph

pytest.importorskip('onnx')


SEEN = []


class Spy(torch.nn.Module):
    """Records in ``SEEN``, at each forward, (ONNX export flag,
    recording_graph()). (Not in an attribute: torch.export runs the forward
    on a copy of the module.)"""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        SEEN.append((torch.onnx.is_in_onnx_export(), recording_graph()))
        return self.linear(x)


@pytest.mark.parametrize('dynamo', [True, False], ids=['dynamo', 'torchscript'])
def test_every_forward_an_onnx_export_records_is_a_recorded_graph(dynamo, tmp_path):
    if dynamo:
        pytest.importorskip('onnxscript')
    model = Spy().eval()
    SEEN.clear()
    model(torch.randn(2, 4))
    assert SEEN == [(False, False)]          # eager: nothing recorded
    SEEN.clear()
    torch.onnx.export(model, (torch.randn(2, 4),), str(tmp_path / 'spy.onnx'), dynamo=dynamo)
    assert SEEN, 'the exporter ran no forward'
    assert all(onnx_export for onnx_export, _ in SEEN), SEEN
    assert all(recorded for _, recorded in SEEN), SEEN
