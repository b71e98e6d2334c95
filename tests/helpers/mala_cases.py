"""What the fused MALA's tests share (tests/test_ops/test_mala): the small
cases (the map, q, k and v from ``mala_inputs``, the combine kernel's cases),
the float64 reference and the comparison against it. Imports triton: import
it after ``pytest.importorskip('triton')``."""
import torch

from devtools.mala_inputs import mala_inputs
from mavit_mm.ops.mala import function as mala_function
from mavit_mm.ops.mala import mala_naive
from mavit_mm.ops.rope2d import RotaryTables

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')



HEIGHT, WIDTH = 5, 7          # odd N = 35, not a multiple of any block



SMALL_BLOCKS = dict(block_n=16, tokens_per_chunk=16)   # 3 chunks, the last partial



def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.double()
    return ((actual.double() - expected).abs().max() / expected.abs().max()).item()



def make_qkv(batch, heads, head_dim, dtype=torch.float32, qk_scale=1.0, v_scale=1.0,
             seed=0, layout='channels_last', height=HEIGHT, width=WIDTH):
    """q, k, v requiring grad on DEVICE, from the one factory
    (``devtools.mala_inputs``): 'channels_last' (the model's, (B, N,
    heads, d) memory), 'nchw' (token-contiguous) or 'contiguous'."""
    return mala_inputs(batch, heads, height, width, head_dim, layout=layout, dtype=dtype,
                       device=DEVICE, requires_grad=True, seed=seed, qk_scale=qk_scale,
                       v_scale=v_scale)



def reference(q, k, v, dout, rope: RotaryTables):
    """Float64 output and grads of the PyTorch reference."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out = mala_naive(q64, k64, v64, *rope.tables(torch.float64, q64.device))
    grads = torch.autograd.grad(out, (q64, k64, v64), dout.double())
    return out, grads



def fused_with_grads(q, k, v, dout, rope: RotaryTables, **plan):
    out = mala_function.fused_mala(q, k, v, rope.angle_on(q.device), rope.width, **plan)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return out, grads



def random_like(t: torch.Tensor, scale: float = 1.0, seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(t.shape, generator=generator, dtype=torch.float64) * scale).to(t)



def check_against_reference(q, k, v, rope, tolerance, dout_scale=1.0, **plan):
    dout = random_like(q, dout_scale)
    out, grads = fused_with_grads(q, k, v, dout, rope, **plan)
    expected_out, expected_grads = reference(q, k, v, dout, rope)
    errors = {'out': relative_error(out, expected_out)}
    errors.update({name: relative_error(g, e) for name, g, e in
                   zip(('dq', 'dk', 'dv'), grads, expected_grads)})
    assert max(errors.values()) <= tolerance, errors
    return out, grads



def plain_qkv(head_dim, dtype=torch.float32, device=DEVICE, requires_grad=False):
    return mala_inputs(1, 2, HEIGHT, WIDTH, head_dim, layout='contiguous', dtype=dtype,
                       device=device, requires_grad=requires_grad)



# name: (height, width, head_dim, tokens per chunk, combine tile or None for the
# default). With the default narrow tile (2 rows, 4 warps) and d = 32, a block
# is 128 chunks for the means and 64 for the KV rows.
COMBINE_CASES = {
    # 130 chunks of one token: 2 mean blocks (128 + 2), 3 KV blocks (64 + 64 + 2):
    # a first, a middle and a partial last block, at the fewest chunks that
    # have them (each chunk is a program in Triton's interpreter).
    'many chunks': (10, 13, 32, 1, None),
    'one chunk': (HEIGHT, WIDTH, 16, 64, None),
    # odd N = 35 in 18 chunks, the last of 1 token; tiny tiles: 2 rows x 64
    # channels (d = 48 padded), 1 warp: mean blocks of 16 (16 + 2), KV blocks of
    # 8 (8 + 8 + 2), 24 programs per head.
    'odd N, tiny tiles': (HEIGHT, WIDTH, 48, 2, (2, 1, 1)),
    # 12 chunks, a KV block of 1 chunk and 32 rows: the second row block is half past d.
    'rows past d': (HEIGHT, WIDTH, 48, 3, (32, 1, 1)),
}



COMBINE_BLOCKS = {'many chunks': (130, 128, 64), 'one chunk': (1, 1, 1),
                  'odd N, tiny tiles': (18, 16, 8), 'rows past d': (12, 16, 1)}



def combine_case_plan(name):
    height, width, head_dim, tokens_per_chunk, tile = COMBINE_CASES[name]
    return mala_function.make_launch_plan(
        height * width, 1, head_dim, torch.float32, DEVICE, block_n=16,
        tokens_per_chunk=tokens_per_chunk, tiles=None if tile is None else {'combine': tile})

