"""Waiting for a completion: asyncio/uvloop, trio, and plain threads.

Each event loop gets a bridge: a reactor ``LoopQueue`` whose fd the loop watches
(``add_reader`` on asyncio and uvloop, a system task on ``wait_readable`` on trio).
The loop reads the fd, drains the queue and finishes completions on its own thread,
so futures are resolved without any cross-thread hop. Work that no loop waits for any
more (a cancelled task, a dropped future, a closed loop, a future awaited from a second
loop) goes to the hub's background watcher (see :mod:`.completion`).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import weakref
from collections.abc import Generator
from typing import Any

from ..errors import SyncInEventLoopError
from .completion import DONE, INLINE, PENDING, Completion, Hub, _reactor, get_hub

#: What :func:`running_loop` returns inside a trio run.
TRIO = "trio"


class _Bridge:
    """A reactor queue that one event loop drains."""

    def __init__(self) -> None:
        self.queue = _reactor.LoopQueue()

    def drain(self) -> None:
        get_hub().drain(self.queue)

    def hand_over(self) -> None:
        """The loop is going away: the background watcher takes over what it watched."""
        hub = get_hub()
        for comp in list(hub.table):
            if comp is not None and comp.watcher is self:
                hub.watch_in_background(comp)
        # Nothing is armed to it any more; what it still holds has landed. Reports that
        # race with the close go to the background watcher (the reactor's orphan queue).
        hub.handle_reports(*self.queue.close())


class _AsyncioBridge(_Bridge):
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.fd = self.queue.fileno()
        loop.add_reader(self.fd, self.drain)
        _hand_over_on_close(loop, self)


_asyncio_bridges: weakref.WeakKeyDictionary[Any, _AsyncioBridge] = weakref.WeakKeyDictionary()


def _hand_over_on_close(loop: asyncio.AbstractEventLoop, bridge: _AsyncioBridge) -> None:
    """Make ``loop.close()`` hand the loop's pending completions to the background.

    asyncio has no close hook, so the instance's ``close`` is wrapped (asyncio's and
    uvloop's loops both allow it). Without this, completions queued for a closed loop
    would keep their memory, slots, tasks and the loop itself alive forever.
    """
    original = loop.close

    def close() -> None:
        if not loop.is_closed() and not loop.is_running():
            if _asyncio_bridges.get(loop) is bridge:
                del _asyncio_bridges[loop]
            try:
                loop.remove_reader(bridge.fd)
            finally:
                bridge.hand_over()
        original()

    try:
        loop.close = close  # type: ignore[method-assign]
    except AttributeError:  # a loop type that refuses: cancelled tasks still hand over
        pass


def _asyncio_bridge(loop: asyncio.AbstractEventLoop) -> _AsyncioBridge:
    bridge = _asyncio_bridges.get(loop)
    if bridge is None:
        bridge = _asyncio_bridges[loop] = _AsyncioBridge(loop)
    return bridge


def _arm(hub: Hub, comp: Completion, bridge: _Bridge) -> None:
    """Arm ``comp`` on ``bridge``; if another loop watches it already, move it to the
    background watcher, which wakes the waiters of every loop."""
    with comp._lock:
        if comp.state != PENDING:
            return
        watcher = comp.watcher
        if watcher is None:
            comp.watcher = bridge
        elif watcher is bridge or watcher is hub.background:
            return
    if watcher is None:
        hub.arm(comp, bridge.queue)
    else:
        hub.watch_in_background(comp)


def running_loop() -> Any:
    """The running asyncio loop, :data:`TRIO` inside a trio run, else a RuntimeError.

    Checked before anything is submitted, so awaiting an op where no supported loop
    runs (curio, a bare ``coro.send``) enqueues nothing and leaks nothing.
    """
    loop = asyncio._get_running_loop()
    if loop is not None:
        return loop
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
            return TRIO
        except RuntimeError:
            pass
    raise RuntimeError(
        "cuasync ops can be awaited inside asyncio, uvloop or trio (directly or through "
        "anyio), but no such event loop is running in this thread; outside an event loop "
        "use op.sync() (or fut.wait())"
    )


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


def wait_for(comp: Completion, loop: Any) -> Generator[Any, Any, Any]:
    """The body of ``await`` on ``loop`` (from :func:`running_loop`): spin, then suspend
    until finished."""
    if not spin_then_check(comp):
        if loop is TRIO:
            yield from _wait_trio(comp)
        else:
            yield from _wait_asyncio(comp, loop)
    return comp.result()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wait_asyncio(comp: Completion, loop: asyncio.AbstractEventLoop) -> Generator[Any, Any, None]:
    hub = get_hub()
    fut: asyncio.Future[None] = loop.create_future()
    bridge = _asyncio_bridge(loop) if comp.slot >= 0 and hub.reactor is not None else None
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
        hub.watch_in_background(comp)
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
            self.hand_over()  # the run is ending


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
        hub.watch_in_background(comp)
        return trio.lowlevel.Abort.SUCCEEDED

    if comp.slot >= 0 and hub.reactor is not None:
        _arm(hub, comp, _trio_bridge())
    comp.add_waiter(wake)
    yield from trio.lowlevel.wait_task_rescheduled(abort).__await__()


def in_running_loop() -> bool:
    try:
        running_loop()
    except RuntimeError:
        return False
    return True


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
        get_hub().watch_in_background(comp)
    while not done.wait(0.5):
        if comp.poll():
            break
