"""Pending transfers (upload_pending / download_pending) and download_into."""

from __future__ import annotations

import asyncio
import gc
import textwrap
import time
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest
from helpers import run_script, settle, still_pending

import cuasync
import cuasync.testing as ct
from cuasync.errors import (
    ArgumentError,
    BusyResourceError,
    DTypeError,
    ShapeError,
    SyncInEventLoopError,
    TransferRejected,
)

pytestmark = pytest.mark.anyio

CASES = [
    ("float32", (1000,)),
    ("float64", (7, 13)),
    ("int16", (3, 4, 5)),
    ("uint8", (4096,)),
    ("complex64", (16,)),
    ("bool", (33,)),
    ("int64", (0,)),
    ("float16", (2, 2, 2, 2)),
]


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dtype == "bool":
        return (rng.integers(0, 2, n) == 1).reshape(shape)
    if dtype.startswith("complex"):
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype).reshape(shape)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 100, n).astype(dtype).reshape(shape)
    return rng.standard_normal(n).astype(dtype).reshape(shape)


def released(ref: weakref.ref[Any]) -> bool:
    """Whether ``ref``'s object goes away once the device is idle (polled, with a deadline)."""
    settle()
    deadline = time.monotonic() + 10
    while ref() is not None and time.monotonic() < deadline:
        cuasync.Device(0).synchronize(allow_in_loop=True)  # (a helper: polls)
        gc.collect()
    return ref() is None


def filled(data: np.ndarray, typed: bool = True) -> cuasync.PinnedHostBuffer:
    buf = cuasync.PinnedPool.default().acquire(data.nbytes, data.dtype if typed else None)
    buf.array(data.dtype, data.shape)[...] = data
    return buf


# -- round trips ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "shape"), CASES, ids=[f"{d}{s}" for d, s in CASES])
def test_round_trip_with_wait(dtype: str, shape: tuple[int, ...]) -> None:
    data = sample(dtype, shape)
    t = cuasync.empty(shape, dtype).sync()
    up = filled(data)
    pending = cuasync.upload_pending(up, t)
    assert isinstance(pending, cuasync.PendingTransfer)
    tensor, buffer = pending.wait()
    assert tensor is t and buffer is up
    np.testing.assert_array_equal(t.to_host().sync(), data)
    down = cuasync.PinnedHostBuffer(data.nbytes)  # a raw (untyped) buffer works too
    tensor, buffer = cuasync.download_pending(t, down).wait()
    assert tensor is t and buffer is down
    np.testing.assert_array_equal(down.array(dtype, shape), data)


@pytest.mark.parametrize(("dtype", "shape"), CASES[:4], ids=[f"{d}{s}" for d, s in CASES[:4]])
async def test_round_trip_with_await(anyio_backend, dtype: str, shape: tuple[int, ...]) -> None:
    data = sample(dtype, shape, seed=1)
    t = await cuasync.empty(shape, dtype)
    up = filled(data, typed=False)
    tensor, buffer = await cuasync.upload_pending(up, t)
    assert tensor is t and buffer is up
    down = cuasync.PinnedPool.default().acquire(data.nbytes, dtype)
    tensor, buffer = await cuasync.download_pending(t, down)
    assert buffer is down
    np.testing.assert_array_equal(down.array(shape=shape), data)


async def test_await_while_the_copy_is_slow(anyio_backend) -> None:
    s = cuasync.Device(0).new_stream()
    data = np.arange(1 << 14, dtype=np.float32)
    t = await cuasync.empty(data.shape, "float32").submit_on(s)
    ct.sleep(3000, stream=s).submit()  # 3 ms of device work before each copy
    tensor, _ = await cuasync.upload_pending(filled(data), t, stream=s)
    buf = cuasync.PinnedHostBuffer(data.nbytes, "float32")
    ct.sleep(3000, stream=s).submit()
    tensor, buf = await cuasync.download_pending(tensor, buf, stream=s)
    np.testing.assert_array_equal(buf.array(), data)


def test_transfer_into_a_contiguous_view_at_an_offset() -> None:
    base = cuasync.zeros((4, 8), "int32").sync()
    row = base[2]
    data = np.arange(8, dtype=np.int32) + 100
    cuasync.upload_pending(filled(data), row).wait()
    expected = np.zeros((4, 8), np.int32)
    expected[2] = data
    np.testing.assert_array_equal(base.to_host().sync(), expected)
    out = cuasync.PinnedHostBuffer(32, "int32")
    cuasync.download_pending(base[2], out).wait()
    np.testing.assert_array_equal(out.array(), data)


