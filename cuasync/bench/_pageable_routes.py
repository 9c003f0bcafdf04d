"""Part of ``transfers``: the routes for pageable numpy data, side by side at each size.

``from_host`` and ``download_into`` pick a route per size (``cuasync._transfers.pageable``): the
calling thread staging through one pinned block ("single"), or chunks staged by the copy
threads while DMAs run ("chunked"). This part times each route forced, the automatic
choice, and the driver's own pageable copies (the "direct" route cuasync does not take,
and the synchronous ``cuMemcpyHtoD``/``cuMemcpyDtoH`` the targets are set against), then:

* GB/s per route and size, with the ratio to the synchronous driver copy;
* how long a submission holds the calling thread (the event loop) per route and size;
* the size from which "chunked" beats "single", to check ``UPLOAD_CHUNKED_MIN`` and
  ``DOWNLOAD_CHUNKED_MIN``;
* the fixed cost of a 4 KiB ``from_host`` beside PyTorch's pageable copies.

>>> run(report, sizes=[4096, 1 << 20], quick=True, with_torch=False)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import cuasync
from cuasync._backends import get_backend
from cuasync._transfers import pageable as _pageable

from ._util import (
    BLOCK,
    KiB,
    MiB,
    Report,
    Row,
    interleaved,
    median_s,
    ratio_table,
    size_name,
)

SUITE = "transfers"
UP = ("from_host auto", "from_host single", "from_host chunked")
DOWN = ("download_into auto", "download_into single", "download_into chunked")
DIRECT_UP = "direct cuMemcpyHtoDAsync (pageable) + sync"
SYNC_UP = "raw cuMemcpyHtoD (pageable)"
SYNC_DOWN = "raw cuMemcpyDtoH (pageable)"
TORCH = ("torch from_numpy(a).cuda() + sync", "torch pageable copy_ + sync")


def _submission_us(host: np.ndarray, stream: cuasync.Stream, reps: int) -> float:
    """Median host time of ``from_host(host).submit_on(stream)`` (each one waited for
    before the next), in µs: how long the calling thread is held."""
    samples = []
    clock = time.perf_counter_ns
    for _ in range(reps + 1):
        t0 = clock()
        fut = cuasync.from_host(host).submit_on(stream)
        samples.append(clock() - t0)
        fut.wait()
    return float(np.median(samples[1:])) / 1e3


def _route(name: str) -> str | None:
    return None if name.endswith("auto") else name.rsplit(" ", 1)[1]


def _measure(n: int, quick: bool, with_torch: bool) -> tuple[dict[str, float], dict[str, float]]:
    """GB/s per route at ``n`` bytes, and the submission's host time (µs) per cuasync
    upload route."""
    cuda = get_backend().driver_handles
    budget = (64 if quick else 512) * MiB if cuda else 4 * MiB
    max_reps = (50 if quick else 200) if cuda else 20
    stream = cuasync.Device(0).new_stream()
    host = np.ones(n, np.uint8)
    t = cuasync.from_host(host).sync_on(stream)
    rate: dict[str, float] = {}
    held: dict[str, float] = {}
    chunkable = _pageable.upload_route(max(n, _pageable.UPLOAD_CHUNKED_MIN), t.device) == (
        "chunked"
    )

    def gbps(fn: Callable[[], Any]) -> float:
        return n / median_s(fn, n, budget, max_reps) / 1e9

    for name in UP:
        route = _route(name)
        if route == "chunked" and not chunkable:
            continue
        with _pageable.forced_route(route):
            rate[name] = gbps(lambda: cuasync.from_host(host).sync_on(stream))
            held[name] = _submission_us(host, stream, 5 if cuda else 3)
    out = np.empty(n, np.uint8)
    for name in DOWN:
        route = _route(name)
        if route == "chunked" and not chunkable:
            continue
        with _pageable.forced_route(route):
            rate[name] = gbps(lambda: cuasync.download_into(t, out))
    if cuda:
        from cuda.bindings import driver as d

        stream.synchronize()  # this thread's current context is the device's now
        ptr, hptr, h = t.ptr, host.ctypes.data, stream.handle

        def direct() -> None:
            d.cuMemcpyHtoDAsync(ptr, hptr, n, h)
            d.cuStreamSynchronize(h)

        rate[DIRECT_UP] = gbps(direct)
        rate[SYNC_UP] = gbps(lambda: d.cuMemcpyHtoD(ptr, hptr, n))
        optr = out.ctypes.data
        rate[SYNC_DOWN] = gbps(lambda: d.cuMemcpyDtoH(optr, ptr, n))
    if with_torch:
        import torch

        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        src = torch.from_numpy(host)

        def alloc_copy() -> None:
            src.cuda()
            torch.cuda.current_stream().synchronize()

        def copy_into() -> None:
            dev.copy_(src)
            torch.cuda.current_stream().synchronize()

        rate[TORCH[0]], rate[TORCH[1]] = gbps(alloc_copy), gbps(copy_into)
    return rate, held


def _crossover(res: dict[int, dict[str, float]], single: str, chunked: str) -> int | None:
    """The smallest size from which ``chunked`` is at least as fast as ``single`` at
    every larger size measured; None when it never is."""
    sizes = [n for n in sorted(res) if single in res[n] and chunked in res[n]]
    found = None
    for n in reversed(sizes):
        if res[n][chunked] < res[n][single]:
            break
        found = n
    return found


def _fixed_cost(report: Report, n_samples: int, with_torch: bool) -> None:
    """Host µs of a 4 KiB upload from pageable memory, completion included; cuasync's
    and torch's interleaved in turns (see ``_util.interleaved``): their ratio is a
    target."""
    n = 4 * KiB
    stream = cuasync.Device(0).new_stream()
    host = np.ones(n, np.uint8)
    print("\n  fixed cost of a 4 KiB upload from pageable memory (host time)", flush=True)
    candidates: dict[str, Callable[[], Any]] = {
        "from_host(a).sync_on(stream), 4 KiB": lambda: cuasync.from_host(host).sync_on(stream)
    }
    if with_torch:
        import torch

        src = torch.from_numpy(host)
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        sync = torch.cuda.current_stream().synchronize

        def alloc_copy() -> None:
            src.cuda()
            sync()

        def copy_into() -> None:
            dev.copy_(src)
            sync()

        candidates[f"{TORCH[0]}, 4 KiB"] = alloc_copy
        candidates[f"{TORCH[1]}, 4 KiB"] = copy_into
    samples = interleaved(candidates, n_samples)
    note = f"interleaved in turns of {BLOCK}" if with_torch else ""
    p50 = {name: report.latency(SUITE, name, taken, note).p50_us for name, taken in samples.items()}
    ours, torch_copy = p50[next(iter(candidates))], p50.get(f"{TORCH[1]}, 4 KiB")
    if ours and torch_copy:
        print("  -- targets (ratios inside this run)")
        name = "from_host 4 KiB p50 / torch pageable copy_ p50 (target <= 1.0)"
        report.value(SUITE, name, ours / torch_copy, "x")


def run(report: Report, sizes: list[int], quick: bool, with_torch: bool) -> None:
    """Print and record the route comparison for ``sizes`` (bytes)."""
    cuda = get_backend().driver_handles
    if not cuda:  # the emulator: the sizes around the thresholds, small budgets
        sizes = sorted({*sizes, _pageable.UPLOAD_CHUNKED_MIN})
    threads = cuasync._transfers.copy_threads.pool_size()
    print(
        f"\n  pageable numpy data, by route (copy threads: {threads}; chunked from "
        f"{size_name(_pageable.UPLOAD_CHUNKED_MIN)} up, auto)",
        flush=True,
    )
    rates: dict[int, dict[str, float]] = {}
    held: dict[int, dict[str, float]] = {}
    for n in sizes:
        rates[n], held[n] = _measure(n, quick, with_torch)
        for route, v in rates[n].items():
            report.rows.append(
                Row(SUITE, f"pageable {size_name(n)}: {route}", value=v, unit="GB/s")
            )
        for route, v in held[n].items():
            name = f"pageable {size_name(n)}: {route} submission (loop held)"
            report.rows.append(Row(SUITE, name, value=v, unit="us"))
    up, down = (*UP, DIRECT_UP, SYNC_UP, *TORCH), (*DOWN, SYNC_DOWN, TORCH[1])
    ratio_table("H2D from pageable GB/s", up, rates, SYNC_UP, SYNC_UP)
    ratio_table("D2H into pageable GB/s", down, rates, SYNC_DOWN, SYNC_DOWN)
    print("\n  host time of one from_host submission (the event loop is held), us")
    print("  " + f"{'route':<44}" + "".join(f"{size_name(n):>15}" for n in sizes))
    for route in UP:
        cells = [f"{held[n][route]:15.1f}" if route in held[n] else f"{'-':>15}" for n in sizes]
        print("  " + f"{route:<44}" + "".join(cells), flush=True)
    for kind, single, chunked, current in (
        ("upload", UP[1], UP[2], _pageable.UPLOAD_CHUNKED_MIN),
        ("download", DOWN[1], DOWN[2], _pageable.DOWNLOAD_CHUNKED_MIN),
    ):
        best = _crossover(rates, single, chunked)
        verdict = "never, in the sizes measured" if best is None else f"from {size_name(best)} up"
        print(f"  {kind}: chunked >= single {verdict} (threshold now {size_name(current)})")
    _fixed_cost(report, 200 if quick or not cuda else 2000, with_torch)
