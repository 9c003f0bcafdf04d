"""The ceiling of the 8192-concurrent row: what ``asyncio.gather`` of 8192 tasks costs
with no GPU work at all, beside the same gather awaiting a tiny kernel each.

The completion suite's concurrent row is ``asyncio.gather`` of 8192 tasks each awaiting
``tiny[1, 32]()``; its target compares it with a sequential loop of raw launch +
``cuStreamSynchronize``. A task's own cost (creation, its steps, gather's callback) is
paid whatever the task awaits, so a gather of empty tasks bounds the row from above.
Rows (ops/s, best of 3, asyncio and uvloop): tasks that return at once; tasks that
``await asyncio.sleep(0)`` once (one more step each); tasks awaiting a tiny kernel.

Then, on uvloop, where the awaiting gather's cost beyond the empty one goes: the same
8192 awaits in a plain loop (no tasks), each way over the default stream pool and over
one stream (``SingleStream``), and the gather with the cyclic GC off. A gather whose
tasks cost more than its empty tasks plus a sequential await each pays for something
the tasks bring (the pool's streams, the collector, the spin's wait on the GPU).

Run: ``python3 tools/probes/gather_floor.py`` (on a GPU, after ``pip install -e .``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import cuasync
from cuasync.bench._util import run_loop
from cuasync.bench.completion import tiny

N = 8192


async def nothing() -> None:
    return None


async def one_step() -> None:
    await asyncio.sleep(0)


async def kernel() -> None:
    await tiny[1, 32]()


async def rate(task: Callable[[], Awaitable[None]]) -> float:
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        await asyncio.gather(*(task() for _ in range(N)))
        best = max(best, N / (time.perf_counter() - t0))
    return best


async def sequential() -> float:
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(N):
            await tiny[1, 32]()
        best = max(best, N / (time.perf_counter() - t0))
    return best


def breakdown() -> None:
    import gc

    single = cuasync.SingleStream(cuasync.Device(0).new_stream())
    print("-- uvloop, where the awaiting gather's time goes")
    for policy_name, policy in (("the default pool", None), ("one stream", single)):
        for label, run in (
            ("sequential awaits", sequential),
            ("gather of awaits", lambda: rate(kernel)),
        ):

            async def under() -> float:
                if policy is None:  # noqa: B023
                    return await run()  # noqa: B023
                with cuasync.use_policy(policy):  # noqa: B023
                    return await run()  # noqa: B023

            before = cuasync.stats()
            ops = run_loop("uvloop", under)
            inline = cuasync.stats().completed_inline - before.completed_inline
            print(
                f"  {label:<18} over {policy_name:<16} {ops:10,.0f} ops/s "
                f"({1e6 / ops:5.1f} us/op, inline {inline})"
            )
    gc.disable()
    try:
        for label, task in (("awaits, the default pool", kernel), ("empty tasks", nothing)):
            ops = run_loop("uvloop", lambda: rate(task))  # noqa: B023
            print(f"  gather of {label}, GC off {ops:10,.0f} ops/s ({1e6 / ops:5.1f} us/op)")
    finally:
        gc.enable()


def main() -> None:
    tiny[1, 32]().sync()
    print(f"backend={cuasync.backend_name()} tasks={N}")
    for kind in ("asyncio", "uvloop"):
        for name, task in (
            ("tasks that return at once", nothing),
            ("tasks that await sleep(0) once", one_step),
            ("tasks that await tiny[1, 32]()", kernel),
        ):
            ops = run_loop(kind, lambda: rate(task))  # noqa: B023
            print(f"  {kind}: gather of {N} {name:<34} {ops:12,.0f} ops/s")
    breakdown()


if __name__ == "__main__":
    main()
