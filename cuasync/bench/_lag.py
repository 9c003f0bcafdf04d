"""A 1 ms ticker's lateness on an event loop: idle, while long kernels are in flight,
woken by a plain socket at the very moments cuasync woke it (the control), while the
first await of a new expression compiles (:func:`first_use_lag`), and while a new
process's first ops of every kernel family compile (:func:`fresh_families_lag`).

The control separates what cuasync costs the loop from what any wake-up costs it:
asyncio's selector waits in whole milliseconds, rounded up, so a wake-up shortly before
a timer is due makes that timer up to a millisecond late, whoever woke the loop.

>>> flight = run_loop("asyncio", lambda: flight_lag(spin_ns, 64, 10.0))
>>> control = run_loop("asyncio", lambda: replayed_lag(flight.wakes, flight.seconds))
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

import cuasync
from cuasync import kernel_cache
from cuasync._core.completion import get_hub

__all__ = [
    "FirstUseLag",
    "FlightLag",
    "families_lag",
    "first_use_lag",
    "flight_lag",
    "fresh_families_lag",
    "idle_lag",
    "replayed_lag",
]


class _Ticker:
    """Sleeps 1 ms again and again on the running loop, recording ``(start, lateness)``."""

    def __init__(self) -> None:
        self.lags: list[tuple[float, float]] = []
        self.running = True
        self.task = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while self.running:
            t0 = time.perf_counter()
            await asyncio.sleep(0.001)
            self.lags.append((t0, time.perf_counter() - t0 - 0.001))

    async def stop(self) -> None:
        self.running = False
        await self.task

    def since(self, t: float) -> np.ndarray:
        """Lateness in microseconds of the ticks started at ``t`` or later."""
        return np.asarray([lag for t0, lag in self.lags if t0 >= t]) * 1e6


async def idle_lag(seconds: float) -> float:
    """The ticker's p99 lateness (us) on a loop with nothing else to do."""
    ticker = _Ticker()
    t0 = time.perf_counter()
    await asyncio.sleep(seconds)
    await ticker.stop()
    return float(np.percentile(ticker.since(t0), 99))


@dataclass
class FlightLag:
    """What :func:`flight_lag` measured."""

    during_p99_us: float  #: ticks started after the submissions
    overall_p99_us: float  #: the submission burst included
    max_us: float
    cpu_percent: float  #: the process's CPU time over the wall time
    seconds: float  #: from the last submission to the last completion
    #: When cuasync's drains woke the loop, in seconds after the last submission.
    wakes: list[float]


async def flight_lag(kernel: Any, kernels: int, ms: float) -> FlightLag:
    """The ticker while ``kernels`` launches of ``kernel[1, 1](ns)`` (a kernel spinning
    for ``ns``) of ``ms`` each are in flight over a pool of 4 streams (so about
    ``kernels * ms / 4`` in all), and the moments the loop drained cuasync's queue."""
    hub = get_hub()
    loop_thread = threading.get_ident()
    drains: list[float] = []
    drain = hub.drain

    def recorded(queue: Any) -> None:  # the loop's own drains (not the watcher's)
        if threading.get_ident() == loop_thread:
            # (when the loop got to it: a little after the reactor made the fd readable)
            drains.append(time.perf_counter())
        drain(queue)

    policy = cuasync.StreamPoolRoundRobin(num_streams=4)
    policy.streams  # create them before measuring  # noqa: B018
    ticker = _Ticker()
    await asyncio.sleep(0.01)
    hub.drain = recorded  # type: ignore[method-assign]
    try:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        futures = [kernel[1, 1](int(ms * 1e6)).schedule(policy) for _ in range(kernels)]
        submitted = time.perf_counter()
        await asyncio.gather(*futures)
        landed = time.perf_counter()
        cpu = (time.process_time() - cpu0) / (landed - wall0) * 100
    finally:
        del hub.drain
    await ticker.stop()
    during, everything = ticker.since(submitted), ticker.since(wall0)
    return FlightLag(
        float(np.percentile(during, 99)),
        float(np.percentile(everything, 99)),
        float(everything.max()),
        cpu,
        landed - submitted,
        [t - submitted for t in drains if t >= submitted],
    )


async def replayed_lag(wakes: list[float], seconds: float) -> float:
    """The ticker's p99 lateness (us) while a thread makes a socket readable at ``wakes``
    (seconds from the start), for ``seconds``: the loop woken as often and when cuasync
    woke it, with no GPU work and no cuasync code on the loop."""
    loop = asyncio.get_running_loop()
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    loop.add_reader(reader.fileno(), reader.recv, 4096)
    ticker = _Ticker()
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    stop = threading.Event()

    def wake_at_each() -> None:
        # (a Python thread: unlike the reactor's, each send waits for the GIL, so a wake-up
        # may come a little late while the loop runs Python; there is little to run here)
        for offset in wakes:
            if stop.wait(max(0.0, start + offset - time.perf_counter())):
                return
            writer.send(b"x")

    thread = threading.Thread(target=wake_at_each, name="bench-waker", daemon=True)
    thread.start()
    try:
        await asyncio.sleep(seconds)
        await ticker.stop()
    finally:
        stop.set()  # (cancelled early: the thread must not keep the loop waiting)
        thread.join()
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()
    return float(np.percentile(ticker.since(start), 99))


