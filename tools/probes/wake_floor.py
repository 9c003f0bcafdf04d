"""The floor under an await the reactor wakes: how long another thread takes to wake a
thread parked in ``epoll_wait``, with no GPU and no cuasync code.

An await that parks (spin budget 0, or work that outlasts the spin) is woken by the
native reactor: its thread sees the flag word, writes the loop's eventfd, and the loop's
thread, asleep in ``epoll_wait``, wakes, drains and resumes the task. On a VM that wake
is an inter-processor interrupt to a halted vCPU. This probe times, p50 over N each:

- a thread writing an eventfd that the main thread waits on in ``epoll.poll()``;
- ``loop.call_soon_threadsafe(future.set_result, ...)`` from a thread, awaited on
  asyncio and on uvloop (a parked await's wake, less cuasync).

Run: ``python3 tools/probes/wake_floor.py [N]`` (any machine; Linux: ``os.eventfd``).
"""

from __future__ import annotations

import asyncio
import os
import select
import sys
import threading
import time

import numpy as np

from cuasync.bench._util import run_loop

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000


def epoll_wake(n: int) -> list[int]:
    """ns from a thread's eventfd write to the main thread's return from epoll.poll()."""
    fd, ack = os.eventfd(0), os.eventfd(0)
    ep = select.epoll()
    ep.register(fd, select.EPOLLIN)
    sent: list[int] = []
    out: list[int] = []

    def waker() -> None:
        for _ in range(n):
            time.sleep(50e-6)  # (the main thread is asleep in poll by then)
            sent.append(time.perf_counter_ns())
            os.eventfd_write(fd, 1)
            os.eventfd_read(ack)

    t = threading.Thread(target=waker)
    t.start()
    for i in range(n):
        ep.poll()
        out.append(time.perf_counter_ns() - sent[i])
        os.eventfd_read(fd)
        os.eventfd_write(ack, 1)
    t.join()
    for f in (fd, ack):
        os.close(f)
    ep.close()
    return out


async def loop_wake(n: int) -> list[int]:
    """ns from a thread's call_soon_threadsafe to the awaiting task's resumption."""
    loop = asyncio.get_running_loop()
    out: list[int] = []
    go = threading.Semaphore(0)
    futures: list[asyncio.Future[int]] = []

    def waker() -> None:
        for i in range(n):
            go.acquire()
            time.sleep(50e-6)  # (the loop is asleep by then)
            loop.call_soon_threadsafe(futures[i].set_result, time.perf_counter_ns())

    t = threading.Thread(target=waker)
    t.start()
    for _ in range(n):
        fut = loop.create_future()
        futures.append(fut)
        go.release()
        sent = await fut
        out.append(time.perf_counter_ns() - sent)
    t.join()
    return out


def main() -> None:
    rows = [("eventfd write -> epoll.poll() returns", epoll_wake(N))]
    for kind in ("asyncio", "uvloop"):
        try:
            samples = run_loop(kind, lambda: loop_wake(N))
        except ImportError:
            continue
        rows.append((f"{kind}: call_soon_threadsafe -> task resumes", samples))
    for name, samples in rows:
        a = np.array(samples) / 1000
        print(f"  {name:<46} p50 {np.median(a):7.2f} us   p99 {np.percentile(a, 99):7.2f} us")


if __name__ == "__main__":
    main()
