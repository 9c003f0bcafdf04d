"""Small device blocks are reused on the stream that freed them, and never too early.

An allocation of at most ``SMALL_MAX`` bytes from the default pool goes, once dropped,
to ``cuasync._core.block_cache`` instead of the driver; the next allocation of its size
class on that stream takes it back. What a user relies on: reuse never lets new work
touch a block that earlier work on another stream still reads (gates hold that work, so
this runs on a GPU too), cached blocks are not live memory, ``trim_pool`` and a
destroyed stream give them back, running out of memory frees them and retries, and the
bounds hold.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._core import block_cache, memory
from cuasync._core.memory import Allocation
from cuasync._native import NATIVE
from cuasync.errors import OutOfMemoryError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("finalizer")]


class _NativeFinalizer:
    """Allocation's finalizer, its native base's: ``kept``, the blocks it kept in C."""

    @property
    def kept(self) -> int:
        return int(NATIVE.blocks_kept())


@pytest.fixture(params=["native", "python"])
def finalizer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Each test twice: with Allocation's finalizer the native module's (its common case,
    a block back to the cache, in C) and with the Python one it falls back to."""
    if request.param == "native":
        return _NativeFinalizer()
    monkeypatch.setattr(Allocation, "__del__", _python_del, raising=False)
    return None


def _python_del(self: Allocation) -> None:
    memory._python_del(self)


def _cached(stream: cuasync.Stream) -> int:
    """Blocks cached on ``stream``."""
    return sum(len(v) for (s, _), v in block_cache.CACHE.blocks.items() if s == stream.handle)


def test_a_small_block_freed_on_a_stream_is_reused_there(baseline: Any, finalizer: Any) -> None:
    device = cuasync.Device(0)
    s, t = device.new_stream(), device.new_stream()
    first = Allocation(device, 3000, s)
    ptr = first.ptr
    del first  # (the first of its class on s: the Python __del__ makes s's list)
    assert _cached(s) == 1
    kept = finalizer.kept if finalizer is not None else 0
    used = device.memory_info().used
    again = Allocation(device, 3000, s)
    del again
    assert device.memory_info().used == used and _cached(s) == 1
    if finalizer is not None:
        assert finalizer.kept == kept + 1  # the common case, in C
    again = Allocation(device, 4096, s)  # the same size class (4 KiB)
    assert again.ptr == ptr and _cached(s) == 0
    other = Allocation(device, 4096, t)  # another stream: not that block
    assert other.ptr != ptr
    large = Allocation(device, block_cache.SMALL_MAX + 1, s)
    del again, other, large
    assert _cached(s) == 1 and _cached(t) == 1  # (the large one went to the driver)


async def test_a_block_is_cached_only_once_the_work_reading_it_has_landed(
    anyio_backend: Any, baseline: Any
) -> None:
    # x is read on stream b behind a closed gate, then dropped by the user: the pending
    # read keeps its block, so nothing can reuse it before the read has run.
    device = cuasync.Device(0)
    a, b = device.new_stream(), device.new_stream()
    values = np.arange(256, dtype=np.float32)
    x = await cuasync.from_host(values).submit_on(a)
    ptr = x.ptr
    with ct.gate(b) as gate:
        read = x.to_host().submit_on(b)
        del x
        gc.collect()
        assert _cached(a) == _cached(b) == 0  # still the read's
        y = await cuasync.full((256,), 7.0, dtype="float32").submit_on(a)
        assert y.ptr != ptr
        gate.open()
        np.testing.assert_array_equal(await read, values)
    del read
    gc.collect()
    assert _cached(a) == 1  # released once the read landed, kept on its writer's stream
    z = await cuasync.full((256,), 9.0, dtype="float32").submit_on(a)
    assert z.ptr == ptr
    np.testing.assert_array_equal(await z.to_host(), np.full(256, 9, np.float32))


def test_cached_blocks_are_not_live_memory_and_trim_pool_frees_them(baseline: Any) -> None:
    device = cuasync.Device(0)
    s = device.new_stream()
    used = device.memory_info().used
    blocks = [Allocation(device, 1024, s) for _ in range(3)]
    assert device.memory_info().used == used + 3 * 1024
    del blocks
    assert device.memory_info().used == used and _cached(s) == 3
    device.trim_pool()
    assert _cached(s) == 0


