"""``completion``: how fast an event loop learns that a tiny kernel finished.

Side by side in one process: raw ``cuda.bindings`` launch + ``cuStreamSynchronize``,
PyTorch and CuPy equivalents, ``run_in_executor(synchronize)``, and cuasync ``await`` on
asyncio and uvloop with the default inline spin, with spin 0 (every await through the
reactor) and in host-callback mode; then 8192 concurrent awaits (and the sequential raw
loop they are compared with: each the median of :data:`ROUNDS` rounds, every round
printed, since the first gather of a process pays for what later ones reuse), the same
with the start-up heap collectable, beside 8192 tasks that do no GPU work (asyncio's own
floor under the cyclic GC); the loop's lag while 64 long kernels are in flight (beside
the same loop woken by a plain socket at the same moments: see ``_lag``), and the
reactor's CPU use when idle and while one long command is pending.
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import threading
import time
from collections.abc import Callable

import cuasync
from cuasync._backends import get_backend
from cuasync._core import wake
from cuasync._core.completion import get_hub

from . import _breakdown, _lag
from ._util import (
    BLOCK,
    Report,
    await_latency,
    await_latency_by_path,
    interleaved_awaits,
    run_loop,
    timed,
)

SUITE = "completion"

#: Rounds of the 8192-task rows (the concurrent gathers, the sequential raw loop).
ROUNDS = 3

TINY_SOURCE = r"""
extern "C" __global__ void cuasync_tiny() {}
extern "C" __global__ void cuasync_spin_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""

tiny = cuasync.Kernel(TINY_SOURCE, "cuasync_tiny", emulate=lambda: None)
spin_ns = cuasync.Kernel(
    TINY_SOURCE, "cuasync_spin_ns", emulate=lambda ns: time.sleep(int(ns) / 1e9)
)


def _raw_launcher(stream: cuasync.Stream) -> tuple[Callable[[], None], Callable[[], None]] | None:
    """(launch, synchronize) through cuda.bindings, or None on the emulator."""
    if not get_backend().driver_handles:
        return None
    from cuda.bindings import driver as d

    function = tiny._prepare(stream.device).handle
    h = stream.handle

    def launch() -> None:
        d.cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, h, 0, 0)

    def sync() -> None:
        d.cuStreamSynchronize(h)

    return launch, sync


def _baselines(report: Report, n: int, stream: cuasync.Stream) -> dict[str, float]:
    results: dict[str, float] = {}
    raw = _raw_launcher(stream)
    if raw is not None:
        launch, sync = raw

        def raw_once() -> None:
            launch()
            sync()

        row = report.latency(
            SUITE, "raw cuda.bindings: launch + cuStreamSynchronize", timed(raw_once, n)
        )
        results["raw"] = row.p50_us or 0.0
    try:
        import torch

        if get_backend().driver_handles and torch.cuda.is_available():
            x = torch.zeros(1, device="cuda")

            def torch_once() -> None:
                x.add_(1)
                torch.cuda.synchronize()

            row = report.latency(
                SUITE, f"torch {torch.__version__}: add_ + cuda.synchronize", timed(torch_once, n)
            )
            results["torch"] = row.p50_us or 0.0
    except ImportError:
        pass
    try:
        import cupy

        if get_backend().driver_handles:
            a = cupy.zeros(1)
            st = cupy.cuda.Stream(non_blocking=True)

            def cupy_once() -> None:
                with st:
                    a.__iadd__(1)
                st.synchronize()

            row = report.latency(
                SUITE, f"cupy {cupy.__version__}: a += 1 + stream.synchronize", timed(cupy_once, n)
            )
            results["cupy"] = row.p50_us or 0.0
    except ImportError:
        pass
    row = report.latency(
        SUITE,
        "cuasync: tiny[1, 32]().sync_on(stream)",
        timed(lambda: tiny[1, 32]().sync_on(stream), n),
    )
    results["sync"] = row.p50_us or 0.0
    return results


