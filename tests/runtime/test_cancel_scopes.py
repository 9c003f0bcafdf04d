"""Cancel scopes: work a cancelled scope still had queued is skipped on the device, its
memory comes back only after the skipped work passed, and work others may await runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest
from helpers import wait_until

import cuasync
import cuasync.testing as ct

pytestmark = pytest.mark.anyio


def _marks(n: int = 4) -> cuasync.Tensor:
    return cuasync.zeros((n,), "uint32").sync(allow_in_loop=True)


def _host(t: cuasync.Tensor) -> list[Any]:
    return np.asarray(t.to_host().sync(allow_in_loop=True)).tolist()


async def _cancel_while_queued(body: Callable[[], Any]) -> cuasync.CancelScope:
    """Run ``body()`` (a coroutine function) in a task inside a cancel scope, behind a
    gate on every stream of the policy; cancel the task once it awaits; open the gate
    and wait for the device. Returns the scope."""
    import anyio

    scopes: list[cuasync.CancelScope] = []
    started: list[bool] = []

    async def task() -> None:
        with cuasync.cancel_scope() as scope:
            scopes.append(scope)
            started.append(True)  # in the step that submits: no yield between
            await body()

    with ct.gate():
        async with anyio.create_task_group() as tg:
            tg.start_soon(task)
            await wait_until(lambda: bool(started))  # its work queued behind the gate
            tg.cancel_scope.cancel()
    await cuasync.get_default_device().synchronized()
    return scopes[0]


def _load(x: cuasync.Tensor) -> None:
    """Compile the kernels the tests queue while the gate is open (a GPU may synchronize
    the context to load a module)."""
    ct.mark(_marks(1), 0).sync(allow_in_loop=True)
    (x + x).sync(allow_in_loop=True)
    (x * 2).sync(allow_in_loop=True)
    cuasync.add(x, x, out=cuasync.empty_like(x).sync(allow_in_loop=True)).sync(allow_in_loop=True)


async def test_queued_work_of_a_cancelled_scope_does_not_run(anyio_backend, baseline) -> None:
    marks = _marks()
    x = cuasync.full((1 << 12,), 1.0, "float32").sync(allow_in_loop=True)
    _load(x)
    made: list[cuasync.Tensor] = []

    async def body() -> None:  # three launches in one await: a mark, a mark, an add
        made.append(await ct.mark(marks, 0).then(lambda _: ct.mark(marks, 1)).then(lambda _: x + x))

    scope = await _cancel_while_queued(body)
    assert scope.cancelled
    assert _host(marks) == [0, 0, 0, 0]  # neither mark ran
    assert made == []  # the generated add's new tensor was never delivered
    # the device and the scope's kernels are fine afterwards
    await ct.mark(marks, 3)
    assert _host(marks) == [0, 0, 0, 1]
    assert set(_host(await cuasync.add(x, x))) == {2.0}


#: Ops writing a tensor others may read: ``write(x, out)``, the tensor written, and
#: its elements once written (x: 4096 ones, out: 4096 sevens).
IN_PLACE = {
    "add out=": (lambda x, out: cuasync.add(x, x, out=out), lambda x, out: out, 2.0),
    # (out overlaps what it reduces: a new tensor first, then copied into out)
    "a reduction into what it reads": (
        lambda x, out: cuasync.sum(x.reshape((64, 64)), axis=1, out=x[:64]),
        lambda x, out: x[:64],
        64.0,
    ),
}


@pytest.mark.parametrize("case", list(IN_PLACE))
async def test_an_in_place_write_others_read_is_never_skipped(
    anyio_backend, baseline, case: str
) -> None:
    """``out=`` writes a tensor others may hold: inside a cancelled scope it still runs,
    and an op of another task ordered after it reads the whole result."""
    import anyio

    write, written, value = IN_PLACE[case]
    marks = _marks(1)
    x = cuasync.full((1 << 12,), 1.0, "float32").sync(allow_in_loop=True)
    out = cuasync.full((1 << 12,), 7.0, "float32").sync(allow_in_loop=True)
    _load(x)
    target = written(x, out)
    y = cuasync.full((1 << 12,), 1.0, "float32").sync(allow_in_loop=True)
    write(y, cuasync.empty_like(y).sync(allow_in_loop=True)).sync(allow_in_loop=True)  # (loaded)
    started: list[bool] = []
    got: list[cuasync.Tensor] = []

    async def cancelled() -> None:
        with cuasync.cancel_scope():
            started.append(True)
            await ct.mark(marks, 0).then(lambda _: write(x, out))

    reading: list[bool] = []

    async def reader() -> None:  # another task, outside any scope
        reading.append(True)  # in the step that enqueues its op: no yield between
        got.append(await (target * 2))

    async with anyio.create_task_group() as outer:
        with ct.gate():
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancelled)
                await wait_until(lambda: bool(started))  # the chain queued behind the gate
                outer.start_soon(reader)
                await wait_until(lambda: bool(reading))  # its op queued after the write
                tg.cancel_scope.cancel()
        # the gate is open: the outer group waits for the reader
    assert _host(marks) == [0]  # the mark (a user kernel that opted in) was skipped
    assert set(_host(target)) == {value}  # the write ran
    assert set(_host(got[0])) == {2 * value}  # the reader saw all of it


async def test_work_outside_the_scope_and_futures_run(anyio_backend, baseline) -> None:
    marks = _marks()
    x = cuasync.full((64,), 1.0, "float32").sync(allow_in_loop=True)
    out = cuasync.full((64,), 7.0, "float32").sync(allow_in_loop=True)
    _load(x)
    futures: list[cuasync.DeviceFuture[Any]] = []

    async def body() -> None:
        # futures may be awaited by others: never skipped, scope or not
        futures.append(ct.mark(marks, 0).submit())
        futures.append(cuasync.add(x, x, out=out).submit())
        await ct.mark(marks, 1)

    ct.mark(marks, 2).submit()  # (outside any scope, queued behind the same gate below)
    await _cancel_while_queued(body)
    for fut in futures:
        await fut
    assert _host(marks) == [1, 0, 1, 0]
    assert set(_host(out)) == {2.0}


async def test_a_kernel_without_the_header_runs_to_completion(anyio_backend, baseline) -> None:
    source = """
    __global__ void bump(unsigned int* m) { if (threadIdx.x == 0) m[0] += 1; }
    """

    def twin(m: Any) -> None:
        m[0] += 1

    bump = cuasync.Kernel(source, "bump", emulate=twin)
    marks = _marks(1)
    await bump[1, 32](marks)
    await _cancel_while_queued(lambda: bump[1, 32](marks))
    assert _host(marks) == [2]  # it cannot see the word: it ran


async def test_a_user_kernel_with_the_header_skips(anyio_backend, baseline) -> None:
    source = """
    #include <cuasync/cancel.cuh>
    __global__ void scale(float* x, float a, int n) {
        if (cuasync_block_cancelled()) return;
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= a;
    }
    """

    def twin(x: Any, a: Any, n: Any) -> None:
        x[: int(n)] *= a

    scale = cuasync.Kernel(source, "scale", emulate=twin)
    x = cuasync.full((256,), 1.0, "float32").sync(allow_in_loop=True)
    await scale[2, 128](x, 3.0, 256)  # outside a scope: it runs
    assert set(_host(x)) == {3.0}
    with cuasync.cancel_scope():
        await scale[2, 128](x, 2.0, 256)  # inside one not cancelled: it runs
    assert set(_host(x)) == {6.0}
    await _cancel_while_queued(lambda: scale[2, 128](x, 5.0, 256))
    assert set(_host(x)) == {6.0}


async def test_new_outputs_of_skipped_work_are_freed_after_it_passed(
    anyio_backend, baseline
) -> None:
    import anyio

    dev = cuasync.Device(0)
    x = cuasync.full((1 << 16,), 1.0, "float32").sync(allow_in_loop=True)
    _load(x)
    used = dev.memory_info().used
    started: list[bool] = []

    async def task() -> None:
        with cuasync.cancel_scope():
            started.append(True)
            await (x + x).then(lambda y: y * 2)  # two new tensors of 256 KiB

    with ct.gate():
        async with anyio.create_task_group() as tg:
            tg.start_soon(task)
            await wait_until(lambda: bool(started))  # both launches queued behind the gate
            tg.cancel_scope.cancel()
        # cancelled, skipped once they start, but not passed yet: still held
        assert dev.memory_info().used >= used + 2 * x.nbytes
    ct.settle()  # the gate is open: the skipped kernels pass, their memory comes back
    assert dev.memory_info().used == used


async def test_a_reused_word_keeps_old_work_skipped(anyio_backend, baseline) -> None:
    import anyio

    marks = _marks(2)
    _load(cuasync.full((4,), 1.0, "float32").sync(allow_in_loop=True))
    words: list[int] = []
    mask = (1 << 48) - 1

    async def cancelled() -> None:
        with cuasync.cancel_scope() as scope:
            words.append(scope.word)
            await ct.mark(marks, 0)

    enqueued: list[bool] = []

    async def queued() -> None:
        enqueued.append(True)  # in the step that launches: no yield between
        await ct.mark(marks, 1)

    async with anyio.create_task_group() as outer:
        with ct.gate():
            async with anyio.create_task_group() as tg:
                tg.start_soon(cancelled)
                await wait_until(lambda: bool(words))  # its mark queued behind the gate
                tg.cancel_scope.cancel()
            # the same word claimed again, by a scope that is not cancelled, while the
            # cancelled scope's mark is still queued
            for _ in range(10_000):
                scope = cuasync.cancel_scope().__enter__()
                if scope.word & mask == words[0] & mask:
                    break
                scope.__exit__(None, None, None)
            assert scope.word & mask == words[0] & mask and scope.word != words[0]
            outer.start_soon(queued)  # (a child task: it runs in the new scope)
            await wait_until(lambda: bool(enqueued))
        # the gate opens: the outer group waits for the new scope's mark
    scope.__exit__(None, None, None)
    await cuasync.get_default_device().synchronized()
    assert _host(marks) == [0, 1]  # the old scope's mark stayed skipped; the new one's ran


def test_a_released_word_never_skips_the_work_of_its_earlier_scope(baseline) -> None:
    """A scope's word goes back to the free words when the scope closes, maybe with work
    of a child task still queued: the word's next owner, cancelled, does not skip it."""
    mask = (1 << 48) - 1

    async def main() -> list[Any]:
        marks = _marks(2)
        await ct.mark(marks, 0)
        launched: list[bool] = []

        async def child() -> None:
            launched.append(True)  # in the step that launches: no yield between
            await ct.mark(marks, 0)

        with ct.gate():
            with cuasync.cancel_scope() as old:
                word = old.word
                task = asyncio.create_task(child())
                await wait_until(lambda: bool(launched))
            # the old scope closed with its child's mark queued; its word, claimed again
            for _ in range(10_000):
                new = cuasync.cancel_scope().__enter__()
                if new.word & mask == word & mask:
                    break
                new.__exit__(None, None, None)
            assert new.word & mask == word & mask
            new.cancel()  # the word now holds the new scope's generation
            new.__exit__(None, None, None)
        await task  # its mark ran: the old scope was never cancelled
        return _host(marks)

    assert asyncio.run(main()) == [2, 0]