def test_a_destroyed_stream_gives_its_blocks_back(baseline: Any) -> None:
    device = cuasync.Device(0)
    s = device.new_stream()
    handle = s.handle
    Allocation(device, 2048, s)  # dropped at once: cached on s
    assert _cached(s) == 1
    del s
    gc.collect()
    assert not [key for key in block_cache.CACHE.blocks if key[0] == handle]
    assert handle not in block_cache._owners


def test_running_out_of_memory_frees_the_cache_and_tries_again(
    baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    device = cuasync.Device(0)
    s = device.new_stream()
    Allocation(device, 8192, s)  # cached
    backend = get_backend()
    real = backend.mem_alloc_async
    calls: list[int] = []

    def out_of_memory_once(nbytes: int, stream: int) -> int:
        calls.append(nbytes)
        if len(calls) == 1:
            raise OutOfMemoryError(nbytes, "device memory")
        return real(nbytes, stream)

    monkeypatch.setattr(backend, "mem_alloc_async", out_of_memory_once)
    a = Allocation(device, 16384, s)  # another class: the driver, which fails once
    assert len(calls) == 2 and _cached(s) == 0  # the cache was freed for the retry
    monkeypatch.undo()
    del a


def test_the_bounds_hold(baseline: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    device = cuasync.Device(0)
    s = device.new_stream()
    monkeypatch.setattr(block_cache.CACHE, "per_key", 2)
    blocks = [Allocation(device, 600, s) for _ in range(3)]
    del blocks
    assert _cached(s) == 2  # the third went to the driver
    monkeypatch.setattr(block_cache.CACHE, "per_key", 256)
    monkeypatch.setattr(block_cache.CACHE, "key_max", 3 * 4096)  # three 4 KiB blocks a key
    blocks = [Allocation(device, 3000, s) for _ in range(4)]  # (class 4 KiB, another key)
    del blocks
    assert _cached(s) == 2 + 3  # the fourth went to the driver
    monkeypatch.setattr(block_cache.CACHE, "device_max", block_cache.CACHE.bytes[device.ordinal])
    Allocation(device, 100, s)  # another class: over the device's bound
    assert _cached(s) == 2 + 3
    device.trim_pool()


def test_a_stream_finalized_inside_the_caches_critical_section_does_not_deadlock(
    baseline: Any,
) -> None:
    # A garbage collection can run inside the cache's critical section (any allocation
    # there may start one) and finalize a stream, whose finalizer frees its blocks on the
    # same thread. Run that in a thread of its own, so that a deadlock fails the test.
    import threading

    device = cuasync.Device(0)
    s = device.new_stream()
    handle = s.handle
    Allocation(device, 2048, s)  # cached on s
    streams = [s]
    del s

    def collect_inside() -> None:
        with block_cache.CACHE.lock:
            streams.clear()  # the last reference: the finalizer runs here, lock held
            gc.collect()

    thread = threading.Thread(target=collect_inside, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the stream's finalizer deadlocked on the cache's lock"
    assert handle not in block_cache._owners


def test_flush_holds_each_stream_while_it_frees_its_blocks(
    baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream whose last user drops it while flush frees its blocks is not destroyed
    # before they are freed on it: flush holds it until then.
    device = cuasync.Device(0)
    streams = [device.new_stream()]
    Allocation(device, 4096, streams[0])
    Allocation(device, 8192, streams[0])  # two blocks: the user lets go after the first
    alive, handle = streams[0]._alive, streams[0].handle
    seen: list[bool] = []
    real = get_backend().mem_free_async

    def free(ptr: int, stream: int) -> None:
        if stream == handle:  # (blocks earlier tests left on their streams go too)
            seen.append(alive[0])
            streams.clear()  # the user's last reference, gone in the middle of the flush
        real(ptr, stream)

    monkeypatch.setattr(get_backend(), "mem_free_async", free)
    block_cache.flush(device)
    assert seen == [True, True]  # both freed while the stream lived
    assert not alive[0]  # and then it went


def test_a_block_freed_on_another_devices_stream_is_not_kept_there(
    baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An op on another device's stream that writes the block (a peer copy into it) makes
    # that stream its last user, where its free is ordered; the block must not be handed
    # to that device's allocations.
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices (CUASYNC_EMU_DEVICES=2 on the emulator)")
    d0, d1 = cuasync.Device(0), cuasync.Device(1)
    s0, s1 = d0.new_stream(), d1.new_stream()
    x = Allocation(d0, 4096, s0)
    ptr = x.ptr
    x.use(s1, s1._submitted, write=True)  # (as a peer copy's record of its write)
    backend = get_backend()
    real, freed = backend.mem_free_async, []
    monkeypatch.setattr(backend, "mem_free_async", lambda p, s: freed.append((p, s)))
    del x
    assert _cached(s1) == 0 and _cached(s0) == 0
    assert freed == [(ptr, s1.handle)]  # freed to the driver instead (ordered on s1)
    monkeypatch.undo()
    real(ptr, s0.handle)  # (the emulator frees device 0's memory on device 0's streams)


def test_a_block_freed_during_a_flush_is_not_left_without_its_stream(baseline: Any) -> None:
    # A collection inside the flush's critical section may free an allocation last used
    # on a stream being flushed. Were its block kept, it would sit under that stream with
    # the stream's owner entry removed: never freed when the stream goes, and handed to
    # whatever stream gets the handle next. It is freed instead (put says False).
    device = cuasync.Device(0)
    s = device.new_stream()
    Allocation(device, 4096, s)  # cached
    key = (s.handle, 12)
    refused: list[bool] = []

    class FreedInside(list[int]):
        def __iter__(self) -> Any:
            refused.append(not block_cache.put(device, s, 13, 0xDEAD))  # (as a __del__ would)
            return super().__iter__()

    block_cache.CACHE.blocks[key] = FreedInside(block_cache.CACHE.blocks[key])
    block_cache.flush(device)
    assert refused == [True]
    assert all(k[0] in block_cache._owners for k in block_cache.CACHE.blocks)
    assert _cached(s) == 0


def test_a_makers_new_tensor_takes_a_cached_block_as_allocation_does(baseline: Any) -> None:
    # LAUNCHES.new_tensor (the native core's makers' new result): a block of the cache,
    # accounted and reused as Allocation's; none to give (too large, or a pool selected:
    # None) and the maker makes it in Python; bad arguments are a TypeError
    from cuasync._ops.launch_plan import LAUNCHES, new_tensor_on

    device = cuasync.Device(0)
    s = device.new_stream()
    dt = np.dtype(np.float32)
    first = Allocation(device, 4096, s)
    ptr = first.ptr
    del first  # (cached on s)
    used = device.memory_info().used
    t = LAUNCHES.new_tensor(4096, (32, 32), dt, (32, 1), s)
    assert type(t) is cuasync.Tensor and t.allocation.ptr == ptr and _cached(s) == 0
    assert (t.shape, t.strides, t.dtype, t.offset, t.device) == ((32, 32), (32, 1), dt, 0, device)
    assert device.memory_info().used == used + 4096
    del t
    assert _cached(s) == 1 and device.memory_info().used == used
    big = block_cache.SMALL_MAX + 1
    assert LAUNCHES.new_tensor(big, (big,), np.dtype(np.uint8), (1,), s) is None
    made = new_tensor_on(s, big, (big,), np.dtype(np.uint8))
    assert made.allocation.nbytes == big and made.strides == (1,)
    del made
    pool = cuasync.lowlevel.MemoryPool(device)
    with cuasync.lowlevel.use_memory_pool(pool):
        assert LAUNCHES.new_tensor(4096, (1024,), dt, (1,), s) is None
    for bad in [
        (4096.0, (1024,), dt, (1,), s),
        (4096, [1024], dt, (1,), s),
        (4096, (1024,), dt, (1, 1), s),
        (4096, (1024,), dt, (1,), 0),
    ]:
        with pytest.raises(TypeError):
            LAUNCHES.new_tensor(*bad)
    with pytest.raises(ValueError):
        LAUNCHES.new_tensor(-1, (0,), dt, (1,), s)
    assert LAUNCHES.new_tensor(2**63, (2**61,), dt, (1,), s) is None  # (past a ssize_t)


@pytest.mark.parametrize("make", ["empty", "zeros", "full"])
async def test_a_new_tensor_past_any_memory_raises_out_of_memory(
    anyio_backend: Any, baseline: Any, make: str
) -> None:
    # sizes a maker of the core sees (under size_t, past a ssize_t) are refused as the
    # long way refuses them: OutOfMemoryError, never a bare OverflowError
    shape = (2**61,)
    op = cuasync.full(shape, 1.0) if make == "full" else getattr(cuasync, make)(shape)
    with pytest.raises(OutOfMemoryError):
        await op
