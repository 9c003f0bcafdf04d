"""Every public call that blocks the calling thread refuses a running event loop.

Each raises :class:`~cuasync.errors.SyncInEventLoopError` inside asyncio, uvloop and trio
(the loop would stop for as long as the device works) unless ``allow_in_loop=True``, and
works outside a loop. Calls that only enqueue (``Event.wait(stream)``) are not blocking.
The awaitable forms (``await dev.synchronized()``, ``await cuasync.wait(stream)``) keep
the loop running.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest
from helpers import run_script

import cuasync
import cuasync.testing as ct
from cuasync.errors import SyncInEventLoopError

#: A blocking call: given a stream, the bound call, which takes ``allow_in_loop``.
Blocking = Callable[[cuasync.Stream], Callable[..., Any]]


def _tensor() -> cuasync.Tensor:
    return cuasync.zeros((8,), "float32").sync(allow_in_loop=True)


BLOCKING: dict[str, Blocking] = {
    "Device.synchronize()": lambda s: s.device.synchronize,
    "Stream.synchronize()": lambda s: s.synchronize,
    "Event.synchronize()": lambda s: cuasync.Event(s.device).record(s).synchronize,
    "DeviceOp.sync()": lambda s: cuasync.zeros((8,)).sync,
    "DeviceOp.sync_on()": lambda s: functools.partial(cuasync.zeros((8,)).sync_on, s),
    "DeviceFuture.wait()": lambda s: cuasync.zeros((8,)).submit_on(s).wait,
    "PendingTransfer.wait()": lambda s: (
        cuasync.upload_pending(cuasync.PinnedHostBuffer(32), _tensor(), stream=s).wait
    ),
    "cuasync.download_into()": lambda s: functools.partial(
        cuasync.download_into, _tensor(), np.empty(8, np.float32)
    ),
}

CASES = pytest.mark.parametrize("name", list(BLOCKING))


@CASES
async def test_blocking_calls_refuse_a_running_loop(anyio_backend, name: str) -> None:
    call = BLOCKING[name](cuasync.Device(0).new_stream())
    with pytest.raises(SyncInEventLoopError, match=r"blocks the calling thread.*allow_in_loop"):
        call()
    call(allow_in_loop=True)  # blocking the loop on purpose: allowed


@CASES
def test_blocking_calls_work_outside_a_loop(name: str) -> None:
    BLOCKING[name](cuasync.Device(0).new_stream())()


@pytest.mark.parametrize("call", ["Device.synchronize", "Stream.synchronize", "Event.synchronize"])
async def test_synchronize_refusals_name_the_awaitable_form(anyio_backend, call: str) -> None:
    s = cuasync.Device(0).new_stream()
    target = {"Device": s.device, "Stream": s, "Event": cuasync.Event().record(s)}
    hint = {"Device": r"await device\.synchronized\(\)", "Stream": r"cuasync\.wait\(stream\)"}
    kind = call.split(".")[0]
    with pytest.raises(SyncInEventLoopError, match=hint.get(kind, r"cuasync\.wait\(event\)")):
        target[kind].synchronize()  # type: ignore[attr-defined]


async def test_event_wait_only_enqueues_and_is_allowed_in_a_loop(anyio_backend) -> None:
    a, b = cuasync.Device(0).new_stream(), cuasync.Device(0).new_stream()
    with ct.gate(a):
        event = cuasync.Event().record(a)
        event.wait(b)  # enqueues only: never blocks, so never refused
        assert not b.query()  # b waits for the held a
    await cuasync.wait(b)


async def test_device_synchronized_waits_for_the_device_and_keeps_the_loop_running(
    anyio_backend,
) -> None:
    dev = cuasync.Device(0)
    held, other = dev.new_stream(), dev.new_stream()
    landed = anyio.Event()

    async def synchronized() -> None:
        await dev.synchronized()
        landed.set()

    async with anyio.create_task_group() as tg:
        with ct.gate(held) as gate:
            x = cuasync.full((256,), 3.0, "float32").submit_on(held)
            tg.start_soon(synchronized)
            # the loop goes on while the device is held: work on another stream lands
            assert await cuasync.ones((4,)).submit_on(other) is not None
            await anyio.sleep(0)
            assert not landed.is_set() and not x.done()
            gate.open()
            await landed.wait()
    assert x.done()
    np.testing.assert_array_equal(await x.result().to_host(), np.full(256, 3.0, np.float32))


async def test_a_cancelled_device_synchronized_leaves_the_work_running(anyio_backend) -> None:
    dev = cuasync.Device(0)
    s = dev.new_stream()
    with ct.gate(s):
        fut = cuasync.full((64,), 2.0, "float32").submit_on(s)
        with anyio.move_on_after(0.01) as scope:
            await dev.synchronized()
        assert scope.cancelled_caught and not fut.done()
    np.testing.assert_array_equal(await (await fut).to_host(), np.full(64, 2.0, np.float32))


DONE_AFTER_A_DEVICE_SYNC = """
import asyncio, threading, cuasync
from cuasync._core.completion import get_hub

class Busy:  # a chore that holds the background watcher while armed
    def __init__(self):
        self.armed, self.entered, self.release = False, threading.Event(), threading.Event()
    def chore(self):
        if self.armed:
            self.entered.set()
            self.release.wait(30)
        return None

dev = cuasync.Device(0)
x = cuasync.zeros((1024,)).sync()
busy = Busy()
get_hub().background.add_chore(busy.chore)
busy.armed = True
get_hub().background.kick()
assert busy.entered.wait(10)
futures = [(x + 1).submit(), (x + 2).submit()]
dev.synchronize()
print(futures[0].done())
later = (x + 3).submit()
asyncio.run(dev.synchronized())
print(later.done())
busy.armed = False
busy.release.set()
print(float(futures[1].result().to_host().sync()[0]), float(later.result().to_host().sync()[0]))
"""


def test_futures_are_done_once_a_device_synchronization_returns() -> None:
    """With host-callback completions, a callback's signal reaches the background watcher
    after the device has finished; a device synchronization covers the work, so its
    futures are done when it returns, even with the watcher held (on the H200, `done()`
    was False right after ``await dev.synchronized()``)."""
    out = run_script(DONE_AFTER_A_DEVICE_SYNC, CUASYNC_HOST_SYNC="callback").stdout.split()
    assert out == ["True", "True", "2.0", "3.0"]
