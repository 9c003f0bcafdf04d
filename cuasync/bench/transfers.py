"""``transfers``: host <-> device bandwidth and the fixed cost of the pending routes.

In one process, for sizes 4 KiB to 256 MiB (powers of 4; 4 KiB to 64 KiB on the
emulator), GB/s of:

* H2D: cuasync ``upload_pending`` from a pooled pinned buffer; ``from_host`` from a
  pageable array (staged through the pinned pool, by the route its size picks); a fresh
  ``PinnedHostBuffer`` per transfer (the alternative to pooling); on cuda also a raw synchronous
  ``cuMemcpyHtoD`` from pageable memory and PyTorch pinned (``copy_(non_blocking=True)``
  + stream sync) and pageable copies;
* D2H: ``download_pending`` into a pooled pinned buffer; ``to_host`` (a new array backed
  by a pool block); ``download_into`` (pinned blocks, then into a reused numpy array); raw
  ``cuMemcpyDtoH`` into pageable memory; PyTorch pinned and pageable.

Every figure is a median over repetitions of one transfer, completion included; ratios
are to PyTorch pinned. Then the routes for pageable data side by side
(:mod:`._pageable_routes`: single-thread and chunked staging, the driver's own pageable
copies, the host time a submission holds the loop, the crossover size), and the fixed
cost (host microseconds) of a 4 KiB pending transfer: submission alone, submission +
``wait()``, and ``await`` on asyncio.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend

from . import _pageable_routes
from ._util import KiB, MiB, Report, Row, median_s, ratio_table, size_name, timed

SUITE = "transfers"


def _median_await_s(
    make: Callable[[], Any], nbytes: int, budget_bytes: int, max_reps: int
) -> float:
    """Like :func:`_median_s` for ``await make()`` inside one asyncio run."""
    reps = max(3, min(max_reps, budget_bytes // max(nbytes, 1)))

    async def main() -> float:
        await make()
        samples = []
        clock = time.perf_counter
        for _ in range(reps):
            t0 = clock()
            await make()
            samples.append(clock() - t0)
        return float(np.median(samples))

    return asyncio.run(main())


class _Torch:
    """PyTorch's pinned and pageable copies on a side stream, when torch sees a GPU."""

    def __init__(self, nbytes: int) -> None:
        import torch

        self.torch = torch
        self.stream = torch.cuda.Stream()
        self.dev = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        self.pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        self.pinned.fill_(1)
        self.pageable = torch.ones(nbytes, dtype=torch.uint8)

    def h2d_pinned(self) -> None:
        with self.torch.cuda.stream(self.stream):
            self.dev.copy_(self.pinned, non_blocking=True)
        self.stream.synchronize()

    def h2d_pageable(self) -> None:
        with self.torch.cuda.stream(self.stream):
            self.dev.copy_(self.pageable)
        self.stream.synchronize()

    def d2h_pinned(self) -> None:
        with self.torch.cuda.stream(self.stream):
            self.pinned.copy_(self.dev, non_blocking=True)
        self.stream.synchronize()

    def d2h_pageable(self) -> None:
        with self.torch.cuda.stream(self.stream):
            self.pageable.copy_(self.dev)
        self.stream.synchronize()


def _torch_available() -> bool:
    if not get_backend().driver_handles:
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


H2D_ROUTES = (
    "cuasync upload_pending (pool pinned)",
    "cuasync await upload_pending (asyncio)",
    "cuasync from_host (pageable, auto route)",
    "cuasync fresh PinnedHostBuffer + upload",
    "raw cuMemcpyHtoD (pageable)",
    "torch pinned copy_(non_blocking)",
    "torch pageable copy_",
)
D2H_ROUTES = (
    "cuasync download_pending (pool pinned)",
    "cuasync await download_pending (asyncio)",
    "cuasync to_host (pool staging)",
    "cuasync download_into (reused numpy, auto)",
    "raw cuMemcpyDtoH (pageable)",
    "torch pinned copy_(non_blocking)",
    "torch pageable copy_",
)
TORCH_PINNED = "torch pinned copy_(non_blocking)"