def test_later_ops_on_other_streams_are_ordered_after_the_upload() -> None:
    s1, s2 = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    data = np.arange(4096, dtype=np.float64)
    t = cuasync.zeros(data.shape, "float64").sync_on(s1)
    with ct.gate(s1):
        pending = cuasync.upload_pending(filled(data), t, stream=s1)
        assert pending.stream is s1
        # no wait: the read on s2 waits for the copy on s1 (event ordering), not the host
        read = t.to_host().submit_on(s2)
        assert still_pending(read.done), "the read did not wait for the upload"
    np.testing.assert_array_equal(read.wait(), data)
    pending.wait()


def test_explicit_stream_and_properties() -> None:
    s = cuasync.Device(0).new_stream()
    t = cuasync.zeros((64,), "uint8").sync_on(s)
    buf = cuasync.PinnedHostBuffer(64)
    pending = cuasync.download_pending(t, buf, stream=s)
    assert pending.stream is s and pending.tensor is t and pending.buffer is buf
    assert pending.kind == "download_pending"
    assert "PendingTransfer download_pending 64 B" in repr(pending)
    pending.wait()
    assert "done" in repr(pending)


# -- is_ready -------------------------------------------------------------------------------------
def test_is_ready_is_false_then_true() -> None:
    s = cuasync.Device(0).new_stream()
    t = cuasync.zeros((256,), "float32").sync()
    buf = filled(np.ones(256, np.float32))
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        assert [pending.is_ready() for _ in range(5)] == [False] * 5
        assert buf.in_flight
    polls = 0
    while not pending.is_ready():  # polling a condition, never waits
        polls += 1
        assert polls < 10_000_000, "the copy never completed"
    assert not buf.in_flight
    assert pending.is_ready()
    tensor, same = pending.wait()  # still hands the pair back afterwards
    assert same is buf
    np.testing.assert_array_equal(tensor.to_host().sync(), np.ones(256, np.float32))


def test_is_ready_may_already_be_true_and_tells_faults_apart() -> None:
    # A fault is sticky for the process's device: run it in a fresh interpreter.
    code = textwrap.dedent(
        """
        import numpy as np, cuasync, cuasync.testing as ct
        from cuasync.errors import DeviceFaultError
        s = cuasync.Device(0).new_stream()
        t = cuasync.zeros((1024,), "float32").sync()
        buf = cuasync.PinnedHostBuffer(4096)
        with ct.gate(s):
            pending = cuasync.upload_pending(buf, t, stream=s)
            print("before", pending.is_ready())
            try:
                ct.trap().sync()  # on another stream: faults the device
            except DeviceFaultError:
                pass
        try:
            for _ in range(1000):
                pending.is_ready()
            print("no error")
        except DeviceFaultError as e:
            print("raised", type(e).__name__)
        try:
            pending.wait()
        except DeviceFaultError:
            print("wait raised")
        """
    )
    r = run_script(code)
    assert r.stdout.split("\n")[:3] == ["before False", "raised DeviceFaultError", "wait raised"]


# -- a PendingTransfer is a DeviceFuture ----------------------------------------------------------
async def test_pending_transfer_is_a_device_future(anyio_backend) -> None:
    s = cuasync.Device(0).new_stream()
    t = await cuasync.zeros((64,), "float32")
    buf = filled(np.arange(64, dtype=np.float32))
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        assert isinstance(pending, cuasync.DeviceFuture)
        assert pending.stream is s
        assert not pending.done()
        with pytest.raises(asyncio.InvalidStateError):
            pending.result()
        with pytest.raises(asyncio.InvalidStateError):
            pending.exception()
    first = await pending
    second = await pending  # a future: awaitable any number of times
    assert first[0] is second[0] is t and first[1] is second[1] is buf
    assert pending.done() and pending.exception() is None and pending.result()[1] is buf
    np.testing.assert_array_equal(await t.to_host(), np.arange(64, dtype=np.float32))


async def test_a_cancelled_await_leaves_the_transfer_awaitable(anyio_backend) -> None:
    s = cuasync.Device(0).new_stream()
    t = await cuasync.zeros((64,), "float32")
    buf = filled(np.ones(64, np.float32))
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        with anyio.move_on_after(0.01) as scope:  # the gate holds the copy: it times out
            await pending
        assert scope.cancelled_caught
        assert buf.in_flight and not pending.done()
    tensor, same = await pending  # the copy went on; the transfer is still valid
    assert tensor is t and same is buf and not buf.in_flight


