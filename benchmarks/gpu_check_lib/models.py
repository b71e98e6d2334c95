"""The models the check's steps build, and how a step runs one: MAViT-T,
mmseg's Swin-T as the UperNet baseline builds it, a backbone's forward or
training step in bf16 autocast or fp32."""
from __future__ import annotations

from collections.abc import Callable

import torch

from devtools.baseline import SWIN_T_CONFIG

BACKBONE_SIZE = (512, 2048)
# On a CPU (the tests) the steps time few calls: one warm-up, the median of three.
CPU_TIMING = dict(cpu_warmup=1, cpu_calls=3)
# The UperNet baseline (SWIN_T_CONFIG): its backbone is the Swin-T of every row (swin_t).
UPERNET_CONFIGS = ('configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py', SWIN_T_CONFIG)
SWIN_T_LABEL = "Swin-T (mmseg's SwinTransformer, the UperNet baseline's backbone)"
MAVIT_T_LABEL = 'MAViT-T (mala_impl auto)'


def mavit_t(impl: str, fast_paths: dict | None = None):
    """MAViT-T; ``fast_paths`` (switches to change) passed only when given."""
    from mavit_mm import MAViT
    switches = {} if fast_paths is None else dict(fast_paths=fast_paths)
    return MAViT(arch='tiny', mala_impl=impl, **switches)


def backbone_step(model, images, precision: str, pass_name: str,
                   device_type: str = 'cuda', optimizer: bool = False) -> Callable:
    def autocast():   # made inside the step, which torch.compile then traces
        return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == 'bf16')
    if pass_name == 'fwd':
        model.eval()

        def forward():
            with torch.no_grad(), autocast():
                return model(images)
        return forward
    model.train()
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-4) if optimizer else None

    def forward_backward():
        with autocast():
            outputs = model(images)
        loss = sum(o.float().mean() for o in outputs)
        loss.backward()
        if adamw is not None:
            adamw.step()
        model.zero_grad(set_to_none=True)
    return forward_backward


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def empty_cache(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.empty_cache()

