"""Tensors used on several streams are ordered with events: RAW, WAR and WAW.

Each op runs on its own stream and the emulator's delay holds every command in flight,
so without the automatic events the later op would overtake the earlier one.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import cuasync

pytestmark = [pytest.mark.anyio, pytest.mark.emulator_only]

N = 1 << 10


@pytest.fixture
def streams(emu):
    emu.set_delay(4000)
    dev = cuasync.Device(0)
    return [dev.new_stream() for _ in range(3)]


async def gather(*ops_on: tuple[cuasync.DeviceOp, cuasync.Stream]) -> list[object]:
    """Submit in order (like asyncio.gather starting its tasks), then wait for all.

    The first op's stream is first given a head start of delayed commands, so that
    without ordering the second op would certainly overtake it.
    """
    scratch = await cuasync.zeros((16,)).submit_on(ops_on[0][1])
    busy = [cuasync.memcpy(scratch, scratch).submit_on(ops_on[0][1]) for _ in range(5)]
    futures = [op.submit_on(s) for op, s in ops_on]
    results = [await f for f in futures]
    for f in busy:
        await f
    return results


async def test_read_after_write(anyio_backend, streams) -> None:
    x = await cuasync.zeros((N,)).submit_on(streams[0])
    a = await cuasync.from_host(np.full(N, 3.0, np.float32)).submit_on(streams[0])
    _, seen = await gather((cuasync.memcpy(x, a), streams[1]), (x.to_host(), streams[2]))
    np.testing.assert_array_equal(seen, np.full(N, 3.0))


async def test_write_after_read(anyio_backend, streams) -> None:
    x = await cuasync.from_host(np.full(N, 1.0, np.float32)).submit_on(streams[0])
    b = await cuasync.from_host(np.full(N, 9.0, np.float32)).submit_on(streams[0])
    seen, _ = await gather((x.to_host(), streams[1]), (cuasync.memcpy(x, b), streams[2]))
    np.testing.assert_array_equal(seen, np.full(N, 1.0))  # the read saw the old value
    np.testing.assert_array_equal(await x.to_host(), np.full(N, 9.0))


async def test_write_after_write(anyio_backend, streams) -> None:
    x = await cuasync.zeros((N,)).submit_on(streams[0])
    a = await cuasync.from_host(np.full(N, 1.0, np.float32)).submit_on(streams[0])
    b = await cuasync.from_host(np.full(N, 2.0, np.float32)).submit_on(streams[0])
    await gather((cuasync.memcpy(x, a), streams[1]), (cuasync.memcpy(x, b), streams[2]))
    np.testing.assert_array_equal(await x.to_host(), np.full(N, 2.0))


async def test_views_of_one_allocation_are_ordered_too(anyio_backend, streams) -> None:
    x = await cuasync.zeros((2, N)).submit_on(streams[0])
    a = await cuasync.from_host(np.full(N, 5.0, np.float32)).submit_on(streams[0])
    _, row = await gather((cuasync.memcpy(x[1], a), streams[1]), (x[1].to_host(), streams[2]))
    np.testing.assert_array_equal(row, np.full(N, 5.0))


def test_gather_of_conflicting_chains_gives_the_sequential_result(emu) -> None:
    """asyncio.gather over many streams: each step reads what the previous one wrote."""
    emu.set_delay(1000)
    policy = cuasync.StreamPoolRoundRobin(num_streams=4)
    acc = cuasync.zeros((N,), "float32").sync()
    steps = [cuasync.from_host(np.full(N, float(i), np.float32)).sync() for i in range(8)]

    async def main() -> list[np.ndarray]:
        tasks = []
        for step in steps:
            # write acc, then read it back, each on the policy's next stream
            tasks.append(asyncio.ensure_future(_await(cuasync.memcpy(acc, step).schedule(policy))))
            tasks.append(asyncio.ensure_future(_await(acc.to_host().schedule(policy))))
        results = await asyncio.gather(*tasks)
        return [r for r in results if isinstance(r, np.ndarray)]

    reads = asyncio.run(main())
    for i, seen in enumerate(reads):
        np.testing.assert_array_equal(seen, np.full(N, float(i)))


async def _await(fut: cuasync.DeviceFuture) -> object:
    return await fut


async def test_no_waits_once_earlier_work_is_known_complete(anyio_backend, emu, streams) -> None:
    x = await cuasync.zeros((N,)).submit_on(streams[0])  # sync: completion observed
    before = emu.commands_enqueued()
    await x.to_host().submit_on(streams[1])
    # dtoh + flag write only: no event record/wait for already-completed work
    assert emu.commands_enqueued() - before == 2
