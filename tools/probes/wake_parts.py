"""Where an await of real-length work spends its time over ``.sync()`` (issue #32 item 3):
the reactor's backoff, or the loop's wake-up; and the early wake that answers it.

``backoff``: one process per reactor setting (its ``backoff_max_ns``, the longest nap between two
scans of the flag words while awaits are parked; cuasync's hub uses 100 us): for a kernel
spinning 0.3 ms and 5 ms, on asyncio and uvloop, the p50 of ``await`` minus the p50 of
``.sync()`` of the same op (in turns), the loop's cross-thread wake floor (another
thread's ``call_soon_threadsafe``, no GPU) and the process's CPU above idle while the
awaits wait. With a short enough nap the reactor sees the flag within microseconds:
what is left over ``.sync()`` is then the loop's wake, and the CPU the price of the scans.

A last process (``event``) measures the candidate that costs no scans: the op submitted on a stream,
a ``CU_EVENT_BLOCKING_SYNC`` event recorded after it, and one waiter thread blocked in
``cuEventSynchronize`` (the GIL released) that wakes the loop with
``call_soon_threadsafe``: its ``await - .sync()`` and CPU are that design's floor.

The default run is the A/B of the early wake (``cuasync/_core/wake.py``; docs/completion.md)
in one process: today's park (``POLICY.on = False``: the reactor wakes the loop), the
early wake (the loop's own timerfd shortly before the learned duration, then a short
spin) with the reactor scanning meanwhile, and the same with the reactor quiet until the
wake's window ends (``POLICY.quiet``, the default), alternated in rounds on the same
loop, for 0.3 ms and 5 ms of work on asyncio and uvloop, each printed with the loop's
cross-thread wake floor, the CPU above idle and the reactor thread's share; with torch
on a GPU, the same for ``await cuasync.wait(torch_stream)`` after ``torch.cuda._sleep``
work beside ``stream.synchronize()``.

    python3 tools/probes/wake_parts.py              # the A/B/C (today's park, early wake, quiet)
    python3 tools/probes/wake_parts.py timeline     # the early wake's path and times, per await
    python3 tools/probes/wake_parts.py cold         # Python after a long sleep, no GPU
    python3 tools/probes/wake_parts.py tune         # the early wake's lead and lateness settings
    python3 tools/probes/wake_parts.py cpu          # where an await's CPU goes, by phase and thread
    python3 tools/probes/wake_parts.py profile      # wait(torch_stream)'s own time; a bare wake
    python3 tools/probes/wake_parts.py backoff      # 100 us, 20 us, 5 us, 1 us: a process each
    python3 tools/probes/wake_parts.py 20000        # one backoff setting, this process
    python3 tools/probes/wake_parts.py event        # the blocking-event waiter only
    python3 tools/probes/wake_parts.py summarize F  # medians of cpu runs saved in F by side

Two trees on one machine: ``tools/probes/tree_ab.sh BEFORE_DIR 3 -- python3
tools/probes/wake_parts.py cpu > ab.txt``, then ``summarize ab.txt``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

SETTINGS = (100_000, 20_000, 5_000, 1_000)


def measure(backoff_ns: int, n: int = 60) -> None:
    import numpy as np

    from cuasync._native import NATIVE

    real = NATIVE.Reactor

    def reactor(*args: object, **kwargs: object) -> object:  # (the hub's, made at first use)
        kwargs["backoff_max_ns"] = backoff_ns
        return real(*args, **kwargs)

    NATIVE.Reactor = reactor
    from cuasync.bench import completion
    from cuasync.bench._util import run_loop
    from cuasync.bench.requests import _awaits_and_syncs, _wake_floor

    idle = completion._idle_cpu(0.2)
    for label, work_ns in (("0.3 ms", 300_000), ("5 ms", 5_000_000)):
        for kind in ("asyncio", "uvloop"):
            waited = run_loop(kind, lambda: _awaits_and_syncs(work_ns, n))  # noqa: B023
            samples, cpu = waited.samples, waited.cpu
            floor = run_loop(kind, lambda: _wake_floor(n, work_ns / 1e9))  # noqa: B023
            over = (np.median(samples["await"]) - np.median(samples[".sync()"])) / 1e3
            print(
                f"backoff {backoff_ns / 1e3:5.0f} us  {label:>6} {kind:<8} await - .sync() "
                f"{over:7.1f} us   wake floor {np.median(floor) / 1e3:6.1f} us   "
                f"CPU above idle {cpu - idle:5.1f} % of a core",
                flush=True,
            )


def blocking_event(n: int = 60) -> None:
    """``await - .sync()`` and CPU of the blocking-sync event waiter (see the docstring)."""
    import asyncio
    import queue
    import threading
    import time

    import numpy as np
    from cuda.bindings import driver

    import cuasync
    from cuasync.bench import completion
    from cuasync.bench._util import run_loop

    def check(result: tuple) -> object:  # (err, value...) of a cuda.bindings call
        if result[0] != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"driver error {result[0]}")
        return result[1] if len(result) == 2 else None

    stream = cuasync.Device(0).new_stream()
    stream.synchronize()
    ctx = check(driver.cuDevicePrimaryCtxRetain(check(driver.cuDeviceGet(0))))
    flags = (
        driver.CUevent_flags.CU_EVENT_BLOCKING_SYNC | driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
    )
    jobs: queue.SimpleQueue = queue.SimpleQueue()

    def waiter() -> None:
        check(driver.cuCtxSetCurrent(ctx))
        while (job := jobs.get()) is not None:
            event, loop, fut = job
            check(driver.cuEventSynchronize(event))
            loop.call_soon_threadsafe(fut.set_result, None)

    threading.Thread(target=waiter, daemon=True).start()
    events = [check(driver.cuEventCreate(flags)) for _ in range(2)]

    async def measure_one(work_ns: int) -> tuple[list[int], list[int], float]:
        loop = asyncio.get_running_loop()
        kernel = completion.spin_ns
        awaits, syncs, cpu, wall = [], [], 0.0, 0.0
        for i in range(n + 3):
            c0, w0, t0 = time.process_time(), time.perf_counter(), time.perf_counter_ns()
            kernel[1, 1](work_ns).submit_on(stream)
            event = events[i % 2]
            check(driver.cuEventRecord(event, stream.handle))
            fut = loop.create_future()
            jobs.put((event, loop, fut))
            await fut
            t1 = time.perf_counter_ns()
            if i >= 3:
                awaits.append(t1 - t0)
                cpu += time.process_time() - c0
                wall += time.perf_counter() - w0
            t0 = time.perf_counter_ns()
            kernel[1, 1](work_ns).submit_on(stream)
            stream.synchronize(allow_in_loop=True)
            if i >= 3:
                syncs.append(time.perf_counter_ns() - t0)
        return awaits, syncs, cpu / wall * 100

    idle = completion._idle_cpu(0.2)
    for label, work_ns in (("0.3 ms", 300_000), ("5 ms", 5_000_000)):
        for kind in ("asyncio", "uvloop"):
            awaits, syncs, cpu = run_loop(kind, lambda: measure_one(work_ns))  # noqa: B023
            over = (np.median(awaits) - np.median(syncs)) / 1e3
            print(
                f"blocking event  {label:>6} {kind:<8} await - sync {over:7.1f} us   "
                f"CPU above idle {cpu - idle:5.1f} % of a core",
                flush=True,
            )
    jobs.put(None)


POLICIES = ("today", "early wake", "quiet")
ROUNDS = 5


def _cases(n_short: int, n_long: int, rounds: Any) -> Any:
    """``(label, work_ns, n, kind, rounds(work_ns, n)'s result on that loop)`` for 0.3 ms
    (``n_short`` awaits) and 5 ms (``n_long``) of work, on asyncio and uvloop (where
    installed)."""
    from cuasync.bench._util import run_loop

    for label, work_ns, n in (("0.3 ms", 300_000, n_short), ("5 ms", 5_000_000, n_long)):
        for kind in ("asyncio", "uvloop"):
            try:
                out = run_loop(kind, lambda: rounds(work_ns, n))  # noqa: B023
            except ImportError:  # no uvloop
                continue
            yield label, work_ns, n, kind, out


def use(policy: str) -> None:
    """``today``: the reactor wakes the loop; ``early wake``: the loop's timer too, the
    reactor scanning meanwhile; ``quiet``: the early wake, the reactor leaving the
    slot alone until the wake's window ends (cuasync's default)."""
    from cuasync._core import wake

    wake.POLICY.on = policy != "today"
    wake.POLICY.quiet = policy == "quiet"


def reactor_cpu() -> float:
    """CPU seconds of the reactor thread so far (0 before it exists)."""
    from cuasync.bench import completion

    tid = completion._reactor_thread()
    return 0.0 if tid is None else completion._thread_usage(tid)[0]


def ab(n_short: int = 300, n_long: int = 60) -> None:
    """Today's park and the early wake, alternated in ``ROUNDS`` rounds on one loop."""
    import numpy as np

    from cuasync.bench import completion
    from cuasync.bench._util import run_loop
    from cuasync.bench.requests import _awaits_and_syncs, _wake_floor

    completion.spin_ns.compile()
    idle = completion._idle_cpu(0.2)

    import time

    async def rounds(work_ns: int, n: int) -> dict[str, tuple[list[int], list[int], float, float]]:
        out: dict[str, tuple[list[int], list[int], float, float]] = {}
        for _ in range(ROUNDS):
            for policy in POLICIES:
                use(policy)
                r0, w0 = reactor_cpu(), time.perf_counter()
                waited = await _awaits_and_syncs(work_ns, n // ROUNDS)
                samples, cpu = waited.samples, waited.cpu
                # (the reactor's share of the whole block, .sync() turns included: it is
                # parked through those)
                rcpu = (reactor_cpu() - r0) / (time.perf_counter() - w0) * 100
                awaits, syncs, cpus, rcpus = out.get(policy, ([], [], 0.0, 0.0))
                out[policy] = (
                    awaits + samples["await"], syncs + samples[".sync()"], cpus + cpu, rcpus + rcpu
                )  # fmt: skip
        use("quiet")
        return out

    print(f"idle CPU {idle:.1f} % of a core; {ROUNDS} alternated rounds", flush=True)
    for label, work_ns, n, kind, out in _cases(n_short, n_long, rounds):
        floor = np.median(run_loop(kind, lambda: _wake_floor(n, work_ns / 1e9))) / 1e3  # noqa: B023
        for policy, (awaits, syncs, cpu, rcpu) in out.items():
            over = (np.median(awaits) - np.median(syncs)) / 1e3
            print(
                f"{policy:<10} {label:>6} {kind:<8} await - .sync() {over:7.1f} us   "
                f"wake floor {floor:6.1f} us   over floor {over - floor:7.1f} us   "
                f"CPU above idle {cpu / ROUNDS - idle:5.1f} % of a core "
                f"(reactor thread {rcpu / ROUNDS:4.1f} %)",
                flush=True,
            )
    torch_ab(n_short, n_long, idle)


def torch_ab(n_short: int, n_long: int, idle: float) -> None:
    """``await cuasync.wait(torch_stream)`` minus ``stream.synchronize()`` after torch work,
    both policies alternated (skipped without torch on a GPU)."""
    try:
        import torch
    except ImportError:
        return
    if not torch.cuda.is_available():
        return
    import time

    import numpy as np

    import cuasync
    from cuasync.bench._util import run_loop
    from cuasync.bench.requests import torch_cycles_per_ms

    stream = torch.cuda.current_stream()
    per_ms = torch_cycles_per_ms(torch)

    async def rounds(cycles: int, n: int) -> dict[str, tuple[list[int], list[int], float]]:
        clock = time.perf_counter_ns
        waits: dict[str, list[int]] = {p: [] for p in POLICIES}
        syncs: dict[str, list[int]] = {p: [] for p in POLICIES}
        cpu = dict.fromkeys(POLICIES, 0.0)
        wall = dict.fromkeys(POLICIES, 0.0)
        for _ in range(ROUNDS):
            for policy in POLICIES:
                use(policy)
                for i in range(n // ROUNDS + 3):
                    torch.cuda._sleep(cycles)
                    t0, c0, w0 = clock(), time.process_time(), time.perf_counter()
                    await cuasync.wait(stream)
                    if i >= 3:
                        waits[policy].append(clock() - t0)
                        cpu[policy] += time.process_time() - c0
                        wall[policy] += time.perf_counter() - w0
                    torch.cuda._sleep(cycles)
                    t0 = clock()
                    stream.synchronize()
                    if i >= 3:
                        syncs[policy].append(clock() - t0)
        use("quiet")
        return {p: (waits[p], syncs[p], cpu[p] / wall[p] * 100) for p in POLICIES}

    for label, ms, n in (("0.3 ms", 0.3, n_short), ("5 ms", 5.0, n_long)):
        for kind in ("asyncio", "uvloop"):
            try:
                out = run_loop(kind, lambda: rounds(int(per_ms * ms), n))  # noqa: B023
            except ImportError:
                continue
            for policy, (waits, syncs, cpu) in out.items():
                over = (np.median(waits) - np.median(syncs)) / 1e3
                print(
                    f"{policy:<10} {label:>6} {kind:<8} wait(torch_stream) - synchronize() "
                    f"{over:7.1f} us   CPU above idle {cpu - idle:5.1f} % of a core",
                    flush=True,
                )


#: The timeline's cases: the work's length and the policy's fields changed for it. After 5 ms
#: the steps from the landing seen to the task resumed ran twice as long as after 0.3 ms
#: (H100, session 54; the emulator too): a thread back from a long sleep, its caches cold;
#: whether the pre-wake (``prewake_ns``) or a longer spin before the landing (``lead_ns``)
#: changes that, these say.
TIMELINE_CASES: tuple[tuple[int, dict[str, int]], ...] = (
    (300_000, {}),
    (5_000_000, {}),
    (5_000_000, {"prewake_ns": 0}),
    (5_000_000, {"prewake_ns": 60_000}),
    (5_000_000, {"lead_ns": 100_000}),
    (5_000_000, {}),
)


def timeline(n: int = 100) -> None:
    """Per await of the early wake, the median times from the await's start (parked,
    timer due, the wake looked, flag seen by the spin, task resumed, await ended) by the
    path it took, beside ``.sync()`` of the same op; asyncio. With torch on a GPU, the
    same for ``await cuasync.wait(torch_stream)`` after ``torch.cuda._sleep`` work,
    beside ``stream.synchronize()``."""
    import asyncio
    import time

    import numpy as np

    import cuasync
    from cuasync._core import loops, wake
    from cuasync._core.completion import get_hub
    from cuasync.bench import completion
    from cuasync.bench.requests import torch_cycles_per_ms

    kernel = completion.spin_ns
    kernel.compile()
    seen: dict[str, int] = {}
    names = ("parked", "due", "looked", "seen", "woken", "resumed")
    hub = get_hub()
    park = hub.park
    entries: list[wake.Pending] = []

    def woken(waiter: Any) -> Any:  # (the waiter resolving the loop's future, stamped)
        def stamped(comp: Any) -> None:
            seen.setdefault("woken", time.monotonic_ns())
            waiter(comp)

        return stamped

    park_loop = loops.AsyncioAdapter.park

    def park_stamped(adapter: Any) -> Any:
        waiter, suspend = park_loop(adapter)
        return woken(waiter), suspend

    loops.AsyncioAdapter.park = park_stamped  # type: ignore[method-assign]

    def parked(*args: Any) -> Any:  # (the hook: the hub's suspension calls it by name)
        entry = park(*args)
        if entry is not None:
            entries.append(entry)
        return entry

    hub.park = parked  # type: ignore[method-assign]

    def entry_times() -> None:  # (the awaited entry's times; wake.resumed stamps resumed)
        if not entries:
            return
        entry = entries.pop()
        entries.clear()
        if not entry.due:
            path = "no wake set"
        elif entry.seen:
            path = "seen by the spin"
        elif entry.lo:
            path = "window ended first"
        else:
            path = "landed before the wake"
        seen.update(path=path, parked=entry.parked, due=entry.due, seen=entry.seen)
        seen.update(looked=entry.looked, resumed=entry.resumed)

    async def run(label: str, start: Any, awaited: Any, synced: Any) -> None:
        rows: dict[str, list[tuple[int, ...]]] = {}
        syncs = []
        for i in range(n + 5):
            seen.clear()
            start()
            t0 = time.monotonic_ns()
            await awaited()
            t1 = time.monotonic_ns()
            entry_times()
            if i >= 5 and "path" in seen:
                since = [seen[k] - t0 if seen[k] else 0 for k in names]
                rows.setdefault(str(seen["path"]), []).append((*since, t1 - t0))
            start()
            t0 = time.monotonic_ns()
            synced()
            syncs.append(time.monotonic_ns() - t0)
        print(f"{label}: sync p50 {np.median(syncs) / 1e3:.0f} us", flush=True)
        for path, times in rows.items():
            parked, due, looked, flag, woke, back, end = np.median(np.array(times), axis=0) / 1e3
            print(
                f"  {path:<24} {len(times) / n * 100:3.0f} %: parked {parked:.0f}, due "
                f"{due:.0f}, looked {looked:.0f}, seen {flag:.0f}, woken {woke:.0f}, "
                f"resumed {back:.0f}, ended {end:.0f} us",
                flush=True,
            )

    def nothing() -> None:
        pass

    policy = {name: getattr(wake.POLICY, name) for name in ("prewake_ns", "lead_ns")}
    for work_ns, variant in TIMELINE_CASES:
        for name, value in {**policy, **variant}.items():
            setattr(wake.POLICY, name, value)
        asyncio.run(run(
            f"{work_ns / 1e6:g} ms{''.join(f', {k} {v}' for k, v in variant.items())}, "
            "await kernel / .sync()", nothing,
            lambda w=work_ns: kernel[1, 1](w),
            lambda w=work_ns: kernel[1, 1](w).sync(allow_in_loop=True),
        ))  # fmt: skip
    for name, value in policy.items():
        setattr(wake.POLICY, name, value)
    try:
        import torch
    except ImportError:
        return
    if cuasync.backend_name() != "cuda" or not torch.cuda.is_available():
        return
    stream = torch.cuda.current_stream()
    per_ms = torch_cycles_per_ms(torch)
    for ms in (0.3, 5.0, 5.0):
        asyncio.run(run(
            f"{ms:g} ms of torch work, await cuasync.wait(stream) / stream.synchronize()",
            lambda c=int(per_ms * ms): torch.cuda._sleep(c),
            lambda: cuasync.wait(stream),
            stream.synchronize,
        ))  # fmt: skip


def cold(rounds: int = 3) -> None:
    """Whether a thread back from a long sleep runs Python slower, with no GPU: an asyncio
    loop sleeps ``S`` (0.3 ms, 5 ms) on a timerfd, spins ``spin`` (30 us, 300 us: the
    early wake's window), then resolves a future a task awaits; the p50 from the future
    resolved to the task resumed, and of a fixed Python workload run right after, beside
    the same run again (warm). With the host's idle states and frequency governor
    (cpu0's ``cpuidle``: a deep state flushes a core's private caches)."""
    import asyncio
    import json
    import os
    import pathlib
    import time

    import numpy as np

    from cuasync._core import wake
    from cuasync._native import NATIVE

    cpu = pathlib.Path("/sys/devices/system/cpu/cpu0")
    for state in sorted(cpu.glob("cpuidle/state*")):
        fields = [
            (state / f).read_text().strip() for f in ("name", "latency", "residency", "disable")
        ]
        print("cpuidle {}: latency {} us, residency {} us, disabled {}".format(*fields))
    governor = cpu / "cpufreq/scaling_governor"
    print("governor:", governor.read_text().strip() if governor.exists() else "(none exposed)")
    data = {"a": [1, 2, 3], "b": {"c": "d"}, "e": 1.5}

    def workload() -> None:
        json.loads(json.dumps(data))
        sorted(str(i) for i in range(20))

    async def step(fut: asyncio.Future[None]) -> None:
        await fut

    def rehearse() -> None:
        """What a task's resumption runs, with no effect: a loop future made and
        resolved, a coroutine stepped through it (the "rehearsal" cases)."""
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        coro = step(fut)
        try:
            coro.send(None)
        except StopIteration:
            pass

    fd = wake.timerfd()
    mono = time.monotonic_ns

    async def trial(sleep_ns: int, spin_ns: int, warm: bool) -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        stamps: list[int] = []

        def fire() -> None:
            os.read(fd, 8)
            if warm:
                rehearse()
            until = mono() + spin_ns
            while mono() < until:
                pass
            stamps.append(mono())
            fut.set_result(None)

        loop.add_reader(fd, fire)
        NATIVE.set_timer(fd, mono() + sleep_ns)
        await fut
        back = mono()
        loop.remove_reader(fd)
        workload()
        first = mono()
        workload()
        return back - stamps[0], first - back, mono() - first

    for _ in range(rounds):
        for sleep_ns in (300_000, 5_000_000):
            for spin_ns, warm in ((30_000, False), (30_000, True), (300_000, False)):

                async def run(s: int = sleep_ns, p: int = spin_ns, w: bool = warm) -> Any:
                    return [await trial(s, p, w) for _ in range(40 if s > 1_000_000 else 300)]

                resume, first, second = np.median(np.array(asyncio.run(run())), axis=0) / 1e3
                print(
                    f"sleep {sleep_ns / 1e6:g} ms, {'rehearsal, ' if warm else ''}spin "
                    f"{spin_ns // 1000} us: resolved -> resumed {resume:.1f} us; workload "
                    f"{first:.1f} us, again {second:.1f} us",
                    flush=True,
                )
    os.close(fd)


#: The early wake's settings ``tune`` alternates (:class:`cuasync._core.wake.Policy`'s
#: fields): the lead before the expected landing, and how the loop's timer lateness is
#: followed (1, 4: its high side, the default; 3, 3: its mean); ``spin_budget_us`` is the hub's
#: inline spin (20 us, ``CUASYNC_SPIN_BUDGET_US``; 0: what an await skipping it pays).
VARIANTS: dict[str, dict[str, int]] = {  # (each over the policy's defaults)
    "default": {},
    "no pre-wake": {"prewake_ns": 0},
    "lead 15": {"lead_ns": 15_000},
    "mean late": {"late_up_shift": 3, "late_down_shift": 3},
    "no inline spin": {"spin_budget_us": 0},
}


def tune(n_short: int = 1000, n_long: int = 100) -> None:
    """The early wake's settings (:data:`VARIANTS`) alternated in ``ROUNDS`` rounds on one
    loop: per setting, ``await - .sync()`` p50 and p90, the CPU above idle (the reactor
    thread's share), the share of awaits whose wake saw the landing / ended its window
    first, the timer's lateness (when the wake ran, after its due time) and the spin (from
    then to the landing). The shares, lateness and spin count the warm-up awaits too
    (3 a round and setting); the latencies and the CPU do not."""
    import time

    import numpy as np

    import cuasync
    from cuasync._core import wake
    from cuasync._core.completion import get_hub
    from cuasync._core.loops import running_adapter
    from cuasync.bench import completion
    from cuasync.bench.requests import _awaits_and_syncs

    completion.spin_ns.compile()
    idle = completion._idle_cpu(0.2)
    looks: list[tuple[int, int]] = []
    entries: list[wake.Pending] = []
    hub = get_hub()
    park = hub.park

    def parked(*args: Any) -> Any:  # (the hook: the hub's suspension calls it by name)
        entry = park(*args)
        if entry is not None:
            entries.append(entry)
        return entry

    def learnt() -> None:  # (the wake's times of the awaits that resumed since)
        for entry in entries:
            if entry.resumed and entry.due and entry.looked:
                spun = entry.seen - entry.looked if entry.seen else -1
                looks.append((entry.looked - entry.due, spun))
        entries.clear()

    hub.park = parked  # type: ignore[method-assign]
    fields = {name for settings in VARIANTS.values() for name in settings} - {"spin_budget_us"}
    defaults = {name: getattr(wake.POLICY, name) for name in fields}
    spin_us = hub.spin_budget_us

    async def rounds(work_ns: int, n: int) -> dict[str, dict[str, Any]]:
        # the work's estimate re-learnt outside the first setting's round (0.3 ms came
        # before 5 ms: each missed window halves the gap, about 8 awaits for 16 times)
        for _ in range(20):
            await completion.spin_ns[1, 1](work_ns)
        try:
            return await alternated(work_ns, n)
        finally:
            for field, value in defaults.items():
                setattr(wake.POLICY, field, value)
            hub.spin_budget_us = spin_us

    async def alternated(work_ns: int, n: int) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {
            v: {"a": [], "s": [], "cpu": 0.0, "reactor": 0.0, "looks": [], "seen": 0, "missed": 0}
            for v in VARIANTS
        }
        late: dict[str, int] = {}
        for _ in range(ROUNDS):
            for name, settings in VARIANTS.items():
                for field, value in {**defaults, **settings}.items():
                    if field != "spin_budget_us":
                        setattr(wake.POLICY, field, value)
                hub.spin_budget_us = settings.get("spin_budget_us", spin_us)
                timer = running_adapter().timer
                if timer is not None:  # (each setting keeps the lateness it measured)
                    timer.late_ns = late.get(name, wake.POLICY.late_ns)
                before = cuasync.stats()
                looks.clear()
                entries.clear()
                r0, w0 = reactor_cpu(), time.perf_counter()
                waited = await _awaits_and_syncs(work_ns, n // ROUNDS)
                learnt()
                samples, cpu = waited.samples, waited.cpu
                # (the reactor's share of the whole block, as in ab)
                rcpu = (reactor_cpu() - r0) / (time.perf_counter() - w0) * 100
                after = cuasync.stats()
                timer = running_adapter().timer
                if timer is not None:
                    late[name] = timer.late_ns
                o = out[name]
                o["a"] += samples["await"]
                o["s"] += samples[".sync()"]
                o["cpu"] += cpu / ROUNDS
                o["reactor"] += rcpu / ROUNDS
                o["looks"] += looks
                o["seen"] += after.early_wakes - before.early_wakes
                o["missed"] += after.early_misses - before.early_misses
        return out

    print(f"idle CPU {idle:.1f} % of a core; {ROUNDS} alternated rounds", flush=True)
    try:
        cases = list(_cases(n_short, n_long, rounds))
    finally:
        del hub.park
    for label, _, _, kind, out in cases:
        for name, o in out.items():
            a, s = np.array(o["a"]), np.median(o["s"])
            made = len(a) + 3 * ROUNDS  # (the warm-up awaits: the counters include them)
            p50, p90 = (np.median(a) - s) / 1e3, (np.percentile(a, 90) - s) / 1e3
            lk = np.array(o["looks"] or [(0, 0)])
            spun = lk[lk[:, 1] >= 0, 1]
            print(
                f"{name:<18} {label:>6} {kind:<8} await - .sync() p50 {p50:6.1f} p90 {p90:6.1f}"
                f"  CPU {o['cpu'] - idle:5.1f} % (reactor {o['reactor']:4.1f})"
                f"  seen {o['seen'] / made * 100:3.0f} %"
                f" missed {o['missed'] / made * 100:3.0f} %  late p50/p90 "
                f"{np.median(lk[:, 0]) / 1e3:5.1f}/{np.percentile(lk[:, 0], 90) / 1e3:5.1f} us"
                f"  spin p50 {np.median(spun) / 1e3 if spun.size else 0:5.1f} us",
                flush=True,
            )


def cpu(n: int = 600) -> None:
    """Where the CPU of an await of 0.3 ms of work goes: the loop thread's CPU per await
    split by step (``time.thread_time`` at each: the launch and inline spin up to
    parking (the completion made); the wake's plan, the reactor's arm, the timer set; the
    loop's sleep in ``epoll`` and its own iteration up to the timer's wake; the wake up to
    the finish (the slot disarmed, the spin); the finish (the output, the slot's release,
    the waiter); the rest of the wake; the task's resumption; the learning; the rest of
    the await), and every thread of the process by name; with the inline spin (the
    default: skipped once the estimate is steady and long) and without it, on asyncio
    and uvloop."""
    import time

    import numpy as np

    from cuasync._core import completion as comp_mod
    from cuasync._core import wake
    from cuasync._core.completion import get_hub
    from cuasync.bench import completion
    from cuasync.bench._util import run_loop

    kernel = completion.spin_ns
    kernel.compile()
    idle = completion._idle_cpu(0.2)
    clock = time.thread_time_ns
    marks: dict[str, int] = {}
    hooked: list[tuple[Any, str, Any]] = []

    def hook(owner: Any, name: str, before: str, after: str) -> None:
        real = getattr(owner, name)
        hooked.append((owner, name, real))

        def timed(*args: Any, **kwargs: Any) -> Any:
            marks.setdefault(before, clock())
            try:
                return real(*args, **kwargs)
            finally:
                marks.setdefault(after, clock())

        setattr(owner, name, timed)

    # (the hub's native suspension calls hub.park by name: the plan, the arm, the timer)
    hook(comp_mod.Hub, "park", "set-up", "set")
    hook(wake.Timer, "fire", "fire", "fired")
    hook(comp_mod.Completion, "finish", "finish", "finished")
    steps = (
        ("launch+spin", "t0", "set-up"), ("plan+arm+timer", "set-up", "set"),
        ("sleep..wake", "set", "fire"),
        ("wake..finish", "fire", "finish"), ("finish", "finish", "finished"),
        ("..wake end", "finished", "fired"), ("..resumed+learnt+end", "fired", "t1"),
    )  # fmt: skip
    hub = get_hub()
    spin_us = hub.spin_budget_us

    async def run(work_ns: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        try:
            for _ in range(2):  # (two alternated rounds)
                for label, spin in (("inline spin", spin_us), ("no inline spin", 0)):
                    hub.spin_budget_us = spin
                    for _ in range(10):
                        await kernel[1, 1](work_ns)
                    rows = []
                    threads0 = completion.threads_cpu()
                    spun0 = hub.stats.early_spin_ns
                    c0, w0 = time.process_time(), time.perf_counter()
                    for _ in range(n // 2):
                        marks.clear()
                        marks["t0"] = clock()
                        await kernel[1, 1](work_ns)
                        marks["t1"] = clock()
                        if all(a in marks and b in marks for _, a, b in steps):
                            rows.append([marks[b] - marks[a] for _, a, b in steps])
                    wall = time.perf_counter() - w0
                    proc = time.process_time() - c0
                    threads1 = completion.threads_cpu()
                    o = out.setdefault(
                        label, {"rows": [], "proc": 0.0, "wall": 0.0, "t": {}, "spun": 0}
                    )
                    o["rows"] += rows
                    o["proc"] += proc
                    o["wall"] += wall
                    o["spun"] += hub.stats.early_spin_ns - spun0
                    for name, s in threads1.items():
                        o["t"][name] = o["t"].get(name, 0.0) + s - threads0.get(name, 0.0)
        finally:
            hub.spin_budget_us = spin_us
        return out

    print(f"idle CPU {idle:.1f} % of a core", flush=True)
    try:
        for kind in ("asyncio", "uvloop"):
            try:
                out = run_loop(kind, lambda: run(300_000))
            except ImportError:
                continue
            for label, o in out.items():
                rows = np.array(o["rows"] or [(0,) * len(steps)]) / 1e3
                awaits = n // 2 * 2
                print(
                    f"{kind:<8} {label:<15} process CPU {o['proc'] / o['wall'] * 100 - idle:5.1f} %"
                    f" = {o['proc'] / awaits * 1e6:6.1f} us/await ({len(o['rows'])} of {awaits}"
                    f" woken by the timer; the wake's spin {o['spun'] / awaits / 1e3:.1f} us an"
                    " await); loop thread p50 us: "
                    + ", ".join(
                        f"{p} {v:.1f}"
                        for (p, _, _), v in zip(steps, np.median(rows, axis=0), strict=True)
                    ),
                    flush=True,
                )
                busy = sorted(o["t"].items(), key=lambda kv: -kv[1])
                print(
                    "    threads, us/await: "
                    + ", ".join(f"{name} {s / awaits * 1e6:.1f}" for name, s in busy if s > 0),
                    flush=True,
                )
    finally:
        for owner, name, real in hooked:
            setattr(owner, name, real)


def _sleep_or_profiler(where: tuple[str, int, str]) -> bool:
    """Whether a cProfile entry is the loop's sleep in ``epoll`` or the profiler itself."""
    return where[0] == "~" and ("epoll" in where[2] or "_lsprof" in where[2])


def profile(n: int = 40) -> None:
    """Where the loop thread's time goes in ``await cuasync.wait(torch_stream)`` after 0.3
    ms and 5 ms of torch work (``cProfile``, the functions with the most own time per
    await, the loop's sleep in ``epoll`` left out), and how long a bare timerfd wake (no
    GPU, no cuasync) takes from its callback to the task's resumption after sleeping that
    long: what a long sleep costs the code that runs after it on this host."""
    import asyncio
    import cProfile
    import pstats
    import time

    import numpy as np

    import cuasync
    from cuasync.bench.requests import timer_wakes, torch_cycles_per_ms

    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or cuasync.backend_name() != "cuda" or not torch.cuda.is_available():
        print("profile: needs torch with a GPU (CUASYNC_BACKEND=cuda)")
        return
    stream = torch.cuda.current_stream()
    per_ms = torch_cycles_per_ms(torch)

    async def waits(cycles: int) -> None:
        for _ in range(5):
            torch.cuda._sleep(cycles)
            await cuasync.wait(stream)
        builds, awaits = [], []
        prof = cProfile.Profile()
        for _ in range(n):
            torch.cuda._sleep(cycles)
            t0 = time.perf_counter_ns()
            op = cuasync.wait(stream)
            t1 = time.perf_counter_ns()
            prof.enable()
            await op
            prof.disable()
            builds.append(t1 - t0)
            awaits.append(time.perf_counter_ns() - t1)
            stream.synchronize()
        print(f"  build p50 {np.median(builds) / 1e3:.1f} us, await p50 "
              f"{np.median(awaits) / 1e3:.1f} us", flush=True)  # fmt: skip
        stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        rows = sorted(((v[2], v[1], f) for f, v in stats.items() if not _sleep_or_profiler(f)),
                      reverse=True)  # fmt: skip
        for own, calls, f in rows[:14]:
            where = f"{f[0].rsplit('/', 1)[-1]}:{f[1]} {f[2]}"
            print(f"    {own / n * 1e6:8.1f} us  {calls / n:5.2f} calls  {where}", flush=True)

    async def bare(period_ns: int) -> None:
        async def gaps(wake: Any) -> list[int]:
            out = []
            for _ in range(n):
                fired = await wake()
                out.append(time.perf_counter_ns() - fired)
            return out

        took = await timer_wakes(period_ns, gaps)
        if took is None:
            print("  bare timerfd wake: no timerfd here", flush=True)
            return
        print(f"  bare timerfd wake after {period_ns / 1e6:g} ms: callback to resumed p50 "
              f"{np.median(took) / 1e3:.1f} us", flush=True)  # fmt: skip

    for ms in (0.3, 5.0):
        print(f"{ms:g} ms of torch work, await cuasync.wait(stream):", flush=True)
        asyncio.run(waits(int(per_ms * ms)))
        asyncio.run(bare(int(ms * 1e6)))


def summarize(path: str) -> None:
    """Medians of ``cpu`` runs saved in one file under ``## SIDE ...`` headers (as
    ``tools/probes/tree_ab.sh`` writes them: before, after): per side, each loop and spin
    case's process CPU and µs an await, and each step's loop-thread p50 over all cases
    and rounds, side by side."""
    import re
    import statistics

    line_re = re.compile(
        r"(asyncio|uvloop)\s+(inline spin|no inline spin)\s+process CPU\s+([\d.]+) % =\s+"
        r"([\d.]+) us/await.*?p50 us: (.*)"
    )
    cases: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    steps: dict[str, dict[str, list[float]]] = {}
    side = None
    with open(path) as f:
        lines = f.readlines()
    for line in lines:
        head = re.match(r"## (\w+)", line)
        if head:
            side = head.group(1)
            continue
        m = line_re.match(line)
        if m is None or side is None:
            continue
        cases.setdefault((side, m.group(1), m.group(2)), []).append(
            (float(m.group(3)), float(m.group(4)))
        )
        for part in m.group(5).split(", "):
            name, value = part.rsplit(" ", 1)
            steps.setdefault(name, {}).setdefault(side, []).append(float(value))
    sides = list(dict.fromkeys(s for s, _, _ in cases))  # (in the order they ran)
    for key in sorted(cases, key=lambda k: (sides.index(k[0]), k[1], k[2])):
        runs = cases[key]
        print(
            f"{key[0]:<8} {key[1]:<8} {key[2]:<15} process CPU median "
            f"{statistics.median(r[0] for r in runs):5.1f} % "
            f"({min(r[0] for r in runs):.1f}-{max(r[0] for r in runs):.1f}), "
            f"{statistics.median(r[1] for r in runs):6.1f} us/await, {len(runs)} runs"
        )
    print("step (loop thread p50, us an await; median over cases and rounds): " + " / ".join(sides))
    for name, by_side in steps.items():
        cells = [
            f"{statistics.median(by_side[s]):6.1f}" if s in by_side else "     -" for s in sides
        ]
        print(f"  {name:<14}" + "".join(cells))


if __name__ == "__main__":
    if sys.argv[1:] == ["event"]:
        blocking_event()
    elif sys.argv[1:] == ["timeline"]:
        timeline()
    elif sys.argv[1:] == ["tune"]:
        tune()
    elif sys.argv[1:] == ["cold"]:
        cold()
    elif sys.argv[1:] == ["cpu"]:
        cpu()
    elif sys.argv[1:] == ["profile"]:
        profile()
    elif sys.argv[1:2] == ["summarize"] and len(sys.argv) == 3:
        summarize(sys.argv[2])
    elif sys.argv[1:] == ["backoff"]:
        for setting in SETTINGS:
            subprocess.run([sys.executable, __file__, str(setting)], check=False)
        subprocess.run([sys.executable, __file__, "event"], check=False)
    elif len(sys.argv) > 1:
        measure(int(sys.argv[1]))
    else:
        ab()
