"""SAXPY with a user kernel: y = a * x + y.

Creates x with ``cuasync.arange`` and y with ``cuasync.ones``, launches a CUDA C++ kernel
compiled with NVRTC (or, on the emulator backend, its numpy twin), awaits the result
without blocking the event loop, and checks it.

    python examples/saxpy.py            # CUASYNC_BACKEND=emulator|cuda to choose
"""

from __future__ import annotations

import asyncio
import sys

import numpy as np

import cuasync

SOURCE = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def saxpy_twin(a: np.float32, x: np.ndarray, y: np.ndarray, n: np.int32) -> None:
    """The kernel's numpy twin: what the emulator backend runs instead of the CUDA code."""
    y[:n] = a * x[:n] + y[:n]


saxpy = cuasync.Kernel(SOURCE, "saxpy", emulate=saxpy_twin)


async def main(n: int = 1 << 20, a: float = 2.0) -> int:
    x = await cuasync.arange(n, dtype="float32")  # 0, 1, 2, ... as float32
    y = await cuasync.ones(n)
    threads = 256
    y = await saxpy[(n + threads - 1) // threads, threads](a, x, y, n)
    result = await y.to_host()

    expected = a * np.arange(n, dtype=np.float32) + 1.0
    ok = bool(np.array_equal(result, expected))
    print(f"backend: {cuasync.backend_name()}, device: {cuasync.get_default_device().name}")
    print(f"saxpy(a={a}, n={n}): y[:4] = {result[:4]}, y[-1] = {result[-1]:.1f}")
    print("result checked: OK" if ok else "result checked: MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