def test_leaving_a_scope_by_cancellation_or_timeout_cancels_it(baseline) -> None:
    async def main() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.001):
                with cuasync.cancel_scope() as timed:
                    await asyncio.sleep(1)
        assert timed.cancelled
        with pytest.raises(ValueError), cuasync.cancel_scope() as failed:
            raise ValueError("not a cancellation")
        assert not failed.cancelled  # its work (futures, say) is not given up
        async with cuasync.cancel_scope() as explicit:
            explicit.cancel()
        assert explicit.cancelled
        assert "cancelled" in repr(explicit)

    asyncio.run(main())


def test_ops_built_after_a_scope_closed_carry_no_word(baseline) -> None:
    from cuasync._cancel_var import current_word

    async def main() -> None:
        with cuasync.cancel_scope() as scope:
            assert current_word() == scope.word != 0
            child = asyncio.create_task(asyncio.sleep(0, result=None))
            await child
        assert current_word() == 0
        assert scope.word == 0  # a task started inside and outliving it: no word either

    asyncio.run(main())


def test_a_launch_carries_its_scope_s_word_and_0_outside_any() -> None:
    # kernel[grid, block] of a kernel taking a cancel word appends the current scope's word
    # (0 outside any; a launch on another device than the scope's, the scope's word
    # there); the wrong number of arguments is worded as before. The same with the native
    # launcher and the Python one (CUASYNC_NATIVE=off).
    from cuasync._ops import codegen
    from cuasync.errors import LaunchError

    def operands(device: int) -> tuple[Any, Any, tuple[Any, ...], tuple[Any, ...]]:
        with cuasync.use_device(device):
            x = cuasync.from_host(np.arange(8, dtype=np.float32)).sync()
            o = cuasync.empty((8,), "float32").sync()
        op = cuasync.add(x, 1.0)
        op._take()
        plan, tensors, scalars = codegen.make_plan(op._node)
        return o, codegen.kernel_for(plan, "float32", 0)[1, 32], tuple(tensors), tuple(scalars)

    o, launcher, tensors, scalars = operands(0)
    other = operands(1) if cuasync.device_count() > 1 else None

    async def main() -> None:
        outside = launcher(o, *tensors, *scalars, 8, 1)
        assert outside._args[-1] == 0
        await outside
        with cuasync.cancel_scope() as scope:
            inside = launcher(o, *tensors, *scalars, 8, 1)
            assert inside._args[-1] == scope.word != 0
            await inside
            if other is not None:  # the scope's word on device 1, not device 0's
                o1, launcher1, tensors1, scalars1 = other
                there = launcher1(o1, *tensors1, *scalars1, 8, 1)
                assert there._args[-1] == scope.word_for(1) not in (0, scope.word)
                await there
        with pytest.raises(LaunchError, match=r"takes 5 argument\(s\) .* got 3"):
            launcher(o, *tensors, 8)

    asyncio.run(main())
    np.testing.assert_array_equal(o.to_host().sync(), np.arange(8) + 1)
    if other is not None:
        np.testing.assert_array_equal(other[0].to_host().sync(), np.arange(8) + 1)


