"""cuasync.lowlevel.MemoryPool and use_memory_pool: selection, statistics, trim, lifetime."""

from __future__ import annotations

import logging
import weakref

import anyio
import pytest

import cuasync
import cuasync.testing
from cuasync.errors import ArgumentError, InvalidDeviceError, OutOfMemoryError
from cuasync.lowlevel import MemoryPool, use_memory_pool

MiB = 1 << 20


def test_allocations_in_the_block_come_from_the_pool_and_not_the_default_one(quiet_device) -> None:
    pool = MemoryPool(quiet_device)
    quiet_device.synchronize()
    before = quiet_device.memory_stats()
    with use_memory_pool(pool) as selected:
        assert selected is pool
        t = cuasync.zeros((MiB,), "float32").sync()
    outside = cuasync.zeros((MiB,), "float32").sync()
    s = pool.stats()
    assert isinstance(s, cuasync.MemoryStats)
    assert (s.live_bytes, s.live_allocations) == (4 * MiB, 1)
    assert s.pool_used >= 4 * MiB and s.pool_reserved >= s.pool_used
    assert s.driver_total == before.driver_total
    device = quiet_device.memory_stats()
    assert device.live_bytes == before.live_bytes + 8 * MiB  # the device counts both
    assert device.pool_used >= before.pool_used + 4 * MiB
    assert device.pool_used < before.pool_used + 8 * MiB  # ... its pool only one
    assert t.to_host().sync()[0] == 0  # the memory works as any other
    del t, outside
    assert cuasync.testing.settle()  # every completion observed: the frees are enqueued
    quiet_device.synchronize()
    after = pool.stats()
    assert (after.live_bytes, after.live_allocations, after.pool_used) == (0, 0, 0)
    assert after.peak_live_bytes == 4 * MiB


def test_trim_gives_the_pools_idle_memory_back(quiet_device) -> None:
    pool = MemoryPool(quiet_device)  # release_threshold=None: keeps everything, as the default pool
    assert pool.release_threshold is None
    with use_memory_pool(pool):
        cuasync.empty((8 * MiB,), "uint8").sync()  # allocated and dropped
    assert cuasync.testing.settle()
    quiet_device.synchronize()  # the free is stream-ordered
    held = pool.stats()
    assert held.pool_used == 0 and held.pool_reserved >= 8 * MiB
    assert pool.trim(keep_bytes=held.pool_reserved) == 0
    released = pool.trim()
    assert released >= 8 * MiB
    assert pool.stats().pool_reserved == held.pool_reserved - released == 0


def test_a_zero_release_threshold_gives_memory_back_at_synchronization(quiet_device) -> None:
    pool = MemoryPool(quiet_device, release_threshold=0)
    with use_memory_pool(pool):
        cuasync.empty((8 * MiB,), "uint8").sync()
    assert cuasync.testing.settle()
    quiet_device.synchronize()
    assert pool.stats().pool_reserved == 0
    pool.release_threshold = 64 * MiB
    assert pool.release_threshold == 64 * MiB
    with use_memory_pool(pool):
        cuasync.empty((8 * MiB,), "uint8").sync()
    assert cuasync.testing.settle()
    quiet_device.synchronize()
    assert pool.stats().pool_reserved >= 8 * MiB  # now kept for reuse


def test_the_pool_lives_until_its_last_allocation_is_gone(quiet_device) -> None:
    pool = MemoryPool(quiet_device)
    alive = weakref.ref(pool)
    with use_memory_pool(pool):
        t = cuasync.ones((1024,), "float32").sync()
    del pool
    assert alive() is not None  # t still uses it
    assert float((t * 2).to_host().sync().sum()) == 2048.0
    del t
    assert cuasync.testing.settle()  # the last op's completion is observed
    assert alive() is None  # destroyed without waiting for the free to land


def test_a_pool_stays_while_held_work_uses_its_memory(quiet_device) -> None:
    pool = MemoryPool(quiet_device)
    alive = weakref.ref(pool)
    with use_memory_pool(pool):
        t = cuasync.ones((1024,), "float32").sync()
    (t + 1).sync()  # loads the kernel: a first load behind a gate may hang a GPU
    with cuasync.testing.gate() as gate:
        fut = (t + 1).to_host().submit()
        del t, pool
        assert alive() is not None  # the op in flight holds the tensor, the tensor the pool
        gate.open()
    assert float(fut.wait()[0]) == 2.0
    del fut
    assert cuasync.testing.settle()
    assert alive() is None