# -- blocking calls inside event loops -------------------------------------------------------------
async def test_wait_inside_a_running_loop_says_to_await(anyio_backend) -> None:
    t = await cuasync.zeros((8,), "float32")
    pending = cuasync.upload_pending(cuasync.PinnedHostBuffer(32), t)
    with pytest.raises(SyncInEventLoopError, match="use 'await' instead"):
        pending.wait()
    tensor, _ = pending.wait(allow_in_loop=True)
    assert tensor is t


# -- refusals -------------------------------------------------------------------------------------
def _refusals() -> list[tuple[str, Callable[[], tuple[Any, Any]], str, str]]:
    """(id, make (buffer, tensor), route, message pattern)."""

    def size() -> tuple[Any, Any]:
        return cuasync.PinnedHostBuffer(400), cuasync.zeros((99,), "float32").sync()

    def dtype() -> tuple[Any, Any]:
        return cuasync.PinnedHostBuffer(400, "int32"), cuasync.zeros((100,), "float32").sync()

    def strided() -> tuple[Any, Any]:
        return cuasync.PinnedHostBuffer(200), cuasync.zeros((100,), "float32").sync()[::2]

    def numpy() -> tuple[Any, Any]:
        return np.zeros(100, np.float32), cuasync.zeros((100,), "float32").sync()

    def not_tensor() -> tuple[Any, Any]:
        return cuasync.PinnedHostBuffer(400), np.zeros(100, np.float32)

    def released() -> tuple[Any, Any]:
        buf = cuasync.PinnedHostBuffer(400)
        buf.release()
        return buf, cuasync.zeros((100,), "float32").sync()

    cases = []
    for route in ("upload_pending", "download_pending"):
        cases += [
            (f"{route}-size", size, route, "holds 400 bytes but the tensor .* has 396"),
            (f"{route}-dtype", dtype, route, "holds int32 data but the tensor is float32"),
            (f"{route}-strided", strided, route, "non-contiguous view"),
            (f"{route}-numpy", numpy, route, "must be a cuasync.PinnedHostBuffer.*numpy.ndarray"),
            (f"{route}-not-a-tensor", not_tensor, route, "tensor must be a cuasync.Tensor"),
            (f"{route}-released", released, route, "released"),
        ]
    return cases


def _submit(route: str, buffer: Any, tensor: Any, **kw: Any) -> cuasync.PendingTransfer:
    if route == "upload_pending":
        return cuasync.upload_pending(buffer, tensor, **kw)
    return cuasync.download_pending(tensor, buffer, **kw)


@pytest.mark.parametrize(
    ("make", "route", "pattern"), [c[1:] for c in _refusals()], ids=[c[0] for c in _refusals()]
)
def test_refusals_hand_the_package_back_untouched(
    make: Callable[[], tuple[Any, Any]], route: str, pattern: str
) -> None:
    buffer, tensor = make()
    if isinstance(tensor, cuasync.Tensor):
        tensor.allocation.device.synchronize()
    marker = None
    if isinstance(buffer, cuasync.PinnedHostBuffer) and not buffer.released:
        marker = buffer.array()
        marker[:] = np.arange(marker.size) % 251
        marker = marker.copy()
    elif isinstance(buffer, np.ndarray):
        buffer[:] = 4.0
    with pytest.raises(TransferRejected, match=pattern) as info:
        _submit(route, buffer, tensor)
    assert str(info.value).startswith(f"{route}: ")
    assert info.value.package[0] is buffer and info.value.package[1] is tensor
    if marker is not None:
        assert not buffer.in_flight
        np.testing.assert_array_equal(buffer.array(), marker)  # untouched, usable
    if isinstance(buffer, np.ndarray):
        assert (buffer == 4.0).all()


def test_refusals_enqueue_nothing(enqueued) -> None:
    t = cuasync.zeros((100,), "float32").sync()
    for make, route, _ in [c[1:] for c in _refusals()]:
        buffer, tensor = make()
        before = len(enqueued)
        with pytest.raises(TransferRejected):
            _submit(route, buffer, tensor)
        assert enqueued[before:] == [], route
    del t


