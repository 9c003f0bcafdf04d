"""Whether an early wake's spin that keeps the GIL (``hub.spin_hold_ns``, on CUDA
``completion.SPIN_HOLD_NS``) shields an await from another Python thread's GIL: awaits of
a tiny kernel and of 0.3 ms of work, on asyncio, with a thread running pure Python beside
the loop and without one, the hold at 0 (the spin releases the GIL at once) and at its
default, alternated in rounds in one process (with the native core: under
``CUASYNC_NATIVE=off`` every await is generic, and no spin holds the GIL). Per case: the
await's p50 / p90 / p99, the early wake's longest spin, and the other thread's progress
(loop iterations a second), beside ``.sync()`` of the same work (which releases the GIL
in ``cuStreamSynchronize``).

    python3 tools/probes/gil_spin.py
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import cuasync
from cuasync._core.completion import SPIN_HOLD_NS, get_hub
from cuasync.bench import completion

ROUNDS, N = 3, 60


def main() -> None:
    kernel = completion.spin_ns
    kernel.compile()
    hub = get_hub()
    out: dict[tuple[str, str, str], list[int]] = {}
    spun: dict[tuple[str, str, str], int] = {}
    progress: dict[tuple[str, str, str], list[float]] = {}

    async def run(work_ns: int, n: int) -> tuple[list[int], list[int]]:
        for _ in range(20):
            await kernel[1, 1](work_ns)
        awaits, syncs = [], []
        clock = time.perf_counter_ns
        for _ in range(n):
            t0 = clock()
            await kernel[1, 1](work_ns)
            awaits.append(clock() - t0)
            t0 = clock()
            kernel[1, 1](work_ns).sync(allow_in_loop=True)
            syncs.append(clock() - t0)
        return awaits, syncs

    # (the emulator's flags are written by a Python thread: a held spin only starves it)
    holds = (0,) if hub.backend.python_writes_flags else (0, SPIN_HOLD_NS)
    default = hub.spin_hold_ns
    try:
        for _ in range(ROUNDS):
            for other in ("alone", "beside a Python thread"):
                for hold in holds:
                    for label, work_ns in (("tiny", 0), ("0.3 ms", 300_000)):
                        hub.spin_hold_ns = hold
                        stop = threading.Event()
                        count = [0]

                        def churn(stop: threading.Event = stop, count: list[int] = count) -> None:
                            while not stop.is_set():
                                count[0] += 1

                        thread = threading.Thread(target=churn) if other != "alone" else None
                        if thread is not None:
                            thread.start()
                        before = hub.stats.early_spin_max_ns
                        hub.stats.early_spin_max_ns = 0
                        w0 = time.perf_counter()
                        try:
                            awaits, syncs = asyncio.run(run(work_ns, N))
                        finally:
                            stop.set()
                            if thread is not None:
                                thread.join()
                        wall = time.perf_counter() - w0
                        how = f"hold {hold // 1000} us"
                        key = (label, other, how)
                        out.setdefault(key, []).extend(awaits)
                        out.setdefault((label, other, f"{how} .sync()"), []).extend(syncs)
                        spun[key] = max(spun.get(key, 0), hub.stats.early_spin_max_ns)
                        hub.stats.early_spin_max_ns = max(before, hub.stats.early_spin_max_ns)
                        progress.setdefault(key, []).append(count[0] / wall)
    finally:
        hub.spin_hold_ns = default
    for key, ns in out.items():
        ns.sort()
        q = [ns[int(len(ns) * f)] / 1e3 for f in (0.5, 0.9, 0.99)]
        label, other, how = key
        extra = ""
        if key in spun:
            extra = (
                f"  longest wake spin {spun[key] / 1e3:7.0f} us"
                f"  other thread {statistics.median(progress[key]) / 1e6:5.2f} M it/s"
            )
        print(
            f"{label:>6} {other:<22} {how:<20} p50 {q[0]:8.1f} p90 {q[1]:8.1f}"
            f" p99 {q[2]:8.1f} us{extra}",
            flush=True,
        )


if __name__ == "__main__":
    print(f"backend {cuasync.backend_name()}; {ROUNDS} rounds of {N}", flush=True)
    main()