def test_the_driver_pool_is_recycled_only_after_the_frees_of_its_memory_ran(
    quiet_device, caplog: pytest.LogCaptureFixture
) -> None:
    # On CUDA 13.0 (driver 580) cuMemPoolDestroy with a free of its memory still pending
    # makes a later driver call crash (tools/probes/pool_destroy.py): cuasync recycles
    # pools instead, each once an event after its last free completed.
    from cuasync._core.pools import _GRAVEYARD

    stream = quiet_device.new_stream()
    pool = MemoryPool(quiet_device)
    handle = pool.handle
    alive = weakref.ref(pool)
    with use_memory_pool(pool):
        t = cuasync.ones((1024,), "float32").sync_on(stream)
    del pool
    with caplog.at_level(logging.DEBUG, logger="cuasync"), cuasync.testing.gate(stream):
        del t  # its free waits behind the gate on `stream`, then the pool goes
        assert alive() is None
        _GRAVEYARD._chore()  # what the background watcher runs (it may have, too)
        assert len(_GRAVEYARD) == 1  # the driver's pool is kept while the free waits
    stream.synchronize()
    _GRAVEYARD._chore()
    assert len(_GRAVEYARD) == 0
    assert not [r for r in caplog.records if "memory pool" in r.getMessage()]
    # Recycled, not destroyed (destroying one crashed that driver even then): the next
    # pool of the device gets it, trimmed and with its own threshold.
    again = MemoryPool(quiet_device, release_threshold=0)
    assert again.handle == handle and again.release_threshold == 0
    stats = again.stats()
    assert (stats.pool_reserved, stats.pool_used, stats.live_allocations) == (0, 0, 0)


def test_the_device_limit_counts_pool_allocations(quiet_device) -> None:
    pool = MemoryPool(quiet_device)
    quiet_device.set_memory_limit(quiet_device.memory_info().used + MiB)
    with use_memory_pool(pool), pytest.raises(OutOfMemoryError, match="set_memory_limit"):
        cuasync.empty((2 * MiB,), "uint8").sync()
    assert pool.stats().live_allocations == 0


def test_the_selection_is_per_device() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs two devices")
    pool = MemoryPool(0)
    with use_memory_pool(pool):
        other = cuasync.zeros((256,), "float32", device=1).sync()
        here = cuasync.zeros((256,), "float32", device=0).sync()
    assert pool.stats().live_allocations == 1
    assert other.device == cuasync.Device(1) and here.device == cuasync.Device(0)


@pytest.mark.anyio
async def test_the_selection_is_local_to_a_task() -> None:
    pool = MemoryPool(0)
    seen: dict[str, int] = {}

    async def in_pool() -> None:
        with use_memory_pool(pool):
            await anyio.sleep(0)  # the other task runs while this one is inside the block
            t = await cuasync.zeros((1000,), "float32")
            seen["in_pool"] = pool.stats().live_allocations
            del t

    async def outside() -> None:
        await anyio.sleep(0)
        t = await cuasync.zeros((1000,), "float32")
        seen["outside"] = t.nbytes
        del t

    async with anyio.create_task_group() as tg:
        tg.start_soon(in_pool)
        tg.start_soon(outside)
    assert seen["in_pool"] == 1
    assert pool.stats().live_allocations == 0  # only the in-pool task's tensor was counted


def test_bad_arguments_say_what_to_do() -> None:
    not_a_pool = cuasync.Device(0)
    with pytest.raises(ArgumentError, match="MemoryPool"), use_memory_pool(not_a_pool):  # type: ignore[arg-type]
        pass
    with pytest.raises(ArgumentError, match="release_threshold"):
        MemoryPool(0, release_threshold=-1)
    with pytest.raises(InvalidDeviceError):
        MemoryPool(99)
    pool = MemoryPool(0)
    with pytest.raises(ArgumentError, match="keep_bytes"):
        pool.trim(-1)
    assert "device 0" in repr(pool)