async def _executor_latency(n: int, stream: cuasync.Stream) -> list[int]:
    loop = asyncio.get_running_loop()
    raw = _raw_launcher(stream)
    if raw is not None:
        launch, sync = raw

        def once() -> None:
            launch()
            sync()
    else:

        def once() -> None:
            tiny[1, 32]().sync_on(stream)

    clock = time.perf_counter_ns
    out = []
    for i in range(n + 50):
        t0 = clock()
        await loop.run_in_executor(None, once)
        if i >= 50:
            out.append(clock() - t0)
    return out


async def _concurrent(count: int) -> float:
    """ops/s of ``count`` concurrent awaits of a tiny kernel over the default stream pool."""
    t0 = time.perf_counter()
    await asyncio.gather(*(_one() for _ in range(count)))
    return count / (time.perf_counter() - t0)


async def _one() -> None:
    await tiny[1, 32]()


async def _gathered_ops(count: int) -> float:
    """ops/s of ``count`` ops handed to ``asyncio.gather`` as they are: asyncio futures
    (``cuasync._core.op_future``), no Task each."""
    t0 = time.perf_counter()
    await asyncio.gather(*(tiny[1, 32]() for _ in range(count)))
    return count / (time.perf_counter() - t0)


async def _idle_concurrent(count: int) -> float:
    """ops/s of ``count`` concurrent tasks that suspend once and do nothing on the GPU:
    what asyncio's tasks cost alone (the floor under :func:`_concurrent`)."""
    t0 = time.perf_counter()
    await asyncio.gather(*(asyncio.sleep(0) for _ in range(count)))
    return count / (time.perf_counter() - t0)


async def _executor_concurrent(count: int, stream: cuasync.Stream) -> float:
    loop = asyncio.get_running_loop()
    raw = _raw_launcher(stream)
    streams = [cuasync.Device(0).new_stream() for _ in range(4)]

    def once(i: int) -> None:
        s = streams[i % 4]
        if raw is not None:
            from cuda.bindings import driver as d

            d.cuLaunchKernel(tiny._prepare(s.device).handle, 1, 1, 1, 32, 1, 1, 0, s.handle, 0, 0)
            d.cuStreamSynchronize(s.handle)
        else:
            tiny[1, 32]().sync_on(s)

    t0 = time.perf_counter()
    await asyncio.gather(*(loop.run_in_executor(None, once, i) for i in range(count)))
    return count / (time.perf_counter() - t0)


def _rounds(measure: Callable[[], float]) -> tuple[float, str]:
    """The median of :data:`ROUNDS` runs of ``measure`` (ops/s), and every round's figure."""
    return _median_of([measure() for _ in range(ROUNDS)])


