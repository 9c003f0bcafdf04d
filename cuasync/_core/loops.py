"""Loop adapters: how the completion hub waits on asyncio/uvloop and trio.

An adapter knows one event loop and nothing about completions: it can park the
current task until woken (from any thread) and watch an fd on the loop, calling the
hub back when it is readable. Everything else (spinning, arming, finishing, faults,
cancellation hand-over) is :class:`~.completion.Hub`'s, in one call per await:

>>> value = yield from wait(comp, running_adapter())   # completion.wait

Blocking threads need no adapter: they call ``Hub.block`` (after
:func:`check_blocking_allowed`, the one check every blocking public call makes). A
blocking driver wait with no flag to await (``cuCtxSynchronize``) is awaited through
:func:`in_thread`: the adapter parks the task while a thread waits.
"""

from __future__ import annotations

import asyncio
import collections
import sys
import threading
import types
import weakref
from collections.abc import Callable, Generator
from typing import Any, cast

from .._native import NATIVE, PROCESS, AdapterCore, FutureWaker
from ..errors import SyncInEventLoopError
from .completion import Completion, Waiter, get_hub

__all__ = ["check_blocking_allowed", "in_running_loop", "in_thread", "running_adapter"]

Suspend = Callable[[], Generator[Any, Any, Any]]


