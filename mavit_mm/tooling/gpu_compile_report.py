"""A ``@triton.jit`` kernel compiled ahead of time for an NVIDIA GPU, without
one, and what the compiled kernel uses: **the** compile report of the fused
kernels (``benchmarks/bench_mala.py --compile-report``,
``benchmarks/depthwise_compile_report.py``).

Triton compiles for any CUDA target on the CPU (its own ptxas); the
registers and the stack (spills) come from ``cuobjdump --dump-resource-usage``
of the cubin, shared memory from the compiled kernel's metadata, and the
global load and store sites, all and vectorised (``.v2/.v4/.v8``), from the
PTX.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path


def compile_for_gpu(kernel, signature: dict, constants: dict, attrs: dict, capability: int,
                    options: dict):
    """``(compiled kernel, usage)`` of ``kernel`` compiled for compute
    capability ``capability`` (90: H100 / H200) with Triton's ``signature``,
    ``constants``, ``attrs`` and ``options`` (``num_warps``, ...). ``usage``:
    ``registers``, ``stack_bytes``, ``shared_bytes``, ``global_loads``,
    ``vector_loads``, ``global_stores``, ``vector_stores``."""
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
                          vector_stores=len(re.findall(r'st\.global\.[^ \t]*v[248]\.', ptx)))


__all__ = ['compile_for_gpu']
