"""Ops as asyncio futures: ``asyncio.gather(*ops)``, ``as_completed``, ``ensure_future``,
``wait_for`` and ``shield`` take an op without a Task (``cuasync._core.op_future``).

What a user relies on: each op's output in order, work started in the loop's next pass
(in the scope it was handed over in), nothing submitted for an op cancelled before then,
cancelled work released once it lands, errors raised where they are awaited, callbacks in
the handover's context, and nothing leaked when the loop closes with work in flight.
Gates hold the work, so the tests run on a GPU too.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import itertools
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import NATIVE_ON, new_loop, python_calls, wait_until

import cuasync
import cuasync.testing as ct
from cuasync.errors import DriverError, OpConsumedError

pytestmark = pytest.mark.anyio

#: The loops whose ops are asyncio futures (trio has none: an op stays a coroutine there).
ASYNCIO = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
]


def _tasks() -> int:
    return len(asyncio.all_tasks())


def _x() -> cuasync.Tensor:
    """256 twos, and the kernels the tests run on them compiled (no first use)."""
    t = cuasync.full((256,), 2.0, "float32").sync(allow_in_loop=True)
    for warm in (t + t, t * 3.0, cuasync.exp(t), cuasync.sum(t)):  # compiled: no first use
        warm.sync(allow_in_loop=True)
    return t


def _marks() -> cuasync.Tensor:
    """Eight zeros for ``ct.mark`` (a kernel that sets its index when it runs), its kernel
    loaded (a module load behind a closed gate would wait for the gate)."""
    marks = cuasync.zeros((8,), "uint32").sync(allow_in_loop=True)
    ct.mark(marks, 7).sync(allow_in_loop=True)
    return marks


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_gather_of_ops_returns_each_output_without_a_task_each(
    anyio_backend: Any, baseline: Any
) -> None:
    x = _x()
    tasks_before = _tasks()
    ops = [x + x, x * 3.0, cuasync.exp(x), cuasync.sum(x)] * 50
    gathered = asyncio.gather(*ops)
    assert _tasks() == tasks_before  # asyncio made no Task for them
    results = await gathered
    want: list[Any] = [np.full(256, 4.0), np.full(256, 6.0), np.full(256, np.exp(2.0)), 512.0]
    for i, got in enumerate(results):
        np.testing.assert_allclose(np.asarray(await got.to_host()), want[i % 4], rtol=1e-6)
    assert all(op.done() and not op.cancelled() for op in ops)
    assert ops[2].result() is results[2]


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_op_asyncio_adopts_starts_in_the_next_pass(
    anyio_backend: Any, baseline: Any
) -> None:
    x = _x()
    op = x + x
    assert asyncio.isfuture(op) and asyncio.ensure_future(op) is op
    assert not op.done()
    with pytest.raises(asyncio.InvalidStateError):
        op.result()
    with ct.gate() as gate:
        await asyncio.sleep(0)  # the loop's next pass started it, behind the gate
        assert cuasync.stats().slots_armed >= 1 and not op.done()
        gate.open()
        out = await op
    assert op.done() and op.exception() is None and op.result() is out
    assert set(np.asarray(await out.to_host()).tolist()) == {4.0}
    with pytest.raises(OpConsumedError):
        op.sync(allow_in_loop=True)  # still one execution


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_ops_cancelled_before_the_next_pass_submit_nothing(
    anyio_backend: Any, baseline: Any
) -> None:
    x = _x()
    finished = cuasync.stats().completed_inline + cuasync.stats().completed_reactor
    op = x + x
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(op, 0)
    assert op.cancelled()
    with pytest.raises(OpConsumedError, match="cancelled before it started"):
        await op  # as a closed coroutine would (loud: a CancelledError would end the task)
    never = cuasync.exp(x)
    assert asyncio.ensure_future(never) is never
    assert never.cancel() and never.cancelled() and not never.cancel()
    with pytest.raises(asyncio.CancelledError):
        never.result()  # the future's protocol says how it ended
    with pytest.raises(OpConsumedError, match="cancelled before it started"):
        await never
    with pytest.raises(OpConsumedError, match="cancelled before it started"):
        never.to_host()  # (any use of it says so)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert cuasync.stats().completed_inline + cuasync.stats().completed_reactor == finished


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_cancelling_a_gather_of_ops_in_flight_lets_their_work_land_and_frees_it(
    anyio_backend: Any, baseline: Any
) -> None:
    marks = _marks()
    with ct.gate() as gate:
        gathered = asyncio.gather(*(ct.mark(marks, i) for i in range(4)))
        await wait_until(lambda: cuasync.stats().slots_armed >= 4)  # submitted
        gathered.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gathered
        gate.open()
    ct.settle()  # the background watcher saw them land, and released what they used
    assert np.asarray(await marks.to_host()).tolist()[:4] == [1, 1, 1, 1]  # no scope: ran


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_ops_handed_over_in_a_cancel_scope_are_skipped_with_it(
    anyio_backend: Any, baseline: Any
) -> None:
    marks = _marks()
    await _gathered_in_a_cancelled_scope(lambda: [ct.mark(marks, i) for i in range(4)])
    assert np.asarray(await marks.to_host()).tolist()[:4] == [0, 0, 0, 0]  # skipped


async def _gathered_in_a_cancelled_scope(
    make: Callable[[], list[Any]], beside: Callable[[], Any] | None = None
) -> Any:
    """Gather ``make()``'s ops in a task inside a cancel scope, behind a closed gate; once
    the loop's next pass started them, cancel the task (it leaves the scope by the
    cancellation), open the gate and wait for the device. ``beside()`` runs right after
    the task is made: what it hands over joins that same pass (which runs in the context
    of the first handover, ``beside``'s); its result is returned."""
    submitted = asyncio.Event()

    async def handler() -> None:
        with cuasync.cancel_scope():
            ops = make()
            gathered = asyncio.gather(*ops)
            await asyncio.sleep(0)  # the next pass started them
            assert all(op._future is not None and op._future.started for op in ops)
            submitted.set()
            await gathered

    with ct.gate():
        task = asyncio.ensure_future(handler())  # (its first step runs before the pass)
        besides = None if beside is None else beside()
        await submitted.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await cuasync.get_default_device().synchronized()
    return besides


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
@pytest.mark.parametrize("how", ["ensure_future", "shield"])
@pytest.mark.parametrize("kind", ["expression", "launch"])
async def test_an_op_handed_over_in_a_scope_is_cancelled_with_it_for_every_awaiter(
    anyio_backend: Any, baseline: Any, how: str, kind: str
) -> None:
    """An op handed to asyncio inside a cancel scope carries the scope's word: once the
    scope is cancelled (its task cancelled while it awaits something else, or the shield
    it awaits), another task awaiting the op gets ``CancelledError``, never an output the
    skipped work did not write (the expression through the native handover, the launch
    through Python's)."""
    x, marks = _x(), _marks()
    make = {"expression": lambda: x * 3.0, "launch": lambda: ct.mark(marks, 0)}[kind]
    handed = asyncio.Event()
    ops: list[Any] = []

    async def handler() -> None:
        with cuasync.cancel_scope():
            ops.append(make())
            shielded = asyncio.shield(ops[0]) if how == "shield" else None
            if shielded is None:
                assert asyncio.ensure_future(ops[0]) is ops[0]
            await asyncio.sleep(0)  # the next pass started it
            assert ops[0]._future.started
            handed.set()
            await (shielded if shielded is not None else asyncio.Event().wait())

    with ct.gate():
        task = asyncio.ensure_future(handler())
        await handed.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ops[0].cancelled()
    with pytest.raises(asyncio.CancelledError, match="cancel scope"):
        await ops[0]  # (another task's await: not the output of skipped work)
    await cuasync.get_default_device().synchronized()
    assert np.asarray(await marks.to_host()).tolist()[0] == 0  # (the launch: skipped)


def test_an_op_another_threads_loop_took_over_in_a_cancelled_scope_delivers_nothing(
    baseline: Any,
) -> None:
    """A scope cancelled from another thread than the loop its op was handed to (a loop
    running in a copy of the scope's context): the op is marked cancelled at once, so the
    pass that finds its skipped work landed, queued on that loop before the cancel is,
    ends it with ``CancelledError``, not with the output the device never wrote."""
    marks = _marks()
    handed, cancelled, landed = threading.Event(), threading.Event(), threading.Event()
    result: dict[str, Any] = {}

    def other_loop() -> None:
        async def main() -> None:
            op = ct.mark(marks, 0)
            assert asyncio.ensure_future(op) is op

            def hold() -> None:  # (queued before the pass that looks at the op)
                handed.set()
                assert cancelled.wait(30) and landed.wait(30)

            asyncio.get_running_loop().call_soon(hold)
            try:
                result["output"] = await op
            except asyncio.CancelledError as exc:
                result["error"] = exc

        asyncio.run(main())

    with ct.gate() as gate, cuasync.cancel_scope() as scope:
        thread = threading.Thread(target=contextvars.copy_context().run, args=(other_loop,))
        thread.start()
        assert handed.wait(30)  # started behind the gate, not looked at yet
        scope.cancel()  # (this thread runs no loop: the op's loop cancels it later)
        cancelled.set()
        gate.open()
    cuasync.Device(0).synchronize()  # the skipped launch's flag landed
    landed.set()
    thread.join(30)
    assert "output" not in result and "cancel scope" in str(result["error"])
    assert np.asarray(marks.to_host().sync()).tolist()[0] == 0  # (skipped)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_op_handed_over_in_a_scope_left_normally_delivers_its_output(
    anyio_backend: Any, baseline: Any
) -> None:
    x = _x()
    with ct.gate(), cuasync.cancel_scope():
        op = x * 3.0
        assert asyncio.ensure_future(op) is op
        await asyncio.sleep(0)  # started in the next pass, behind the gate
        assert op._future.started
    # the scope closed (before the gate opened) with its work queued: it runs, and delivers
    np.testing.assert_allclose(np.asarray(await (await op).to_host()), 6.0)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_ops_started_in_one_pass_keep_the_scope_each_was_handed_over_in(
    anyio_backend: Any, baseline: Any
) -> None:
    """Ops handed over in a cancelled scope and ops of no scope, started in the same pass
    (the pass runs in the context of the first handover), each run with its own scope's
    word, whichever way the core takes each: only the cancelled scope's are skipped."""
    marks = _marks()
    free = await _gathered_in_a_cancelled_scope(
        lambda: [ct.mark(marks, i) for i in range(4)],
        beside=lambda: asyncio.gather(ct.mark(marks, 4), ct.mark(marks, 5)),  # (no scope)
    )
    await free
    assert np.asarray(await marks.to_host()).tolist()[:6] == [0, 0, 0, 0, 1, 1]


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_as_completed_and_shield_take_ops(anyio_backend: Any, baseline: Any) -> None:
    x = _x()
    ops = [x * 3.0 for _ in range(8)]
    outs = [await next_done for next_done in asyncio.as_completed(ops)]
    assert len(outs) == 8 and {float(np.asarray(await o.to_host())[0]) for o in outs} == {6.0}
    shielded = await asyncio.shield(x + x)
    assert float(np.asarray(await shielded.to_host())[0]) == 4.0


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_failed_op_raises_from_the_gather_and_the_others_still_land(
    anyio_backend: Any, baseline: Any
) -> None:
    x = _x()
    bump, y = await _bumped()
    bad = bump[1, 32, 64 * 1024](y, 32)  # more dynamic shared memory than allowed
    good = x + x
    outcomes = await asyncio.gather(good, bad, return_exceptions=True)
    assert isinstance(outcomes[1], DriverError) and isinstance(bad.exception(), DriverError)
    landed = outcomes[0]
    assert isinstance(landed, cuasync.Tensor)
    assert float(np.asarray(await landed.to_host())[0]) == 4.0
    with pytest.raises(DriverError):
        await asyncio.gather(x * 3.0, bump[1, 32, 64 * 1024](y, 32))


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_callbacks_run_in_the_handover_context_once_done(
    anyio_backend: Any, baseline: Any
) -> None:
    x = _x()
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="loop")
    seen: list[tuple[str, bool]] = []
    var.set("handover")
    op = x + x

    def record(done: Any) -> None:
        seen.append((var.get(), done is op and done.done()))

    def dropped(_: Any) -> None:
        seen.append(("dropped", False))

    op.add_done_callback(record)
    op.add_done_callback(dropped)
    op.add_done_callback(dropped)
    assert op.remove_done_callback(dropped) == 2
    var.set("later")
    await op
    await asyncio.sleep(0)
    assert seen == [("handover", True)]
    op.add_done_callback(record)  # once done: scheduled at once
    await asyncio.sleep(0)
    assert seen[-1] == ("later", True)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_first_use_in_a_gather_compiles_off_the_loop(
    anyio_backend: Any, baseline: Any
) -> None:
    from cuasync import _first_use

    source = 'extern "C" __global__ void fresh(float* x) { x[threadIdx.x] = 9.0f; }'
    fresh = cuasync.Kernel(source, "fresh", emulate=lambda x: x.__setitem__(slice(0, 32), 9.0))
    y = await cuasync.zeros((32,), "float32")
    before = _first_use.stats()
    await asyncio.gather(fresh[1, 32](y), cuasync.exp(y))
    assert _first_use.stats() > before  # the new kernel was prepared on the compile thread
    assert set(np.asarray(await y.to_host()).tolist()) == {9.0}


