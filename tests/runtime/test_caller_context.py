"""cuasync leaves the caller's current CUDA context current.

Code mixing cuasync with torch, CuPy or Numba keeps a context of its own current (another
device's, or a context made with ``cuCtxCreate``); every cuasync call runs in its
device's primary context and puts the caller's back. On the GPU the other context is a
real one (``cuCtxCreate`` on device 0); on the emulator, its model of the driver's
per-thread current context (``cuasync.emulator.create_context``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from helpers import ON_EMULATOR

import cuasync
import cuasync.emulator as emu


class Contexts:
    """The driver's current context on this thread, and a second context on device 0."""

    def __init__(self) -> None:
        self._objects: dict[int, Any] = {}
        if not ON_EMULATOR:
            from cuda.bindings import driver

            self._d = driver

    def current(self) -> int:
        if ON_EMULATOR:
            return emu.current_context()
        err, ctx = self._d.cuCtxGetCurrent()
        assert not err
        return int(ctx)

    def set_current(self, ctx: int) -> None:
        if ON_EMULATOR:
            emu.set_current_context(ctx)
            return
        (err,) = self._d.cuCtxSetCurrent(self._objects.get(ctx, self._d.CUcontext(ctx)))
        assert not err

    def create(self) -> int:
        """A new context on device 0, current on this thread (``cuCtxCreate``)."""
        if ON_EMULATOR:
            return emu.create_context(0)
        d = self._d
        err, dev = d.cuDeviceGet(0)
        assert not err
        try:
            err, ctx = d.cuCtxCreate(None, 0, dev)  # cuda-bindings 13: (params, flags, dev)
        except TypeError:
            err, ctx = d.cuCtxCreate(0, dev)  # 12: (flags, dev)
        assert not err, err
        self._objects[int(ctx)] = ctx
        return int(ctx)

    def destroy(self, ctx: int) -> None:
        if ON_EMULATOR:
            emu.destroy_context(ctx)
            return
        (err,) = self._d.cuCtxDestroy(self._objects.pop(ctx))
        assert not err


@pytest.fixture
def contexts() -> Iterator[Contexts]:
    yield Contexts()


@pytest.fixture
def other_context(contexts: Contexts) -> Iterator[int]:
    """A second context on device 0, current on this thread while the test runs."""
    cuasync.zeros((4,)).sync()  # cuasync already ran here: its own context was current
    before = contexts.current()
    ctx = contexts.create()
    assert contexts.current() == ctx
    yield ctx
    cuasync.Device(0).synchronize()
    contexts.destroy(ctx)
    contexts.set_current(before)


def _calls(dev: cuasync.Device, s: cuasync.Stream) -> dict[str, Callable[[], Any]]:
    """Calls that reach the driver with the device's context (each one at least once)."""
    x = cuasync.from_host(np.arange(64, dtype=np.float32)).sync()
    return {
        "Device.new_stream": lambda: dev.new_stream(),
        "Event": lambda: cuasync.Event(dev).record(s).synchronize(),
        "elementwise": lambda: (x * 2 + 1).sync_on(s),
        "reduction": lambda: cuasync.sum(x).sync(),
        "from_host": lambda: cuasync.from_host(np.ones(8192, np.float32)).sync(),
        "to_host": lambda: x.to_host().sync(),
        "pinned buffer": lambda: cuasync.PinnedHostBuffer(4096),
        "memory_stats": dev.memory_stats,
        "trim_pool": dev.trim_pool,
        "stream priority": lambda: dev.stream_priority_range,
        "Stream.synchronize": s.synchronize,
        "Device.synchronize": dev.synchronize,
    }


def test_cuasync_calls_leave_the_callers_context_current(
    contexts: Contexts, other_context: int
) -> None:
    dev = cuasync.Device(0)
    s = dev.new_stream()
    assert contexts.current() == other_context
    for name, call in _calls(dev, s).items():
        call()
        assert contexts.current() == other_context, f"{name} left cuasync's context current"


def test_awaits_leave_the_callers_context_current(contexts: Contexts, other_context: int) -> None:
    async def main() -> np.ndarray:
        x = await cuasync.arange(256, dtype="float32")
        assert contexts.current() == other_context
        y = await (x * 3 - 1)
        assert contexts.current() == other_context
        return await y.to_host()

    out = asyncio.run(main())  # (the loop runs on this thread: its context is ours)
    assert contexts.current() == other_context
    np.testing.assert_array_equal(out, np.arange(256, dtype=np.float32) * 3 - 1)


def test_a_thread_without_a_context_keeps_the_primary_one(contexts: Contexts) -> None:
    seen: list[int] = []

    def fresh_thread() -> None:
        seen.append(contexts.current())
        cuasync.zeros((16,)).sync()
        seen.append(contexts.current())

    t = threading.Thread(target=fresh_thread)
    t.start()
    t.join()
    assert seen[0] == 0  # a new thread: no context current
    assert seen[1] != 0  # as after a CUDA runtime call: the device's primary context
