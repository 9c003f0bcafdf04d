"""Copies from and into pageable numpy memory: the single and chunked staging routes.

Behaviour is held with mechanisms both backends have: a gate holds the stream, and the
copy threads' memcpy (``cuasync._transfers.pageable._memcpy``) is replaced by one that waits on an
event, fails or counts, so every test runs unchanged on a GPU.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Iterator

import anyio
import numpy as np
import pytest
from helpers import run_script, settle, still_pending, wait_until

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync._transfers import copy_threads as _copy_threads
from cuasync._transfers import pageable as _pageable
from cuasync._transfers.pageable import (
    CHUNK_MAX,
    CHUNK_MIN,
    DOWNLOAD_CHUNKED_MIN,
    MAX_CHUNKS,
    UPLOAD_CHUNKED_MIN,
    chunk_bytes,
    download_route,
    forced_route,
    upload_route,
)

pytestmark = pytest.mark.anyio

CHUNKED = (
    _copy_threads.pool_size() > 0
    and upload_route(UPLOAD_CHUNKED_MIN, cuasync.Device(0)) == "chunked"
)
needs_chunked = pytest.mark.skipif(
    not CHUNKED, reason="no copy threads (CUASYNC_STAGING_THREADS=0) or stream memory ops"
)


def data(nbytes: int, dtype: str = "uint8", seed: int = 0) -> np.ndarray:
    """``nbytes`` (rounded down to whole items) of distinct-looking values."""
    dt = np.dtype(dtype)
    n = nbytes // dt.itemsize
    values = np.random.default_rng(seed).integers(0, 250, n)
    return (values % 2 == 1) if dt == np.bool_ else values.astype(dt)


class Copies:
    """Stands in for the staging memcpy: counts calls, holds those of the copy threads
    until ``release`` is set, fails the ``fail_at``-th one."""

    def __init__(self, hold: bool = False, fail_at: int | None = None) -> None:
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.fail_at = fail_at
        self.calls = 0
        self.done = 0
        self.lock = threading.Lock()

    def __call__(self, dst: np.ndarray, src: np.ndarray) -> None:
        with self.lock:
            self.calls += 1
            call = self.calls
        if threading.current_thread().name.startswith("cuasync-copy"):  # not the caller's
            assert self.release.wait(30), "the test never released the copies"
        if call == self.fail_at:
            raise MemoryError("injected failure of a staging copy")
        np.copyto(dst, src)
        with self.lock:
            self.done += 1


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[Copies]:
    held = Copies(hold=True)
    monkeypatch.setattr(_pageable, "_memcpy", held)
    try:
        yield held
    finally:
        held.release.set()  # a failing test must not leave copy threads waiting


# -- routes ------------------------------------------------------------------------------
def test_routes_by_size() -> None:
    dev = cuasync.Device(0)
    assert upload_route(UPLOAD_CHUNKED_MIN - 1, dev) == "single"
    assert download_route(DOWNLOAD_CHUNKED_MIN - 1, dev) == "single"
    assert upload_route(0, dev) == download_route(0, dev) == "single"
    expected = "chunked" if CHUNKED else "single"
    assert upload_route(UPLOAD_CHUNKED_MIN, dev) == expected
    assert download_route(DOWNLOAD_CHUNKED_MIN, dev) == expected
    with forced_route("single"):
        assert upload_route(1 << 30, dev) == "single"
    with forced_route("chunked"):
        assert upload_route(1, dev) == expected
    with pytest.raises(ValueError, match="route must be"), forced_route("direct"):
        pass


def test_chunk_sizes() -> None:
    threads = max(1, _copy_threads.pool_size())
    for nbytes in (1, CHUNK_MIN, UPLOAD_CHUNKED_MIN, 64 << 20, 1 << 30, 1 << 34):
        chunk = chunk_bytes(nbytes)
        count = -(-nbytes // chunk)
        assert chunk & (chunk - 1) == 0 and chunk >= CHUNK_MIN and count <= MAX_CHUNKS
        assert chunk <= CHUNK_MAX or count > MAX_CHUNKS // 2  # larger only past the cap
        if CHUNK_MIN < chunk < CHUNK_MAX:  # two chunks or more per thread, not many more
            assert 2 * threads <= count < 4 * threads


def test_no_copy_threads_means_single_route() -> None:
    run_script(
        """
        import numpy as np, cuasync, threading
        from cuasync._transfers.pageable import upload_route, UPLOAD_CHUNKED_MIN
        assert upload_route(UPLOAD_CHUNKED_MIN * 4, cuasync.Device(0)) == "single"
        a = np.arange(1 << 20, dtype=np.float32)
        t = cuasync.from_host(a).sync()
        out = np.empty_like(a)
        cuasync.download_into(t, out)
        assert (out == a).all()
        assert not [t for t in threading.enumerate() if t.name.startswith("cuasync-copy")]
        """,
        CUASYNC_STAGING_THREADS="0",
    )


# -- results -----------------------------------------------------------------------------
def _upload_sizes() -> list[int]:
    chunk = chunk_bytes(UPLOAD_CHUNKED_MIN)
    sizes = {1, CHUNK_MIN - 1, CHUNK_MIN, CHUNK_MIN + 1, UPLOAD_CHUNKED_MIN - 1}
    sizes |= {UPLOAD_CHUNKED_MIN, UPLOAD_CHUNKED_MIN + 1, 3 * chunk - 1, 3 * chunk + 7}
    sizes |= {2 * CHUNK_MAX + 3}  # chunks of the largest size, and a short last one
    return sorted(sizes)


@pytest.mark.parametrize(
    ("route", "nbytes"),
    [
        (route, nbytes)
        for nbytes in _upload_sizes()
        for route in (None, "single", "chunked")
        # (the single route of large arrays is the old path, tested elsewhere)
        if not (route == "single" and nbytes > 4 * UPLOAD_CHUNKED_MIN)
    ],
)
def test_from_host_equals_numpy_around_the_thresholds(route: str | None, nbytes: int) -> None:
    a = data(nbytes)
    with forced_route(route):
        t = cuasync.from_host(a).sync()
    np.testing.assert_array_equal(t.to_host().sync(), a)


@pytest.mark.parametrize("route", ["single", "chunked"])
@pytest.mark.parametrize(
    ("dtype", "make"),
    [
        ("float32", lambda a: a.reshape(1024, -1).T),  # transposed: split by rows
        ("float64", lambda a: a.reshape(256, -1)[:, ::2]),  # every other column
        ("int16", lambda a: a.reshape(1, 1, -1)[:, :, ::3]),  # leading axes of length 1
        ("complex64", lambda a: a.reshape(64, 64, -1)[::-1]),  # a reversed first axis
        ("uint8", lambda a: np.asfortranarray(a.reshape(1024, -1))),
        ("bool", lambda a: a.reshape(4, -1)[:, 1:]),  # rows larger than a chunk
        ("float16", lambda a: a[:0]),
        ("int32", lambda a: a.reshape(8, -1)[:, :0]),
    ],
)
def test_from_host_of_non_contiguous_and_empty_arrays(route: str, dtype: str, make) -> None:
    a = make(data(4 << 20, dtype, seed=1))
    assert not a.flags.c_contiguous or a.size == 0
    with forced_route(route):
        t = cuasync.from_host(a).sync()
    assert t.shape == a.shape and t.dtype == a.dtype
    np.testing.assert_array_equal(t.to_host().sync(), a)


@pytest.mark.parametrize("nbytes", [DOWNLOAD_CHUNKED_MIN - 1, DOWNLOAD_CHUNKED_MIN + 5, 3 << 20])
@pytest.mark.parametrize("route", [None, "single", "chunked"])
def test_download_into_equals_numpy(route: str | None, nbytes: int) -> None:
    a = data(nbytes, "uint8", seed=2)
    t = cuasync.from_host(a).sync()
    out = np.zeros(nbytes, np.uint8)
    with forced_route(route):
        assert cuasync.download_into(t, out) is out
    np.testing.assert_array_equal(out, a)
    # another shape of out, a typed tensor, a strided view of it (the single route)
    b = data(nbytes, "float32", seed=3)
    tb = cuasync.from_host(b).sync()
    out2 = np.zeros((b.size // 4, 4) if b.size % 4 == 0 else b.shape, np.float32)
    with forced_route(route):
        cuasync.download_into(tb, out2)
        np.testing.assert_array_equal(out2.reshape(-1), b)
        half = np.zeros(tb[::2].shape, np.float32)
        cuasync.download_into(tb[::2], half)
    np.testing.assert_array_equal(half, b[::2])


def test_no_copy_touches_pageable_memory(emu) -> None:
    """Every route stages through pinned memory: the emulator counts copies whose host
    side is not pinned, and none is issued."""
    before = emu.pageable_copies()
    for nbytes in (1000, UPLOAD_CHUNKED_MIN + 3):
        for route in ("single", "chunked"):
            a = data(nbytes, "float32")
            with forced_route(route):
                t = cuasync.from_host(a).sync()
                cuasync.download_into(t, np.empty_like(a))
                t.to_host().sync()
                cuasync.from_host(a[: a.size // 8 * 8].reshape(8, -1)[:, ::2]).sync()
    assert emu.pageable_copies() == before
    # a copy from a numpy array's own memory is counted
    t = cuasync.empty((4,), "float32").sync()
    host, stream = np.ones(4, np.float32), cuasync.Device(0).new_stream()
    get_backend().memcpy_htod_async(t.ptr, host.ctypes.data, 16, stream.handle)
    stream.synchronize()
    assert emu.pageable_copies() == before + 1


@pytest.mark.skipif(cuasync.device_count() < 2, reason="needs two devices")
@pytest.mark.parametrize("route", ["single", "chunked"])
def test_routes_on_another_device(route: str) -> None:
    a = data(3 << 20, "float32", seed=4)
    with forced_route(route):
        t = cuasync.from_host(a, device=1).sync()
        assert t.device.ordinal == 1
        out = np.empty_like(a)
        cuasync.download_into(t, out)
    np.testing.assert_array_equal(out, a)


# -- the array's lifetime ------------------------------------------------------------------
def test_small_array_may_change_right_after_submit() -> None:
    a = data(UPLOAD_CHUNKED_MIN // 2, "float32")
    expected = a.copy()
    fut = cuasync.from_host(a).submit()
    a[:] = 0  # read during submission: the op does not see this
    np.testing.assert_array_equal(fut.wait().to_host().sync(), expected)


@needs_chunked
def test_chunked_upload_keeps_the_array_alive(copies: Copies) -> None:
    a = data(4 << 20, "float64")
    expected, alive = a.copy(), weakref.ref(a)
    with forced_route("chunked"):
        fut = cuasync.from_host(a).submit()
    del a  # the op is the only holder now; the copy threads have not read it yet
    assert alive() is not None and copies.done == 0
    copies.release.set()
    np.testing.assert_array_equal(fut.wait().to_host().sync(), expected)
    del fut
    settle()
    assert alive() is None


# -- the event loop is not blocked -------------------------------------------------------
@needs_chunked
async def test_submission_returns_before_the_copies(anyio_backend, copies: Copies) -> None:
    a = data(4 << 20, "float32")
    s = cuasync.Device(0).new_stream()
    with forced_route("chunked"):
        fut = cuasync.from_host(a).submit_on(s)
    # the loop thread enqueued and returned: no chunk was copied yet
    assert copies.done == 0 and not fut.done()
    ran = anyio.Event()

    async def other_task() -> None:
        ran.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(other_task)
        await ran.wait()
    assert not fut.done()
    copies.release.set()
    t = await fut
    np.testing.assert_array_equal(await t.to_host(), a)
    assert copies.done == len(_pageable._split(a, chunk_bytes(a.nbytes))[1])


@needs_chunked
async def test_staged_copy_pending_behind_a_gate(anyio_backend, baseline, copies) -> None:
    a = data(3 << 20, "int32")
    s = cuasync.Device(0).new_stream()
    nchunks = len(_pageable._split(a, chunk_bytes(a.nbytes))[1])
    copies.release.set()
    with ct.gate(s) as gate:
        with forced_route("chunked"):
            fut = cuasync.from_host(a).submit_on(s)
        # the copy threads stage every chunk while the loop runs other tasks...
        await wait_until(lambda: copies.done == nchunks)
        assert still_pending(fut.done)  # ...and the DMAs wait for the gate
        gate.open()
        t = await fut
    np.testing.assert_array_equal(await t.to_host(), a)
    del t, fut


@needs_chunked
def test_a_first_kernel_load_waits_for_held_copies(copies: Copies) -> None:
    """On a GPU a first module load synchronizes the device, so it waits for the
    chunked upload's words: the copy threads write them without the loading thread, so
    the load goes on once they do (the emulator models the wait)."""
    source = """
    extern "C" __global__ void bump(float* x, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] += 1.0f;
    }
    """

    def twin(x: np.ndarray, n: int) -> None:
        x[:n] += 1

    bump = cuasync.Kernel(source, "bump", emulate=twin)
    a = data(2 << 20, "float32")
    x = cuasync.from_host(np.zeros(4, np.float32)).sync()
    s = cuasync.Device(0).new_stream()
    with forced_route("chunked"):
        fut = cuasync.from_host(a).submit_on(s)  # its words stay closed: copies are held
    outcome: list[object] = []

    def first_launch() -> None:
        try:
            outcome.append(bump[1, 32](x, 4).sync())
        except BaseException as exc:
            outcome.append(exc)

    loader = threading.Thread(target=first_launch)
    loader.start()
    copies.release.set()  # before or after the load began: it must go on either way
    loader.join(60)
    assert not loader.is_alive(), "the first kernel load never finished"
    assert outcome and not isinstance(outcome[0], BaseException), outcome
    np.testing.assert_array_equal(x.to_host().sync(), np.ones(4, np.float32))
    np.testing.assert_array_equal(fut.wait().to_host().sync(), a)


# -- failures ------------------------------------------------------------------------------
@needs_chunked
@pytest.mark.parametrize("which", ["first", "last"])
async def test_a_failing_copy_fails_the_op(anyio_backend, baseline, monkeypatch, which) -> None:
    a = data(4 << 20)
    nchunks = len(_pageable._split(a, chunk_bytes(a.nbytes))[1])
    assert nchunks >= 2
    monkeypatch.setattr(_pageable, "_memcpy", Copies(fail_at=1 if which == "first" else nchunks))
    with forced_route("chunked"), pytest.raises(MemoryError, match="injected failure") as caught:
        await cuasync.from_host(a)
    assert any("copy thread" in note for note in caught.value.__notes__)
    # every word was written (else the stream would hang): the next op runs
    np.testing.assert_array_equal(await (await cuasync.from_host(a[:10])).to_host(), a[:10])


@needs_chunked
def test_a_submission_failing_part_way_writes_its_words(baseline, monkeypatch) -> None:
    backend = cuasync._backends.get_backend()
    real, calls = backend.memcpy_htod_async, []

    def second_fails(dst: int, src: int, nbytes: int, stream: int) -> None:
        calls.append(dst)
        if len(calls) == 2:
            raise cuasync.errors.DeviceError("injected failure to enqueue a copy")
        real(dst, src, nbytes, stream)

    monkeypatch.setattr(backend, "memcpy_htod_async", second_fails)
    s = cuasync.Device(0).new_stream()
    with forced_route("chunked"), pytest.raises(cuasync.errors.DeviceError, match="injected"):
        cuasync.from_host(data(2 << 20)).submit_on(s)
    monkeypatch.undo()
    t = cuasync.from_host(np.arange(4.0)).sync_on(s)  # the stream was not left held
    np.testing.assert_array_equal(t.to_host().sync(), np.arange(4.0))


@needs_chunked
def test_a_failure_to_queue_the_copies_writes_the_words(baseline, monkeypatch) -> None:
    def refuse(tasks: list[_copy_threads.Task]) -> bool:
        raise MemoryError("injected: no memory to queue the copies")

    monkeypatch.setattr(_copy_threads, "submit", refuse)
    s = cuasync.Device(0).new_stream()
    with forced_route("chunked"), pytest.raises(MemoryError, match="injected"):
        cuasync.from_host(data(2 << 20)).submit_on(s)
    monkeypatch.undo()
    # the waits already enqueued must not hold the stream forever
    assert cuasync.testing.settle(), "the stream waits on a word nobody will write"
    t = cuasync.from_host(np.arange(4.0)).sync_on(s)
    np.testing.assert_array_equal(t.to_host().sync(), np.arange(4.0))


@needs_chunked
def test_running_out_of_words_fails_cleanly(baseline, monkeypatch) -> None:
    hub = cuasync._core.completion.get_hub()
    real, calls = hub.claim_word, []

    def second_fails() -> tuple[int, int, int]:
        calls.append(1)
        if len(calls) == 2:
            raise cuasync.errors.DeviceError("injected: all flag slots are in use")
        return real()

    monkeypatch.setattr(hub, "claim_word", second_fails)
    with forced_route("chunked"), pytest.raises(cuasync.errors.DeviceError, match="injected"):
        cuasync.from_host(data(2 << 20)).sync()


@needs_chunked
def test_a_failing_copy_out_fails_download_into(baseline, monkeypatch) -> None:
    a = data(3 << 20)
    t = cuasync.from_host(a).sync()
    monkeypatch.setattr(_pageable, "_memcpy", Copies(fail_at=2))
    with forced_route("chunked"), pytest.raises(MemoryError, match="injected"):
        cuasync.download_into(t, np.empty_like(a))
    monkeypatch.undo()
    out = np.empty_like(a)
    with forced_route("chunked"):
        cuasync.download_into(t, out)
    np.testing.assert_array_equal(out, a)
    del t


# -- cancellation, exit --------------------------------------------------------------------
@needs_chunked
async def test_cancelling_the_await_leaks_nothing(anyio_backend, baseline, copies) -> None:
    a = data(4 << 20, "float32")
    s = cuasync.Device(0).new_stream()
    with ct.gate(s):
        with cuasync.use_policy(cuasync.SingleStream(s)), forced_route("chunked"):
            with anyio.move_on_after(0.01) as scope:
                await cuasync.from_host(a)
        assert scope.cancelled_caught
        copies.release.set()
    # the copies, the DMAs and the completion go on without the task; baseline checks
    # that the words, the slots and the device memory all come back


def test_the_exit_hook_runs_each_queued_task_once(monkeypatch) -> None:
    pool = _copy_threads._Pool()
    started, release = threading.Event(), threading.Event()
    runs: list[int] = []

    def held(i: int) -> None:
        started.set()
        assert release.wait(30)

    try:
        assert pool.submit([(held, 0), (runs.append, 1)], 1)
        assert started.wait(30)  # the one thread runs `held`; the other task is queued
        queue = pool.tasks  # what the thread takes its next task from
        monkeypatch.setattr(_copy_threads, "_EXIT_WAIT_S", 0.01)
        pool.close()  # runs the queued task here; `held` is still running
        assert runs == [1]
        assert not queue, "a copy thread would run the task a second time"
    finally:
        release.set()
        atexit.unregister(pool.close)


def test_exit_with_chunked_copies_queued_or_running() -> None:
    run_script(
        """
        import threading, numpy as np, cuasync
        from cuasync._transfers import pageable as _pageable
        entered, stuck = threading.Event(), threading.Event()
        def memcpy(dst, src):
            if threading.current_thread().name.startswith("cuasync-copy"):
                entered.set()
                stuck.wait()  # the copy thread never finishes its chunk
            np.copyto(dst, src)
        _pageable._memcpy = memcpy
        with _pageable.forced_route("chunked"):
            fut = cuasync.from_host(np.ones(4 << 20, np.uint8)).submit()
        assert entered.wait(30)
        # exit now: the queued chunks run in the exit hook, the stuck thread is a daemon
        """,
        timeout=60,
        CUASYNC_STAGING_THREADS="1",
    )
