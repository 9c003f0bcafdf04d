"""``priority``: latency of short urgent ops while long batch kernels saturate the device.

Two default-priority streams keep ``depth`` long kernels each in flight (every one a
grid of 4096 blocks that spin, several waves on any GPU); meanwhile one request at a
time awaits a tiny kernel under :func:`cuasync.use_policy`, once with a pool of
default-priority streams and once with a pool at the device's greatest priority. The
rows are the requests' p50/p99 latency (submit to ``await`` returning) in each case.

On the emulator the numbers only show the suite runs: its streams run side by side
without contending for a device.

>>> python -m cuasync.bench priority
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import cuasync

from . import completion
from ._util import Report

SUITE = "priority"

#: completion's kernels: an empty one, and one spinning ``ns`` on %globaltimer (on the
#: emulator one launch stands for one block: it sleeps ``ns``).
tiny, spin = completion.tiny, completion.spin_ns

#: Blocks of 256 threads per batch kernel: several waves on any current GPU.
BATCH_GRID = 4096


async def _requests_under_load(
    policy: cuasync.SchedulingPolicy, batch: list[cuasync.Stream], n: int, block_us: int, depth: int
) -> list[int]:
    """Latency (ns) of ``n`` tiny kernels awaited one by one under ``policy`` while
    ``batch`` streams each keep ``depth`` spin kernels in flight."""
    stop = asyncio.Event()
    started = asyncio.Event()

    async def feed(stream: cuasync.Stream) -> None:
        inflight: deque[cuasync.DeviceFuture[None]] = deque()
        while not stop.is_set():
            while len(inflight) < depth:
                inflight.append(spin[BATCH_GRID, 256](block_us * 1000).submit_on(stream))
            started.set()
            await inflight.popleft()
        for fut in inflight:
            await fut

    feeders = [asyncio.ensure_future(feed(s)) for s in batch]
    await started.wait()
    samples = []
    clock = time.perf_counter_ns
    try:
        for _ in range(n):
            t0 = clock()
            with cuasync.use_policy(policy):
                await tiny[1, 32]()
            samples.append(clock() - t0)
    finally:
        stop.set()
        await asyncio.gather(*feeders)
    return samples


def run(report: Report, n: int = 500, block_us: int = 200, depth: int = 4) -> None:
    dev = cuasync.Device(0)
    r = dev.stream_priority_range
    print(f"== priority ({cuasync.backend_name()}: {dev.name}; priorities {r})", flush=True)
    for kernel in (tiny, spin):
        kernel.compile(dev)  # loading a module waits for the device's work: load first
    batch = [dev.new_stream() for _ in range(2)]
    plain = cuasync.StreamPoolRoundRobin(dev, num_streams=1)
    urgent = cuasync.StreamPoolRoundRobin(dev, num_streams=1, priority=r.greatest)
    note = f"2 streams x {depth} kernels of {BATCH_GRID}x256 threads spinning {block_us} us"
    rows = {}
    for label, policy in (("default priority", plain), (f"priority {r.greatest}", urgent)):
        samples = asyncio.run(_requests_under_load(policy, batch, n, block_us, depth))
        rows[label] = report.latency(SUITE, f"tiny kernel under batch load, {label}", samples, note)
    base, fast = rows["default priority"].p99_us, rows[f"priority {r.greatest}"].p99_us
    if base and fast:
        report.value(SUITE, "p99 speed-up from the urgent priority", base / fast, "x")