def test_an_op_is_a_coroutine_outside_a_running_asyncio_loop(baseline: Any) -> None:
    x = cuasync.full((8,), 1.0, "float32").sync()
    op = x + x
    assert not asyncio.isfuture(op)  # trio, or no loop yet: asyncio would run it in a Task
    loop = asyncio.new_event_loop()
    try:
        out = loop.run_until_complete(op)  # (ensure_future before the loop runs: a Task)
    finally:
        loop.close()
    assert set(np.asarray(out.to_host().sync()).tolist()) == {2.0}
    shared = (x + x).shared()
    assert not asyncio.isfuture(shared)  # never a future: see op_future
    shared.sync()


def test_closing_a_loop_with_ops_handed_over_releases_their_work(baseline: Any) -> None:
    x = cuasync.full((64,), 1.0, "float32").sync()
    (x + x).sync()
    gate = ct.gate()

    async def main() -> list[Any]:
        ops = [x + x for _ in range(4)]
        assert all(asyncio.ensure_future(op) is op for op in ops)
        await asyncio.sleep(0)  # started, behind the gate
        await asyncio.sleep(0)  # looked at: armed to the reactor
        return [op for op in ops if not op.done()]

    loop = asyncio.new_event_loop()
    pending = loop.run_until_complete(main())
    loop.close()  # with their work in flight
    assert len(pending) == 4
    gate.open()
    ct.settle()  # (the baseline fixture checks memory and slots came back)
    # each ended, cancelled (unseen: its loop is gone), once its work landed
    assert all(op.done() and op.cancelled() for op in pending)
    with pytest.raises(asyncio.CancelledError):
        pending[0].result()
    del pending
    gc.collect()


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_awaiting_an_op_cancelled_after_it_launched_raises_cancelled(
    anyio_backend: Any, baseline: Any
) -> None:
    marks = _marks()  # (ct.mark: a launch that takes its scope's word when executed)
    op = ct.mark(marks, 0)
    with ct.gate():
        assert asyncio.ensure_future(op) is op
        await asyncio.sleep(0)  # launched behind the gate
        assert op.cancel() and op.cancelled()
        with pytest.raises(asyncio.CancelledError):
            await op
    ct.settle()


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_op_failing_in_a_pass_fails_alone(
    anyio_backend: Any, baseline: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cuasync._core.completion import get_hub

    x = _x()
    hub = get_hub()
    watch = hub.watch
    failed: list[bool] = []

    def fail_once(*args: Any) -> None:  # arming a completion fails once (out of memory)
        if not failed:
            failed.append(True)
            raise MemoryError("no memory to arm it")
        watch(*args)

    monkeypatch.setattr(hub, "watch", fail_once)
    with ct.gate() as gate:  # (held: every op is armed, none lands at its looks)
        gathered = asyncio.gather(
            x + x, cuasync.from_host(np.ones(4, np.float32)), x * 3.0, return_exceptions=True
        )
        await wait_until(lambda: bool(failed))
        gate.open()
        outcomes = await gathered
    assert sum(isinstance(o, MemoryError) for o in outcomes) == 1
    assert sum(isinstance(o, cuasync.Tensor) for o in outcomes) == 2
    ct.settle()  # (the baseline fixture: the failed one's slot and memory came back)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_shared_op_is_never_a_future(anyio_backend: Any, baseline: Any) -> None:
    x = _x()
    shared = (x + x).shared()
    with pytest.raises(TypeError, match="not an asyncio future"):
        shared.cancel()
    first, second = await asyncio.gather(shared, shared)  # in Tasks, as coroutines
    assert first is second and first is await shared


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_each_callback_gets_its_own_context(anyio_backend: Any, baseline: Any) -> None:
    var: contextvars.ContextVar[int] = contextvars.ContextVar("var", default=0)
    seen: list[int] = []
    op = _x() + 1.0

    def setter(_: Any) -> None:
        var.set(7)

    def reader(_: Any) -> None:
        seen.append(var.get())

    op.add_done_callback(setter)
    op.add_done_callback(reader)
    await op
    await asyncio.sleep(0)
    assert seen == [0]  # the setter's change stayed in its own copy


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_bad_callback_is_refused_before_anything_starts(
    anyio_backend: Any, baseline: Any
) -> None:
    op = _x() + 1.0
    with pytest.raises(cuasync.errors.ArgumentError, match="fn must be callable"):
        op.add_done_callback(42)  # type: ignore[arg-type]
    with pytest.raises(cuasync.errors.ArgumentError, match="context must be"):
        op.add_done_callback(print, context={})  # type: ignore[arg-type]
    assert op._future is None  # not handed over: still an op to await
    assert float(np.asarray(await (await op).to_host())[0]) == 3.0


async def _bumped() -> tuple[Any, cuasync.Tensor]:
    """A plain kernel launch (the native handover's case), its kernel prepared by one
    launch on the 32 zeros it returns beside it (ones now)."""
    from test_express import bump

    y = await cuasync.zeros((32,), "float32")
    await bump[1, 32](y, 32)
    return bump, y


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_gathered_launches_run_on_the_policy_in_force_at_the_handover(
    anyio_backend: Any, baseline: Any
) -> None:
    bump, y = await _bumped()  # (prepared: no first use)
    stream = cuasync.Device(0).new_stream()
    submitted = stream._submitted
    with cuasync.use_policy(cuasync.SingleStream(stream)):
        ops = [bump[1, 32](y, 32) for _ in range(5)]
        gathered = asyncio.gather(*ops)  # handed over here, in this policy's context
    outputs = await gathered  # (started in the next pass, outside the block)
    assert stream._submitted == submitted + 5  # every one ran on the policy's stream
    assert all(op.done() and op.result() is out for op, out in zip(ops, outputs, strict=True))
    assert set(np.asarray(await y.to_host()).tolist()) == {6.0}


class _NotAStream(cuasync.SchedulingPolicy):
    def next_stream(self) -> Any:
        return "not a stream"


async def _maker(kind: str) -> Callable[[], Any]:
    """Ops of a kind the native handover takes: a plain kernel launch, or a TensorOp of a
    seen expression (each kernel prepared)."""
    if kind == "launch":
        bump, y = await _bumped()
        return lambda: bump[1, 32](y, 32)
    x = _x()
    return lambda: x + x


@pytest.mark.parametrize("kind", ["launch", "tensor op"])
@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_op_whose_policy_fails_raises_where_it_is_awaited(
    anyio_backend: Any, kind: str, baseline: Any
) -> None:
    make = await _maker(kind)
    with cuasync.use_policy(_NotAStream()):
        bad = make()
        assert asyncio.ensure_future(bad) is bad  # handed over: no error here
    good = make()
    outcomes = await asyncio.gather(bad, good, return_exceptions=True)
    assert isinstance(outcomes[0], cuasync.errors.SchedulingError)
    assert "must return a cuasync.Stream" in str(outcomes[0])
    assert isinstance(outcomes[1], cuasync.Tensor) and bad.done() and not bad.cancelled()
    with pytest.raises(OpConsumedError):  # taken all the same: one execution
        bad.sync(allow_in_loop=True)


class _Interrupting(cuasync.SchedulingPolicy):
    """^C landing while a policy picks the stream."""

    def next_stream(self) -> Any:
        raise KeyboardInterrupt


@pytest.mark.parametrize("kind", ["launch", "tensor op", "copy"])
@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_an_op_whose_handover_is_interrupted_is_used_not_left_hanging(
    anyio_backend: Any, kind: str, baseline: Any
) -> None:
    """^C during the handover propagates; the op is used (one execution) and awaiting it
    raises at once, on the native handover (a launch, a TensorOp) and Python's (a copy)."""
    make = await _maker("launch" if kind == "launch" else "tensor op")
    op = _x().to_host() if kind == "copy" else make()
    with cuasync.use_policy(_Interrupting()), pytest.raises(KeyboardInterrupt):
        asyncio.isfuture(op)  # (asyncio's question hands it over)
    with pytest.raises(OpConsumedError):
        await asyncio.wait_for(op, 10)  # (a hang would time out instead)


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_an_interrupt_in_the_start_pass_ends_its_op_and_the_rest_start_after(
    kind: str, baseline: Any
) -> None:
    """^C while the pass starts an op stops the loop, as it would in a Task's step: that
    op ends with it (its awaiters see it), and the ops queued after it start in the next
    pass; nothing hangs, nothing leaks. (asyncio runs that pass when the loop runs again;
    uvloop runs the callbacks ready by then once more before it stops, so there the next
    pass may already have run, and its ops finished.)"""
    x = _x()

    def interrupted(_: Any) -> Any:
        raise KeyboardInterrupt

    ops = [x + x, (x * 3.0).then(interrupted), cuasync.exp(x)]

    async def main() -> list[Any]:
        return await asyncio.gather(*ops, return_exceptions=True)

    loop = new_loop(kind)
    try:
        task = loop.create_task(main())
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(task)
        if kind == "asyncio":  # (uvloop: see above)
            assert not ops[2].done()  # queued after the interrupted one: not started yet
        outcomes = loop.run_until_complete(asyncio.wait_for(task, 10))  # (a hang: times out)
        outputs = [np.asarray(loop.run_until_complete(outcomes[i].to_host())) for i in (0, 2)]
    finally:
        loop.close()
    assert isinstance(outcomes[1], KeyboardInterrupt)
    assert isinstance(ops[1].exception(), KeyboardInterrupt)
    np.testing.assert_allclose(outputs[0], 4.0)
    np.testing.assert_allclose(outputs[1], np.exp(2.0), rtol=1e-6)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_handover_must_give_the_ops_own_watched(anyio_backend: Any, baseline: Any) -> None:
    """An op class whose handover hook returns another op's Watched is refused (its
    callbacks would be called with the other op, its own never done), and the op is
    still unused."""
    from cuasync._core.output import Output

    other = _x() + 1.0
    assert asyncio.ensure_future(other) is other

    class Borrowing(cuasync.DeviceOp[int]):  # (the hook is cuasync's own op classes')
        __slots__ = ()

        def _enqueue(self, ctx: Any) -> Any:
            return Output.ready(42)

        @staticmethod
        def _hand_over(op: Any) -> Any:
            return other._future

    mine = Borrowing(cuasync.Device(0))
    with pytest.raises(TypeError, match="not its _future"):
        asyncio.isfuture(mine)
    await other
    assert await mine == 42


def _cuasync_calls(fn: Callable[[], object]) -> list[str]:
    """The names of cuasync's Python functions ``fn()`` calls."""
    return python_calls(fn, within=str(Path(cuasync.__file__).parent))


_NEVER_SEEN = itertools.count(5)

#: The Python handover's own steps (``Watched.prepare``): a seen expression skips them.
_PYTHON_HANDOVER = {"prepare", "prepare_on", "_first_use", "_express_launch", "_pick_stream"}


@pytest.mark.skipif(not NATIVE_ON, reason="the native handover (the generic path is Python's)")
@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_seen_expression_is_handed_over_in_c_and_a_new_one_prepared_first(
    anyio_backend: Any, baseline: Any
) -> None:
    """A gathered TensorOp of a seen expression is taken with its raw launch in C (no plan
    walked in Python per op: issue #32's tensor ops at launch cost); one never seen goes
    through its first use (``Watched.prepare_on``) and still gives its output."""
    x = _x()
    seen = x * 3.0
    assert not _PYTHON_HANDOVER.intersection(_cuasync_calls(lambda: asyncio.ensure_future(seen)))
    fresh = cuasync.sqrt(x) * x
    for _ in range(next(_NEVER_SEEN)):  # (a structure this process never ran)
        fresh = cuasync.sqrt(fresh)
    assert "prepare_on" in _cuasync_calls(lambda: asyncio.ensure_future(fresh))
    outs = await asyncio.gather(seen, fresh)
    np.testing.assert_allclose(np.asarray(await outs[0].to_host()), 6.0)
    assert np.asarray(await outs[1].to_host()).min() > 1.0  # (sqrt of 2 * sqrt 2, again)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_asyncio_reads_an_op_as_a_future_without_python_code(
    anyio_backend: Any, baseline: Any
) -> None:
    """What gather asks of each op (``_asyncio_future_blocking``, ``get_loop``,
    ``add_done_callback``, then ``done``, ``cancelled``, ``exception``, ``result``) is
    the native base's: a launch handed over runs no Python of cuasync's for them."""
    make = await _maker("launch")
    op = make()
    seen: list[Any] = []

    def asked() -> None:
        assert op._asyncio_future_blocking is False  # (handed over here)
        assert op.get_loop() is asyncio.get_running_loop() and not op.done()
        op.add_done_callback(seen.append)

    assert _cuasync_calls(asked) == []
    out = await op
    await asyncio.sleep(0)
    assert seen == [op]

    def read() -> None:
        assert op.done() and not op.cancelled() and op.exception() is None
        assert op.result() is out

    assert _cuasync_calls(read) == []
    with pytest.raises(TypeError, match="must be a Watched"):
        other = make()
        other._future = object()  # (a record that is not one: refused, no crash)
        other.done()
    other._future = None
    other._take()  # (never executed: it does not warn)


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_gathered_op_writing_out_in_a_cancelled_scope_still_writes_it(
    anyio_backend: Any, baseline: Any
) -> None:
    """A TensorOp writing a tensor given to it (``out=``) is executed outside its cancel
    scope, gathered as awaited: a tensor others may read is never left half written."""
    x, out = _x(), cuasync.zeros((256,), "float32").sync(allow_in_loop=True)
    cuasync.add(x, 1.0, out=x).sync(allow_in_loop=True)  # (prepared: no first use; x 3s)
    await _gathered_in_a_cancelled_scope(lambda: [cuasync.add(x, 1.0, out=out)])
    assert set(np.asarray(await out.to_host()).tolist()) == {4.0}  # written all the same


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_gathered_creation_ops_give_their_tensors_and_warn_of_nothing(
    anyio_backend: Any, baseline: Any
) -> None:
    """A TensorOp whose raw launch is a library call (``zeros``: a memset) is handed over
    with that launch, as its await launches it; nothing is reported as an op never
    executed."""
    await cuasync.zeros((16,), "float32")  # (seen: its raw launch is a library call)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zeros, full = await asyncio.gather(
            cuasync.zeros((16,), "float32"), cuasync.full((16,), 3.0, "float32")
        )
        gc.collect()
    assert not [w for w in caught if "never executed" in str(w.message)]
    assert np.asarray(await zeros.to_host()).tolist() == [0.0] * 16
    assert np.asarray(await full.to_host()).tolist() == [3.0] * 16


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_a_watched_op_with_a_field_deleted_raises_instead_of_crashing(
    anyio_backend: Any, baseline: Any
) -> None:
    from cuasync._core.completion import get_hub
    from cuasync._core.op_future import Watched

    bump, y = await _bumped()
    op = bump[1, 32](y, 32)
    watched = Watched(op, asyncio.get_running_loop(), None)
    del watched.launch
    op._future = watched  # (what asyncio asks of the op reads it too)
    for step in (
        watched.end, watched.let_launch_go, lambda: watched.look(get_hub()), op.done,
        op.get_loop, lambda: op.add_done_callback(print),
    ):  # fmt: skip
        with pytest.raises(RuntimeError, match="deleted"):
            step()
    op._future = None
    with pytest.raises(TypeError, match="Watched objects"):
        Watched.start_each([object()], lambda w, e: None)
    watched.launch = None
    watched.end()  # (whole again: it ends)
    assert watched.finished and watched.op is None
    op._take()  # (never executed: it does not warn)


