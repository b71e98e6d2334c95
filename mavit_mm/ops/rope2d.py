"""2D rotary position embedding (RoPE) as used by MAViT.

A head of ``head_dim`` channels is rotated on interleaved pairs ``(x0, x1)``;
the first half of the channels encodes the row index, the second half the
column index. The per-stage ``angle`` buffer holds ``head_dim // 2`` angles
(``head_dim // 4`` frequencies, each repeated twice), as in the published model.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from .graph_capture import building_kept_tensors, recording_graph


def rope_angles(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The published angle table: ``head_dim // 2`` values, each frequency twice."""
    if head_dim % 4 != 0:
        raise ValueError(f'2D RoPE needs a head dim divisible by 4, got {head_dim}')
    # On the CPU whatever the device context: the published values, and no
    # decomposition of the power on the meta device (a model built with no data
    # for a pre-flight check), which imports Dynamo (about 0.8 s). The table
    # then goes where the context puts new tensors.
    exponents = torch.linspace(0, 1, head_dim // 4, dtype=torch.float64, device='cpu')
    freqs = (1.0 / base ** exponents).repeat_interleave(2).float()
    return freqs.to(torch.empty(()).device)


def angles_repeat_in_pairs(angle: torch.Tensor) -> bool:
    """Whether ``angle`` holds each frequency twice, the layout the fused kernels
    use. It compares values (a sync on a GPU): call it when a buffer is built or
    loaded, not per forward."""
    return bool(angle.numel() % 2 == 0 and torch.equal(angle[0::2], angle[1::2]))


class RotaryTables:
    """The rotation of one stage at one feature-map size, shared by its blocks:
    ``angle``, ``height`` and ``width`` for the fused kernel, and the PyTorch
    paths' tables, built once per (dtype, device) asked for: the ``(N, head_dim)``
    cos / signed-sin of :func:`apply_rope`, for fp32 / fp64 the ``(N, head_dim /
    2)`` complex rotations of :meth:`rotate`; they broadcast over batch and heads.
    ``kept``: the tables serve later calls too (:class:`RoPE2d`'s cache), so
    they are built as :func:`~.graph_capture.building_kept_tensors` says.
    """

    def __init__(self, angle: torch.Tensor, height: int, width: int,
                 paired: bool | None = None, kept: bool = False):
        self.angle = angle
        self.height = height
        self.width = width
        self._paired = paired
        self.kept = kept
        self._tables = {}
        self._rotations = {}
        self._angles = {}

    @property
    def paired(self) -> bool:
        """Whether the angles repeat in pairs (known from the owning RoPE2d,
        or checked once here for hand-built tables)."""
        if self._paired is None:
            self._paired = angles_repeat_in_pairs(self.angle)
        return self._paired

    def angle_on(self, device) -> torch.Tensor:
        """``angle`` on ``device`` (moved once, then cached), in its own dtype."""
        device = torch.device(device)
        if _same_device(self.angle.device, device):
            return self.angle
        if device not in self._angles:
            self._angles[device] = self._built(self.angle.to, device)
        return self._angles[device]

    def tables(self, dtype: torch.dtype, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, signed_sin)``, each ``(N, head_dim)``, in ``dtype`` on
        ``device`` (default: the angles' device)."""
        angle = self.angle if device is None else self.angle_on(device)
        key = (dtype, angle.device)
        if key not in self._tables:
            self._tables[key] = self._built(_build_tables, angle, self.height, self.width, dtype)
        return self._tables[key]

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """``apply_rope(x, *self.tables(x.dtype, x.device))`` (plain formula).

        For fp32 / fp64 inputs whose channel pairs are adjacent in memory, one
        complex multiply a pair, ``(x0 + i x1) e^{i theta}``, in one pass that
        keeps ``x``'s order of dimensions. Traced, compiled or exported graphs
        (ONNX has no complex type) and half inputs take :func:`apply_rope`.
        """
        if not recording_graph() and x.dtype in _COMPLEX_OF and self.paired and _pairs_adjacent(x):
            angle = self.angle_on(x.device)
            key = (x.dtype, angle.device)
            if key not in self._rotations:
                self._rotations[key] = self._built(_build_rotations, angle, self.height,
                                                   self.width, x.dtype)
            pairs = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
            return torch.view_as_real(pairs * self._rotations[key]).flatten(-2)
        return apply_rope(x, *self.tables(x.dtype, x.device))

    def _built(self, build, *args):
        if not self.kept:
            return build(*args)
        with building_kept_tensors():
            return build(*args)


_HALF_DTYPES = (torch.float16, torch.bfloat16)
_COMPLEX_OF = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def _same_device(a: torch.device, b: torch.device) -> bool:
    """``cuda`` and ``cuda:0`` name the same device when 0 is the current one."""
    if a.type != b.type:
        return False
    if a.index is None or b.index is None:
        current = torch.cuda.current_device() if a.type == 'cuda' else 0
        return ((current if a.index is None else a.index)
                == (current if b.index is None else b.index))
    return a.index == b.index


def _pairs_adjacent(x: torch.Tensor) -> bool:
    """Whether ``x`` (..., d) can be viewed as (..., d / 2) complex numbers."""
    return (x.shape[-1] % 2 == 0 and x.stride(-1) == 1 and x.storage_offset() % 2 == 0
            and all(stride % 2 == 0 for size, stride in zip(x.shape[:-1], x.stride()[:-1])
                    if size > 1))


def _angles_theta(angle: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``(N, head_dim)`` rotation angles: the row index times the first half of
    the angles, the column index times the second. In fp64 for fp64 angles,
    else fp32, even for half models: positions up to ~10^3 times an angle lose
    all precision in half types."""
    compute_dtype = torch.float64 if angle.dtype == torch.float64 else torch.float32
    angle = angle.to(compute_dtype)
    rows = torch.arange(height, device=angle.device, dtype=compute_dtype)
    cols = torch.arange(width, device=angle.device, dtype=compute_dtype)
    theta_rows = (rows[:, None] * angle[None, :])[:, None, :].expand(height, width, -1)
    theta_cols = (cols[:, None] * angle[None, :])[None, :, :].expand(height, width, -1)
    return torch.cat([theta_rows, theta_cols], dim=-1).reshape(height * width, 2 * angle.shape[-1])


def _build_tables(angle: torch.Tensor, height: int, width: int, dtype: torch.dtype):
    theta = _angles_theta(angle, height, width)
    cos = theta.cos()
    # rotate((x0, x1)) = (-x1, x0) is a pair swap times (-1, +1): fold the sign into sin.
    sign = torch.tensor([-1.0, 1.0], device=angle.device, dtype=theta.dtype)
    signed_sin = (_pairs(theta.sin()) * sign).flatten(-2)
    return cos.to(dtype), signed_sin.to(dtype)


def _build_rotations(angle: torch.Tensor, height: int, width: int, dtype: torch.dtype):
    """``e^{i theta}`` per channel pair, ``(N, head_dim / 2)`` complex (paired angles)."""
    theta = _angles_theta(angle, height, width)[:, 0::2]
    # The cos and sin of _build_tables (same precision, same functions), then cast.
    return torch.complex(theta.cos(), theta.sin()).to(_COMPLEX_OF[dtype])


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (..., N, head_dim) by the tables of :class:`RotaryTables`."""
    swapped = _pairs(x).flip(-1).flatten(-2)
    return x * cos + swapped * signed_sin


def swap_pairs(t: torch.Tensor) -> torch.Tensor:
    """``(t0, t1, t2, t3, ...) -> (t1, t0, t3, t2, ...)`` along the first
    dimension: what :func:`apply_rope` does to the channels of a map, done to
    the rows of a weight (or a bias) that makes them."""
    return t.unflatten(0, (-1, 2)).flip(1).flatten(0, 1)


def rotary_pair_weights(weight: torch.Tensor) -> torch.Tensor:
    """``(2, C_in, C_out)``: a 1x1 convolution's ``(C_out, C_in, 1, 1)``
    weight transposed, and the same with its output pairs swapped, stacked
    for :func:`rotated_projection`."""
    rows = weight.flatten(1)
    return torch.stack((rows, swap_pairs(rows))).transpose(1, 2)


def rotated_bias_table(bias: torch.Tensor, rope: RotaryTables, dtype: torch.dtype
                       ) -> torch.Tensor:
    """``R(b)`` at every position of ``rope``'s map, ``(N, C)``: a 1x1
    convolution's bias of ``C / head_dim`` heads side by side, rotated in
    fp32 (fp64 for an fp64 bias) and cast to ``dtype``."""
    compute = torch.float64 if bias.dtype == torch.float64 else torch.float32
    cos, signed_sin = rope.tables(compute, bias.device)
    heads = bias.to(compute).unflatten(0, (-1, cos.shape[-1]))          # (heads, d)
    rotated = heads * cos[:, None] + swap_pairs(heads.T).T * signed_sin[:, None]
    return rotated.flatten(1).to(dtype)


def rotated_projection(x: torch.Tensor, pair_weights: torch.Tensor, bias_table: torch.Tensor,
                       cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``R(conv1x1(x, W, b))`` of a channels_last map, on dense operands and
    without a flip (switch ``dense_rope``). The plain formula::

        t = conv1x1(x, W, b);  R(t) = t * cos + swap_pairs(t) * signed_sin

    (:func:`apply_rope` on each head of the map). Here ``swap_pairs(t)``
    comes from the weights instead of a flip of ``t``, and the bias from its
    rotated table::

        y0, y1 = x @ W^T, x @ swap_pairs(W)^T      (one matrix product, dense)
        R(t)   = R(b) + y0 * cos + y1 * signed_sin  (two multiply-adds, dense)

    ``pair_weights``: :func:`rotary_pair_weights` of ``W``; ``bias_table``:
    :func:`rotated_bias_table` of ``b``; ``cos`` / ``signed_sin``: the
    ``(N, head_dim)`` tables of :meth:`RotaryTables.tables`, shared by the
    heads. Returns ``(B, C, H, W)`` channels_last.
    """
    batch, _, height, width = x.shape
    head_dim = cos.shape[-1]
    rows = x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
    y = torch.matmul(rows, pair_weights).unflatten(1, (batch, height * width))
    y = y.unflatten(-1, (-1, head_dim))                                 # (2, B, N, heads, d)
    cos, signed_sin = cos[:, None], signed_sin[:, None]                 # (N, 1, d)
    out = torch.addcmul(bias_table.unflatten(-1, (-1, head_dim)), y[0], cos)
    out = out.addcmul_(y[1], signed_sin)
    return out.flatten(-2).unflatten(1, (height, width)).permute(0, 3, 1, 2)


def _pairs(x: torch.Tensor) -> torch.Tensor:
    """(..., d) -> (..., d / 2, 2), a view. ``reshape`` rather than ``unflatten``:
    the TorchScript ONNX exporter has ``unflatten`` only from opset 13, and
    mmdeploy's detectors export at opset 11. ``d / 2`` given, not ``-1``,
    which no empty tensor (a batch of 0) can resolve."""
    return x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)


class RoPE2d(nn.Module):
    """Owns a stage's ``angle`` buffer (state-dict key ``layers.i.RoPE.angle``).

    Whether it has the paired layout is checked when it is built and after each
    ``load_state_dict``, not per forward. ``RoPE2d(height, width)`` returns the
    same :class:`RotaryTables` (so the same built tables) for the last
    ``CACHED_SIZES`` map sizes, until ``angle`` changes: a load, a move, or an
    in-place edit. ``angle`` stays fp32 when the module is cast to fp16 / bf16:
    the phase at column 511 of a bf16 angle is off by up to ~2 rad, so a half
    model would no longer be the trained one.
    """

    CACHED_SIZES = 4

    def __init__(self, head_dim: int):
        super().__init__()
        self.head_dim = head_dim
        self.register_buffer('angle', rope_angles(head_dim))
        self.angles_paired = True
        self._rotary = OrderedDict()
        self.register_load_state_dict_post_hook(RoPE2d._check_loaded_angles)

    @staticmethod
    def _check_loaded_angles(module: RoPE2d, incompatible_keys) -> None:
        module.angles_paired = angles_repeat_in_pairs(module.angle)
        module._rotary.clear()

    def _apply(self, fn, recurse=True):
        angle = self.angle
        super()._apply(fn, recurse)
        if self.angle.dtype in _HALF_DTYPES and angle.dtype not in _HALF_DTYPES:
            self.angle = angle.to(self.angle.device)
        self._rotary.clear()
        return self

    def forward(self, height: int, width: int) -> RotaryTables:
        # A traced graph computes its tables (no Python-side state); an
        # inference tensor (a module made inside inference_mode) keeps no
        # version counter to tell an edit by.
        if recording_graph() or self.angle.is_inference():
            return RotaryTables(self.angle, height, width, paired=self.angles_paired)
        key = (height, width)
        # A tensor's version counts its in-place edits.
        angle_state = (self.angle, self.angle._version, self.angles_paired)
        cached = self._rotary.get(key)
        if cached is not None and cached[0][0] is angle_state[0] \
                and cached[0][1:] == angle_state[1:]:
            self._rotary.move_to_end(key)
            return cached[1]
        rotary = RotaryTables(self.angle, height, width, paired=self.angles_paired, kept=True)
        self._rotary[key] = (angle_state, rotary)
        while len(self._rotary) > self.CACHED_SIZES:
            self._rotary.popitem(last=False)
        return rotary
