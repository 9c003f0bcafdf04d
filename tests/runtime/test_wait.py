"""``cuasync.wait``: awaiting work another library enqueued on its stream or event.

Foreign work is stood in for by a stream held at a closed gate: whatever is enqueued
on it cannot finish until the gate opens, on a GPU as on the emulator.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from helpers import COMPLETION, ON_EMULATOR, still_pending, wait_until

import cuasync
import cuasync.testing as ct
from cuasync._backends import get_backend
from cuasync.errors import ArgumentError, CaptureError

pytestmark = pytest.mark.anyio


@pytest.fixture
def stream() -> cuasync.Stream:
    return cuasync.Device(0).new_stream()


async def test_waiting_for_a_stream_keeps_the_loop_running(
    anyio_backend: object, stream: cuasync.Stream, baseline: object
) -> None:
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0)

    async def waiter() -> None:
        nonlocal done
        await cuasync.wait(stream)
        done = True

    gate = ct.gate(stream)
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        tg.start_soon(waiter)
        await wait_until(lambda: ticks > 20)
        assert not done  # the loop ran on while the stream was held
        gate.open()
        await wait_until(lambda: done)
        tg.cancel_scope.cancel()


async def test_cancelling_a_wait_leaves_the_foreign_work_alone(
    anyio_backend: object, stream: cuasync.Stream, baseline: object
) -> None:
    t = await cuasync.zeros((64,))
    with ct.gate(stream):
        work = cuasync.fill(t, 4.0).submit_on(stream)  # "their" work, behind the gate
        op = cuasync.wait(stream)
        with anyio.move_on_after(0.01) as scope:
            await op
        assert scope.cancelled_caught
        assert not work.done()
        assert repr(op) == f"<cuasync.DeviceOp wait for {stream!r} (consumed)>"  # (let go of)
    await work
    np.testing.assert_array_equal(await t.to_host(), np.full(64, 4.0, np.float32))


async def test_waiting_for_an_event(
    anyio_backend: object, stream: cuasync.Stream, baseline: object
) -> None:
    event = cuasync.Event()
    with ct.gate(stream):
        event.record(stream)
        waiting = cuasync.wait(event).submit()
        assert waiting.stream is not stream
        assert still_pending(waiting.done), "the wait did not wait for the event"
    await waiting


@pytest.mark.parametrize("form", ["handle", "protocol", "torch-like", "cupy-like"])
async def test_stream_forms(anyio_backend: object, stream: cuasync.Stream, form: str) -> None:
    class Protocol:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, stream.handle)

    class TorchStream:  # what wait() reads of a torch.cuda.Stream
        __module__ = "torch.cuda.streams"
        cuda_stream = stream.handle

    class CupyStream:  # and of a cupy.cuda.Stream
        __module__ = "cupy.cuda.stream"
        ptr = stream.handle

    x = {
        "handle": stream.handle,
        "protocol": Protocol(),
        "torch-like": TorchStream(),
        "cupy-like": CupyStream(),
    }[form]
    with ct.gate(stream):
        waiting = cuasync.wait(x).submit()
        assert waiting.stream.handle == stream.handle  # the flag goes on their stream
        assert still_pending(waiting.done)
    await waiting


@pytest.mark.parametrize("form", ["torch-like", "cupy-like"])
async def test_event_forms(anyio_backend: object, stream: cuasync.Stream, form: str) -> None:
    event = cuasync.Event()

    class TorchEvent:
        __module__ = "torch.cuda.streams"
        cuda_event = event.handle

    class CupyEvent:
        __module__ = "cupy.cuda.stream"
        ptr = event.handle

    with ct.gate(stream):
        event.record(stream)
        waiting = cuasync.wait(TorchEvent() if form == "torch-like" else CupyEvent()).submit()
        assert still_pending(waiting.done)
    await waiting


async def test_an_unrecorded_torch_event_is_already_done(anyio_backend: object) -> None:
    class TorchEvent:
        __module__ = "torch.cuda.streams"
        cuda_event = 0  # torch creates the event on its first record

    await cuasync.wait(TorchEvent())


def test_submitting_on_another_stream_still_waits(stream: cuasync.Stream) -> None:
    other = cuasync.Device(0).new_stream()
    with ct.gate(stream):
        waiting = cuasync.wait(stream).submit_on(other)
        assert still_pending(waiting.done)
    waiting.wait()


class _Foreign:
    """A foreign stream object (``__cuda_stream__``): a wait retains it as its owner."""

    def __init__(self, handle: int) -> None:
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)


def test_a_capturing_foreign_stream_is_refused(stream: cuasync.Stream) -> None:
    # refused before anything is enqueued or retained: nothing joins the foreign capture
    # (a release retained first would enqueue its completion's write into it)
    backend = get_backend()
    backend.stream_begin_capture(stream.handle)
    try:
        for make in (
            lambda: cuasync.wait(stream.handle),
            lambda: cuasync.wait(_Foreign(stream.handle)),
        ):
            with pytest.raises(CaptureError, match="capturing"):
                make().sync()
            with pytest.raises(CaptureError, match="capturing"):
                make().submit().wait()
    finally:
        graph = backend.stream_end_capture(stream.handle)
        # (the emulator's own record of what the capture holds)
        captured = backend._graphs[graph].commands if ON_EMULATOR else []  # type: ignore[attr-defined]
        backend.graph_destroy(graph)
    assert captured == []


def test_a_wait_runs_on_the_stream_it_waits_for(
    stream: cuasync.Stream, monkeypatch: pytest.MonkeyPatch
) -> None:
    # whatever the policy's next stream, an await, a sync and a future of a wait put the
    # flag on the stream waited for: no other stream is made to wait for it (the generic
    # path, CUASYNC_NATIVE=off, took the policy's stream once)
    import asyncio

    from cuasync._interop import wait as wait_module

    made: list[tuple[int, ...]] = []
    real = wait_module.wait_for_foreign_handle

    def spy(*a: int) -> object:
        made.append(a)
        return real(*a)

    monkeypatch.setattr(wait_module, "wait_for_foreign_handle", spy)

    async def main() -> None:
        for _ in range(3):
            await cuasync.wait(stream)
        await cuasync.wait(stream).submit()

    asyncio.run(main())
    cuasync.wait(stream).sync()
    assert made == []


@pytest.mark.parametrize("bad", ["0x1000", 1.5, True, None, -1, object()])
def test_bad_inputs(bad: object) -> None:
    with pytest.raises(ArgumentError):
        cuasync.wait(bad)


def test_building_a_wait_enqueues_nothing(stream: cuasync.Stream, enqueued: list[str]) -> None:
    op = cuasync.wait(stream)
    assert enqueued == []
    op.submit().wait()
    assert len(enqueued) == 1 and enqueued[0] in COMPLETION  # only the flag, on the stream


# -- GPU (run with CUASYNC_BACKEND=cuda) ----------------------------------------------------
gpu = pytest.mark.skipif(ON_EMULATOR, reason="needs a GPU: torch's streams are CUDA streams")


@gpu
async def test_torch_stream_and_event(anyio_backend: object) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = torch.ones(1 << 20, device="cuda") * 2
    await cuasync.wait(s)
    assert s.query()
    event = torch.cuda.Event()
    with torch.cuda.stream(s):
        y += 1
    event.record(s)
    await cuasync.wait(event)
    assert event.query()
    await cuasync.wait(torch.cuda.current_stream())


@gpu
async def test_cupy_stream(anyio_backend: object) -> None:
    cupy = pytest.importorskip("cupy", reason="cupy is not installed")
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        cupy.arange(1 << 20).sum()
    await cuasync.wait(s)
    assert s.done