def test_a_chain_submitted_as_a_future_is_never_skipped() -> None:
    def run() -> list[Any]:
        marks = _marks(2)
        ct.mark(marks, 0).sync()
        with ct.gate(), cuasync.cancel_scope() as scope:
            fut = ct.mark(marks, 0).then(lambda _: ct.mark(marks, 1)).submit()
            scope.cancel()
        fut.wait()
        return _host(marks)

    assert run() == [2, 1]  # (no tensor in this frame: a failure here keeps none alive)


async def _cancelled_while_queued(
    run: Callable[[], Coroutine[Any, Any, Any]], queued: list[bool]
) -> None:
    """Run ``run()`` in a task behind a closed gate, wait until ``queued`` says it has
    queued its work there (set in the step that executes it: no yield between), cancel
    the task and see it raise ``CancelledError``; then the gate opens."""
    with ct.gate():
        task = asyncio.create_task(run())
        await wait_until(lambda: bool(queued))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_a_shared_op_is_never_skipped_by_one_awaiters_scope() -> None:
    async def main() -> list[Any]:
        marks = _marks(1)
        await ct.mark(marks, 0)
        shared = ct.mark(marks, 0).shared()

        executing: list[bool] = []

        async def first() -> None:
            with cuasync.cancel_scope():
                executing.append(True)  # in the step that executes it: no yield between
                await shared

        await _cancelled_while_queued(first, executing)
        await shared  # another awaiter: the work ran for it
        return _host(marks)

    assert asyncio.run(main()) == [2]


