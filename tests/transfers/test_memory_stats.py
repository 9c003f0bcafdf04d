"""Device memory visibility and control: memory_stats, peaks, pool trims, limits."""

from __future__ import annotations

import logging

import pytest

import cuasync
import cuasync.testing
from cuasync.errors import ArgumentError, OutOfMemoryError

MiB = 1 << 20


def test_memory_stats_sees_an_allocation_in_every_layer(quiet_device) -> None:
    quiet_device.synchronize()
    before = quiet_device.memory_stats()
    assert isinstance(before, cuasync.MemoryStats)
    assert 0 <= before.driver_free <= before.driver_total
    assert before.pool_used <= before.pool_reserved
    assert before.live_bytes == quiet_device.memory_info().used
    t = cuasync.empty((4 * MiB,), "uint8").sync()
    during = quiet_device.memory_stats()
    assert during.live_bytes == before.live_bytes + 4 * MiB
    assert during.live_allocations == before.live_allocations + 1
    assert during.peak_live_bytes >= during.live_bytes
    assert during.pool_used >= before.pool_used + 4 * MiB
    assert during.pool_reserved >= during.pool_used
    # (No claim on driver_free: it is the whole device's, and other processes on a GPU
    # allocate and free while this test runs.)
    del t
    after = quiet_device.memory_stats()
    assert after.live_bytes == before.live_bytes
    assert after.live_allocations == before.live_allocations
    assert after.peak_live_bytes >= before.live_bytes + 4 * MiB


def test_reset_peak_memory_restarts_the_watermark(quiet_device) -> None:
    t = cuasync.empty((2 * MiB,), "uint8").sync()
    del t
    assert (
        quiet_device.memory_stats().peak_live_bytes
        >= quiet_device.memory_stats().live_bytes + 2 * MiB
    )
    quiet_device.reset_peak_memory()
    s = quiet_device.memory_stats()
    assert s.peak_live_bytes == s.live_bytes


def test_trim_pool_gives_idle_memory_back(quiet_device, caplog: pytest.LogCaptureFixture) -> None:
    # The pool gives memory back by whole mappings: a small block freed inside a mapping
    # that also holds a live allocation stays (on the H200 a 16 MiB one did). Trimmed
    # first, the pool has no idle mapping, so 256 MiB gets a mapping of its own.
    quiet_device.trim_pool()
    t = cuasync.empty((256 * MiB,), "uint8").sync()
    del t
    quiet_device.synchronize()  # the free is stream-ordered
    held = quiet_device.memory_stats()
    assert held.pool_reserved - held.pool_used >= 256 * MiB  # the pool keeps freed memory
    with caplog.at_level(logging.DEBUG, logger="cuasync.memory"):
        released = quiet_device.trim_pool()
    trimmed = quiet_device.memory_stats()
    assert released >= 256 * MiB
    assert trimmed.pool_reserved == held.pool_reserved - released
    assert trimmed.pool_reserved >= trimmed.pool_used  # (driver_free: the whole device's)
    assert any("trimmed" in r.getMessage() for r in caplog.records if r.name == "cuasync.memory")


def test_trim_pool_keeps_what_it_is_asked_to_and_checks_its_argument(quiet_device) -> None:
    with pytest.raises(ArgumentError, match="keep_bytes"):
        quiet_device.trim_pool(-1)
    t = cuasync.empty((8 * MiB,), "uint8").sync()
    del t
    quiet_device.synchronize()
    quiet_device.trim_pool(1 << 60)  # keep everything
    assert (
        quiet_device.memory_stats().pool_reserved - quiet_device.memory_stats().pool_used >= 8 * MiB
    )


def test_memory_limit_refuses_before_the_driver(quiet_device) -> None:
    live = quiet_device.memory_stats().live_bytes
    quiet_device.set_memory_limit(live + 3 * MiB)
    assert quiet_device.memory_stats().limit == live + 3 * MiB
    a = cuasync.empty((2 * MiB,), "uint8").sync()
    pool_used = quiet_device.memory_stats().pool_used
    with pytest.raises(OutOfMemoryError, match="set_memory_limit") as info:
        cuasync.empty((2 * MiB,), "uint8").sync()
    assert info.value.nbytes == 2 * MiB
    assert isinstance(info.value, MemoryError)
    s = quiet_device.memory_stats()
    assert s.live_bytes == live + 2 * MiB  # the refused allocation counts nowhere
    assert s.pool_used == pool_used
    b = cuasync.empty((MiB,), "uint8").sync()  # exactly up to the limit is fine
    del a, b
    quiet_device.set_memory_limit(None)
    assert quiet_device.memory_stats().limit is None
    cuasync.empty((4 * MiB,), "uint8").sync()


@pytest.mark.parametrize("bad", [-1, 1.5, "1", True])
def test_memory_limit_checks_its_argument(quiet_device, bad: object) -> None:
    with pytest.raises(ArgumentError, match="nbytes"):
        quiet_device.set_memory_limit(bad)
