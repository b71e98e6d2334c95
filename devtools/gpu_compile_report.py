"""A ``@triton.jit`` kernel compiled ahead of time for an NVIDIA GPU, without
one, and what the compiled kernel uses: **the** compile report of the fused
kernels (``benchmarks/bench_mala.py --compile-report``,
``benchmarks/depthwise_compile_report.py``).

Triton compiles for any CUDA target on the CPU (its own ptxas); the
registers and the stack (spills) come from ``cuobjdump --dump-resource-usage``
of the cubin, shared memory from the compiled kernel's metadata, and the
global load and store sites, all and vectorised (``.v2/.v4/.v8``), from the
PTX; the blocks one SM holds at once (``resident_blocks``) follow from the
registers and shared memory by the CUDA occupancy rules.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path


def compile_for_gpu(kernel, signature: dict, constants: dict, attrs: dict, capability: int,
                    options: dict):
    """``(compiled kernel, usage)`` of ``kernel`` compiled for compute
    capability ``capability`` (90: H100 / H200) with Triton's ``signature``,
    ``constants``, ``attrs`` and ``options`` (``num_warps``, ...). ``usage``:
    ``registers``, ``stack_bytes``, ``shared_bytes``, ``global_loads``,
    ``vector_loads``, ``global_stores``, ``vector_stores`` (PTX sites), then
    ``async_copies`` (``cp.async`` sites: loads the software pipeline keeps in
    flight), ``wgmma`` (Hopper warp-group tensor-core products) and
    ``barriers`` (``bar.sync`` sites)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    compiled = triton.compile(ASTSource(kernel, signature, constants, attrs),
                              target=GPUTarget('cuda', capability, 32), options=options)
    with tempfile.NamedTemporaryFile(suffix='.cubin') as cubin:
        cubin.write(compiled.asm['cubin'])
        cubin.flush()
        tool = Path(triton.__file__).parent / 'backends' / 'nvidia' / 'bin' / 'cuobjdump'
        resources = subprocess.run([os.fspath(tool), '--dump-resource-usage', cubin.name],
                                   capture_output=True, text=True).stdout
    registers = re.search(r'REG:(\d+)', resources)
    stack = re.search(r'STACK:(\d+)', resources)
    ptx = compiled.asm['ptx']
    return compiled, dict(registers=int(registers.group(1)) if registers else None,
                          stack_bytes=int(stack.group(1)) if stack else None,
                          shared_bytes=compiled.metadata.shared,
                          global_loads=len(re.findall(r'ld\.global\.', ptx)),
                          vector_loads=len(re.findall(r'ld\.global\.[^ \t]*v[248]\.', ptx)),
                          global_stores=len(re.findall(r'st\.global\.', ptx)),
                          vector_stores=len(re.findall(r'st\.global\.[^ \t]*v[248]\.', ptx)),
                          async_copies=len(re.findall(r'cp\.async\.c[ag]', ptx)),
                          wgmma=len(re.findall(r'wgmma\.mma_async', ptx)),
                          barriers=len(re.findall(r'\bbar\.sync|barrier\.sync', ptx)))


# -- Occupancy: what a compiled kernel leaves room for on one SM --------------------
@dataclass(frozen=True)
class KernelResources:
    """One compiled kernel's demands (from its compile report)."""
    registers: int      # per thread
    shared_bytes: int   # per block
    num_warps: int


@dataclass(frozen=True)
class SMLimits:
    """What one SM offers (defaults: A100 / H100 / H200)."""
    registers: int = 64 * 1024
    shared_bytes: int = 228 * 1024
    threads: int = 2048
    blocks: int = 16   # 32 on sm_80 / sm_90, 16 on sm_86; binding only for tiny blocks


# The CUDA occupancy rules: registers are allocated per warp in units of 256
# (8 per thread), and the runtime reserves 1 KiB of shared memory per block.
REGISTER_ALLOCATION_UNIT = 8
SHARED_BYTES_RESERVED_PER_BLOCK = 1024
WARP_SIZE = 32


def resident_blocks(resources: KernelResources, limits: SMLimits = SMLimits()) -> int:
    """Blocks of a kernel one SM runs at once: the tightest of its register,
    shared-memory, thread and block limits (at least 1). The compile report's
    ``resident_per_sm``; ``ops/mala/function.py``'s ``RESIDENT_PROGRAMS_PER_SM``
    is this for the sm_90 compile of its split-N kernel."""
    threads = resources.num_warps * WARP_SIZE
    unit = REGISTER_ALLOCATION_UNIT
    registers = -(-max(resources.registers, 1) // unit) * unit
    shared = resources.shared_bytes + SHARED_BYTES_RESERVED_PER_BLOCK
    return max(1, min(limits.registers // (registers * threads), limits.shared_bytes // shared,
                      limits.threads // threads, limits.blocks))


__all__ = ['KernelResources', 'SMLimits', 'compile_for_gpu', 'resident_blocks']