async def test_a_graph_captured_in_a_scope_does_not_bake_in_its_word(
    anyio_backend, baseline
) -> None:
    marks = _marks(1)
    await ct.mark(marks, 0)
    with cuasync.cancel_scope() as scope:
        graph = ct.mark(marks, 0).graph()
        scope.cancel()
    await graph.launch()  # the replay runs: the captured launch carries no word
    await graph.launch()
    assert _host(marks) == [3]
    del graph


def test_cancelling_a_closed_scope_leaves_its_reused_word_alone(baseline) -> None:
    with cuasync.cancel_scope() as old:
        word = old.word
    mask = (1 << 48) - 1
    for _ in range(10_000):  # the next scope on the same word
        new = cuasync.cancel_scope().__enter__()
        if new.word & mask == word & mask:
            break
        new.__exit__(None, None, None)
    new.cancel()
    old.cancel()  # closed: no store (it would overwrite the new scope's generation)
    assert not old.cancelled and new.cancelled
    assert new.word == 0  # ops the scope builds after cancel() run (their values count)
    new.__exit__(None, None, None)
    with pytest.raises(cuasync.errors.UsageError, match="entered once"):
        old.__enter__()


@pytest.mark.parametrize("where", ["another task", "another thread"])
def test_cancel_cancels_the_task_that_entered_the_scope(where: str, baseline) -> None:
    async def main() -> list[Any]:
        marks = _marks(1)
        await ct.mark(marks, 0)
        scopes: list[cuasync.CancelScope] = []
        got: list[Any] = []

        async def handler() -> None:
            with cuasync.cancel_scope() as scope:
                scopes.append(scope)
                got.append(await ct.mark(marks, 0))

        with ct.gate():
            task = asyncio.create_task(handler())
            await wait_until(lambda: bool(scopes))  # its mark queued behind the gate
            if where == "another task":
                scopes[0].cancel()
            else:
                await asyncio.to_thread(scopes[0].cancel)
            with pytest.raises(asyncio.CancelledError):
                await task
        await cuasync.get_default_device().synchronized()
        assert got == []  # the skipped work delivered nothing
        return _host(marks)

    assert asyncio.run(main()) == [1]  # only the first mark ran


