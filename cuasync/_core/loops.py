"""Waiting for a completion: asyncio/uvloop, trio, and plain threads.

Each event loop gets a bridge: a reactor ``LoopQueue`` whose fd the loop watches
(``add_reader`` on asyncio and uvloop, a system task on ``wait_readable`` on trio).
The loop reads the fd, drains the queue and finishes completions on its own thread,
so futures are resolved without any cross-thread hop. A background thread plays the
same role for blocking waits and for work nobody awaits any more (cancelled tasks,
futures collected unawaited), so that what such work uses is still released.
"""

from __future__ import annotations

import asyncio
import select
import sys
import threading
import weakref
from collections.abc import Generator
from typing import Any

from ..errors import SyncInEventLoopError
from .completion import DONE, INLINE, PENDING, Completion, Hub, _reactor, get_hub


class _Bridge:
    """A reactor queue and the thread that drains it."""

    def __init__(self) -> None:
        self.queue = _reactor.LoopQueue()
        self.thread = threading.get_ident()

    def drain(self) -> None:
        hub = get_hub()
        done, stale = self.queue.drain()
        for slot in done:
            hub.on_landed(slot)
        for slot in stale:
            hub.on_stale(slot)


class _AsyncioBridge(_Bridge):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        loop.add_reader(self.queue.fileno(), self.drain)


class _BackgroundBridge(_Bridge):
    """Drains completions that no event loop is waiting for."""

    def __init__(self) -> None:
        super().__init__()
        self.worker = threading.Thread(target=self._run, name="cuasync-background", daemon=True)
        self.thread = -1
        self.worker.start()

    def _run(self) -> None:
        self.thread = threading.get_ident()
        fd = self.queue.fileno()
        while True:
            select.select([fd], [], [])
            try:
                self.drain()
            except Exception:  # never let the thread die
                import traceback

                traceback.print_exc()


_asyncio_bridges: weakref.WeakKeyDictionary[Any, _AsyncioBridge] = weakref.WeakKeyDictionary()
_background: _BackgroundBridge | None = None
_bridge_lock = threading.Lock()


def _background_bridge() -> _BackgroundBridge:
    global _background
    if _background is None:
        with _bridge_lock:
            if _background is None:
                _background = _BackgroundBridge()
    return _background


def watch_in_background(comp: Completion) -> None:
    """Make sure ``comp`` is observed (and what it uses released) with nobody awaiting it."""
    hub = get_hub()
    if comp.state != PENDING or comp.slot < 0 or hub.reactor is None:
        return  # finished, or a host callback will finish it
    background = _background_bridge()
    with comp._lock:
        watcher = comp.watcher
        if watcher is background:
            return
        if watcher is not None:
            # False: it was already pushed to that queue, so it has landed (finished below).
            hub.reactor.disarm(comp.slot)
        comp.watcher = background
    if comp.landed():
        comp.finish(INLINE)
    else:
        hub.arm(comp, background.queue)


def _arm(hub: Hub, comp: Completion, bridge: _Bridge) -> None:
    """Arm ``comp`` on ``bridge`` unless some bridge already watches it."""
    with comp._lock:
        if comp.state != PENDING or comp.watcher is not None:
            return
        comp.watcher = bridge
    hub.arm(comp, bridge.queue)


def spin_then_check(comp: Completion) -> bool:
    """Inline spin; True when the result is available.

    The spin only pays off when this work is all its stream has to do: when earlier
    work on the stream is still pending (many concurrent awaits), spinning would only
    burn the budget, so the await suspends at once.
    """
    if comp.state != PENDING:
        return comp.state >= DONE
    hub = get_hub()
    budget = hub.spin_budget_us
    if budget and comp.stream._completed < comp.seq - 1:
        budget = 0
    if (budget and hub.spin(comp, budget)) or (comp.slot >= 0 and comp.landed()):
        comp.finish(INLINE)
    return comp.state >= DONE


