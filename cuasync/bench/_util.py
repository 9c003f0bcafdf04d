"""Timing helpers and the result table shared by the benchmark suites."""

from __future__ import annotations

import asyncio
import json
import platform
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import cuasync
from cuasync._core.completion import get_hub


@dataclass
class Row:
    suite: str
    name: str
    p50_us: float | None = None
    p99_us: float | None = None
    value: float | None = None
    unit: str = ""
    note: str = ""


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    #: Called with each row's name once measured (the progress bar); not saved.
    on_row: Callable[[str], None] | None = None
    #: The samples (µs) of each latency row, by name, for ``--plot``; not saved.
    samples: dict[str, np.ndarray] = field(default_factory=dict)

    def latency(
        self, suite: str, name: str, samples_ns: list[int] | np.ndarray, note: str = ""
    ) -> Row:
        a = np.asarray(samples_ns, dtype=np.float64) / 1e3
        row = Row(suite, name, float(np.percentile(a, 50)), float(np.percentile(a, 99)), note=note)
        self.rows.append(row)
        self.samples[name] = a
        if self.on_row is not None:
            self.on_row(name)
        print(
            f"  {name:<58} p50 {row.p50_us:8.1f} us   p99 {row.p99_us:8.1f} us  {note}", flush=True
        )
        return row

    def value(self, suite: str, name: str, value: float, unit: str, note: str = "") -> Row:
        row = Row(suite, name, value=float(value), unit=unit, note=note)
        self.rows.append(row)
        if self.on_row is not None:
            self.on_row(name)
        print(f"  {name:<58} {value:12,.2f} {unit}  {note}", flush=True)
        return row

    def find(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)

    def dump(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"meta": self.meta, "rows": [asdict(r) for r in self.rows]}, f, indent=2)


def machine_meta() -> dict[str, Any]:
    meta: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "backend": cuasync.backend_name(),
        "device": cuasync.Device(0).name,
        "numpy": np.__version__,
        "time": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    try:
        import cuda.bindings

        meta["cuda_bindings"] = cuda.bindings.__version__
    except Exception:
        pass
    backend = cuasync._backends.get_backend()
    if backend.driver_version:
        meta["driver_cuda_version"] = backend.driver_version

    hub = get_hub()
    # whether the native module is in use (else every await takes host callbacks), and
    # whether bursts of awaits go through the native submitter (CUASYNC_SUBMITTER)
    meta["native"] = hub.native is not None and hub.express is not None
    meta["bursts"] = "submitter" if hub.submitter is not None else str(hub.step_aside).lower()
    for mod in ("uvloop", "torch", "cupy", "trio", "anyio"):
        try:
            meta[mod] = __import__(mod).__version__
        except Exception:
            pass
    return meta


def timed(fn: Callable[[], Any], n: int, warmup: int = 50) -> list[int]:
    for _ in range(warmup):
        fn()
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        out.append(clock() - t0)
    return out


#: Calls of each candidate per turn when candidates are interleaved (:func:`interleaved`).
BLOCK = 20


def interleaved(
    candidates: dict[str, Callable[[], Any]],
    n: int,
    *,
    block: int = BLOCK,
    warmup: int = 50,
    between: Callable[[], Any] | None = None,
) -> dict[str, list[int]]:
    """ns of each of ``n`` calls of each candidate, taken in turns of ``block`` calls.

    The rows whose ratio is a target are measured this way: a VM's vCPUs change speed
    from one second to the next (docs/performance.md, session 26), so candidates timed
    one after the other can each catch another speed; taken in turns a few hundred
    microseconds long, each sees the same stretches of the machine. ``between`` runs
    after each turn, untimed (waiting for what the turn submitted).

    >>> samples = interleaved({"raw": raw_launch, "cuasync": submit}, 20000)
    """
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    if between is not None:
        between()
    out: dict[str, list[int]] = {name: [] for name in candidates}
    clock = time.perf_counter_ns
    for done in range(0, n, block):
        for name, fn in candidates.items():
            samples = out[name]
            for _ in range(min(block, n - done)):
                t0 = clock()
                fn()
                samples.append(clock() - t0)
            if between is not None:
                between()
    return out