def test_a_launch_takes_the_word_of_the_task_that_executes_it(baseline) -> None:
    """Built inside a scope, awaited by a task outside it: the launch runs (its value is
    delivered there); scheduled as a future inside a scope: it runs too."""

    async def main() -> list[Any]:
        marks = _marks(2)
        await ct.mark(marks, 0)
        stream = cuasync.get_default_device().new_stream()
        policy = cuasync.SingleStream(stream)
        with ct.gate(), ct.gate(stream):
            with cuasync.cancel_scope() as scope:
                built = ct.mark(marks, 0)  # built here, awaited by another task below
                scheduled = ct.mark(marks, 1).schedule(policy)
                scope.cancel()
            task = asyncio.create_task(asyncio.wait_for(built, 10))
            await asyncio.sleep(0)
        await task
        await scheduled
        return _host(marks)

    assert asyncio.run(main()) == [2, 1]


async def _skipped_after_a_mark(make: Callable[[], Any], marks: cuasync.Tensor) -> None:
    """Await ``mark(marks, 0)`` then ``make()`` as one chain in a task's cancel scope,
    queued behind a gate; cancel the task: neither runs (the mark stays at 1, where the
    caller's own mark left it; on the emulator both count as skipped), nothing delivered."""
    from cuasync._backends import get_backend

    counts = getattr(get_backend(), "counts", None)
    before = counts.skipped if counts is not None else 0
    launched: list[bool] = []
    got: list[Any] = []

    async def handler() -> None:
        with cuasync.cancel_scope():
            launched.append(True)
            got.append(await ct.mark(marks, 0).then(lambda _: make()))

    await _cancelled_while_queued(handler, launched)
    await cuasync.get_default_device().synchronized()
    assert got == [] and _host(marks) == [1]
    if counts is not None:  # the mark and what make() enqueued returned at once
        assert counts.skipped - before >= 2