@pytest.mark.skipif(not NATIVE_ON, reason="the native core's looks (the generic path arms each op)")
@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_ops_behind_a_held_one_on_its_stream_wait_for_it_without_being_armed(
    anyio_backend: Any, baseline: Any
) -> None:
    marks = _marks()
    stream = cuasync.Device(0).new_stream()
    with cuasync.use_policy(cuasync.SingleStream(stream)), ct.gate(stream) as gate:
        ops = [ct.mark(marks, i) for i in range(6)]
        gathered = asyncio.gather(*ops)
        watched = [op._future for op in ops]
        await wait_until(lambda: watched[0].comp is not None)  # the first, armed
        for _ in range(40):  # passes go by: the others, behind it, get no completion
            await asyncio.sleep(0)
        assert [w.comp is not None for w in watched] == [True] + [False] * 5
        assert watched[0].behind == watched[1:] and not any(op.done() for op in ops)
        gate.open()
        await gathered
    assert np.asarray(await marks.to_host()).tolist()[:6] == [1] * 6


@pytest.mark.parametrize("anyio_backend", ASYNCIO, indirect=True)
async def test_cancelling_the_op_others_wait_behind_lets_them_land(
    anyio_backend: Any, baseline: Any
) -> None:
    marks = _marks()
    stream = cuasync.Device(0).new_stream()
    with cuasync.use_policy(cuasync.SingleStream(stream)), ct.gate(stream) as gate:
        ops = [ct.mark(marks, i) for i in range(4)]
        assert all(asyncio.ensure_future(op) is op for op in ops)
        first, second = ops[0]._future, ops[1]._future
        await wait_until(lambda: first.comp is not None)  # armed (the others behind it)
        assert ops[0].cancel()
        await wait_until(lambda: second.comp is not None)  # the next one, armed
        gate.open()
        outputs = await asyncio.gather(*ops[1:])
    assert all(op.result() is out for op, out in zip(ops[1:], outputs, strict=True))
    ct.settle()
    assert np.asarray(await marks.to_host()).tolist()[:4] == [1] * 4  # (the first ran too)


def test_closing_a_loop_with_ops_waiting_behind_an_armed_one_releases_them(
    baseline: Any,
) -> None:
    marks = cuasync.zeros((8,), "uint32").sync()
    ct.mark(marks, 7).sync()
    stream = cuasync.Device(0).new_stream()
    gate = ct.gate(stream)

    async def main() -> list[Any]:
        with cuasync.use_policy(cuasync.SingleStream(stream)):
            ops = [ct.mark(marks, i) for i in range(4)]
            assert all(asyncio.ensure_future(op) is op for op in ops)
        first = ops[0]._future
        await wait_until(lambda: first.comp is not None)  # armed (the native core: 3 behind it)
        return [op for op in ops if not op.done()]

    loop = asyncio.new_event_loop()
    pending = loop.run_until_complete(main())
    loop.close()  # with the first armed, the others waiting behind it
    assert len(pending) == 4
    gate.open()
    ct.settle()  # (the baseline fixture checks memory and slots came back)
    # each ended, cancelled (unseen): at the close, or the armed one once its work landed
    assert all(op.done() and op.cancelled() for op in pending)
    del pending
    gc.collect()
    assert np.asarray(marks.to_host().sync()).tolist()[:4] == [1] * 4  # (they ran)
