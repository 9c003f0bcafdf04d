"""Tensors used on several streams are ordered with events: RAW, WAW and WAR.

The earlier op waits at a closed gate on its stream, so without the automatic events
the later op, on another stream, would run first; with them it cannot finish until the
gate opens.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
from helpers import COMPLETION, reactor_path, still_pending

import cuasync
import cuasync.testing as ct

pytestmark = pytest.mark.anyio

N = 1 << 10


@pytest.fixture
def streams() -> list[cuasync.Stream]:
    dev = cuasync.Device(0)
    return [dev.new_stream() for _ in range(3)]


async def in_order(
    first: tuple[cuasync.DeviceOp, cuasync.Stream], second: tuple[cuasync.DeviceOp, cuasync.Stream]
) -> list[object]:
    """Submit ``first`` behind a closed gate, then ``second``; check that ``second`` waits."""
    (op1, s1), (op2, s2) = first, second
    with ct.gate(s1):
        earlier = op1.submit_on(s1)
        later = op2.submit_on(s2)
        assert still_pending(later.done), "the later op did not wait for the earlier one"
    return [await earlier, await later]


async def test_read_after_write(anyio_backend, streams) -> None:
    x = await cuasync.zeros((N,)).submit_on(streams[0])
    a = await cuasync.from_host(np.full(N, 3.0, np.float32)).submit_on(streams[0])
    _, seen = await in_order((cuasync.memcpy(x, a), streams[1]), (x.to_host(), streams[2]))
    np.testing.assert_array_equal(seen, np.full(N, 3.0))


async def test_write_after_read(anyio_backend, streams) -> None:
    x = await cuasync.from_host(np.full(N, 1.0, np.float32)).submit_on(streams[0])
    b = await cuasync.from_host(np.full(N, 9.0, np.float32)).submit_on(streams[0])
    seen, _ = await in_order((x.to_host(), streams[1]), (cuasync.memcpy(x, b), streams[2]))
    np.testing.assert_array_equal(seen, np.full(N, 1.0))  # the read saw the old value
    np.testing.assert_array_equal(await x.to_host(), np.full(N, 9.0))


async def test_write_after_write(anyio_backend, streams) -> None:
    x = await cuasync.zeros((N,)).submit_on(streams[0])
    a = await cuasync.from_host(np.full(N, 1.0, np.float32)).submit_on(streams[0])
    b = await cuasync.from_host(np.full(N, 2.0, np.float32)).submit_on(streams[0])
    await in_order((cuasync.memcpy(x, a), streams[1]), (cuasync.memcpy(x, b), streams[2]))
    np.testing.assert_array_equal(await x.to_host(), np.full(N, 2.0))


async def test_views_of_one_allocation_are_ordered_too(anyio_backend, streams) -> None:
    x = await cuasync.zeros((2, N)).submit_on(streams[0])
    a = await cuasync.from_host(np.full(N, 5.0, np.float32)).submit_on(streams[0])
    _, row = await in_order((cuasync.memcpy(x[1], a), streams[1]), (x[1].to_host(), streams[2]))
    np.testing.assert_array_equal(row, np.full(N, 5.0))


def test_gather_of_conflicting_chains_gives_the_sequential_result() -> None:
    """asyncio.gather over many streams: each step reads what the previous one wrote."""
    policy = cuasync.StreamPoolRoundRobin(num_streams=4)
    acc = cuasync.zeros((N,), "float32").sync()
    steps = [cuasync.from_host(np.full(N, float(i), np.float32)).sync() for i in range(8)]

    async def main() -> list[np.ndarray]:
        # The first stream waits at a gate; it holds every other write (they are ordered
        # after it) and so every read: without the events, the other streams run ahead.
        with ct.gate(policy.streams[0]):
            futures: list[cuasync.DeviceFuture[Any]] = []
            for step in steps:
                # write acc, then read it back, each on the policy's next stream
                futures.append(cuasync.memcpy(acc, step).schedule(policy))
                futures.append(acc.to_host().schedule(policy))
            assert policy.streams[0] is futures[0].stream
            assert still_pending(lambda: any(f.done() for f in futures))
            results = asyncio.gather(*futures)
        return [r for r in await results if isinstance(r, np.ndarray)]

    reads = asyncio.run(main())
    for i, seen in enumerate(reads):
        np.testing.assert_array_equal(seen, np.full(N, float(i)))


async def test_no_waits_once_earlier_work_is_known_complete(
    anyio_backend, streams, enqueued
) -> None:
    x = await cuasync.zeros((N,)).submit_on(streams[0])  # awaited: completion observed
    before = len(enqueued)
    await x.to_host().submit_on(streams[1])
    # the copy and its completion only: no event record or wait for completed work
    assert enqueued[before:] in [["memcpy_dtoh_async", c] for c in COMPLETION]


@reactor_path  # (host-callback completions take the generic path by design)
async def test_the_core_orders_after_uses_that_may_still_run_only(
    anyio_backend, streams, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A launch the native core submits is ordered after another stream's use of its
    # tensors while that use may still run (Allocation.use, which makes the stream wait);
    # after a use known to have run (its stream's work landed), nothing is ordered: the
    # core records the use itself, with no Python call (each op on tensors made on
    # another stream once paid one).
    from cuasync._core import express
    from cuasync._native import PROCESS

    if express._core() is None:
        pytest.skip("the native core is off (CUASYNC_NATIVE=off, or not built)")
    x = await cuasync.from_host(np.full(N, 1.0, np.float32)).submit_on(streams[0])
    o = await cuasync.zeros((N,)).submit_on(streams[0])
    await cuasync.add(x, 1.0, out=o).submit_on(streams[1])  # (seen: its plan, its kernel)
    await cuasync.multiply(x, 2.0, out=o).submit_on(streams[1])
    ordered: list[cuasync.Stream] = []
    use = PROCESS.alloc_use
    assert use is not None

    def spy(alloc: Any, stream: Any, seq: int, write: bool) -> None:
        ordered.append(stream)
        use(alloc, stream, seq, write)

    monkeypatch.setattr(PROCESS, "alloc_use", spy)
    await cuasync.add(x, 2.0, out=o).submit_on(streams[2])  # x's, o's last uses landed
    assert ordered == []
    np.testing.assert_array_equal(await o.to_host(), np.full(N, 3.0))
    await in_order(
        (cuasync.add(x, 1.0, out=x), streams[0]), (cuasync.multiply(x, 2.0, out=o), streams[1])
    )
    assert streams[1] in ordered  # (x's write on streams[0] was held at the gate)
    np.testing.assert_array_equal(await o.to_host(), np.full(N, 4.0))


@reactor_path  # (host-callback completions take the generic path by design)
async def test_a_stream_the_core_lets_go_of_is_finalized_under_the_lock_as_marked(
    anyio_backend,
) -> None:
    # Recording a write, the core drops the records of other streams' landed uses; one
    # may hold a stream's last reference. Its finalizer runs there, under the execution
    # lock, which it must see as held by this thread (LOCAL.active): code that takes the
    # lock (a DLPack capsule's release, a stream's own destroy) would else wait for ever.
    import gc
    import weakref

    from cuasync._core.context import LOCAL

    dev = cuasync.Device(0)
    t = dev.new_stream()
    x = await cuasync.from_host(np.full(N, 1.0, np.float32)).submit_on(t)
    o = await cuasync.zeros((N,)).submit_on(t)
    await cuasync.add(x, 1.0, out=o).submit_on(t)  # (seen: its plan, its kernel)
    s = dev.new_stream()
    await cuasync.add(x, 1.0, out=o).submit_on(s)  # o written on s, x read there
    marked: list[bool] = []
    weakref.finalize(s, lambda: marked.append(bool(getattr(LOCAL, "active", False))))
    del s
    gc.collect()
    await cuasync.add(o, 2.0, out=o).submit_on(t)  # o's write on s let go of
    await cuasync.add(x, 2.0, out=x).submit_on(t)  # x's read on s: the stream's last
    assert marked == [True]
    np.testing.assert_array_equal(await o.to_host(), np.full(N, 4.0))