def test_a_buffer_in_flight_is_refused_with_a_busy_rejection(enqueued) -> None:
    s = cuasync.Device(0).new_stream()
    t = cuasync.zeros((100,), "float32").sync()
    t2 = cuasync.zeros((100,), "float32").sync()
    buf = cuasync.PinnedHostBuffer(400)
    with ct.gate(s):
        first = cuasync.upload_pending(buf, t, stream=s)
        before = len(enqueued)
        for route in ("upload_pending", "download_pending"):
            with pytest.raises(
                TransferRejected, match="already in flight: upload_pending on stream"
            ) as info:
                _submit(route, buf, t2)
            assert isinstance(info.value, BusyResourceError)
            assert info.value.package == (buf, t2)
            assert info.value.package[0] is buf and info.value.package[1] is t2
        assert enqueued[before:] == []
    first.wait()
    cuasync.download_pending(t2, buf).wait()  # free again once the first one is done


def test_a_stream_of_another_device_is_refused() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices")
    t = cuasync.zeros((4,), "float32", device=0).sync()
    buf = cuasync.PinnedHostBuffer(16)
    other = cuasync.Device(1).new_stream()
    with pytest.raises(
        TransferRejected,
        match="stream must be a cuasync.Stream of the tensor's device 0, got a stream of device 1",
    ) as info:
        cuasync.upload_pending(buf, t, stream=other)
    assert info.value.package == (buf, t)
    with pytest.raises(TransferRejected, match="got str"):
        cuasync.download_pending(t, buf, stream="s")  # type: ignore[arg-type]


def test_transfers_on_a_second_device() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices")
    data = np.arange(32, dtype=np.int64)
    t = cuasync.zeros((32,), "int64", device=1).sync()
    pending = cuasync.upload_pending(filled(data), t)
    assert pending.stream.device.ordinal == 1
    pending.wait()
    np.testing.assert_array_equal(t.to_host().sync(), data)


# -- lifetimes ------------------------------------------------------------------------------------
def test_dropping_an_unwaited_transfer_keeps_everything_alive_until_done(baseline) -> None:
    s = cuasync.Device(0).new_stream()
    dev = cuasync.Device(0)
    used = dev.memory_info().used
    data = np.arange(1 << 12, dtype=np.float32)
    t = cuasync.empty(data.shape, "float32").sync()
    assert dev.memory_info().used == used + data.nbytes
    buf = cuasync.PinnedHostBuffer(data.nbytes, "float32")
    buf.array()[:] = data
    alive_t, alive_buf = weakref.ref(t), weakref.ref(buf)
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        del pending, t, buf
        gc.collect()
        # the device may still read the buffer and write the tensor: both are held
        assert alive_t() is not None and alive_buf() is not None
        assert dev.memory_info().used == used + data.nbytes
        if cuasync.stats().reactor:
            assert cuasync.stats().slots_armed >= 2  # its completion is watched; the gate
    # the background watcher (or the host callback) observes the completion and releases them
    assert released(alive_t) and released(alive_buf)


async def test_dropping_an_unwaited_download_inside_a_loop(anyio_backend, baseline) -> None:
    s = cuasync.Device(0).new_stream()
    t = await cuasync.full((512,), 2.0, "float64")
    buf = cuasync.PinnedHostBuffer(4096, "float64")
    alive = weakref.ref(buf)
    with ct.gate(s):
        cuasync.download_pending(t, buf, stream=s)
        del buf, t
        gc.collect()
        assert alive() is not None
    assert released(alive)


async def test_cancelled_await_leaves_the_transfer_running(anyio_backend, baseline) -> None:
    import anyio

    s = cuasync.Device(0).new_stream()
    t = await cuasync.zeros((64,), "float32")
    buf = filled(np.full(64, 9, np.float32))
    with ct.gate(s):
        pending = cuasync.upload_pending(buf, t, stream=s)
        with anyio.move_on_after(0.01) as scope:
            await pending
        assert scope.cancelled_caught
        assert buf.in_flight
    tensor, _ = await pending
    np.testing.assert_array_equal(await tensor.to_host(), np.full(64, 9, np.float32))


def test_zero_byte_transfer() -> None:
    t = cuasync.empty((0, 3), "float32").sync()
    buf = cuasync.PinnedHostBuffer(0)
    assert cuasync.upload_pending(buf, t).wait()[0] is t
    assert cuasync.download_pending(t, buf).wait()[1] is buf


# -- download_into ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "shape"), CASES, ids=[f"{d}{s}" for d, s in CASES])
def test_download_into_reuses_the_array(dtype: str, shape: tuple[int, ...]) -> None:
    out = np.empty(shape, dtype)
    for seed in range(3):
        data = sample(dtype, shape, seed)
        t = cuasync.from_host(data).sync()
        got = cuasync.download_into(t, out)
        assert got is out
        np.testing.assert_array_equal(out, data)


