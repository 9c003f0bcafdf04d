"""The ceiling of the 8192-concurrent row: what ``asyncio.gather`` of 8192 tasks costs
with no GPU work at all, beside the same gather awaiting a tiny kernel each.

The completion suite's concurrent row is ``asyncio.gather`` of 8192 tasks each awaiting
``tiny[1, 32]()``; its target compares it with a sequential loop of raw launch +
``cuStreamSynchronize``. A task's own cost (creation, its steps, gather's callback) is
paid whatever the task awaits, so a gather of empty tasks bounds the row from above.
Rows (ops/s, best of 3, asyncio and uvloop): tasks that return at once; tasks that
``await asyncio.sleep(0)`` once (one more step each); tasks awaiting a tiny kernel.

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


if __name__ == "__main__":
    main()
