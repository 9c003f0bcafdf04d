"""PinnedHostBuffer and PinnedPool: views, size checks, release, reuse, busy while in flight."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import numpy as np
import pytest
from helpers import run_script, wait_until

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._transfers.staging import staging_pool
from cuasync.errors import ArgumentError, BusyResourceError, DTypeError, ShapeError

CHUNK = 1 << 20  # pinned chunk that blocks below 64 KiB are carved from


@pytest.fixture
def freed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Addresses handed to the backend's ``host_free`` during the test (what earlier
    tests left to the background watcher freed first).

    The process's staging pool keeps its own background sweep out of them: in a long
    run, blocks it cached in earlier tests reach its idle timeout (60 s) and would be
    freed during this one (the native core's small uploads no longer draw on the pool
    every time, so its idle blocks do age)."""
    monkeypatch.setattr(staging_pool(), "idle_timeout", None)  # (its chore then sleeps)
    assert ct.settle()  # (earlier tests' collected buffers freed before we listen)
    backend = get_backend()
    original = backend.host_free
    calls: list[int] = []

    def recording(ptr: int) -> None:
        calls.append(ptr)
        original(ptr)

    monkeypatch.setattr(backend, "host_free", recording)
    yield calls


# -- PinnedHostBuffer ------------------------------------------------------------------------
def test_buffer_basics() -> None:
    buf = cuasync.PinnedHostBuffer(4096)
    assert buf.nbytes == 4096 and buf.dtype is None and buf.pool is None
    assert isinstance(buf.address, int) and buf.address != 0
    assert not buf.in_flight and not buf.released
    raw = buf.array()
    assert raw.dtype == np.uint8 and raw.shape == (4096,)
    assert raw.ctypes.data == buf.address
    f = buf.array("float32")
    assert f.shape == (1024,) and f.dtype == np.float32
    m = buf.array(np.float64, (16, 32))
    assert m.shape == (16, 32)
    m[3, 4] = 2.5
    assert buf.array("float64")[3 * 32 + 4] == 2.5  # views share the memory
    assert "PinnedHostBuffer 4096 B at 0x" in repr(buf)


def test_typed_buffer_views_default_to_its_dtype() -> None:
    buf = cuasync.PinnedHostBuffer(96, "int32")
    assert buf.dtype == np.int32
    assert buf.array().shape == (24,) and buf.array().dtype == np.int32
    assert buf.array(shape=(4, 6)).shape == (4, 6)
    assert buf.array("uint8").shape == (96,)  # reinterpreting is explicit and allowed
    assert "int32" in repr(buf)


def test_array_shape_and_dtype_are_checked_against_nbytes() -> None:
    buf = cuasync.PinnedHostBuffer(100)
    with pytest.raises(
        ShapeError, match=r"shape=\(10, 3\) of float32 covers 120 bytes but the buffer holds 100"
    ):
        buf.array("float32", (10, 3))
    with pytest.raises(ShapeError, match="not a whole number of float64 elements"):
        buf.array("float64")
    with pytest.raises(ShapeError, match="must be >= 0"):
        buf.array("uint8", (-100,))
    with pytest.raises(DTypeError, match="not a supported dtype"):
        buf.array("object")
    assert buf.array("float32", (5, 5)).shape == (5, 5)


def test_bad_sizes_and_dtypes_are_refused() -> None:
    for bad in (-1, 1.5, True, "4096"):
        with pytest.raises(ArgumentError, match="nbytes must be an int >= 0"):
            cuasync.PinnedHostBuffer(bad)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="not a whole number of float32"):
        cuasync.PinnedHostBuffer(10, "float32")
    with pytest.raises(DTypeError):
        cuasync.PinnedHostBuffer(16, "str")


def test_zero_byte_buffer() -> None:
    buf = cuasync.PinnedHostBuffer(0, "float32")
    assert buf.array().shape == (0,)
    assert buf.array(shape=(0, 5)).shape == (0, 5)


def test_standalone_buffer_is_freed_when_collected(freed: list[int]) -> None:
    buf = cuasync.PinnedHostBuffer(8192)
    address = buf.address
    del buf
    assert ct.settle()  # (the background watcher frees it: a destructor never blocks)
    assert freed == [address]


@contextlib.contextmanager
def _collected_behind_a_gate() -> Iterator[tuple[int, cuasync.DeviceFuture[None]]]:
    """A pinned buffer without a pool, made and collected while a gate holds a sleep on
    a stream: its address and the held sleep, for the caller to await after the block
    (the gate opens as it ends)."""
    buf = cuasync.PinnedHostBuffer(8192)
    address = buf.address
    stream = cuasync.Device(0).new_stream()
    with ct.gate(stream):
        held = ct.sleep(100, stream=stream).submit()
        del buf
        gc.collect()
        yield address, held


