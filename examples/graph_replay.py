"""Capture a small decode-like step once, then replay it per token with new inputs.

Each step: y = 2 * x + y over a pre-allocated buffer, fed by a memcpy of the token's
input into `x` through `graph.update`, then one `graph.launch()` per token.
Runs on the GPU when there is one, else on the emulator (numpy twin of the kernel).
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

import cuasync

SOURCE = r"""
extern "C" __global__ void step(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + y[i];
}
"""


def step_emulated(x: np.ndarray, y: np.ndarray, n: int) -> None:
    y[:n] = 2.0 * x[:n] + y[:n]


step = cuasync.Kernel(SOURCE, "step", emulate=step_emulated)
N = 4096


async def main() -> None:
    print(f"backend {cuasync.backend_name()}: {cuasync.Device(0).name}")
    x = await cuasync.zeros((N,))  # pre-allocated: graphs bake pointers in
    y = await cuasync.zeros((N,))
    graph = step[(N + 255) // 256, 256](x, y, N).graph()
    tokens = [np.full(N, float(t), np.float32) for t in range(1, 9)]
    t0 = time.perf_counter()
    for token in tokens:
        staging = await cuasync.from_host(token)
        graph.update(cuasync.memcpy(x, staging))  # ordered before the launch on the graph's stream
        await graph.launch()
    result = await y.to_host()
    elapsed = (time.perf_counter() - t0) * 1e3
    expected = 2.0 * sum(t[0] for t in tokens)
    assert np.all(result == expected), (result[:4], expected)
    print(
        f"{len(tokens)} graph replays in {elapsed:.1f} ms; y[0] = {result[0]} (expected {expected})"
    )


if __name__ == "__main__":
    asyncio.run(main())
