"""Where the tiled kernel should hand float products to cuBLAS (``tiled_gemm.SMALL_MACS``).

For square float32 products n x n x n, each route (the tiled kernel; cuBLAS, with
``SMALL_MACS`` set to 0) is timed two ways, the routes alternated in 5 rounds:

- **awaited**: p50 host time of ``await cuasync.matmul(m, m)`` (what one request pays);
- **device**: the GPU time per product of 200 of them back to back on one stream,
  between two CUDA events (what a loaded GPU pays; 0 on the emulator).

    CUASYNC_BACKEND=cuda python3 tools/probes/tiled_gemm_threshold.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync._ops import contract, tiled_gemm

SIZES = (32, 64, 96, 128, 160, 192, 256)
ROUNDS = 5
AWAITS = 400
BACK_TO_BACK = 200


async def _awaited(m: cuasync.Tensor) -> float:
    clock = time.perf_counter_ns
    out = []
    for _ in range(AWAITS):
        t0 = clock()
        await cuasync.matmul(m, m)
        out.append(clock() - t0)
    return statistics.median(out) / 1000


def _device(m: cuasync.Tensor, stream: cuasync.Stream) -> float:
    backend = get_backend()
    if not backend.driver_handles:
        return 0.0
    from cuda.bindings import driver

    start, end = (driver.cuEventCreate(0)[1] for _ in range(2))
    futures = []
    driver.cuEventRecord(start, stream.handle)
    for _ in range(BACK_TO_BACK):
        futures.append(cuasync.matmul(m, m).submit_on(stream))
    driver.cuEventRecord(end, stream.handle)
    stream.synchronize()
    ms = driver.cuEventElapsedTime(start, end)[1]
    for event in (start, end):
        driver.cuEventDestroy(event)
    return ms * 1000 / BACK_TO_BACK


def _route(name: str) -> None:
    tiled_gemm.SMALL_MACS = 1 << 40 if name == "tiled" else 0
    contract._SEEN.clear()  # (a seen kind holds its route)


def main() -> None:
    stream = cuasync.Device(0).new_stream()
    print(f"{'n':>5} {'route':<7} {'awaited p50':>12} {'device / product':>17}")
    for n in SIZES:
        m = cuasync.from_host(np.ones((n, n), np.float32)).sync()
        got: dict[str, list[tuple[float, float]]] = {"tiled": [], "cuBLAS": []}
        for _ in range(ROUNDS):
            for name in got:
                _route(name)
                for _ in range(20):  # (seen, loaded)
                    cuasync.matmul(m, m).sync()
                got[name].append((asyncio.run(_awaited(m)), _device(m, stream)))
        for name, rows in got.items():
            awaited = statistics.median(r[0] for r in rows)
            device = statistics.median(r[1] for r in rows)
            print(f"{n:>5} {name:<7} {awaited:>10.1f}us {device:>15.2f}us")


if __name__ == "__main__":
    main()