@dataclass
class FirstUseLag:
    """What :func:`first_use_lag` measured."""

    p99_us: float  #: the ticker's lateness while the first uses ran
    max_us: float
    ticks: int  #: ticks started while they ran
    first_use_ms: float  #: the median time of one first use (compile and load)


#: Expression structures made so far by :func:`_new_structure` (each one new).
_structures = 0


def _new_structure(x: cuasync.Tensor) -> Any:
    """An expression of ``x`` whose structure this process has not compiled yet: a chain
    of additions one longer than the last one made."""
    global _structures
    _structures += 1
    y: Any = x * 0.5
    for _ in range(8 + _structures):
        y = y + 1.0
    return y


async def first_use_lag(rounds: int, inline: bool = False) -> FirstUseLag:
    """The ticker while ``rounds`` first awaits of new expression structures compile and
    load (the disk cache off, so each compiles), 2 ms apart. ``inline``: each
    runs with ``.sync(allow_in_loop=True)`` instead, which compiles on the loop thread (as
    every first use did before 0.2): the control."""
    x = await cuasync.from_host(np.ones(1024, np.float32))
    cached = kernel_cache.stats().path
    kernel_cache.disable()
    try:
        return await _ticked((_new_structure(x) for _ in range(rounds)), inline)
    finally:
        if cached is not None:
            kernel_cache.enable(cached)


async def _ticked(ops: Iterable[Any], inline: bool) -> FirstUseLag:
    """The ticker while each of ``ops`` (built as it is reached) runs, 2 ms apart:
    awaited, or (``inline``) with ``.sync(allow_in_loop=True)``."""
    ticker = _Ticker()
    await asyncio.sleep(0.01)
    times: list[float] = []
    start = time.perf_counter()
    for op in ops:
        t0 = time.perf_counter()
        if inline:
            op.sync(allow_in_loop=True)
        else:
            await op
        times.append(time.perf_counter() - t0)
        await asyncio.sleep(0.002)  # (a tick between them: each stall counts once)
    end = time.perf_counter()
    await ticker.stop()
    lags = np.asarray([lag for t0, lag in ticker.lags if start <= t0 <= end]) * 1e6
    if not len(lags):  # (the loop never ran a tick while they ran)
        lags = np.asarray([(end - start) * 1e6])
    return FirstUseLag(
        float(np.percentile(lags, 99)),
        float(lags.max()),
        len(lags),
        float(np.median(times)) * 1e3,
    )


def _families(x: cuasync.Tensor, m: cuasync.Tensor, i: cuasync.Tensor) -> list[Any]:
    """One op of each family of kernels cuasync generates or builds in (x: float32 (24,),
    m: x as (4, 6), i: int32 indices): what a service's first requests may launch."""
    return [
        cuasync.full((256,), 2.5, dtype="float32"),  # fill
        cuasync.arange(256, dtype="float32"),  # ramps
        cuasync.rand((256,), dtype="float32", seed=1),  # random numbers
        x.astype("float16"),  # conversions and gathering copies
        cuasync.exp(x * 0.5 + 1.0),  # a fused elementwise expression
        cuasync.sum(m * 2.0, axis=1),  # a reduction, the expression fused in
        cuasync.cumsum(m, axis=1),  # a scan
        cuasync.sort(x),  # a sort's four kernels
        cuasync.searchsorted(x, x),  # a binary search
        cuasync.take(x, i),  # take, gather
        cuasync.gather(m, i, axis=1, mode="clip"),
        cuasync.scatter(x, i, 9.0, axis=0),
        cuasync.pad(x, 2),
        cuasync.tril(m),
        cuasync.matmul(i.reshape((2, 3)), i.reshape((3, 2))),  # integer matmul
        cuasync.matmul(m, m.mT),  # cuBLAS: its libraries and the device's handle
    ]


async def families_lag(inline: bool = False) -> FirstUseLag:
    """The ticker while the first op of each kernel family (:func:`_families`) runs, one
    after the other, 2 ms apart: awaited, or (``inline``) run with
    ``.sync(allow_in_loop=True)``, which prepares its kernels on the loop thread (the
    control). Meant for a process that has prepared none of them
    (:func:`fresh_families_lag`)."""
    x = await cuasync.from_host(np.linspace(-2, 2, 24, dtype=np.float32))
    m = x.reshape((4, 6))
    i = await cuasync.from_host(np.array([3, 0, 5, 1, 3, 2], np.int32))
    return await _ticked(_families(x, m, i), inline)


_FRESH = """
import json, sys
from dataclasses import asdict
from cuasync.bench import _lag, _util
lag = _util.run_loop(sys.argv[1], lambda: _lag.families_lag(sys.argv[2] == "inline"))
print(json.dumps(asdict(lag)))
"""


def fresh_families_lag(kind: str, inline: bool = False) -> FirstUseLag:
    """:func:`families_lag` on a loop of ``kind`` in a new Python process with the disk
    cache off (``CUASYNC_KERNEL_CACHE=off``): nothing is prepared there, every kernel
    compiles, as in a service's first requests without a warm-up or a warm cache."""
    env = {**os.environ, "CUASYNC_KERNEL_CACHE": "off"}
    how = "inline" if inline else "awaited"
    done = subprocess.run(
        [sys.executable, "-c", _FRESH, kind, how],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"the first-use probe failed: {done.stderr.strip()[-2000:]}")
    return FirstUseLag(**json.loads(done.stdout.strip().splitlines()[-1]))