async def interleaved_awaits(
    awaited: Callable[[], Any], blocking: Callable[[], Any], n: int, *, block: int = BLOCK
) -> tuple[list[int], list[int]]:
    """ns of each of ``n`` ``await awaited()`` and ``n`` ``blocking()`` calls, in turns
    of ``block`` on the running loop (see :func:`interleaved`); after 50 warm ones each."""
    clock = time.perf_counter_ns
    for _ in range(50):
        await awaited()
        blocking()
    awaits: list[int] = []
    calls: list[int] = []
    for done in range(0, n, block):
        for _ in range(min(block, n - done)):
            t0 = clock()
            await awaited()
            awaits.append(clock() - t0)
        for _ in range(min(block, n - done)):
            t0 = clock()
            blocking()
            calls.append(clock() - t0)
    return awaits, calls


def run_loop(kind: str, coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``coro()`` run to the end on a fresh ``"asyncio"`` or ``"uvloop"`` loop."""
    if kind == "uvloop":
        import uvloop

        return uvloop.run(coro())
    return asyncio.run(coro())


async def await_latency(kernel: Any, n: int, stream: Any) -> list[int]:
    """ns of each of ``n`` awaits of ``kernel[1, 32]()`` on ``stream`` (after 50 warm ones)."""

    clock = time.perf_counter_ns
    out = []
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        for i in range(n + 50):
            t0 = clock()
            await kernel[1, 32]()
            if i >= 50:
                out.append(clock() - t0)
    return out


async def await_latency_by_path(kernel: Any, n: int, stream: Any) -> tuple[list[int], list[int]]:
    """:func:`await_latency`'s samples, and of them those of the awaits the native reactor
    woke (its ``completed_reactor`` counter moved during the await).

    With a spin budget of 0 an await still finishes inline when its work landed before it
    parked, so the p50 of all of them mixes the two paths in proportions that change with
    the machine's speed; the second list is the reactor's alone.

    >>> every, woken = run_loop("uvloop", lambda: await_latency_by_path(k, 2000, s))
    """

    stats = get_hub().stats
    clock = time.perf_counter_ns
    every: list[int] = []
    woken: list[int] = []
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        for i in range(n + 50):
            before = stats.completed_reactor
            t0 = clock()
            await kernel[1, 32]()
            t = clock() - t0
            if i >= 50:
                every.append(t)
                if stats.completed_reactor != before:
                    woken.append(t)
    return every, woken


KiB, MiB = 1 << 10, 1 << 20


def size_name(n: int) -> str:
    """``4 KiB``, ``16 MiB``: a transfer size as the tables print it."""
    return f"{n // MiB} MiB" if n >= MiB else f"{n // KiB} KiB"


def median_s(fn: Callable[[], Any], nbytes: int, budget_bytes: int, max_reps: int) -> float:
    """Median seconds of one ``fn()`` (after one warm-up call: first touch, pool fill,
    lazy init), repeated about ``budget_bytes / nbytes`` times, 3 to ``max_reps``."""
    reps = max(3, min(max_reps, budget_bytes // max(nbytes, 1)))
    return float(np.median(timed(fn, reps, warmup=1))) / 1e9


def ratio_table(
    title: str,
    routes: tuple[str, ...],
    results: dict[int, dict[str, float]],
    ref: str,
    ref_label: str,
) -> None:
    """Print GB/s of each route (a row) at each size (a column), with its ratio to
    route ``ref`` where that was measured; routes measured at no size are left out."""
    sizes = sorted(results)
    has_ref = any(ref in results[n] for n in sizes)
    print(f"\n  {title}{f' (x = ratio to {ref_label})' if has_ref else ''}", flush=True)
    print("  " + f"{'route':<44}" + "".join(f"{size_name(n):>15}" for n in sizes))
    for route in routes:
        if not any(route in results[n] for n in sizes):
            continue
        cells = []
        for n in sizes:
            v, r = results[n].get(route), results[n].get(ref)
            if v is None:
                cells.append(f"{'-':>15}")
            elif r:
                cells.append(f"{v:8.2f} {v / r:4.2f}x")
            else:
                cells.append(f"{v:15.2f}")
        print("  " + f"{route:<44}" + "".join(f"{c:>15}" for c in cells), flush=True)