def _median_of(rates: list[float]) -> tuple[float, str]:
    """The median of ``rates`` (ops/s), and each of them, in thousands."""
    return sorted(rates)[len(rates) // 2], ", ".join(f"{r / 1000:.1f}k" for r in rates)


#: Rounds of the 8192-task gather, each followed by a round of the sequential raw loop.
PAIRED_ROUNDS = 5


def _paired_rounds(
    measure: Callable[[], float], baseline: Callable[[], float]
) -> tuple[list[float], list[float]]:
    """:data:`PAIRED_ROUNDS` rounds of ``measure``, each followed by one of ``baseline``
    (ops/s of each): their ratio is a target, and a slow stretch of the VM's vCPUs then
    falls on both of a pair (see ``_util.interleaved``)."""
    pairs = [(measure(), baseline()) for _ in range(PAIRED_ROUNDS)]
    return [m for m, _ in pairs], [b for _, b in pairs]


def _collectable_rounds(
    measure: Callable[[], float], baseline: Callable[[], float]
) -> tuple[list[float], list[float], _Collections]:
    """:func:`_paired_rounds` with the start-up heap collectable (after a full collection,
    so the next full pass is due as in a process that never froze it), and the cyclic
    GC's collections meanwhile; the heap frozen again after."""
    gc.unfreeze()
    gc.collect()
    try:
        with _Collections() as collections:
            rates, raws = _paired_rounds(measure, baseline)
    finally:
        gc.collect()
        gc.freeze()
    return rates, raws, collections


class _Settled:
    """How the ops of measured rounds ended: settled at a look or an await's spin
    (``completed_inline``), or woken by the reactor (``completed_reactor``).

    >>> settled = _Settled(); rate = settled.around(measure)()
    >>> str(settled)
    'settled by the loop 40960, woken by the reactor 0'
    """

    def __init__(self) -> None:
        self.inline = self.reactor = 0

    def around(self, measure: Callable[[], float]) -> Callable[[], float]:
        """``measure``, counting how its ops ended (outside its timed part)."""

        def counted() -> float:
            before = cuasync.stats()
            rate = measure()
            after = cuasync.stats()
            self.inline += after.completed_inline - before.completed_inline
            self.reactor += after.completed_reactor - before.completed_reactor
            return rate

        return counted

    def __str__(self) -> str:
        return f"settled by the loop {self.inline}, woken by the reactor {self.reactor}"


class _Collections:
    """The cyclic GC's collections by generation while the block runs (``gc.callbacks``).

    >>> with _Collections() as c: ...
    >>> c.per_round(5)
    '22.8/2.0/0.60'
    """

    def __init__(self) -> None:
        self.count = [0, 0, 0]

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            self.count[info["generation"]] += 1

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def per_round(self, rounds: int) -> str:
        young, middle, full = (n / rounds for n in self.count)
        return f"{young:.1f}/{middle:.1f}/{full:.2f}"


def _sequential_raw(count: int, stream: cuasync.Stream) -> float:
    raw = _raw_launcher(stream)
    t0 = time.perf_counter()
    for _ in range(count):
        if raw is not None:
            raw[0]()
            raw[1]()
        else:
            tiny[1, 32]().sync_on(stream)
    return count / (time.perf_counter() - t0)


def _idle_cpu(seconds: float) -> float:
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    return (time.process_time() - cpu0) / (time.perf_counter() - wall0) * 100


def _thread_names() -> dict[int, str]:
    """This process's threads, native id -> name (``comm``); empty where ``/proc`` is not."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # not Linux
        return {}
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = f.read().strip()
        except OSError:  # (a thread that ended meanwhile)
            pass
    return out


def _reactor_thread() -> int | None:
    """The native id of the reactor thread (the native module names it), or None."""
    return next((t for t, name in _thread_names().items() if name == "cuasync-reactor"), None)


def threads_cpu() -> dict[str, float]:
    """CPU seconds of each thread of this process so far, by name (``comm``; threads of one
    name summed; the calling thread is ``"this thread"``); empty where ``/proc`` is not.

    >>> before = threads_cpu()
    >>> spent = {k: v - before.get(k, 0.0) for k, v in threads_cpu().items()}
    """
    me = threading.get_native_id()
    out: dict[str, float] = {}
    for tid, name in _thread_names().items():
        name = "this thread" if tid == me else name
        try:
            out[name] = out.get(name, 0.0) + _thread_usage(tid)[0]
        except OSError:  # (a thread that ended meanwhile)
            pass
    return out


def _thread_usage(tid: int) -> tuple[float, int]:
    """(CPU seconds, context switches) of one thread of this process.

    CPU time comes from ``schedstat`` (nanoseconds) where the kernel has it, else from
    utime + stime in ``stat`` (clock ticks, too coarse for a 2 s sample of a thread
    that mostly sleeps).
    """
    base = f"/proc/self/task/{tid}"
    try:
        with open(f"{base}/schedstat") as f:
            cpu = int(f.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        with open(f"{base}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    switches = 0
    with open(f"{base}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"):
                switches += int(value)
    return cpu, switches


def _long_pending_cpu(seconds: float) -> tuple[float, float] | None:
    """(% of a core, context switches/s) of the reactor thread while one armed slot's
    flag lands only after ``seconds``: Python stores it, standing in for a long kernel.
    None without the native reactor or /proc."""
    from .. import _reactor  # present whenever hub.reactor is

    hub = get_hub()
    if hub.reactor is None:
        return None
    claimed = hub.slots.claim()
    if claimed is None:
        return None
    slot, gen, address = claimed
    queue = _reactor.LoopQueue()
    try:
        hub.reactor.arm(slot, gen, queue)
        tid, deadline = None, time.monotonic() + 1.0
        while tid is None and time.monotonic() < deadline:  # a new thread names itself
            tid = _reactor_thread()
            time.sleep(0.001)
        if tid is None:
            hub.reactor.disarm(slot)
            return None
        cpu0, switches0 = _thread_usage(tid)
        wall0 = time.perf_counter()
        time.sleep(seconds)
        cpu1, switches1 = _thread_usage(tid)
        wall = time.perf_counter() - wall0
        _reactor.store32(address, gen)
        select.select([queue.fileno()], [], [], 5.0)  # the reactor reports it
        hub.reactor.disarm(slot)  # in case it did not (False when it did)
    finally:
        queue.close()
        hub.slots.release(slot)
    return (cpu1 - cpu0) / wall * 100, (switches1 - switches0) / wall


def run(report: Report, n: int = 2000, concurrent: int = 8192) -> None:
    print(f"== completion ({cuasync.backend_name()}: {cuasync.Device(0).name})", flush=True)
    hub = get_hub()
    stream = cuasync.Device(0).new_stream()
    tiny.compile()
    spin_ns.compile()
    base = _baselines(report, n, stream)
    default_spin = hub.spin_budget_us
    loops = ["asyncio"]
    try:
        import uvloop  # noqa: F401

        loops.append("uvloop")
    except ImportError:
        pass
    for kind in loops:
        row = report.latency(
            SUITE,
            f"{kind}: run_in_executor(launch + synchronize)",
            run_loop(kind, lambda: _executor_latency(n, stream)),
        )
        base[f"{kind}-executor"] = row.p50_us or 0.0
        if kind == loops[0]:  # the default spin on every loop, interleaved with the raw loop
            base.update(_await_interleaved(report, n, stream, loops, default_spin))
        for label, spin, reactor in (
            ("spin 0 (reactor)", 0, True),
            ("host callback", 0, False),
        ):
            hub.spin_budget_us, hub.use_reactor = spin, reactor and hub.reactor is not None
            before = cuasync.stats()
            early, wake.POLICY.on = wake.POLICY.on, False  # (the reactor's wake, not the loop's)
            try:
                samples, woken = run_loop(kind, lambda: await_latency_by_path(tiny, n, stream))
            finally:
                wake.POLICY.on = early
            after = cuasync.stats()
            note = (
                f"inline {after.completed_inline - before.completed_inline}, "
                f"reactor {after.completed_reactor - before.completed_reactor}, "
                f"callback {after.completed_host_callback - before.completed_host_callback}"
            )
            row = report.latency(
                SUITE, f"{kind}: cuasync await tiny kernel, {label}", samples, note
            )
            base[f"{kind}-{label}"] = row.p50_us or 0.0
            if reactor and woken:  # (the reactor's wake alone: see await_latency_by_path)
                row = report.latency(
                    SUITE,
                    f"{kind}: cuasync await tiny kernel, spin 0, woken by the reactor",
                    woken,
                    f"{len(woken)} of the {len(samples)} awaits above",
                )
                base[f"{kind}-woken"] = row.p50_us or 0.0
        hub.spin_budget_us, hub.use_reactor = default_spin, hub.reactor is not None
        before = cuasync.stats()
        gathers, raws = _paired_rounds(
            lambda: run_loop(kind, lambda: _concurrent(concurrent)),  # noqa: B023
            lambda: _sequential_raw(concurrent, stream),
        )
        after = cuasync.stats()
        ops, rounds = _median_of(gathers)
        note = (
            f"rounds {rounds}; inline {after.completed_inline - before.completed_inline}, "
            f"reactor {after.completed_reactor - before.completed_reactor}, "
            f"stepped aside {after.burst_awaits - before.burst_awaits}, "
            f"queued {after.launches_queued - before.launches_queued}, "
            f"spins skipped {after.spins_skipped - before.spins_skipped}, "
            f"reactor batches {after.reactor_batches - before.reactor_batches}"
        )
        report.value(SUITE, f"{kind}: {concurrent} concurrent cuasync awaits", ops, "ops/s", note)
        raw_ops, raw_rounds = _median_of(raws)
        report.value(
            SUITE,
            f"{kind}: sequential raw loop, {concurrent} launch + sync, interleaved",
            raw_ops,
            "ops/s",
            f"rounds {raw_rounds}: each right after one of the gather's above",
        )
        base[f"{kind}-concurrent/raw"] = sorted(g / r for g, r in zip(gathers, raws, strict=True))[
            len(gathers) // 2
        ]
        if gc.get_freeze_count():  # the same gather with the start-up heap collectable
            thawed = (  # ... and tasks that do no GPU work: asyncio's own floor
                (
                    "thawed",
                    _concurrent,
                    f"{concurrent} concurrent cuasync awaits, heap not frozen",
                    "one after the other after a full collection",
                ),
                (
                    "futures",
                    _gathered_ops,
                    f"{concurrent} ops gathered as futures (no task each), heap not frozen",
                    "asyncio.gather(*ops): each op an asyncio future, watched without a Task",
                ),
                (
                    "idle",
                    _idle_concurrent,
                    f"{concurrent} concurrent tasks, no GPU work, heap not frozen",
                    "asyncio.sleep(0) each, no cuasync: asyncio's own floor",
                ),
            )
            for key, gather, name, what in thawed:
                settled = _Settled()
                rates, raws, collections = _collectable_rounds(
                    settled.around(lambda: run_loop(kind, lambda: gather(concurrent))),  # noqa: B023
                    lambda: _sequential_raw(concurrent, stream),
                )
                ops, rounds = _median_of(rates)
                report.value(
                    SUITE,
                    f"{kind}: {name}",
                    ops,
                    "ops/s",
                    f"rounds {rounds}; {what}; cyclic GC collections per round by generation "
                    f"{collections.per_round(len(rates))} (a full pass traverses every object "
                    f"the process imported: torch, CuPy); {settled}",
                )
                ratios = sorted(g / r for g, r in zip(rates, raws, strict=True))
                base[f"{kind}-{key}/raw"] = ratios[len(ratios) // 2]
        ops = run_loop(kind, lambda: _executor_concurrent(concurrent, stream))
        report.value(SUITE, f"{kind}: {concurrent} concurrent run_in_executor", ops, "ops/s")
    ops, rounds = _rounds(lambda: _sequential_raw(concurrent, stream))
    report.value(
        SUITE, f"sequential raw loop, {concurrent} launch + sync", ops, "ops/s", f"rounds {rounds}"
    )
    for kind in loops:
        idle = run_loop(kind, lambda: _lag.idle_lag(0.2))
        report.value(SUITE, f"{kind}: 1 ms ticker lag p99, idle loop (baseline)", idle, "us")
        flight = run_loop(kind, lambda: _lag.flight_lag(spin_ns, 64, 10.0))
        report.value(
            SUITE,
            f"{kind}: 1 ms ticker lag p99, 64 x 10 ms kernels in flight",
            flight.during_p99_us,
            "us",
            f"with the submission burst {flight.overall_p99_us:.0f} us, max "
            f"{flight.max_us:.0f} us, CPU {flight.cpu_percent:.1f}%, "
            f"{len(flight.wakes)} wake-ups in {flight.seconds * 1e3:.0f} ms",
        )
        control = run_loop(kind, lambda: _lag.replayed_lag(flight.wakes, flight.seconds))  # noqa: B023
        report.value(
            SUITE,
            f"{kind}: 1 ms ticker lag p99, a socket waking it as cuasync did",
            control,
            "us",
            "no GPU work, no cuasync code on the loop: what the wake-ups alone cost",
        )
        for inline in (False, True):
            first = run_loop(kind, lambda: _lag.first_use_lag(3, inline))  # noqa: B023
            how = "compiled inline by .sync() (control)" if inline else "awaited"
            report.value(
                SUITE,
                f"{kind}: 1 ms ticker lag p99, first use of 3 new expressions, {how}",
                first.p99_us,
                "us",
                f"max {first.max_us:.0f} us, {first.ticks} ticks, one first use "
                f"{first.first_use_ms:.0f} ms (NVRTC and the module load; disk cache off)"
                + ("" if inline else "; target <= 5 ms"),
            )
        for inline in (False, True) if kind == loops[0] else (False,):
            fresh = _lag.fresh_families_lag(kind, inline)
            how = "run inline by .sync() (control)" if inline else "awaited"
            families = "a new process's first op of 16 kernel families"
            report.value(
                SUITE,
                f"{kind}: 1 ms ticker lag p99, {families}, {how}",
                fresh.p99_us,
                "us",
                f"max {fresh.max_us:.0f} us, {fresh.ticks} ticks, one first op "
                f"{fresh.first_use_ms:.0f} ms (fill, ramp, random, convert, elementwise, "
                "reduction, scan, sort, search, take, gather, scatter, pad, tril, integer "
                "matmul, cuBLAS matmul; NVRTC, the module loads and cuBLAS, disk cache off)"
                + ("" if inline else f"; target <= 5 ms: {fresh.p99_us / 5000:.2f} x"),
            )
    report.value(
        SUITE,
        "idle process CPU (reactor parked), 1 s",
        _idle_cpu(1.0),
        "% of a core",
        f"reactor wakeups so far {cuasync.stats().reactor_wakeups}",
    )
    pending = _long_pending_cpu(2.0)
    if pending is not None:
        cpu, switches = pending
        report.value(
            SUITE,
            "reactor CPU with one long command pending, 2 s",
            cpu,
            "% of a core",
            f"{switches:,.0f} context switches/s",
        )
    _breakdown.run(report, tiny, stream, n)
    _ratios(report, base, loops, default_spin, concurrent)


def _await_interleaved(
    report: Report, n: int, stream: cuasync.Stream, loops: list[str], spin: int
) -> dict[str, float]:
    """The default-spin await on each loop and the raw launch + synchronize, interleaved
    on that loop in turns of ``BLOCK`` calls (``n`` samples of each per loop); each
    loop's ratio is taken against the raw samples taken beside its own.

    Measured one after the other, a row pays for the state the rows before it left (a
    burst's garbage, the order of the loops: ``tools/probes/state_inflation.py`` and
    ``loop_ab.py``) and may catch another speed of the VM's vCPUs; interleaved, the
    ratios compare them in the same state and on the same stretches of the machine.
    """
    raw = _raw_launcher(stream)
    out: dict[str, float] = {}
    for kind in loops:
        before = cuasync.stats()
        calls: list[int] = []
        if raw is not None:
            launch, sync = raw

            async def both() -> tuple[list[int], list[int]]:
                with cuasync.use_policy(cuasync.SingleStream(stream)):
                    return await interleaved_awaits(
                        lambda: tiny[1, 32](),
                        lambda: (launch(), sync()),  # noqa: B023
                        n,
                    )

            awaits, calls = run_loop(kind, both)
        else:
            awaits = run_loop(kind, lambda: await_latency(tiny, n, stream))
        after = cuasync.stats()
        if calls:
            name = f"{kind}: raw cuda.bindings launch + cuStreamSynchronize, interleaved"
            out[f"{kind}-raw"] = report.latency(SUITE, name, calls).p50_us or 0.0
        note = (
            f"inline {after.completed_inline - before.completed_inline}, "
            f"reactor {after.completed_reactor - before.completed_reactor}, "
            f"callback {after.completed_host_callback - before.completed_host_callback}, "
            f"stepped aside {after.burst_awaits - before.burst_awaits}"
        )
        if calls:
            note += f"; interleaved with the raw loop above in turns of {BLOCK}"
        label = f"{kind}: cuasync await tiny kernel, spin {spin} us"
        out[f"{kind}-spin {spin} us"] = report.latency(SUITE, label, awaits, note).p50_us or 0.0
    return out


def _ratios(
    report: Report, base: dict[str, float], loops: list[str], spin: int, concurrent: int
) -> None:
    raw = base.get("raw")
    if not raw:
        return
    print("-- targets (ratios inside this run)")
    for kind in loops:
        p50 = base[f"{kind}-spin {spin} us"]
        beside = base.get(f"{kind}-raw") or raw  # (the raw loop interleaved with it)
        report.value(SUITE, f"{kind}: await p50 / raw p50 (target <= 1.0)", p50 / beside, "x")
        if "torch" in base:
            report.value(
                SUITE, f"{kind}: await p50 / torch p50 (target < 1.0)", p50 / base["torch"], "x"
            )
        woken = base.get(f"{kind}-woken")
        report.value(
            SUITE,
            f"{kind}: spin-0 p50 - raw p50 (target <= 15)",
            (woken or base[f"{kind}-spin 0 (reactor)"]) - raw,
            "us",
            "of the awaits the reactor woke" if woken else "of every spin-0 await",
        )
        lag = report.find(f"{kind}: 1 ms ticker lag p99, 64 x 10 ms kernels in flight")
        alone = report.find(f"{kind}: 1 ms ticker lag p99, a socket waking it as cuasync did")
        if lag and alone and lag.value is not None and alone.value is not None:
            report.value(
                SUITE,
                f"{kind}: ticker lag p99 in flight (target <= 500)",
                lag.value,
                "us",
                f"the same wake-ups from a socket alone: {alone.value:.0f} us",
            )
    seq = report.find(f"sequential raw loop, {concurrent} launch + sync")
    for kind in loops:
        conc = report.find(f"{kind}: {concurrent} concurrent cuasync awaits")
        exe = report.find(f"{kind}: {concurrent} concurrent run_in_executor")
        if seq and conc and exe and seq.value and exe.value and conc.value:
            # (the median of the rounds' ratios, each gather to the raw loop right after it)
            paired = base.get(f"{kind}-concurrent/raw") or conc.value / seq.value
            report.value(
                SUITE,
                f"{kind}: concurrent / sequential raw (target >= 1.5)",
                paired,
                "x",
                "median of the rounds' ratios, each gather to the raw round after it",
            )
            thawed = base.get(f"{kind}-thawed/raw")
            if thawed is not None:
                report.value(
                    SUITE,
                    f"{kind}: concurrent, heap not frozen / sequential raw (target >= 1.0)",
                    thawed,
                    "x",
                    "median of the rounds' ratios, each gather to the raw round after it",
                )
            futures = base.get(f"{kind}-futures/raw")
            if futures is not None:
                report.value(
                    SUITE,
                    f"{kind}: ops gathered as futures, heap not frozen / sequential raw "
                    "(target >= 1.0)",
                    futures,
                    "x",
                    "median of the rounds' ratios; asyncio.gather(*ops), no Task per op",
                )
            idle = base.get(f"{kind}-idle/raw")
            if idle is not None:
                report.value(
                    SUITE,
                    f"{kind}: tasks with no GPU work, heap not frozen / sequential raw",
                    idle,
                    "x",
                    "asyncio's own ceiling for the line above: its tasks, no cuasync",
                )
            report.value(
                SUITE,
                f"{kind}: concurrent / run_in_executor (target >= 5)",
                conc.value / exe.value,
                "x",
            )