def test_download_into_strided_views_and_other_shapes() -> None:
    data = np.arange(48, dtype=np.float32).reshape(6, 8)
    t = cuasync.from_host(data).sync()
    out = np.empty((3, 4), np.float32)
    cuasync.download_into(t[::2, 1::2], out)
    np.testing.assert_array_equal(out, data[::2, 1::2])
    flat = np.empty(48, np.float32)
    cuasync.download_into(t, flat)  # same element count, another shape
    np.testing.assert_array_equal(flat, data.ravel())
    col = np.empty((6, 8), np.float32, order="F")  # any writable layout
    cuasync.download_into(t, col)
    np.testing.assert_array_equal(col, data)


def test_download_into_checks_its_arguments() -> None:
    t = cuasync.zeros((4, 4), "float32").sync()
    with pytest.raises(DTypeError, match="out is float64 but the tensor is float32"):
        cuasync.download_into(t, np.empty(16, np.float64))
    with pytest.raises(ShapeError, match="out has 15 elements"):
        cuasync.download_into(t, np.empty(15, np.float32))
    ro = np.empty(16, np.float32)
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        cuasync.download_into(t, ro)
    with pytest.raises(ArgumentError, match="must be a numpy.ndarray"):
        cuasync.download_into(t, [0.0] * 16)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="must be a cuasync.Tensor"):
        cuasync.download_into(np.zeros(16), np.empty(16))  # type: ignore[arg-type]


def test_download_into_resizes_in_place_when_asked() -> None:
    out = np.empty(0, np.float32)
    original = out
    del original  # one name only: numpy's reference rule
    big = cuasync.arange(12, dtype="float32").reshape((3, 4)).sync()
    got = cuasync.download_into(big, out, resize=True)
    assert got is out and out.shape == (3, 4)
    del got
    np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(3, 4))
    small = cuasync.full((5,), 7.0, "float32").sync()
    cuasync.download_into(small, out, resize=True)  # shrinks too
    assert out.shape == (5,) and (out == 7.0).all()
    cuasync.download_into(small, out, resize=True)  # same size: no resize at all
    assert out.shape == (5,)
    holder = {"out": np.empty(2, np.float32)}  # one holder, whichever kind
    cuasync.download_into(small, holder["out"], resize=True)
    assert holder["out"].shape == (5,)


def test_download_into_says_why_it_cannot_resize() -> None:
    t = cuasync.arange(8, dtype="float32").sync()
    out = np.zeros(4, np.float32)
    with pytest.raises(ShapeError, match="resize=True"):
        cuasync.download_into(t, out)  # not asked
    view = out[:2]
    with pytest.raises(ShapeError, match="referenced from more than the one place"):
        cuasync.download_into(t, out, resize=True)  # resizing would pull memory from `view`
    with pytest.raises(ShapeError, match="does not own its memory"):
        cuasync.download_into(t, view, resize=True)
    del view
    fortran = np.zeros((2, 3), np.float32, order="F")
    with pytest.raises(ShapeError, match="not C-contiguous"):
        cuasync.download_into(t, fortran, resize=True)
    assert (out == 0).all() and out.shape == (4,)  # refusals leave out untouched
    alias = out
    cuasync.download_into(t, out, resize=True, refcheck=False)  # the caller vouches
    assert alias is out and out.shape == (8,)


def test_download_into_reads_bool_tensors() -> None:
    x = cuasync.arange(6, dtype="float32").sync()
    mask = (x > 2.5).sync()
    out = np.empty(6, np.bool_)
    cuasync.download_into(mask, out)
    assert out.tolist() == [False, False, False, True, True, True]
    assert out.view(np.uint8).max() == 1  # 0/1 bytes, as numpy requires of bool


async def test_download_into_is_refused_inside_a_running_loop(anyio_backend) -> None:
    t = await cuasync.full((8,), 1.5, "float32")
    out = np.zeros(8, np.float32)
    with pytest.raises(SyncInEventLoopError, match=r"download_into\(\) blocks"):
        cuasync.download_into(t, out)
    assert (out == 0).all()
    cuasync.download_into(t, out, allow_in_loop=True)
    assert (out == 1.5).all()


def test_download_into_uses_the_pinned_pool() -> None:
    pool = cuasync.PinnedPool.default()
    t = cuasync.zeros((3000,), "float32").sync()
    out = np.empty(3000, np.float32)
    cuasync.download_into(t, out)
    gc.collect()
    before = pool.stats()
    for _ in range(5):
        cuasync.download_into(t, out)
    after = pool.stats()
    assert after.allocations == before.allocations  # nothing new pinned per call
    assert after.reuses >= before.reuses + 5