def _family(name: str, x: cuasync.Tensor, idx: cuasync.Tensor) -> Any:
    """An op of a built-in kernel family making a new tensor, and numpy's answer."""
    host = np.arange(64, dtype=np.float32).reshape(8, 8)
    return {
        "full": (lambda: cuasync.full((64,), 3.0, "float32"), np.full(64, 3.0, np.float32)),
        "arange": (lambda: cuasync.arange(64, dtype="float32"), np.arange(64, dtype=np.float32)),
        "eye": (lambda: cuasync.eye(8), np.eye(8)),
        "linspace": (lambda: cuasync.linspace(0, 1, 64), np.linspace(0, 1, 64)),
        "sum over an axis": (lambda: cuasync.sum(x, axis=1), host.sum(axis=1)),
        "sum float4": (lambda: cuasync.sum(x, axis=0), host.sum(axis=0)),
        "take": (lambda: cuasync.take(x, idx, axis=0), host[[1, 3]]),
        "tril": (lambda: cuasync.tril(x), np.tril(host)),
        "gather": (lambda: cuasync.gather(x, idx, axis=1), host[:, [1, 3]]),
        "pad": (lambda: cuasync.pad(x, 1), np.pad(host, 1)),
    }[name]


@pytest.mark.parametrize(
    "name",
    [
        "full",
        "arange",
        "eye",
        "linspace",
        "sum over an axis",
        "sum float4",
        "take",
        "tril",
        "gather",
        "pad",
    ],
)
def test_built_in_kernels_of_a_cancelled_scope_are_skipped(name: str, baseline) -> None:
    """Creation, reduction and structural kernels making a new tensor check the word
    once per block: queued in a cancelled scope they do no work (counted on the
    emulator); the same ops afterwards are right."""

    async def main() -> None:
        marks = _marks(1)
        x = await cuasync.asarray(np.arange(64, dtype=np.float32).reshape(8, 8))
        idx = await cuasync.asarray(np.array([1, 3]))
        make, want = _family(name, x, idx)
        await make()  # (its kernels loaded before the gate)
        await ct.mark(marks, 0)
        await _skipped_after_a_mark(make, marks)  # the family's kernel(s) returned at once
        np.testing.assert_allclose(_host(await make()), want, rtol=1e-5)

    asyncio.run(main())


# -- guarded regions: library calls, memsets, copies (conditional graph nodes on a GPU) -----
@pytest.fixture
def guard_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guard every region, however small (the policy guards only long work)."""
    from cuasync._launch import guard

    monkeypatch.setattr(guard.POLICY, "min_ns", 0.0)


def needs_guards(kind: str) -> pytest.MarkDecorator:
    """Skip unless this backend guards regions of ``kind`` ("memset", "library", "copy")."""
    from cuasync._backends import get_backend
    from cuasync._launch.guard import guards_on

    return pytest.mark.skipif(
        not guards_on(get_backend(), kind),
        reason=f"{kind} regions are not guarded here (backend.guards, CUASYNC_GUARDS)",
    )


def _memset(t: cuasync.Tensor, value: int) -> cuasync.DeviceOp[None]:
    """An op setting every byte of ``t`` (which it did not make) in a guarded region: what
    a cuBLAS call or a memset into a new tensor gets, observable here."""
    from cuasync._backends import get_backend
    from cuasync._core.op import device_op
    from cuasync._core.output import Output
    from cuasync._launch.guard import guarded

    def enqueue(ctx: Any) -> Any:
        ctx.write(t.allocation, "t")  # (its waits first: a region holds only the memset)
        with guarded(ctx, "memset", nbytes=t.nbytes):
            get_backend().memset_d8_async(t.ptr, value, t.nbytes, ctx.handle)
        return Output.ready(None)

    return device_op(enqueue, t.device, "guarded memset")


def _copy(dst: cuasync.Tensor, src: cuasync.Tensor) -> cuasync.DeviceOp[None]:
    """An op copying ``src`` (a view) into the contiguous ``dst`` (which it did not make)
    with the copy engines in a guarded region: what ``dup``'s copy gets, observable here."""
    from cuasync._core.op import device_op
    from cuasync._core.output import Output
    from cuasync._launch.guard import guarded
    from cuasync._transfers.device_copy import copy_strided

    def enqueue(ctx: Any) -> Any:
        ctx.write(dst.allocation, "dst")  # (the waits first: a region holds only the copy)
        at = ctx.read(src.allocation) + src.offset * src.itemsize
        size = src.itemsize
        dst_strides = tuple(st * size for st in dst.strides)
        with guarded(ctx, "copy", nbytes=2 * dst.nbytes):
            src_strides = tuple(st * size for st in src.strides)
            copy_strided(ctx, "dtod", dst.ptr, dst_strides, at, src_strides, src.shape, size)
        return Output.ready(None)

    return device_op(enqueue, dst.device, "guarded copy")


