"""A Triton driver for a CUDA GPU that is not there, to run Triton's launch
path on a machine without one.

With it active, a compiled-mode ``@triton.jit`` kernel called as
``kernel[grid](*args)`` goes through all of Triton's host code: the argument
binder and specialisation, the kernel-cache key, the compile for the chosen
CUDA target (Triton's own ptxas runs on the CPU), the binary's loading
checks, and the launch. Only the driver's C launcher is replaced: it records
the call (grid, stream, the kernel handle, the packed metadata and the
arguments) and runs nothing. Tensors may be CPU tensors; nothing reads them.

What it is for: timing the host cost of the fused MALA's launches without a
GPU (``benchmarks/mala_host_overhead.py``, which imports it as
``benchmarks.triton_stub_driver``; nothing in ``mavit_mm`` uses it). It uses
Triton's public driver switch, ``triton.runtime.driver.driver.set_active``.
Kernels must be decorated with the interpreter off (``TRITON_INTERPRET=0``
before the kernels' module is imported).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

# An H100's limits, as the CUDA driver reports them: what the loading checks
# compare a kernel against.
H100_PROPERTIES = dict(max_shared_mem=232448, max_num_regs=65536, multiprocessor_count=132,
                       warpSize=32, sm_clock_rate=1980000, mem_clock_rate=2619000,
                       mem_bus_width=5120)


@dataclass
class LaunchRecord:
    """One launch as the driver's launcher received it."""
    kernel: str
    grid: tuple[int, int, int]
    stream: object
    function: object
    packed_metadata: object
    args: tuple


@dataclass
class StubCudaDriver:
    """Stands in for Triton's CUDA driver (see the module's docstring)."""
    capability: int = 90
    record: bool = True
    launches: list[LaunchRecord] = field(default_factory=list)   # when ``record``
    launch_count: int = 0
    loaded: list[str] = field(default_factory=list)

    def __post_init__(self):
        self.utils = _StubUtils(self)
        stub = self

        class Launcher:
            """The C launcher's place: called with (grid x, y, z, stream,
            function, packed metadata, launch metadata, enter hook, exit
            hook, *kernel arguments)."""

            def __init__(self, src, metadata):
                self.kernel = getattr(getattr(src, 'fn', None), '__name__', str(src))

            def __call__(self, grid_x, grid_y, grid_z, stream, function, packed_metadata,
                         launch_metadata, enter_hook, exit_hook, *args):
                stub.launch_count += 1
                if stub.record:
                    stub.launches.append(LaunchRecord(self.kernel, (grid_x, grid_y, grid_z),
                                                      stream, function, packed_metadata, args))

        self.launcher_cls = Launcher

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> GPUTarget:
        return GPUTarget('cuda', self.capability, 32)


class _StubUtils:
    """The driver's loader: a binary is "loaded" as a handle named after it."""

    def __init__(self, stub: StubCudaDriver):
        self.stub = stub

    def load_binary(self, name, kernel, shared, device):
        self.stub.loaded.append(name)
        # (module, function, registers, spills, max threads per block)
        return f'module:{name}', f'function:{name}', 0, 0, 1024

    def get_device_properties(self, device) -> dict:
        return dict(H100_PROPERTIES)

    def unload_module(self, module) -> None:
        pass


@contextlib.contextmanager
def stub_cuda_driver(capability: int = 90, record: bool = True):
    """Makes a :class:`StubCudaDriver` Triton's active driver for the block;
    afterwards Triton picks its default driver again when next asked."""
    stub = StubCudaDriver(capability=capability, record=record)
    driver.set_active(stub)
    try:
        yield stub
    finally:
        driver.set_active(None)
