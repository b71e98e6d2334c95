"""Which path a MALA call takes: the PyTorch formula (:mod:`.naive`) or the
fused Triton op (:mod:`.function`).

``mala_attention`` is the one entry point the backbone uses; ``impl`` works as
for both fused ops (:mod:`mavit_mm.ops.triton_support`, which also states the
export policy). Beyond the device checks both ops share, the MALA kernels
cannot run some cases (head dim, dtype, a GPU without the tf32 dots or the
shared memory they need): ``'auto'`` warns once per reason and takes the
PyTorch path.
"""
from __future__ import annotations

import torch

from ..amp import autocast_disabled
from ..linear_attention import linear_attention_torch
from ..rope2d import RotaryTables
from ..triton_support import FusedOpDispatch, Unsupported, compile_constant, index_extent

TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
TRITON_MIN_HEAD_DIM = 16
TRITON_MAX_HEAD_DIM = 128
# (B * heads) is the second launch-grid axis, limited to 65535 programs.
TRITON_MAX_BATCH_HEADS = 65535

# Shared memory one block of the fused kernels takes, at most, by head dim
# (padded to a power of two) and pass: (forward, backward) bytes, from the
# sm_90 compile report (``bench_mala.py --compile-report``; a test recompiles
# the kernels to keep the two in step). Wider heads' backward does not fit the
# ~99 KiB per block of sm_86 / sm_89 GPUs: it takes the PyTorch path there.
TRITON_SHARED_BYTES = {64: (40960, 98304), 128: (90112, 155648)}
MALA_DISPATCH = FusedOpDispatch(__package__, 'mala_impl', 'the fused MALA kernels',
                                'MALA falls back', counted_when_traced=True)


def check_mala_impl(impl: str) -> str:
    return MALA_DISPATCH.check_impl(impl)


def mala_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   rope: RotaryTables, impl: str = 'auto') -> torch.Tensor:
    """MALA over ``(B, heads, N, d)`` q, k, v (pre-activation q and k).

    ``N`` must equal ``rope.height * rope.width``; returns ``(B, heads, N, d)``.
    Any strides are accepted.
    """
    check_mala_impl(impl)
    check_shapes(q, k, v, rope)
    if MALA_DISPATCH.takes_plain_formula(impl, q):
        return _torch_mala(q, k, v, rope)
    unsupported = triton_unsupported(q, k, v, rope, allow_interpreter=impl == 'triton')
    if unsupported is None:
        return _triton_or_fallback(q, k, v, rope, impl)
    MALA_DISPATCH.fall_back(impl, unsupported)
    return _torch_mala(q, k, v, rope)


def _triton_or_fallback(q, k, v, rope: RotaryTables, impl: str) -> torch.Tensor:
    """The fused kernels; a launch the GPU cannot hold (Triton's out-of-resources
    error) falls back under 'auto' and is a clear error under 'triton'."""
    function = MALA_DISPATCH.function()   # explicit: callers may come straight here
    try:
        return _triton_mala(q, k, v, rope)
    except function.OutOfResources as exc:
        MALA_DISPATCH.fall_back(impl, Unsupported(f'the kernels do not fit this GPU ({exc})',
                                                  RuntimeError), cause=exc)
        return _torch_mala(q, k, v, rope)


def triton_unsupported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, rope: RotaryTables,
                       allow_interpreter: bool) -> Unsupported | None:
    """``None`` when the fused kernels can run this case, else why not."""
    device = q.device
    unsupported = MALA_DISPATCH.device_unsupported(device, allow_interpreter)
    if unsupported is not None:
        return unsupported
    if q.dtype not in TRITON_DTYPES:
        return Unsupported(f'dtype {q.dtype} is not supported (float16, bfloat16 or float32)',
                           ValueError)
    if k.dtype != q.dtype or v.dtype != q.dtype or k.device != device or v.device != device:
        return Unsupported(f'q, k and v must share one dtype and device, got '
                           f'{q.dtype}/{k.dtype}/{v.dtype} on {device}/{k.device}/{v.device}',
                           ValueError)
    head_dim = q.shape[-1]
    if not (TRITON_MIN_HEAD_DIM <= head_dim <= TRITON_MAX_HEAD_DIM and head_dim % 4 == 0):
        return Unsupported(f'head dim {head_dim} is not supported (a multiple of 4 in '
                           f'{TRITON_MIN_HEAD_DIM}..{TRITON_MAX_HEAD_DIM})', ValueError)
    batch_heads = q.shape[0] * q.shape[1]
    if batch_heads > TRITON_MAX_BATCH_HEADS:
        return Unsupported(f'batch * heads = {batch_heads} exceeds {TRITON_MAX_BATCH_HEADS}',
                           ValueError)
    too_far = _int32_offset_overflow(q, k, v)
    if too_far is not None:
        return Unsupported(too_far, ValueError)
    if not rope.paired:
        return Unsupported('the RoPE angle buffer must repeat each frequency twice '
                           '(the published layout the kernels rely on)', ValueError)
    needs_backward = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    shortfall = _gpu_shortfall(device, head_dim, needs_backward)
    if shortfall is not None:
        return Unsupported(shortfall, RuntimeError)
    return None


