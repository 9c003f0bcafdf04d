"""``requests``: what a service's request pays, host time included, beside torch and CuPy.

Every row is host time per call (p50, p99) in this process, which imported torch and
CuPy where they are installed; candidates are taken in turns (:func:`_turns`). Rows:

- **small ops awaited**, x a (1024,) float32, m a (64, 64) float32 (the tiled kernel's
  product), mb a (256, 256) float32 (cuBLAS's):
  ``await cuasync.add(x, 1.0)``, ``await cuasync.exp(x * 2.0 + 1.0, out=o)``,
  ``await cuasync.sum(x)``, ``await cuasync.matmul(m, m)``, ``await cuasync.matmul(mb,
  mb)``, each beside torch's eager
  call(s) + ``torch.cuda.synchronize()`` and CuPy's + ``cupy.cuda.Device().synchronize()``;
  once with the start-up heap frozen (``gc.freeze()``, the bench's default) and once with
  the whole heap collectable (what a service has), both printed;
- **waking for real work**: ``await`` of a kernel spinning 0.3 ms and 5 ms on asyncio and
  uvloop, beside ``.sync()`` of the same op, and the cross-thread wake floor of that loop
  (a thread's ``call_soon_threadsafe`` to the awaiting task, no GPU), with the process's
  CPU above idle while awaiting and each thread's share of it (``loop``: the awaiting
  thread; by name, from ``/proc``), beside the CPU of the loop's own timer wake at the
  same period (a timerfd set and a future resolved by its reader, no GPU, no cuasync:
  what any await that sleeps and wakes itself pays at least);
  ``await cuasync.wait(torch_stream)`` after torch work of
  the same lengths, beside ``stream.synchronize()``. These run with the wake policy in
  force (``CUASYNC_WAKE``: by default the early wake; ``tools/probes/wake_parts.py``
  prints it beside today's park in one run).

The ``-- targets`` lines put them in ratio (small ops: cuasync over torch, target
``<= 1.0``; waking: the await's extra over ``.sync()``, target ``<= 25 us``, and over
the wake floor, target ``<= 10 us``; the CPU above idle, target ``<= 10 %``). On the
emulator (no torch, CuPy or device) the cuasync rows alone run, at smaller counts.

>>> python -m cuasync.bench requests
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, TypeVar

import cuasync
from cuasync._backends import get_backend
from cuasync._core import wake
from cuasync._native import NATIVE

from . import completion
from ._breakdown import _per_op
from ._util import Report, Row, run_loop

T = TypeVar("T")

SUITE = "requests"


async def _turns(
    awaited: dict[str, Callable[[], Awaitable[Any]]],
    called: dict[str, Callable[[], Any]],
    n: int,
    block: int = 20,
) -> dict[str, list[int]]:
    """ns of ``n`` runs of each candidate, in turns of ``block`` on the running loop
    (awaits of ``awaited``, calls of ``called``), after 30 warm ones each."""
    clock = time.perf_counter_ns
    for make in awaited.values():
        for _ in range(30):
            await make()
    for fn in called.values():
        for _ in range(30):
            fn()
    out: dict[str, list[int]] = {name: [] for name in (*awaited, *called)}
    for done in range(0, n, block):
        turn = min(block, n - done)
        for name, make in awaited.items():
            samples = out[name]
            for _ in range(turn):
                t0 = clock()
                await make()
                samples.append(clock() - t0)
        for name, fn in called.items():
            samples = out[name]
            for _ in range(turn):
                t0 = clock()
                fn()
                samples.append(clock() - t0)
    return out


def _p50(row: Row) -> float:
    assert row.p50_us is not None  # (a latency row always has one)
    return row.p50_us


def _libraries() -> tuple[Any, Any]:
    if not get_backend().driver_handles:
        return None, None
    try:
        import cupy
        import torch
    except ImportError:
        return None, None
    return torch, cupy


def _small_ops(report: Report, torch: Any, cupy: Any, n: int, heap: str) -> list[tuple[str, float]]:
    x = cuasync.arange(1024, dtype="float32").sync()
    o = cuasync.zeros((1024,), "float32").sync()
    m = cuasync.ones((64, 64), "float32").sync()
    mb = cuasync.ones((256, 256), "float32").sync()
    ops: dict[str, Callable[[], Awaitable[Any]]] = {
        "add": lambda: cuasync.add(x, 1.0),
        "exp(x * 2 + 1, out=o)": lambda: cuasync.exp(x * 2.0 + 1.0, out=o),
        "sum": lambda: cuasync.sum(x),
        "matmul 64x64": lambda: cuasync.matmul(m, m),
        "matmul 256x256 (cuBLAS)": lambda: cuasync.matmul(mb, mb),
    }
    peers: dict[str, dict[str, Callable[[], Any]]] = {name: {} for name in ops}
    if torch is not None:
        tx = torch.arange(1024, dtype=torch.float32, device="cuda")
        to = torch.zeros(1024, dtype=torch.float32, device="cuda")
        tm = torch.ones((64, 64), dtype=torch.float32, device="cuda")
        tmb = torch.ones((256, 256), dtype=torch.float32, device="cuda")
        sync = torch.cuda.synchronize
        peers["add"]["torch"] = lambda: (torch.add(tx, 1.0), sync())
        peers["exp(x * 2 + 1, out=o)"]["torch"] = lambda: (
            torch.exp(tx * 2.0 + 1.0, out=to),
            sync(),
        )
        peers["sum"]["torch"] = lambda: (torch.sum(tx), sync())
        peers["matmul 64x64"]["torch"] = lambda: (torch.matmul(tm, tm), sync())
        peers["matmul 256x256 (cuBLAS)"]["torch"] = lambda: (torch.matmul(tmb, tmb), sync())
    if cupy is not None:
        cx = cupy.arange(1024, dtype=cupy.float32)
        co = cupy.zeros(1024, dtype=cupy.float32)
        cm = cupy.ones((64, 64), dtype=cupy.float32)
        cmb = cupy.ones((256, 256), dtype=cupy.float32)
        csync = cupy.cuda.Device().synchronize
        peers["add"]["cupy"] = lambda: (cupy.add(cx, 1.0), csync())
        peers["exp(x * 2 + 1, out=o)"]["cupy"] = lambda: (cupy.exp(cx * 2.0 + 1.0, out=co), csync())
        peers["sum"]["cupy"] = lambda: (cupy.sum(cx), csync())
        peers["matmul 64x64"]["cupy"] = lambda: (cupy.matmul(cm, cm), csync())
        peers["matmul 256x256 (cuBLAS)"]["cupy"] = lambda: (cupy.matmul(cmb, cmb), csync())
    targets = []
    for name, make in ops.items():
        samples = asyncio.run(_turns({"cuasync": make}, peers[name], n))
        p50 = {}
        for who, ns in samples.items():
            row = report.latency(SUITE, f"small op {name}: {who} ({heap})", ns)
            p50[who] = _p50(row)
        if "torch" in p50:
            targets.append((f"small op {name} ({heap}): cuasync / torch (target <= 1.0)",
                            p50["cuasync"] / p50["torch"]))  # fmt: skip
    return targets


async def _wake_floor(n: int, delay_s: float) -> list[int]:
    """ns from another thread's ``call_soon_threadsafe`` to the awaiting task's resumption
    (the loop parked meanwhile: the thread waits ``delay_s`` first)."""
    loop = asyncio.get_running_loop()
    out = []
    for _ in range(n):
        fut: asyncio.Future[int] = loop.create_future()

        def wake(fut: asyncio.Future[int] = fut) -> None:
            time.sleep(delay_s)
            loop.call_soon_threadsafe(fut.set_result, time.perf_counter_ns())

        threading.Thread(target=wake).start()
        sent = await fut
        out.append(time.perf_counter_ns() - sent)
    return out


async def _timer_floor(period_ns: int, n: int) -> float:
    """The process's CPU (% of a core) while a task wakes ``n`` times by its loop's own
    timerfd, each ``period_ns`` after it parked: no GPU, no cuasync on the loop (what
    any await that sleeps and wakes by its loop's timer pays at least; nan without
    ``timerfd``)."""

    async def cpu(wake: Callable[[], Awaitable[int]]) -> float:
        for _ in range(3):  # (warm, as the awaits' rows are)
            await wake()
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(n):
            await wake()
        return (time.process_time() - c0) / (time.perf_counter() - w0) * 100

    try:
        spent = await timer_wakes(period_ns, cpu)
    except OSError:  # (the kernel refused the timer: no floor here)
        return float("nan")
    return float("nan") if spent is None else spent


async def timer_wakes(
    period_ns: int, use: Callable[[Callable[[], Awaitable[int]]], Awaitable[T]]
) -> T | None:
    """``await use(wake)``, where ``await wake()`` parks the task until the running loop's
    own timerfd (a new one, closed after) expires ``period_ns`` later, and returns when
    its reader ran (``time.perf_counter_ns()``); None, ``use`` not called, without one
    (no ``timerfd``). What any await that sleeps and wakes by its loop's timer pays at
    least: no GPU, no cuasync (``tools/probes/wake_parts.py profile`` too).

    >>> gaps = await timer_wakes(300_000, measure)   # measure(wake): awaits wake() n times
    """
    fd = wake.timerfd()
    if fd < 0:
        return None
    try:
        loop = asyncio.get_running_loop()
        waiting: list[asyncio.Future[int]] = []

        def fire() -> None:
            try:
                os.read(fd, 8)
            except BlockingIOError:  # (not expired after all)
                return
            waiting.pop().set_result(time.perf_counter_ns())

        async def woken() -> int:
            fut = loop.create_future()
            waiting.append(fut)
            if not NATIVE.set_timer(fd, time.monotonic_ns() + period_ns):
                raise OSError(f"timerfd_settime refused fd {fd}")
            return await fut

        loop.add_reader(fd, fire)
        try:
            return await use(woken)
        finally:
            loop.remove_reader(fd)
    finally:
        os.close(fd)


class Waited(NamedTuple):
    """What :func:`_awaits_and_syncs` measured: each await's and each ``.sync()``'s time
    (ns), the process's CPU while the awaits waited (% of a core), how many of their wake
    windows ended before the landing, how many wakes looked only after it, and their
    early wakes' spin (ns an await)."""

    samples: dict[str, list[int]]
    cpu: float
    missed: int
    late: int
    spin_ns: float


