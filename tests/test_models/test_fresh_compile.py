"""``torch.compile`` from a fresh process: a user who compiles right after
building the model gets one graph.

The fused MALA op imports its Triton modules on first use. Under a trace that
import used to break the graph (Dynamo refuses to trace ``importlib``), so
``fullgraph=True`` failed before any eager call and the backbone split into
20 graphs. Only a fresh process shows it: once anything ran the op eagerly,
the modules are imported. On the CPU the path is reached with
``mala_impl='triton'`` under Triton's interpreter (on CUDA, with ``'auto'``).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers.paths import REPO_ROOT, child_environment

pytest.importorskip('triton')

SCRIPT = r'''
import json, sys
import torch
from mavit_mm.models import MAViT

graphs = []


def recording_backend(graph_module, example_inputs):
    """Keeps each graph Dynamo hands over and runs it as it is."""
    graphs.append(graph_module)
    return graph_module.forward


assert 'mavit_mm.ops.mala.function' not in sys.modules      # nothing imported yet
# Nor Dynamo: the compile constants are marked without it (compile_constant).
dynamo_at_import = 'torch._dynamo' in sys.modules
torch.manual_seed(0)
# (The switches that stand aside under compile off, and matmul_1x1, which on a
# CPU acts only under compile: eager then runs what the compiled graph runs, so
# the two agree exactly. oneDNN's 1x1 convolution and a GEMM round alike on
# some CPUs, not on all.)
# One block a stage: the import broke the graph at the first MALA block, and
# every block type still runs, at a third of the full depth's time.
model = MAViT('tiny', depths=[1, 1, 1, 1], mala_impl='triton',
              fast_paths=dict(folded_residual_conv=False, joint_qk_rotation=False,
                              matmul_1x1=False)).eval()
x = torch.randn(1, 3, 64, 96)
with torch.no_grad():
    compiled = torch.compile(model, fullgraph=True, backend=recording_backend)(x)  # first call
    imported = 'mavit_mm.ops.mala.function' in sys.modules
    eager = model(x)
print(json.dumps(dict(
    dynamo_at_import=dynamo_at_import, imported=imported, graphs=len(graphs),
    mala_calls=sum('mavit_mm.mala' in str(node.target) for graph in graphs
                   for node in graph.graph.nodes),
    mala_blocks=sum(d for d, t in zip(model.depths, model.attn_types) if t == 'mala'),
    max_difference=max((a - b).abs().max().item() for a, b in zip(compiled, eager)))))
'''


def test_compile_before_any_eager_call_gives_one_graph():
    env = child_environment(TRITON_INTERPRET='1')
    result = subprocess.run([sys.executable, '-c', SCRIPT], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert not report['dynamo_at_import']    # importing mavit_mm costs no Dynamo (~0.7 s)
    assert report['imported']                # the trace itself imported the kernels' modules
    assert report['graphs'] == 1, report       # fullgraph=True: a break would have raised
    assert report['mala_calls'] == report['mala_blocks'] == 2    # stages 1-2, the fused op
    assert report['max_difference'] == 0.0, report