@compile_constant
def _gpu_shortfall(device: torch.device, head_dim: int, backward: bool) -> str | None:
    """Why this GPU cannot run the kernels (tf32 dots, shared memory), or None,
    judged from tables (``_triton_or_fallback`` catches a launch that still
    finds the GPU short). A constant to Dynamo: a compile runs it once, as
    Python, and never traces the device's properties."""
    if device.type != 'cuda':
        return None
    properties = torch.cuda.get_device_properties(device)
    if (properties.major, properties.minor) < (8, 0):
        return (f'{properties.name} (sm_{properties.major}{properties.minor}) has no tf32 '
                'tensor cores; the kernels need sm_80 or newer')
    padded = 64 if head_dim <= 64 else 128
    needed = TRITON_SHARED_BYTES[padded][int(backward)]
    available = getattr(properties, 'shared_memory_per_block_optin', needed)
    if needed > available:
        return (f'the {"backward" if backward else "forward"} kernels for head dim {head_dim} '
                f'need {needed // 1024} KiB of shared memory per block; {properties.name} '
                f'offers {available // 1024} KiB')
    return None


def _int32_offset_overflow(*tensors: torch.Tensor) -> str | None:
    # The kernels index within a head in int32 (the head's base is int64).
    for name, t in zip('qkv', tensors):
        extent = index_extent(t, 2)
        if extent >= 2 ** 31:
            return (f'{name} spans {extent + 1} elements within one head with strides '
                    f'{t.stride()}; the kernels index a head in int32 (at most 2**31)')
    return None


def check_shapes(q, k, v=None, rope: RotaryTables | None = None) -> None:
    """q, k (and v, where given) of one ``(B, heads, N, d)`` shape, dtype and
    device, with at least one token; ``N`` the tokens of ``rope``'s map and
    ``d`` the head dim its angles rotate (where given)."""
    if q.dim() != 4 or q.shape != k.shape or (v is not None and q.shape != v.shape):
        which = 'q and k must both be' if v is None else 'q, k and v must all be'
        shapes = ', '.join(str(tuple(t.shape)) for t in (q, k, v) if t is not None)
        raise ValueError(f'{which} (B, heads, N, d), got {shapes}')
    if q.dtype != k.dtype or q.device != k.device or (
            v is not None and (q.dtype != v.dtype or q.device != v.device)):
        kinds = ', '.join(f'{t.dtype} on {t.device}' for t in (q, k, v) if t is not None)
        raise ValueError(f'q, k and v must share one dtype and device, got {kinds}')
    if q.shape[-2] == 0:
        raise ValueError(f'attention needs at least one token, got N = 0 (shape {tuple(q.shape)})')
    if rope is not None:
        if q.shape[-2] != rope.height * rope.width:
            raise ValueError(f'{q.shape[-2]} tokens do not fill the {rope.height}x{rope.width} '
                             'feature map of the rotary tables')
        if 2 * rope.angle.shape[-1] != q.shape[-1]:
            raise ValueError(f'the rotary tables rotate a head dim of {2 * rope.angle.shape[-1]} '
                             f'({rope.angle.shape[-1]} angles), but q and k have head dim '
                             f'{q.shape[-1]}')


def _torch_mala(q, k, v, rope: RotaryTables) -> torch.Tensor:
    # The formula of mala_naive; it picks its own (fp32) precision, which
    # autocast would undo.
    with autocast_disabled(q.device.type):
        return linear_attention_torch(q, k, v, rope, 'mala', 'elu')


def _triton_mala(q, k, v, rope: RotaryTables) -> torch.Tensor:
    return MALA_DISPATCH.function().fused_mala(q, k, v, rope.angle_on(q.device), rope.width)


__all__ = ['MALA_DISPATCH', 'check_mala_impl', 'check_shapes', 'mala_attention',
           'triton_unsupported']
