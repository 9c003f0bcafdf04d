"""Where a seen cuBLAS-sized ``await cuasync.matmul(m, m)`` spends its host time (issue 32
item 1): the awaited p50 of 256 x 256 float32 (cuBLAS) and 64 x 64 (the tiled kernel)
beside torch's ``torch.matmul`` + synchronize, then cProfile of 2000 awaits of the
cuBLAS one, by own time. On a GPU (``CUASYNC_BACKEND=cuda``; the emulator's GEMM is
numpy's, which says nothing about cuBLAS's host cost).

    python3 tools/probes/matmul_profile.py [ROWS]
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
import time

import numpy as np

import cuasync


async def _p50(make: object, n: int = 2000) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await make()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


async def main(rows: int) -> None:
    big = await cuasync.asarray(np.ones((256, 256), np.float32))
    small = await cuasync.asarray(np.ones((64, 64), np.float32))
    for _ in range(300):
        await cuasync.matmul(big, big)
        await cuasync.matmul(small, small)
    cublas = await _p50(lambda: cuasync.matmul(big, big))
    tiled = await _p50(lambda: cuasync.matmul(small, small))
    print(f"await matmul 256 x 256 (cuBLAS) p50 {cublas:.1f} us, 64 x 64 (tiled) {tiled:.1f} us")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        t = torch.ones((256, 256), device="cuda")
        for _ in range(300):
            torch.matmul(t, t)
        torch.cuda.synchronize()
        times = []
        for _ in range(2000):
            t0 = time.perf_counter()
            torch.matmul(t, t)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        print(f"torch.matmul 256 x 256 + synchronize p50 {np.median(times) * 1e6:.1f} us")
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        await cuasync.matmul(big, big)
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(rows)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 25))