def wait_for(comp: Completion) -> Generator[Any, Any, Any]:
    """The body of ``await``: spin, then suspend on the running loop until finished."""
    if not spin_then_check(comp):
        loop = asyncio._get_running_loop()
        if loop is not None:
            yield from _wait_asyncio(comp, loop)
        elif "trio" in sys.modules:
            yield from _wait_trio(comp)
        else:
            raise RuntimeError("cuasync ops can be awaited on asyncio, uvloop or trio event loops")
    return comp.result()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wait_asyncio(comp: Completion, loop: asyncio.AbstractEventLoop) -> Generator[Any, Any, None]:
    hub = get_hub()
    fut: asyncio.Future[None] = loop.create_future()
    bridge: _AsyncioBridge | None = None
    if comp.slot >= 0:
        bridge = _asyncio_bridges.get(loop)
        if bridge is None:
            bridge = _asyncio_bridges[loop] = _AsyncioBridge(loop)
    loop_thread = threading.get_ident()

    def wake(_: Completion) -> None:
        if threading.get_ident() == loop_thread:
            _resolve(fut)
        else:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    comp.add_waiter(wake)
    if bridge is not None:
        _arm(hub, comp, bridge)
    try:
        yield from fut.__await__()
    except BaseException:
        # Cancelled (or the loop is going away): the work goes on; make sure its
        # completion is still observed so that what it uses is released.
        watch_in_background(comp)
        raise


class _TrioBridge(_Bridge):
    def __init__(self) -> None:
        import trio

        super().__init__()
        trio.lowlevel.spawn_system_task(self._dispatch, name="cuasync-dispatcher")

    async def _dispatch(self) -> None:
        import trio

        fd = self.queue.fileno()
        try:
            while True:
                await trio.lowlevel.wait_readable(fd)
                self.drain()
        finally:
            # The run is ending: whatever is still armed here goes to the background.
            hub = get_hub()
            for comp in list(hub.table):
                if comp is not None and comp.watcher is self:
                    watch_in_background(comp)


_trio_var: Any = None


def _trio_bridge() -> _TrioBridge:
    global _trio_var
    import trio

    if _trio_var is None:
        _trio_var = trio.lowlevel.RunVar("cuasync_bridge")
    try:
        return _trio_var.get()
    except LookupError:
        bridge = _TrioBridge()
        _trio_var.set(bridge)
        return bridge


def _wait_trio(comp: Completion) -> Generator[Any, Any, None]:
    import trio

    hub = get_hub()
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()
    aborted = False

    def reschedule() -> None:
        if not aborted:
            trio.lowlevel.reschedule(task)

    def wake(_: Completion) -> None:
        try:
            token.run_sync_soon(reschedule)
        except trio.RunFinishedError:
            pass

    def abort(_: Any) -> Any:
        nonlocal aborted
        aborted = True
        watch_in_background(comp)
        return trio.lowlevel.Abort.SUCCEEDED

    if comp.slot >= 0:
        _arm(hub, comp, _trio_bridge())
    comp.add_waiter(wake)
    yield from trio.lowlevel.wait_task_rescheduled(abort).__await__()


def in_running_loop() -> bool:
    if asyncio._get_running_loop() is not None:
        return True
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
            return True
        except RuntimeError:
            return False
    return False


def check_blocking_allowed(what: str, allow: bool) -> None:
    if not allow and in_running_loop():
        raise SyncInEventLoopError(
            f"{what} blocks the calling thread, and this thread is running an event loop: "
            f"use 'await' instead (or pass allow_in_loop=True if blocking the loop is intended)"
        )


def block_on(comp: Completion) -> None:
    """Block the calling thread until ``comp`` is finished."""
    if spin_then_check(comp):
        return
    done = threading.Event()
    comp.add_waiter(lambda _: done.set())
    if comp.slot >= 0:
        watch_in_background(comp)
    while not done.wait(0.5):
        if comp.poll():
            break