async def _awaits_and_syncs(
    ns_work: int, n: int, threads: dict[str, float] | None = None
) -> Waited:
    """The await and the ``.sync()`` of a kernel spinning ``ns_work`` (in turns), measured
    (:class:`Waited`); ``threads``, where given, gets each thread's share of the awaits'
    CPU (% of a core, by name: ``completion.threads_cpu``)."""
    kernel = completion.spin_ns
    cpu = 0.0
    wall = 0.0
    spent: dict[str, float] = {}
    awaits: list[int] = []
    syncs: list[int] = []
    clock = time.perf_counter_ns
    for _ in range(warm_ups(n)):  # (the wake's estimate learnt for this length of work)
        await kernel[1, 1](ns_work)
        kernel[1, 1](ns_work).sync(allow_in_loop=True)
    start = cuasync.stats()
    for done in range(0, n, 5):
        turn = min(5, n - done)
        before = completion.threads_cpu() if threads is not None else {}
        c0, w0, l0 = time.process_time(), time.perf_counter(), time.thread_time()
        for _ in range(turn):
            t0 = clock()
            await kernel[1, 1](ns_work)
            awaits.append(clock() - t0)
        mine = time.thread_time() - l0
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        if threads is not None:  # (the loop's own: reading /proc costs it, not the others)
            spent["this thread"] = spent.get("this thread", 0.0) + mine
            for name, s in completion.threads_cpu().items():
                if name != "this thread" and s > before.get(name, s):  # (none: one ended)
                    spent[name] = spent.get(name, 0.0) + s - before[name]
        for _ in range(turn):
            t0 = clock()
            kernel[1, 1](ns_work).sync(allow_in_loop=True)
            syncs.append(clock() - t0)
    if threads is not None:
        threads.update({name: s / wall * 100 for name, s in spent.items()})
    end = cuasync.stats()
    return Waited(
        {"await": awaits, ".sync()": syncs},
        cpu / wall * 100,
        *_wake_counts(start, end),
        (end.early_spin_ns - start.early_spin_ns) / n,
    )


