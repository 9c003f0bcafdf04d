"""The one-hot-path issue's figures (#31) for the cuasync found first on ``sys.path``, as
one JSON line: before/after pairs run this in alternating processes, one per checkout
(``tools/probes/hot_path_ab.sh``).

Rows (p50 of host time unless said, in this process; it imports torch and CuPy where
they are installed, as the bench does):

- ``await_asyncio`` / ``await_uvloop``: ``await tiny[1, 32]()`` on one stream, and
  ``raw_asyncio`` / ``raw_uvloop``: a cuda-bindings launch + ``cuStreamSynchronize`` of
  the same kernel on the same loop, in turns (target: await <= 1.0 x raw);
- ``submit_on``: ``bump[1, 256](x, 256).submit_on(stream)`` beside ``raw_launch``, a
  cuda-bindings ``cuLaunchKernel`` of it (target <= 1.6 x);
- ``gather_8192``: 8192 concurrent awaits of the tiny kernel on uvloop, ops/s (the
  median of 3);
- ``upload_4k``: ``await cuasync.from_host(a)``, a 4 KiB float32 array;
- ``zip_launch``: per launch of ``cuasync.zip`` of 100 launches, submitted and synced.

Run on a GPU: ``python3 tools/probes/hot_path_ab.py`` with the checkout to measure first
on ``PYTHONPATH`` (its native module built in place).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np

try:  # (the process a service has: what the bench imports beside cuasync)
    import cupy  # noqa: F401
    import torch  # noqa: F401
except ImportError:
    pass

import cuasync
from cuasync.bench._util import run_loop, timed
from cuasync.bench.completion import _concurrent, _raw_launcher, tiny
from cuasync.bench.launch import bump

N = 3000
TURN = 20


def p50(samples: list[int]) -> float:
    return float(np.percentile(samples, 50)) / 1e3


async def _await_and_raw(stream: Any, raw: Any) -> tuple[list[int], list[int]]:
    """Turns of TURN awaits and TURN raw launch + synchronize, N of each."""
    launch, sync = raw
    clock = time.perf_counter_ns
    awaits: list[int] = []
    raws: list[int] = []
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        for _ in range(50):
            await tiny[1, 32]()
        while len(awaits) < N:
            for _ in range(TURN):
                t0 = clock()
                await tiny[1, 32]()
                awaits.append(clock() - t0)
            for _ in range(TURN):
                t0 = clock()
                launch()
                sync()
                raws.append(clock() - t0)
    return awaits, raws


def main() -> None:
    stream = cuasync.Device(0).new_stream()
    raw = _raw_launcher(stream)
    out: dict[str, float] = {}
    if raw is not None:
        for kind in ("asyncio", "uvloop"):
            awaits, raws = run_loop(kind, lambda: _await_and_raw(stream, raw))
            out[f"await_{kind}"], out[f"raw_{kind}"] = p50(awaits), p50(raws)
    x = cuasync.zeros((256,), dtype="float32").sync()
    bump[1, 256](x, 256).sync_on(stream)
    out["submit_on"] = p50(timed(lambda: bump[1, 256](x, 256).submit_on(stream), N))
    bump[1, 256](x, 256).sync_on(stream)  # (the submitted launches drained)
    if raw is not None:
        import ctypes

        from cuda.bindings import driver as d

        function = bump._prepare(stream.device).handle
        args = (ctypes.c_void_p(x.ptr), ctypes.c_int(256))
        params = (ctypes.c_void_p * 2)(*(ctypes.addressof(a) for a in args))
        h = stream.handle

        def launch() -> None:
            d.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, h, ctypes.addressof(params), 0)

        out["raw_launch"] = p50(timed(launch, N))
        d.cuStreamSynchronize(h)
    rates = sorted(run_loop("uvloop", lambda: _concurrent(8192)) for _ in range(3))
    out["gather_8192"] = rates[1]
    a = np.arange(1024, dtype=np.float32)

    async def uploads() -> list[int]:
        clock = time.perf_counter_ns
        samples = []
        for i in range(N + 50):
            t0 = clock()
            await cuasync.from_host(a)
            if i >= 50:
                samples.append(clock() - t0)
        return samples

    out["upload_4k"] = p50(run_loop("uvloop", uploads))

    def zipped() -> None:
        cuasync.zip(*(bump[1, 256](x, 256) for _ in range(100))).submit_on(stream).wait()

    out["zip_launch"] = p50(timed(zipped, 200, warmup=5)) / 100
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.set_event_loop(None)
    main()
