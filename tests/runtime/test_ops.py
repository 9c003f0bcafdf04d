"""DeviceOp execution modes and combinators, on asyncio, uvloop and trio."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings

import numpy as np
import pytest
from helpers import COMPLETION, still_pending, wait_until

import cuasync
import cuasync.testing as ct
from cuasync.errors import (
    ArgumentError,
    OpConsumedError,
    ReentrancyError,
    SchedulingError,
    SyncInEventLoopError,
)

pytestmark = pytest.mark.anyio


def ramp(n: int = 8, start: float = 0.0) -> np.ndarray:
    return np.arange(start, start + n, dtype=np.float32)


async def test_await_runs_the_op(anyio_backend) -> None:
    t = await cuasync.from_host(ramp())
    np.testing.assert_array_equal(await t.to_host(), ramp())


async def test_ops_are_single_use(anyio_backend) -> None:
    op = cuasync.from_host(ramp())
    await op
    with pytest.raises(OpConsumedError, match=r"\.shared\(\)"):
        await op
    with pytest.raises(OpConsumedError):
        op.submit()
    # combinators of a used op raise, build nothing (no "never executed" warning when
    # collected) and take none of the other members
    other = cuasync.value(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for combine in (lambda: op.then(cuasync.value), lambda: op.map(str)):
            with pytest.raises(OpConsumedError):
                combine()
        with pytest.raises(OpConsumedError):
            cuasync.zip(other, op)
        gc.collect()
    assert await other == 2


def test_sync_and_sync_on() -> None:
    assert cuasync.value(5).sync() == 5
    s = cuasync.Device(0).new_stream()
    t = cuasync.from_host(ramp()).sync_on(s)
    np.testing.assert_array_equal(t.to_host().sync_on(s), ramp())
    op = cuasync.value(1)
    with pytest.raises(ArgumentError, match="stream must be a cuasync.Stream"):
        op.sync_on("s")  # type: ignore[arg-type]
    assert op.sync_on(s) == 1  # the refused call did not consume the op


async def test_sync_inside_a_running_loop_says_to_await(anyio_backend) -> None:
    op = cuasync.value(1)
    with pytest.raises(SyncInEventLoopError, match="use 'await' instead"):
        op.sync()
    assert isinstance(SyncInEventLoopError("x"), RuntimeError)
    # the op was not consumed by the refused call, and the opt-in works
    assert op.sync(allow_in_loop=True) == 1


@pytest.mark.parametrize("sniffio", ["sniffio", "no sniffio"])
def test_blocking_calls_know_a_trio_run_from_outside_one(
    sniffio: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Blocking calls ask whether a loop runs in their thread, trio's included, by
    # sniffio's thread-local where trio sets its name (else by asking trio itself).
    import sys
    import types

    trio = pytest.importorskip("trio")
    from cuasync._core.loops import in_running_loop

    if sniffio == "no sniffio":
        monkeypatch.setitem(sys.modules, "sniffio", types.ModuleType("sniffio"))
    assert not in_running_loop()
    assert cuasync.value(1).sync() == 1

    async def inside() -> None:
        assert in_running_loop()
        op = cuasync.value(1)
        with pytest.raises(SyncInEventLoopError):
            op.sync()
        assert await op == 1

    trio.run(inside)
    assert not in_running_loop()


async def test_submit_returns_an_awaitable_future(anyio_backend) -> None:
    fut = cuasync.from_host(ramp()).then(lambda t: t.to_host()).submit()
    assert isinstance(fut, cuasync.DeviceFuture)
    out = await fut
    assert fut.done()
    np.testing.assert_array_equal(out, ramp())
    assert fut.result() is out
    assert await fut is out  # awaiting again yields the same object


def test_future_result_before_done_raises_and_wait_blocks() -> None:
    with ct.gate():
        fut = cuasync.zeros((4,)).submit()
        assert not fut.done()
        with pytest.raises(asyncio.InvalidStateError, match="not completed yet"):
            fut.result()
    t = fut.wait()
    assert t.shape == (4,)
    assert fut.done()


async def test_schedule_uses_the_policy(anyio_backend) -> None:
    s = cuasync.Device(0).new_stream()
    fut = cuasync.zeros((3,)).schedule(cuasync.SingleStream(s))
    assert fut.stream is s
    await fut
    op = cuasync.zeros((3,))
    with pytest.raises(ArgumentError, match="SchedulingPolicy"):
        op.schedule(s)  # type: ignore[arg-type]
    assert (await op).shape == (3,)  # the refused call did not consume the op


async def test_then_chains_on_one_stream(anyio_backend) -> None:
    streams: list[cuasync.Stream] = []

    def step(t: cuasync.Tensor) -> cuasync.DeviceOp[np.ndarray]:
        return t.dup().then(lambda d: d.to_host())

    policy = cuasync.StreamPoolRoundRobin(num_streams=4)
    fut = cuasync.from_host(ramp()).then(step).schedule(policy)
    streams.append(fut.stream)
    np.testing.assert_array_equal(await fut, ramp())


async def test_then_must_return_an_op(anyio_backend) -> None:
    with pytest.raises(ArgumentError, match="must return a DeviceOp, got int; use map"):
        await cuasync.value(1).then(lambda v: v + 1)  # type: ignore[arg-type,return-value]
    op = cuasync.value(1)
    with pytest.raises(ArgumentError, match="needs a callable"):
        op.then(3)  # type: ignore[arg-type]
    assert await op == 1


async def test_then_closure_errors_propagate_and_release_the_lock(anyio_backend) -> None:
    def boom(_: object) -> cuasync.DeviceOp[int]:
        raise KeyError("closure failed")

    with pytest.raises(KeyError, match="closure failed"):
        await cuasync.from_host(ramp()).then(boom)
    assert await cuasync.value(2) == 2  # lock released


async def test_executing_inside_then_is_a_reentrancy_error(anyio_backend) -> None:
    def nested(t: cuasync.Tensor) -> cuasync.DeviceOp[object]:
        cuasync.value(1).sync(allow_in_loop=True)
        return cuasync.value(t)

    with pytest.raises(ReentrancyError, match="then_unchecked"):
        await cuasync.from_host(ramp()).then(nested)
    assert isinstance(ReentrancyError("x"), RuntimeError)


def test_then_unchecked_may_execute_other_ops() -> None:
    def nested(t: cuasync.Tensor) -> cuasync.DeviceOp[int]:
        return cuasync.value(cuasync.value(41).sync() + 1)

    assert cuasync.from_host(ramp()).then_unchecked(nested).sync() == 42


async def test_map_runs_after_completion_on_host(anyio_backend) -> None:
    import anyio

    calls: list[float] = []
    waiting: list[bool] = []
    totals: list[float] = []

    def total(a: np.ndarray) -> float:
        calls.append(float(a.sum()))
        return calls[-1]

    async def waiter() -> None:
        waiting.append(True)  # in the same step as the await's submission: no yield between
        totals.append(await cuasync.from_host(ramp()).then(lambda t: t.to_host()).map(total))

    async with anyio.create_task_group() as tg:
        with ct.gate() as gate:
            tg.start_soon(waiter)
            await wait_until(lambda: bool(waiting))  # the waiter waits on its op
            assert calls == []  # the work waits at the gate: map has not run
            gate.open()
    assert calls == totals == [float(ramp().sum())]


async def test_inspect_sees_and_passes_through(anyio_backend) -> None:
    seen: list[float] = []
    out = (
        await cuasync.from_host(ramp())
        .then(lambda t: t.to_host())
        .inspect(lambda a: seen.append(a[3]))
    )
    assert seen == [3.0] and out[3] == 3.0


async def test_map_errors_propagate(anyio_backend) -> None:
    with pytest.raises(ZeroDivisionError):
        await cuasync.value(1).map(lambda v: v / 0)


async def test_zip_first_last_unzip(anyio_backend) -> None:
    a, b = await cuasync.zip(
        cuasync.value(1), cuasync.from_host(ramp(2)).then(lambda t: t.to_host())
    )
    assert a == 1 and list(b) == [0.0, 1.0]
    assert await cuasync.zip(cuasync.value("x"), cuasync.value("y")).first() == "x"
    assert await cuasync.zip(cuasync.value("x"), cuasync.value("y")).last() == "y"
    left, right = cuasync.zip(cuasync.value(1), cuasync.value(2)).unzip()
    assert (await right, await left) == (2, 1)
    p, q = cuasync.value((3, 4)).unzip(2)
    assert (await p, await q) == (3, 4)


def test_zip_and_unzip_bad_input() -> None:
    op = cuasync.value((1, 2))
    with pytest.raises(
        ArgumentError, match=r"argument 1 must be a cuasync.DeviceOp.*cuasync.value"
    ):
        cuasync.zip(op, 2)  # type: ignore[call-overload]
    with pytest.raises(ArgumentError, match="at least one op"):
        cuasync.zip()  # type: ignore[call-overload]
    with pytest.raises(ArgumentError, match="pass n"):
        op.unzip()
    assert op.sync() == (1, 2)  # neither refusal consumed the op


async def test_failing_zip_member_fails_the_zip(anyio_backend) -> None:
    with pytest.raises(ValueError, match="member"):
        await cuasync.zip(
            cuasync.value(1),
            cuasync.value(0).map(lambda _: (_ for _ in ()).throw(ValueError("member"))),
        )


async def test_unzipped_ops_share_one_execution(anyio_backend, enqueued) -> None:
    x, y = cuasync.zip(cuasync.zeros((4,)), cuasync.zeros((4,))).unzip()
    tx, ty = await x, await y
    assert tx.shape == ty.shape == (4,)
    # the zip's two allocations and memsets ran once; each await added only its completion
    work = [c for c in enqueued if c not in COMPLETION]
    assert work == ["mem_alloc_async", "memset_d8_async"] * 2
    assert len(enqueued) - len(work) == 2


async def test_shared_runs_once_and_yields_the_same_object(anyio_backend, enqueued) -> None:
    calls: list[int] = []
    shared = cuasync.zeros((4,)).inspect(lambda t: calls.append(1)).shared()
    results = [await shared for _ in range(3)]
    assert results[0] is results[1] is results[2]
    assert calls == [1]
    work = [c for c in enqueued if c not in COMPLETION]
    assert work == ["mem_alloc_async", "memset_d8_async"]  # one execution
    assert len(enqueued) - len(work) == 3  # a completion for each await


def test_shared_executed_concurrently_from_threads(enqueued) -> None:
    calls: list[int] = []
    shared = cuasync.from_host(ramp()).inspect(lambda t: calls.append(1)).shared()
    results: list[object] = []
    barrier = threading.Barrier(7)

    def worker() -> None:
        barrier.wait()
        results.append(shared.sync())

    threads = [threading.Thread(target=worker) for _ in range(6)]
    with ct.gate():  # the first execution stays in flight while the others join it
        for t in threads:
            t.start()
        barrier.wait()
        deadline = time.monotonic() + 10
        while "memcpy_htod_async" not in enqueued and time.monotonic() < deadline:
            time.sleep(0.0005)  # polling a condition: one thread has submitted the copy
        assert not results
    for t in threads:
        t.join()
    assert len(results) == 6 and all(r is results[0] for r in results)
    assert calls == [1] and enqueued.count("memcpy_htod_async") == 1


async def test_shared_consumer_on_another_stream_is_ordered_after_the_producer(
    anyio_backend,
) -> None:
    s1, s2 = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    shared = cuasync.from_host(ramp(1 << 12)).shared()
    with ct.gate(s1):  # the producer has not written the tensor yet
        fut = shared.submit_on(s1)
        # consumer on s2: reads the tensor the producer is still writing on s1
        consumer = shared.then(lambda t: t.to_host()).submit_on(s2)
        assert still_pending(consumer.done), "the consumer did not wait for the producer"
    np.testing.assert_array_equal(await consumer, ramp(1 << 12))
    await fut


async def test_failing_shared_op_fails_every_consumer_with_the_same_error(anyio_backend) -> None:
    shared: cuasync.SharedOp[object] = cuasync.value(1).map(lambda v: [][v]).shared()
    errors = []
    for _ in range(2):
        with pytest.raises(IndexError) as info:
            await shared
        errors.append(info.value)
    # The same error for every consumer; raised again as a fresh copy chained to the
    # first, so that repeated raises do not grow one traceback without bound.
    assert type(errors[1]) is type(errors[0]) and str(errors[1]) == str(errors[0])
    assert errors[1].__cause__ is errors[0]


async def test_value(anyio_backend) -> None:
    sentinel = object()
    assert await cuasync.value(sentinel) is sentinel


async def test_policy_of_another_device_is_a_scheduling_error(anyio_backend) -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices")
    t = await cuasync.zeros((4,), device=0)
    with (
        cuasync.use_policy(cuasync.Device(1).policy),
        pytest.raises(
            SchedulingError, match="stream of device 1 for an op whose tensors live on device 0"
        ),
    ):
        await t.to_host()


async def test_custom_policy_returning_garbage(anyio_backend) -> None:
    class Broken(cuasync.SchedulingPolicy):
        def next_stream(self):
            return 42

    with pytest.raises(SchedulingError, match="must return a cuasync.Stream, got int"):
        await cuasync.zeros((1,)).schedule(Broken())


async def test_use_policy_is_context_local_across_tasks(anyio_backend) -> None:
    import anyio

    s = cuasync.Device(0).new_stream()
    seen: dict[str, cuasync.Stream] = {}

    async def pinned() -> None:
        with cuasync.use_policy(cuasync.SingleStream(s)):
            await anyio.sleep(0)
            seen["pinned"] = cuasync.zeros((1,)).submit().stream

    async def free() -> None:
        await anyio.sleep(0)
        seen["free"] = cuasync.zeros((1,)).submit().stream

    async with anyio.create_task_group() as tg:
        tg.start_soon(pinned)
        tg.start_soon(free)
    assert seen["pinned"] is s
    assert seen["free"] is not s


def test_round_robin_rotates_and_validates() -> None:
    policy = cuasync.StreamPoolRoundRobin(num_streams=3)
    got = [policy.next_stream() for _ in range(6)]
    assert got[:3] == got[3:] and len({id(s) for s in got[:3]}) == 3
    with pytest.raises(ArgumentError, match="num_streams"):
        cuasync.StreamPoolRoundRobin(num_streams=0)
    assert isinstance(cuasync.Device(0).policy, cuasync.StreamPoolRoundRobin)


async def test_shared_free_function_wraps_values_and_ops(anyio_backend) -> None:
    three = cuasync.shared(3)
    assert isinstance(three, cuasync.SharedOp)
    assert [await three for _ in range(2)] == [3, 3]
    calls: list[int] = []
    op = cuasync.from_host(ramp()).inspect(lambda t: calls.append(1))
    shared = cuasync.shared(op)
    first, second = await shared, await shared
    assert first is second and calls == [1]
    assert cuasync.shared(shared) is shared
    with pytest.raises(OpConsumedError):
        await op  # shared() took it