def warm_ups(n: int) -> int:
    """The awaits a row of ``n`` makes before it measures: enough for the early wake to
    learn the work's length anew (the rows share one kernel and grid, whose estimate
    the previous row taught another length: relearnt in four to eight awaits, each of
    them a missed window the reactor reports), a third of a long row.

    >>> warm_ups(300), warm_ups(10)
    (20, 8)
    """
    return max(8, min(20, n // 3))


def _wake_counts(start: Any, end: Any) -> tuple[int, int]:
    """The wake windows that ended before the landing, and the wakes that looked only
    after it, between two ``cuasync.stats()``."""
    return end.early_misses - start.early_misses, end.early_late - start.early_late


def _wake_note(missed: int, late: int, n: int) -> str:
    """The note of an await row: how many of its ``n`` awaits' wake windows ended before
    their work landed (each reported by the reactor instead), and how many wakes looked
    only after it (each await paid the time between: the timer's lateness)."""
    return f"{missed} of {n} wake windows ended before the landing, {late} wakes looked after it"


def _submission_ns(n: int) -> float:
    """The p50 host time of submitting the wake rows' kernel (``op.submit_on(stream)``,
    no wait): what any await of it pays before its loop can sleep."""
    kernel, stream = completion.spin_ns, cuasync.Device(0).new_stream()
    times, futures = _per_op(lambda op: op.submit_on(stream), [kernel[1, 1](0) for _ in range(n)])
    stream.synchronize()
    for future in futures:
        future.result()
    return float(statistics.median(times))


def _waking(report: Report, torch: Any, quick: bool) -> list[tuple[str, float]]:
    targets = []
    idle = completion._idle_cpu(0.2)
    submit_ns = _submission_ns(50 if quick else 500)
    lengths = (("0.3 ms", 300_000, 40 if quick else 300), ("5 ms", 5_000_000, 10 if quick else 60))
    for label, work_ns, n in lengths:
        for kind in ("asyncio", "uvloop"):
            threads: dict[str, float] = {}
            try:
                waited = run_loop(kind, lambda: _awaits_and_syncs(work_ns, n, threads))  # noqa: B023
                samples, cpu = waited.samples, waited.cpu
                floor = run_loop(kind, lambda: _wake_floor(n, work_ns / 1e9))  # noqa: B023
                timer_cpu = run_loop(kind, lambda: _timer_floor(work_ns, n)) - idle  # noqa: B023
            except ImportError:  # no uvloop
                continue
            p50 = {}
            for who, ns in samples.items():
                note = _wake_note(waited.missed, waited.late, n) if who == "await" else ""
                p50[who] = _p50(
                    report.latency(SUITE, f"{kind}: {who} of {label} of work", ns, note)
                )
            p50["floor"] = _p50(
                report.latency(SUITE, f"{kind}: cross-thread wake floor ({label} apart)", floor)
            )
            busy = sorted(((s, name) for name, s in threads.items() if s >= 0.05), reverse=True)
            shares = ", ".join(f"{name.replace('this thread', 'loop')} {s:.1f}" for s, name in busy)
            report.value(SUITE, f"{kind}: CPU above idle while awaiting {label} of work",
                         cpu - idle, "% of a core", f"idle {idle:.1f} %; {shares}")  # fmt: skip
            report.value(SUITE, f"{kind}: CPU above idle, the loop's own timer wake every "
                         f"{label} (no GPU, no cuasync)", timer_cpu, "% of a core")  # fmt: skip
            # what an await that lets its loop sleep and wakes it early pays at least: that
            # timer wake, the submission, and the spin until the landing its wake needed
            cycle = p50["await"] * 1e3
            floor_cpu = timer_cpu + (submit_ns + waited.spin_ns) / cycle * 100
            report.value(SUITE, f"{kind}: CPU floor of an early wake at {label}", floor_cpu,
                         "% of a core", f"the timer wake {timer_cpu:.1f} % + the submission "
                         f"{submit_ns / 1e3:.1f} us + the spin {waited.spin_ns / 1e3:.1f} us "
                         f"an await of {cycle / 1e3:.0f} us")  # fmt: skip
            targets.append((f"{kind} {label}: CPU above idle while awaiting (target <= 10 %)",
                            cpu - idle))  # fmt: skip
            targets.append((f"{kind} {label}: CPU above idle over the early wake's floor (%)",
                            cpu - idle - floor_cpu))  # fmt: skip
            targets.append((f"{kind} {label}: await - .sync() (target <= 25 us)",
                            p50["await"] - p50[".sync()"]))  # fmt: skip
            targets.append((f"{kind} {label}: await - (.sync() + wake floor) (target <= 10 us)",
                            p50["await"] - p50[".sync()"] - p50["floor"]))  # fmt: skip
    if torch is not None:
        targets += _torch_waits(report, torch, quick)
    return targets


def torch_cycles_per_ms(torch: Any) -> float:
    """``torch.cuda._sleep`` cycles per millisecond on the current device, timed once."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # (the first call loads its kernel: not timed)
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    return 20_000_000 / start.elapsed_time(end)


def _torch_waits(report: Report, torch: Any, quick: bool) -> list[tuple[str, float]]:
    """``await cuasync.wait(stream)`` after torch work, beside ``stream.synchronize()``."""
    stream = torch.cuda.current_stream()
    cycles_per_ms = torch_cycles_per_ms(torch)
    targets = []
    for label, ms, n in (("0.3 ms", 0.3, 40 if quick else 300), ("5 ms", 5.0, 10 if quick else 60)):
        cycles = int(cycles_per_ms * ms)
        counts = [0, 0]  # (the row's wake windows that ended first, wakes after the landing)

        async def both(
            cycles: int = cycles, n: int = n, counts: list[int] = counts
        ) -> dict[str, list[int]]:
            waits: list[int] = []
            syncs: list[int] = []
            out = {"await cuasync.wait(torch_stream)": waits, "stream.synchronize()": syncs}
            clock = time.perf_counter_ns
            for _ in range(warm_ups(n)):  # (as for a kernel: the stream's estimate learnt)
                torch.cuda._sleep(cycles)
                await cuasync.wait(stream)
            start = cuasync.stats()
            for _ in range(n):
                torch.cuda._sleep(cycles)
                t0 = clock()
                await cuasync.wait(stream)
                waits.append(clock() - t0)
                torch.cuda._sleep(cycles)
                t0 = clock()
                stream.synchronize()
                syncs.append(clock() - t0)
            counts[:] = _wake_counts(start, cuasync.stats())
            return out

        for kind in ("asyncio", "uvloop"):
            try:
                samples = run_loop(kind, both)
            except ImportError:
                continue
            notes = {"await cuasync.wait(torch_stream)": _wake_note(counts[0], counts[1], n)}
            p50 = {
                w: _p50(report.latency(
                    SUITE, f"{kind}: {w} after {label} of torch work", ns, notes.get(w, "")
                ))
                for w, ns in samples.items()
            }  # fmt: skip
            waited, synced = p50.values()
            targets.append((f"{kind} {label} torch work: wait - synchronize (target <= 25 us)",
                            waited - synced))  # fmt: skip
    return targets


def run(report: Report, quick: bool = False) -> None:
    print(f"== requests ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    torch, cupy = _libraries()
    completion.spin_ns.compile()
    n = 200 if quick or torch is None else 2000
    heap = "heap frozen" if gc.get_freeze_count() else "heap collectable"
    targets = _small_ops(report, torch, cupy, n, heap)
    if gc.get_freeze_count():  # the same rows with the start-up heap collectable
        gc.unfreeze()
        try:
            targets += _small_ops(report, torch, cupy, n, "heap collectable")
        finally:
            gc.collect()
            gc.freeze()
    targets += _waking(report, torch, quick or torch is None)
    print("-- targets (inside this run)")
    for name, value in targets:
        unit = "x" if "/" in name else "%" if name.endswith("%)") else "us"
        report.value(SUITE, name, value, unit)