class AsyncioAdapter(AdapterCore):
    """An asyncio or uvloop loop: ``add_reader`` on the fd, a loop future to park on.

    The loop is held weakly (the adapter lives in a weak mapping keyed by the loop).
    ``_ready``, ``_tick_task``, ``_tick_shared``, ``long_ops`` and ``steps_aside`` are
    the native base's fields (``AdapterCore``: an await reads them).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self.queue: Any = None
        self._fd = -1
        # Wake-ups from other threads hold this while calling call_soon_threadsafe, and
        # close() sets ``_closed`` under it before the loop closes its self-pipe: a
        # wake-up racing close() never writes to a closed (or reused) socket fd.
        self._lock = threading.Lock()
        self._closed = False
        # asyncio's ready queue (a deque) tells whether other callbacks wait to run;
        # uvloop has no view of its own, so the tasks awaiting in one loop iteration
        # tell instead (see others_ready).
        self._ready = getattr(loop, "_ready", None)
        if not isinstance(self._ready, collections.deque):
            self._ready = None
        self._tick_task = None
        self._tick_shared = False
        self.long_ops = False
        self.skips = 0
        #: The loop's early-wake timer (:class:`~.wake.Timer`), made at its first use.
        self.timer: Any = None
        # A task may step aside with a bare ``yield`` (asyncio runs it again after the
        # other ready tasks): an await in a burst queues its launch and lets them submit.
        self.steps_aside = True
        #: Ops handed to asyncio as futures (:mod:`.op_future`): those to start in the
        #: loop's next pass, the batches started, to look at in the pass after, and the
        #: ones armed to the reactor with others behind them on their stream (``behind``,
        #: looked at again once the one ahead ends).
        self.starting: list[Any] = []
        self.looking: list[list[Any]] = []
        self.parked: list[Any] = []

    def others_ready(self) -> bool:
        """Whether other work on this loop is ready to run now (then a long await parks at once).

        asyncio: its ready queue is not empty. uvloop: another task already awaited in
        this loop iteration (a burst such as ``gather``); one task awaiting again and
        again, as a sequential loop does, still spins; asked from a callback (the early
        wake's timer), whether two tasks awaited in this iteration.
        """
        ready = self._ready
        if ready is not None:
            if len(ready) == 1 and self.timer is not None:  # (not its own early wake)
                return getattr(ready[0], "_callback", None) != self.timer.fire
            return bool(ready)
        task = _current_task(self._loop())
        first = self._tick_task
        if first is None:
            self._tick_task = task
            loop = self._loop()
            if loop is not None:
                loop.call_soon(self._next_tick)
            return False
        if first is not task and task is not None:
            self._tick_shared = True
        return self._tick_shared

    def _next_tick(self) -> None:
        self._tick_task = None
        self._tick_shared = False

    def park(self) -> tuple[Waiter, Suspend]:
        loop = self._loop()
        assert loop is not None  # running: the caller holds it
        fut: asyncio.Future[None] = loop.create_future()
        return FutureWaker(self, fut), fut.__await__

    def watch_fd(self, fd: int, drain: Callable[[], None]) -> None:
        loop = self._loop()
        assert loop is not None
        self._fd = fd
        loop.add_reader(fd, drain)

    def call_from_thread(self, callback: Callable[..., object], *args: Any) -> bool:
        """Have the loop call ``callback(*args)``, from any thread; False (nothing done)
        once the loop is closed: nobody waits on it any more. Wake-ups from other threads
        hold ``_lock`` while they call ``call_soon_threadsafe``: ``close()`` sets
        ``_closed`` under it before the loop closes its self-pipe.

        >>> adapter.call_from_thread(_resolve, fut)   # from the reactor's drain, a pool
        """
        with self._lock:
            loop = self._loop()
            if self._closed or loop is None:
                return False
            try:
                loop.call_soon_threadsafe(callback, *args)
            except RuntimeError:  # closed without cuasync's close(): as above
                return False
        return True

    def abandon_handed_over(self) -> None:
        """The loop is closing: ops handed to it as asyncio futures end unseen; what they
        submitted goes to the background watcher (``op_future.Watched.abandon``)."""
        behind = []
        for head in self.parked:  # (their heads end unseen: they wait for them no more)
            if head.behind is not None:
                behind.append(head.behind)
                head.behind = None
        batches = [self.starting, *self.looking, *behind]
        self.starting, self.looking, self.parked = [], [], []
        for watched in batches:
            for w in watched:
                w.abandon()

    def watch_timer(self, timer: Any) -> None:
        """Call ``timer.fire()`` whenever its fd expires (the early wake, :mod:`.wake`);
        the loop's close closes it."""
        loop = self._loop()
        assert loop is not None
        loop.add_reader(timer.fd, timer.fire)


#: The task running on a loop: asyncio's own table where it has one (Python 3.11-3.13:
#: a dict lookup, where ``asyncio.current_task()`` costs 0.2 us on every await).
_current_tasks: Any = getattr(asyncio.tasks, "_current_tasks", None)
if isinstance(_current_tasks, dict):
    _current_task: Callable[[Any], Any] = _current_tasks.get
else:  # pragma: no cover - a Python without the table
    _current_task = asyncio.current_task


def current_tasks_table() -> dict[Any, Any] | None:
    """asyncio's table of the task running each loop (read by the native await to tell a
    burst on uvloop, as :meth:`AsyncioAdapter.others_ready` does), or None where this
    Python has none."""
    return _current_tasks if isinstance(_current_tasks, dict) else None


#: Resolve a loop future with None unless it is done (native: what a ``FutureWaker`` has
#: its loop call from another thread).
_resolve: Callable[[asyncio.Future[None]], None] = NATIVE.resolve_future


def _detach_on_close(loop: asyncio.AbstractEventLoop, adapter: AsyncioAdapter) -> None:
    """Make ``loop.close()`` hand the loop's pending completions to the background.

    asyncio has no close hook, so the instance's ``close`` is wrapped (asyncio's and
    uvloop's loops both allow it). Without this, completions queued for a closed loop
    would keep their memory, slots, tasks and the loop itself alive forever.
    """
    original = loop.close

    def close() -> None:
        if not loop.is_closed() and not loop.is_running():
            if _asyncio_adapters.get(loop) is adapter:
                del _asyncio_adapters[loop]
                PROCESS.last = _NO_LAST
            with adapter._lock:
                adapter._closed = True
            timer = adapter.timer
            try:
                if adapter._fd >= 0:
                    loop.remove_reader(adapter._fd)
                if timer is not None:
                    adapter.timer = None
                    loop.remove_reader(timer.fd)
            finally:
                if timer is not None:
                    timer.close()  # (before detach: what waits on it is handed over)
                adapter.abandon_handed_over()
                get_hub().detach(adapter)
        original()

    try:
        loop.close = close  # type: ignore[method-assign]
    except AttributeError:  # a loop type that refuses: cancelled tasks still hand over
        pass


_asyncio_adapters: weakref.WeakKeyDictionary[Any, AsyncioAdapter] = weakref.WeakKeyDictionary()
_NO_LAST: tuple[Callable[[], Any], Any] = (lambda: None, None)
#: The last loop looked up and its adapter, ``PROCESS.last``: ``(weakref to the loop,
#: adapter)``, one tuple so that threads running other loops read a consistent pair (a
#: field of the native module's ``PROCESS``, which an await reads in C).
PROCESS.last = _NO_LAST


def _asyncio_adapter(loop: asyncio.AbstractEventLoop) -> AsyncioAdapter:
    adapter = _asyncio_adapters.get(loop)
    if adapter is None:
        adapter = _asyncio_adapters[loop] = AsyncioAdapter(loop)
        _detach_on_close(loop, adapter)
    PROCESS.last = (weakref.ref(loop), adapter)
    return adapter


class TrioAdapter(AdapterCore):
    """A trio run: a system task on ``wait_readable``, ``wait_task_rescheduled`` to park."""

    def __init__(self) -> None:
        import trio

        self._trio = trio
        self._token = trio.lowlevel.current_trio_token()
        self._statistics = trio.lowlevel.current_statistics
        self.queue: Any = None
        self.long_ops = False
        self.skips = 0
        self.timer: Any = None  # (as AsyncioAdapter's)
        # trio has no bare yield: an await in a burst launches and spins as any other.
        self.steps_aside = False

    def others_ready(self) -> bool:
        """Whether other trio tasks are runnable now (then a long await parks at once)."""
        return bool(self._statistics().tasks_runnable)

    def park(self) -> tuple[Waiter, Suspend]:
        trio = self._trio
        task = trio.lowlevel.current_task()
        token = self._token
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
            aborted = True  # the hub hands the completion over when Cancelled is raised
            return trio.lowlevel.Abort.SUCCEEDED

        return wake, lambda: trio.lowlevel.wait_task_rescheduled(abort).__await__()

    def watch_fd(self, fd: int, drain: Callable[[], None]) -> None:
        self._trio.lowlevel.spawn_system_task(self._dispatch, fd, drain, name="cuasync-dispatcher")

    def watch_timer(self, timer: Any) -> None:
        """Call ``timer.fire()`` whenever its fd expires (a system task, closed with the run)."""
        self._trio.lowlevel.spawn_system_task(self._tick, timer, name="cuasync-wake-timer")

    async def _tick(self, timer: Any) -> None:
        try:
            while True:
                await self._trio.lowlevel.wait_readable(timer.fd)
                timer.fire()
        finally:  # the run is ending
            self.timer = None
            timer.close()

    async def _dispatch(self, fd: int, drain: Callable[[], None]) -> None:
        try:
            while True:
                await self._trio.lowlevel.wait_readable(fd)
                drain()
        finally:
            get_hub().detach(self)  # the run is ending


_trio_var: Any = None


def _trio_adapter(trio: Any) -> TrioAdapter:
    """The adapter of the running trio run; RuntimeError outside one."""
    global _trio_var
    if _trio_var is None:
        _trio_var = trio.lowlevel.RunVar("cuasync_adapter")
    try:
        adapter: TrioAdapter = _trio_var.get()
    except LookupError:
        adapter = TrioAdapter()
        _trio_var.set(adapter)
    return adapter


def running_adapter() -> AsyncioAdapter | TrioAdapter:
    """The adapter of the loop running in this thread, else a RuntimeError.

    Checked before anything is submitted, so awaiting an op where no supported loop
    runs (curio, a bare ``coro.send``) enqueues nothing and leaks nothing.
    """
    loop = asyncio._get_running_loop()
    if loop is not None:
        ref, adapter = PROCESS.last
        if ref() is loop:
            return adapter
        return _asyncio_adapter(loop)
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            return _trio_adapter(trio)
        except RuntimeError:
            pass
    raise RuntimeError(
        "cuasync ops can be awaited inside asyncio, uvloop or trio (directly or through "
        "anyio), but no such event loop is running in this thread; outside an event loop "
        "use op.sync() (or fut.wait())"
    )


def in_running_loop() -> bool:
    """Whether an asyncio, uvloop or trio loop runs in this thread.

    Every blocking call asks (``sync()``, ``wait()``), in processes that imported trio
    too: trio says it runs in sniffio's thread-local (a read), where asking trio itself
    raises and catches an exception outside a run (about 0.8 us).
    """
    if asyncio._get_running_loop() is not None:
        return True
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    local = getattr(sys.modules.get("sniffio"), "thread_local", None)
    if local is not None:  # (trio sets its name there for the whole of a run)
        return getattr(local, "name", None) == "trio"
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def check_blocking_allowed(what: str, allow: bool, instead: str = "use 'await'") -> None:
    """Refuse a call that blocks the thread (``what``) where a loop runs, unless ``allow``.

    ``instead`` says what to write in a coroutine (default: ``await`` the op).
    """
    if not allow and in_running_loop():
        raise SyncInEventLoopError(
            f"{what} blocks the calling thread, and this thread is running an event loop: "
            f"{instead} instead (or pass allow_in_loop=True if blocking the loop is intended)"
        )


@types.coroutine
def in_thread(fn: Callable[[], None]) -> Generator[Any, Any, None]:
    """Run the blocking ``fn`` on a new thread while the running loop's task is parked.

    For the rare waits that have no flag to await (a whole device). The loop keeps
    running; a cancelled task stops waiting, the thread finishes ``fn`` on its own and
    its outcome is dropped. ``fn``'s exception is raised in the task.

    >>> await in_thread(functools.partial(backend.device_synchronize, 0))
    """
    wake, suspend = running_adapter().park()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # handed to the task
            failure.append(exc)
        wake(cast(Completion, None))

    threading.Thread(target=run, name="cuasync-in-thread", daemon=True).start()
    yield from suspend()
    if failure:
        raise failure.pop()