def _bandwidths(n: int, quick: bool, with_torch: bool) -> dict[str, dict[str, float]]:
    """GB/s of every route at ``n`` bytes: ``{"H2D": {route: GB/s}, "D2H": {...}}``."""
    cuda = get_backend().driver_handles
    budget = (64 if quick else 512) * MiB if cuda else 4 * MiB
    max_reps = (50 if quick else 200) if cuda else 20
    dev = cuasync.Device(0)
    stream = dev.new_stream()
    pool = cuasync.PinnedPool.default()
    t = cuasync.empty((n,), "uint8").sync_on(stream)
    buf = pool.acquire(n)
    buf.array()[:] = 1
    host = np.ones(n, np.uint8)
    out: dict[str, dict[str, float]] = {"H2D": {}, "D2H": {}}

    def gbps(fn: Callable[[], Any], budget_bytes: int = budget) -> float:
        return n / median_s(fn, n, budget_bytes, max_reps) / 1e9

    def agbps(make: Callable[[], Any]) -> float:
        return n / _median_await_s(make, n, budget, max_reps) / 1e9

    h2d, d2h = out["H2D"], out["D2H"]
    h2d[H2D_ROUTES[0]] = gbps(lambda: cuasync.upload_pending(buf, t, stream=stream).wait())
    h2d[H2D_ROUTES[1]] = agbps(lambda: cuasync.upload_pending(buf, t, stream=stream))
    h2d[H2D_ROUTES[2]] = gbps(lambda: cuasync.from_host(host).sync_on(stream))
    if n <= 64 * MiB:

        def fresh() -> None:
            b = cuasync.PinnedHostBuffer(n)
            np.copyto(b.array(), host)
            cuasync.upload_pending(b, t, stream=stream).wait()

        h2d[H2D_ROUTES[3]] = gbps(fresh, budget // 8)
    d2h[D2H_ROUTES[0]] = gbps(lambda: cuasync.download_pending(t, buf, stream=stream).wait())
    d2h[D2H_ROUTES[1]] = agbps(lambda: cuasync.download_pending(t, buf, stream=stream))
    d2h[D2H_ROUTES[2]] = gbps(lambda: t.to_host().sync_on(stream))
    d2h[D2H_ROUTES[3]] = gbps(lambda: cuasync.download_into(t, host))
    if cuda:
        from cuda.bindings import driver as d

        stream.synchronize()  # this thread's current context is the device's now
        ptr, hptr = t.ptr, host.ctypes.data
        h2d[H2D_ROUTES[4]] = gbps(lambda: d.cuMemcpyHtoD(ptr, hptr, n))
        d2h[D2H_ROUTES[4]] = gbps(lambda: d.cuMemcpyDtoH(hptr, ptr, n))
    if with_torch:
        tc = _Torch(n)
        h2d[H2D_ROUTES[5]] = gbps(tc.h2d_pinned)
        h2d[H2D_ROUTES[6]] = gbps(tc.h2d_pageable)
        d2h[D2H_ROUTES[5]] = gbps(tc.d2h_pinned)
        d2h[D2H_ROUTES[6]] = gbps(tc.d2h_pageable)
        del tc
    buf.release()
    return out


def _host_copy_gbps(n: int) -> float:
    """GB/s of ``np.copyto`` from pageable memory into a pinned buffer (the staging step)."""
    src = np.ones(n, np.uint8)
    with cuasync.PinnedPool.default().acquire(n) as b:
        view = b.array()
        s = median_s(lambda: np.copyto(view, src), n, 256 * MiB, 50)
    return n / s / 1e9


def _fixed_cost(report: Report, n_samples: int, with_torch: bool) -> None:
    """Host microseconds of 4 KiB pending transfers (and the same via torch and raw)."""
    n = 4 * KiB
    stream = cuasync.Device(0).new_stream()
    t = cuasync.empty((n,), "uint8").sync_on(stream)
    pool = cuasync.PinnedPool.default()
    buf = pool.acquire(n)
    print("\n  fixed cost of a 4 KiB transfer (host time)", flush=True)

    report.latency(
        SUITE,
        "upload_pending(buf, t) + wait()",
        timed(lambda: cuasync.upload_pending(buf, t, stream=stream).wait(), n_samples),
    )
    report.latency(
        SUITE,
        "download_pending(t, buf) + wait()",
        timed(lambda: cuasync.download_pending(t, buf, stream=stream).wait(), n_samples),
    )

    # submission alone: a ring of buffers so that none is in flight when reused
    ring = [pool.acquire(n) for _ in range(64)]
    for kind in ("upload_pending", "download_pending"):
        samples: list[int] = []
        clock = time.perf_counter_ns
        for i in range(n_samples + 64):
            b = ring[i % 64]
            if b.in_flight:
                stream.synchronize()
            t0 = clock()
            if kind == "upload_pending":
                p = cuasync.upload_pending(b, t, stream=stream)
            else:
                p = cuasync.download_pending(t, b, stream=stream)
            dt = clock() - t0
            p.wait()
            if i >= 64:
                samples.append(dt)
        report.latency(SUITE, f"{kind} submission alone", samples)

    async def awaited() -> list[int]:
        out = []
        clock = time.perf_counter_ns
        for i in range(n_samples + 50):
            t0 = clock()
            await cuasync.upload_pending(buf, t, stream=stream)
            if i >= 50:
                out.append(clock() - t0)
        return out

    report.latency(SUITE, "await upload_pending(buf, t) on asyncio", asyncio.run(awaited()))

    if get_backend().driver_handles:
        from cuda.bindings import driver as d

        stream.synchronize()
        h, ptr, addr = stream.handle, t.ptr, buf.address

        def raw() -> None:
            d.cuMemcpyHtoDAsync(ptr, addr, n, h)
            d.cuStreamSynchronize(h)

        report.latency(SUITE, "raw cuMemcpyHtoDAsync + cuStreamSynchronize", timed(raw, n_samples))
    if with_torch:
        tc = _Torch(n)
        for name, fn in (("H2D", tc.h2d_pinned), ("D2H", tc.d2h_pinned)):
            report.latency(
                SUITE, f"torch pinned copy_(non_blocking) + sync ({name})", timed(fn, n_samples)
            )
    for b in ring:
        b.release()
    buf.release()


def run(report: Report, quick: bool = False) -> None:
    backend = get_backend()
    print(f"== transfers ({backend.name}: {cuasync.Device(0).name})", flush=True)
    cuda = backend.driver_handles  # a GPU: raw driver baselines, and budgets to match
    with_torch = _torch_available()
    top = (16 * MiB if quick else 256 * MiB) if cuda else 64 * KiB
    sizes = []
    n = 4 * KiB
    while n <= top:
        sizes.append(n)
        n *= 4
    h2d: dict[int, dict[str, float]] = {}
    d2h: dict[int, dict[str, float]] = {}
    for n in sizes:
        res = _bandwidths(n, quick, with_torch)
        h2d[n], d2h[n] = res["H2D"], res["D2H"]
        for direction, routes in res.items():
            ref = routes.get(TORCH_PINNED)
            for route, v in routes.items():
                note = f"{v / ref:.2f}x torch pinned" if ref else ""
                name = f"{direction} {size_name(n)}: {route}"
                report.rows.append(Row(SUITE, name, value=v, unit="GB/s", note=note))
    ratio_table("H2D GB/s", H2D_ROUTES, h2d, TORCH_PINNED, "torch pinned")
    ratio_table("D2H GB/s", D2H_ROUTES, d2h, TORCH_PINNED, "torch pinned")

    _pageable_routes.run(report, sizes, quick, with_torch)
    big = sizes[-1]
    name = f"host np.copyto into pinned, {size_name(big)}"
    report.value(SUITE, name, _host_copy_gbps(big), "GB/s")
    _fixed_cost(report, 200 if quick or not cuda else 2000, with_torch)