@needs_guards("copy")
@pytest.mark.parametrize("view", ["one block", "rows of a view"])
def test_a_guarded_copy_runs_only_while_its_scope_is_not_cancelled(
    view: str, guard_everything, baseline
) -> None:
    """A copy engines' copy in a guarded region (one cuMemcpyDtoDAsync, or cuMemcpy2DAsync
    rows), queued in a scope cancelled before it starts, leaves its destination as it
    was; the same region in a scope not cancelled writes it."""
    host = np.arange(32 * 128, dtype=np.uint8).reshape(32, 128)

    async def main() -> tuple[Any, Any]:
        marks = _marks(1)
        big = await cuasync.asarray(host)
        src = big[:8] if view == "one block" else big[::2, :64]  # (8 whole rows: one block)
        skipped = await cuasync.full(src.shape, 7, "uint8")
        ran = await cuasync.full(src.shape, 7, "uint8")
        await _copy(ran, src)  # (the guard kernel and the mark loaded before the gate)
        await cuasync.fill(ran, 7)
        await ct.mark(marks, 0)
        launched: list[bool] = []

        async def handler(t: cuasync.Tensor) -> None:
            with cuasync.cancel_scope():
                launched.append(True)
                await ct.mark(marks, 0).then(lambda _: _copy(t, src))

        await _cancelled_while_queued(lambda: handler(skipped), launched)
        await handler(ran)  # the same region, its scope not cancelled: it runs
        await cuasync.get_default_device().synchronized()
        return np.asarray(_host(skipped)), np.asarray(_host(ran))

    skipped, ran = asyncio.run(main())
    want = host[:8] if view == "one block" else host[::2, :64]
    assert (skipped == 7).all()  # the copy never ran
    np.testing.assert_array_equal(ran.reshape(want.shape), want)


@needs_guards("memset")
def test_a_guarded_region_runs_only_while_its_scope_is_not_cancelled(
    guard_everything, baseline
) -> None:
    async def main() -> tuple[list[Any], list[Any]]:
        marks = _marks(1)
        skipped = await cuasync.full((256,), 7, "uint8")
        ran = await cuasync.full((256,), 7, "uint8")
        await _memset(ran, 7)  # (the guard kernel and the mark loaded before the gate)
        await ct.mark(marks, 0)
        launched: list[bool] = []

        async def handler(t: cuasync.Tensor) -> None:
            with cuasync.cancel_scope():
                launched.append(True)
                await ct.mark(marks, 0).then(lambda _: _memset(t, 0))

        await _cancelled_while_queued(lambda: handler(skipped), launched)
        await handler(ran)  # the same region, its scope not cancelled: it runs
        await cuasync.get_default_device().synchronized()
        return _host(skipped), _host(ran)

    skipped, ran = asyncio.run(main())
    assert set(skipped) == {7}  # the memset never ran
    assert set(ran) == {0}