@pytest.mark.anyio
async def test_a_buffer_collected_while_work_is_in_flight_is_freed_once_it_lands(
    anyio_backend, freed: list[int]
) -> None:
    """Freeing pinned memory waits for the device: a buffer dropped while work is held
    behind a gate must not hold the thread that dropped it (the event loop here) until
    the gate opens. The background watcher frees it once nothing is in flight."""
    with _collected_behind_a_gate() as (address, held):
        assert freed == []  # (had it been freed here, this thread would wait on a GPU)
    await held
    await wait_until(lambda: freed == [address])


@pytest.mark.anyio
async def test_frees_that_wait_too_long_for_a_quiet_moment_are_made_anyway(
    anyio_backend, freed: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service with work always in flight must get collected buffers' memory back:
    past ``ORPHANS.patience_s`` the background watcher frees them anyway (it may wait
    for the device there; no event loop does)."""
    from cuasync._transfers.staging import ORPHANS

    monkeypatch.setattr(ORPHANS, "patience_s", 0.05)
    with _collected_behind_a_gate() as (address, held):
        await wait_until(lambda: freed == [address])  # (the gate still closed)
    await held


def test_a_view_keeps_the_memory_alive(freed: list[int]) -> None:
    buf = cuasync.PinnedHostBuffer(8192)
    address = buf.address
    view = buf.array("float32")
    view[:] = 7
    del buf
    gc.collect()
    assert freed == []
    assert float(view.sum()) == 7 * 2048  # still readable
    del view
    assert ct.settle()
    assert freed == [address]


def test_release_makes_the_buffer_unusable(freed: list[int]) -> None:
    buf = cuasync.PinnedHostBuffer(4096)
    address = buf.address
    buf.release()
    assert ct.settle()
    assert buf.released and freed == [address]
    with pytest.raises(ArgumentError, match="released"):
        buf.array()
    with pytest.raises(ArgumentError, match="released"):
        _ = buf.address
    buf.release()  # idempotent
    assert "released" in repr(buf)


def test_context_manager_releases(freed: list[int]) -> None:
    with cuasync.PinnedHostBuffer(4096) as buf:
        address = buf.address
        buf.array()[:] = 1
    assert ct.settle()
    assert buf.released and freed == [address]


# -- PinnedPool --------------------------------------------------------------------------------
def test_pool_hands_the_same_block_back_after_release(freed: list[int]) -> None:
    pool = cuasync.PinnedPool()
    a = pool.acquire(5000)
    assert a.nbytes == 5000 and a.pool is pool
    address = a.address
    a.release()
    b = pool.acquire(6000)  # same 8 KiB size class
    assert b.address == address and b.nbytes == 6000
    s = pool.stats()
    # small classes are carved out of one 1 MiB pinned chunk
    assert (s.allocations, s.reuses, s.bytes_allocated) == (1, 1, CHUNK)
    assert (s.bytes_cached, s.bytes_in_use) == (CHUNK - 8192, 8192)
    assert freed == []  # pooled memory goes back to the pool, not to the driver


def test_pool_reuses_after_collection_and_context_manager() -> None:
    pool = cuasync.PinnedPool()
    buf = pool.acquire(4096, "float32")
    address = buf.address
    del buf
    gc.collect()
    with pool.acquire(4096) as again:
        assert again.address == address
    assert again.released
    assert pool.acquire(100).address == address  # 100 B rounds up to the 4 KiB class
    assert pool.stats().reuses == 2


def test_pool_size_classes_do_not_mix() -> None:
    pool = cuasync.PinnedPool()
    small = pool.acquire(4096)
    big = pool.acquire(4097)
    small_address = small.address
    assert small_address != big.address
    s = pool.stats()
    assert s.allocations == 2 and s.bytes_allocated == 2 * CHUNK  # one chunk per class
    assert s.bytes_in_use == 4096 + 8192
    small.release()
    assert pool.stats().bytes_in_use == 8192
    other = pool.acquire(8192)  # the idle 4 KiB block does not serve the 8 KiB class
    assert other.address not in (small_address, big.address)
    assert pool.stats().allocations == 2  # carved from the 8 KiB chunk


def test_pool_trim_frees_idle_blocks(freed: list[int]) -> None:
    pool = cuasync.PinnedPool()
    bufs = [pool.acquire(4096) for _ in range(3)]
    chunk = min(b.address for b in bufs)  # the first block handed out is the chunk's base
    keep = bufs.pop()
    for b in bufs:
        b.release()
    assert pool.stats().bytes_in_use == 4096
    assert pool.trim() == 0  # a chunk goes back only when all of its blocks are idle
    assert freed == []
    assert "4096 B in use" in repr(pool)
    big = pool.acquire(1 << 16)  # 64 KiB and up: one allocation per block
    big.release()
    assert pool.trim() == 1 << 16
    keep.release()
    assert pool.trim() == CHUNK
    assert chunk in freed and len(freed) == 2
    s = pool.stats()
    assert (s.bytes_cached, s.bytes_allocated, s.bytes_in_use) == (0, 0, 0)


def test_default_pool_is_shared_and_serves_staging() -> None:
    pool = cuasync.PinnedPool.default()
    assert pool is cuasync.PinnedPool.default()
    before = pool.stats()
    data = np.arange(3000, dtype=np.float64)  # 24000 B: the 32 KiB class
    t = cuasync.from_host(data).sync()
    np.testing.assert_array_equal(t.to_host().sync(), data)
    gc.collect()
    after = pool.stats()
    assert after.allocations + after.reuses >= before.allocations + before.reuses + 2


def test_pool_acquire_checks_its_arguments() -> None:
    pool = cuasync.PinnedPool()
    with pytest.raises(ArgumentError, match="nbytes"):
        pool.acquire(-5)
    with pytest.raises(ShapeError):
        pool.acquire(10, "float64")


# -- busy while in flight ------------------------------------------------------------------------
def test_buffer_in_flight_refuses_views_and_names_the_transfer() -> None:
    s = cuasync.Device(0).new_stream()
    t = cuasync.zeros((1024,), "float32").sync()
    buf = cuasync.PinnedPool.default().acquire(4096, "float32")
    buf.array()[:] = 3
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        assert buf.in_flight
        with pytest.raises(
            BusyResourceError,
            match=r"upload_pending on stream 0x[0-9a-f]+ .*await the PendingTransfer",
        ) as info:
            buf.array()
        assert "PinnedHostBuffer 4096 B float32" in str(info.value)
        assert buf.in_flight  # still: the copy waits at the gate
    tensor, same = pending.wait()
    assert same is buf and not buf.in_flight
    assert float(buf.array().sum()) == 3 * 1024
    np.testing.assert_array_equal(tensor.to_host().sync(), np.full(1024, 3, np.float32))


def test_download_buffer_is_busy_until_the_copy_is_observed() -> None:
    s = cuasync.Device(0).new_stream()
    t = cuasync.full((256,), 5.0, "float64").sync()
    buf = cuasync.PinnedHostBuffer(2048, "float64")
    with ct.gate(s):
        pending = cuasync.download_pending(t, buf, stream=s)
        with pytest.raises(BusyResourceError, match="download_pending"):
            buf.array()
    pending.wait()
    np.testing.assert_array_equal(buf.array(), np.full(256, 5.0))


def test_in_flight_clears_when_the_copy_lands_without_waiting() -> None:
    s = cuasync.Device(0).new_stream()
    t = cuasync.zeros((16,), "uint8").sync()
    buf = cuasync.PinnedHostBuffer(16)
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        assert buf.in_flight
    pending.stream.synchronize()
    assert not buf.in_flight  # polling observed the completion: no wait() needed
    assert pending.is_ready()


def test_release_while_in_flight_returns_the_block_only_after_the_copy(baseline) -> None:
    s = cuasync.Device(0).new_stream()
    pool = cuasync.PinnedPool()
    t = cuasync.zeros((2048,), "uint8").sync()
    buf = pool.acquire(2048)
    address = buf.address
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        buf.release()
        gc.collect()
        assert pool.stats().bytes_in_use == 4096  # the device may still read it
        assert pool.acquire(2048).address != address
    tensor, same = pending.wait()
    del pending, same, tensor, t
    gc.collect()
    assert pool.acquire(2048).address == address


# -- trimming idle blocks on its own ----------------------------------------------------------
class FakeClock:
    """A monotonic clock the test moves by hand; counts its readings."""

    def __init__(self) -> None:
        self.now = 0.0
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return self.now


async def _let_the_sweep_run(pool: cuasync.PinnedPool, clock: FakeClock) -> None:
    """Reschedule the background sweep (setting the timeout does) and wait until it has
    looked at the clock."""
    before = clock.readings
    pool.idle_timeout = pool.idle_timeout
    await wait_until(lambda: clock.readings > before)


@pytest.mark.anyio
async def test_idle_blocks_are_freed_in_the_background_after_the_idle_timeout(
    anyio_backend, freed: list[int]
) -> None:
    clock = FakeClock()
    pool = cuasync.PinnedPool(idle_timeout=10.0, clock=clock)
    first, second, kept = (pool.acquire(n) for n in (1 << 16, 1 << 17, 1 << 18))
    first_address, second_address = first.address, second.address
    first.release()  # idle since 0
    clock.now = 6.0
    second.release()  # idle since 6
    assert pool.stats().bytes_cached == (1 << 16) + (1 << 17)

    clock.now = 9.5
    await _let_the_sweep_run(pool, clock)
    assert freed == [] and pool.stats().bytes_cached == (1 << 16) + (1 << 17)

    clock.now = 10.0
    await wait_until(lambda: freed == [first_address])  # the watcher was due at 10 s
    clock.now = 16.0
    await _let_the_sweep_run(pool, clock)
    await wait_until(lambda: freed == [first_address, second_address])
    s = pool.stats()
    assert (s.bytes_cached, s.bytes_in_use) == (0, 1 << 18)  # a block in use stays
    kept.release()


@pytest.mark.anyio
async def test_the_background_sweep_waits_while_work_is_in_flight(
    anyio_backend, freed: list[int]
) -> None:
    # Freeing pinned memory waits for the device: swept while work is held behind a
    # gate, the watcher thread would hold the driver until the gate opened (on the H200
    # that deadlocked a test loading a module meanwhile). The sweep waits instead.
    clock = FakeClock()
    pool = cuasync.PinnedPool(idle_timeout=10.0, clock=clock)
    block = pool.acquire(1 << 16)
    address = block.address
    block.release()
    stream = cuasync.Device(0).new_stream()
    with ct.gate(stream):
        held = ct.sleep(100, stream=stream).submit()
        clock.now = 20.0
        await _let_the_sweep_run(pool, clock)
        assert freed == [] and pool.stats().bytes_cached == 1 << 16
    await held
    # Now the sweep frees it: on its 1 s busy retry, or at once when kicked. (Waiting for
    # one more clock reading would race: in host-callback mode the watcher finishes
    # `held` itself and may sweep before the kick, leaving nothing to read the clock for.)
    pool.idle_timeout = pool.idle_timeout
    await wait_until(lambda: freed == [address])


def test_trim_idle_for_frees_only_what_has_been_idle_that_long(freed: list[int]) -> None:
    clock = FakeClock()
    pool = cuasync.PinnedPool(idle_timeout=None, clock=clock)
    small = [pool.acquire(4096) for _ in range(2)]  # two blocks of one 1 MiB chunk
    big = pool.acquire(1 << 16)
    big.release()
    small[0].release()
    clock.now = 5.0
    small[1].release()  # the chunk is all idle from 5 s on
    assert pool.trim(idle_for=5.0) == (1 << 16)  # the big block (idle 5 s); the chunk: 0 s
    clock.now = 10.0
    assert pool.trim(idle_for=5.0) == CHUNK
    assert len(freed) == 2 and pool.stats().bytes_allocated == 0


def test_a_block_in_flight_is_never_trimmed(baseline, freed: list[int]) -> None:
    clock = FakeClock()
    pool = cuasync.PinnedPool(idle_timeout=0.0, clock=clock)
    s = cuasync.Device(0).new_stream()
    t = cuasync.zeros((1 << 16,), "uint8").sync()
    buf = pool.acquire(1 << 16)
    with ct.gate(s):
        pending = cuasync.download_pending(t, buf, stream=s)
        buf.release()
        gc.collect()
        clock.now = 1000.0
        assert pool.trim(idle_for=0.0) == 0  # the device may still write it
        assert freed == [] and pool.stats().bytes_in_use == 1 << 16
    tensor, same = pending.wait()
    del pending, same, tensor, t
    gc.collect()
    pool.trim(idle_for=0.0)  # unless the background sweep (due at once) was first
    assert pool.stats().bytes_allocated == 0


def test_idle_timeout_is_checked_and_defaults_to_the_environment() -> None:
    for bad in (-1.0, float("nan"), "10", True):
        with pytest.raises(ArgumentError, match="idle_timeout"):
            cuasync.PinnedPool(idle_timeout=bad)  # type: ignore[arg-type]
    assert cuasync.PinnedPool(idle_timeout=None).idle_timeout is None
    script = "import cuasync; print(cuasync.PinnedPool.default().idle_timeout, cuasync.PinnedPool().idle_timeout)"
    assert run_script(script).stdout.split() == ["60.0", "60.0"]
    assert run_script(script, CUASYNC_PINNED_IDLE_S="2.5").stdout.split() == ["2.5", "2.5"]
    assert run_script(script, CUASYNC_PINNED_IDLE_S="off").stdout.split() == ["None", "None"]