@pytest.mark.parametrize(
    "name",
    [
        "matmul (tiled kernel)",
        pytest.param("matmul (cuBLAS)", marks=needs_guards("library")),
        pytest.param("zeros", marks=needs_guards("memset")),
        pytest.param("eye", marks=needs_guards("memset")),
        pytest.param("dup", marks=needs_guards("copy")),
        pytest.param("dup of a strided view", marks=needs_guards("copy")),
    ],
)
def test_library_calls_memsets_and_copies_of_a_cancelled_scope_are_skipped(
    name: str, guard_everything, baseline
) -> None:
    """A float matmul (a small one: the tiled kernel, which checks the word; a larger one:
    cuBLAS, in a guarded region), a memset or a copy engines' copy (one block:
    cuMemcpyDtoDAsync, or rows of a view: cuMemcpy2DAsync) making a new tensor, queued in a cancelled scope, never runs
    (counted on the emulator) and never delivers; afterwards the same op is right, and
    memory and slots are back (baseline). (On a GPU nothing counts the skip: the visible
    tests of a region are the ones writing into a tensor made beforehand.)"""

    host = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    large = np.arange(160**2, dtype=np.float32).reshape(160, 160) / 160**2  # (cuBLAS's)

    async def main() -> None:
        marks = _marks(1)
        x = await cuasync.asarray(host)
        y = await cuasync.asarray(large)
        make, want = {
            "matmul (tiled kernel)": (lambda: cuasync.matmul(x, x), host @ host),
            "matmul (cuBLAS)": (lambda: cuasync.matmul(y, y), large @ large),
            "zeros": (lambda: cuasync.zeros((8, 8)), np.zeros((8, 8))),
            "eye": (lambda: cuasync.eye(8), np.eye(8)),
            "dup": (lambda: x.dup(), host),
            "dup of a strided view": (lambda: y[::2, :64].dup(), large[::2, :64]),
        }[name]
        await make()  # (cuBLAS and the guard kernel loaded before the gate)
        await ct.mark(marks, 0)
        await _skipped_after_a_mark(make, marks)  # the guarded region did nothing
        np.testing.assert_allclose(_host(await make()), want, rtol=1e-6)

    asyncio.run(main())


def test_a_dup_of_memory_another_library_allocated_is_not_guarded(
    guard_everything, monkeypatch
) -> None:
    """Memory adopted from another library (``__cuda_array_interface__``, DLPack) may be
    CUDA managed memory, which a conditional node's body may refuse to copy: its ``dup``
    is copied unguarded (and right); a tensor cuasync allocated gets the region."""
    from cuasync._interop.cai import from_cuda_array_interface
    from cuasync._transfers import copies

    regions: list[str] = []
    real = copies.guarded

    def spy(ctx: Any, kind: str, **size: Any) -> Any:
        regions.append(kind)
        return real(ctx, kind, **size)

    monkeypatch.setattr(copies, "guarded", spy)
    host = np.arange(64, dtype=np.float32)

    class Adopted:  # (another library's array over the same memory)
        def __init__(self, t: cuasync.Tensor) -> None:
            self.__cuda_array_interface__ = t.__cuda_array_interface__

    async def main() -> tuple[list[str], list[str]]:
        own = await cuasync.asarray(host)
        adopted = from_cuda_array_interface(Adopted(own))
        with cuasync.cancel_scope():
            copy = await adopted.dup()
            np.testing.assert_array_equal(_host(copy), host)
            foreign, regions[:] = list(regions), []
            await own.dup()
        return foreign, list(regions)

    foreign, own = asyncio.run(main())
    assert foreign == [] and own == ["copy"]


def test_a_matmul_into_a_given_tensor_runs_in_a_cancelled_scope(guard_everything, baseline) -> None:
    """``out=`` names a tensor others may read: its cuBLAS call is never guarded."""
    host = np.eye(8, dtype=np.float32) * 2

    async def main() -> list[Any]:
        x = await cuasync.asarray(host)
        out = await cuasync.zeros((8, 8))
        await cuasync.matmul(x, x * 2, out=out)  # (its kernels loaded before the gate)
        launched: list[bool] = []

        async def handler() -> None:  # the product and the pending x * 3 it reads run
            with cuasync.cancel_scope():
                launched.append(True)
                await cuasync.matmul(x, x * 3, out=out)

        await _cancelled_while_queued(handler, launched)
        await cuasync.get_default_device().synchronized()
        return np.asarray(_host(out)).ravel().tolist()

    assert asyncio.run(main()) == (host @ (host * 3)).ravel().tolist()
