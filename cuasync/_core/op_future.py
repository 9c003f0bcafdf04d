"""Ops as asyncio futures: ``asyncio.gather(*ops)`` without a Task per op.

asyncio takes any object whose class has ``_asyncio_future_blocking`` as a future
(``asyncio.isfuture``): ``gather``, ``as_completed``, ``shield``, ``ensure_future`` and
``wait_for`` then watch it with ``add_done_callback`` instead of running it in a Task.
Inside a running asyncio or uvloop loop a :class:`~cuasync.DeviceOp` is such a future
(:class:`AsyncioFuture`, a base of ``DeviceOp``).

>>> a, b = await asyncio.gather(cuasync.add(x, 1.0), cuasync.exp(x))
>>> for next_done in asyncio.as_completed([step(r) for r in requests]): ...

**Lifecycle.** asyncio asks whether an object is a future before it adopts it
(``asyncio.isfuture``: ``ensure_future``, ``gather``, ``wait_for``, ``shield``,
``as_completed``); an op it asks about, or whose ``add_done_callback`` is called, is
handed over: taken, its stream, cancel word and raw launch chosen in the caller's
context (a snapshot of it kept only for an op the core does not launch), and queued to
start in the loop's next pass, as the first step of the Task asyncio used to wrap it in
would be: ``asyncio.ensure_future(op)`` still starts it in the background. Cancelled
before then (``asyncio.wait_for(op, 0)``), it submits nothing. The pass starts every op
queued meanwhile: a core launch is queued for the native submitter thread, as an await's
in a burst is; the passes after look at the flags, in the order the launches were
submitted, up to the first on each stream that has not landed (its head: nothing behind
it has). Work that has landed is settled there, with no
:class:`~.completion.Completion`; a head not landed after its looks (16 while the
submitter has not made it, 4 once it has) is armed to the reactor, which wakes the loop
as it does for a parked await, and the ops behind it wait for it to end
(``Watched.behind``). Then the op's callbacks are scheduled. The common steps are the
native base's (``WatchedCore``, ``reactor/python/watched.c``), the protocol asyncio
calls on the op (``done``, ``result``, ``add_done_callback``, ...) is ``OpCore``'s
(``reactor/python/op_future.c``), and the handover of a launch or a TensorOp is
``LaunchAwait.hand_over``, the await's own preamble (a class's ``_hand_over``). Per op
that is one
:class:`Watched`, where a Task costs a Task, its context, its weak reference and the
await's iterator, all alive until the work lands: a gather of thousands of them makes
the cyclic GC's full passes over a large heap (torch's, CuPy's), the cost
docs/performance.md measures. One op failing in a pass fails alone; an interrupt (^C)
stops the pass as it would a Task's step, ending the op it stopped in with it, and the
ops after it start when the loop runs again.

**Semantics.** An op handed over is still single-use: ``await op`` (what a Task does
with it) waits for that one execution, ``op.result()`` reads it, and ``op.cancel()``
cancels it as cancelling an awaiting task would (submitted work goes on, and is released
when it lands; inside a cancel scope, leaving the scope by the cancellation skips what is
still queued). Awaiting an op that was cancelled before it began raises
:class:`~cuasync.errors.OpConsumedError`, as a closed coroutine would. Unlike ``await op``
a watched op never spins (the fan-in case: others are ready). Outside a running asyncio
loop (trio; ``loop.run_until_complete(op)`` before the loop runs) an op is not a future,
and asyncio runs it in a Task as a coroutine, as before. A shared op (``.shared()``) is
never a future: cancelling a future cancels it for every awaiter, and a shared op's
other awaiters must not lose it.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from asyncio import _get_running_loop
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from .._cancel_var import SCOPE
from .._first_use import prepare_then
from .._native import PROCESS, WatchedCore
from ..errors import OpConsumedError
from .completion import DONE, Completion, get_hub
from .loops import AsyncioAdapter, running_adapter

__all__ = ["AsyncioFuture", "Watched", "register_core"]

Callback = Callable[[Any], object]

#: The native core's side (``express``, a layer above: it registers its functions with
#: :func:`register_core` when imported): the settling of a look at an op handed over
#: (its output, or its completion to arm) and what a cancelled launch lets go of. Its
#: launch the native base makes (``submit_launch``); the handover in C is each op
#: class's ``_hand_over`` (:class:`AsyncioFuture`).


_settle: Callable[..., tuple[Any, Completion | None]]
_let_go: Callable[[Any], None]


def register_core(
    settle: Callable[..., tuple[Any, Completion | None]], let_go: Callable[[Any], None]
) -> None:
    """Take the native core's settling of a look and its let-go (``express``'s)."""
    global _settle, _let_go
    _settle, _let_go = settle, let_go


class Watched(WatchedCore):
    """The asyncio-future side of one op (``op._future``): its loop, its stream and
    launch, the core's launch until it is settled, its completion where it had to be
    armed, its callbacks, and how it ended. Called with the completion once it is
    finished, from any thread (a completion's waiter). Its fields, and the steps the loop
    takes for every op (``add``, ``look``, ``end``, ``let_launch_go``), are the native
    base's (``WatchedCore``); the rest is here.

    >>> op.add_done_callback(fn)    # makes it: op._future.finished is False until it ends
    """

    __slots__ = ()

    # -- handed over (in the caller's context), started (the loop's next pass) ------------
    def prepare(self) -> None:
        """At the handover, in the caller's context: its stream (the policy's), then
        :meth:`prepare_on` it."""
        try:
            self.stream = self.op._pick_stream()
        except Exception as exc:
            self.error = exc  # (raised where it is awaited; ended in the next pass)
            return
        self.prepare_on()

    def prepare_on(self) -> None:
        """Its stream chosen, in the caller's context: the kernels it needs prepared, and
        the raw launch the core will make; a snapshot of the context where the op is not
        a core launch (it is submitted in it). (``LaunchAwait.hand_over`` calls it for a
        TensorOp that has no raw launch yet: a first use, a pending operand.)"""
        try:
            op = self.op
            self.first = op._first_use(self.stream.device)
            if not self.first:
                self.launch = op._express_launch(self.stream)
        except Exception as exc:
            self.error = exc
            return
        if self.launch is None:
            self.context = contextvars.copy_context()

    def start(self) -> None:
        """The loop's next pass, for an op that is not a core launch with nothing to
        prepare (``start_each`` makes those itself, ``submit_launch``): ended where it
        failed at the handover, its kernels prepared first on the compile thread where
        they are new, else submitted in its context."""
        self.started = True
        if self.error is not None:
            self.end()
        elif self.first:
            prepare_then(self.first, self._prepared)
        else:
            self.context.run(self.submit)

    def _prepared(self, error: BaseException | None) -> None:  # (on the compile thread)
        self.adapter.call_from_thread(self._after_prepare, error)

    def _after_prepare(self, error: BaseException | None) -> None:
        if self.finished:
            return  # cancelled meanwhile (the preparation is kept for the next use)
        if error is not None:
            self.fail(error)
            return
        self.first = ()
        try:
            self.context.run(self.submit)
        except BaseException as exc:  # (^C, SystemExit: it ends with it, as a Task would)
            _failed(self, exc)
            raise
        if self.launched:
            _looking(self.adapter, [self])

    def submit(self) -> None:
        """Submit it in this context: as a core launch where it is one (after a first
        use), else as ``submit()`` would, its completion armed to the reactor."""
        try:
            launch = self.launch = self.op._express_launch(self.stream)
            if launch is not None:
                self.submit_launch()
                return
            comp = self.op._start(self.stream, True)
        except Exception as exc:
            self.fail(exc)
            return
        self.watch(comp)

    def submit_declined(self, launch: Any) -> None:
        """A launch the core declined (or no core): submitted the generic way, as it was
        handed over (``submit_launch``'s other case), its completion armed."""
        try:
            comp = launch._submit_declined(self.stream)
        except Exception as exc:
            self.fail(exc)
            return
        self.watch(comp)

    def settle_look(self, hub: Any, landed: bool) -> None:
        """What a look (``WatchedCore.look``) leaves to Python: a launch that failed
        (``landed``: its flag was written), or one not landed after its looks, which is
        armed to the reactor."""
        value, comp = self.settle(hub, landed)
        if comp is None:
            self.value = value
            self.end()
        else:
            self.watch(comp)

    def look_again(self, behind: list[Watched]) -> None:
        """It was armed with ops behind it on its stream, and has ended (``end``): they are
        looked at in the loop's next pass."""
        parked = self.adapter.parked
        if self in parked:
            parked.remove(self)
        _looking(self.adapter, behind)

    def settle(self, hub: Any, landed: bool) -> tuple[Any, Completion | None]:
        """Its launch settled (``express.settle_look``): no longer looked at."""
        launch, box, held = self.let_launch_go()
        return _settle(
            launch, self.stream, hub, box, self.slot, self.gen, self.address, self.seq,
            self.ticket, held, landed,
        )  # fmt: skip

    def watch(self, comp: Completion) -> None:
        """Watch its completion from the loop (ended at once where it has landed)."""
        self.comp = comp
        hub = PROCESS.hub or get_hub()
        try:
            if hub.settle(comp, 0):
                self.end()
            else:
                hub.watch(comp, self.adapter, self)
        except Exception as exc:  # (out of memory arming it): the background takes it
            comp.abandon()
            hub.watch_in_background(comp)
            self.fail(exc)

    # -- ending --------------------------------------------------------------------------
    def __call__(self, _: Completion) -> None:
        """Its completion finished (any thread): end on the loop's thread; where the loop
        has closed, it ends cancelled, unseen (:meth:`abandon`)."""
        if self.finished:  # (cancelled meanwhile: nothing to say, no wake)
            return
        if threading.get_ident() != self.thread:
            if not self.adapter.call_from_thread(self.end):
                self.abandon()
        elif self.adapter._closed:  # (a later loop of this thread finished it)
            self.abandon()
        else:
            self.end()

    def fail(self, error: BaseException) -> None:
        """It failed without a completion (a compile error, no stream, a refused launch);
        one that has ended already keeps how it ended."""
        if self.finished:
            return
        self.error = error
        self.end()

    def cancel(self, message: Any) -> bool:
        if self.finished:
            return False
        self.cancelled, self.message = True, message
        if self.launched:  # submitted, not settled yet
            launch = self.launch
            hub = PROCESS.hub or get_hub()
            _, self.comp = self.settle(hub, hub.native.spin_wait(self.address, self.gen, 0))
            _let_go(launch)
        self.launch = None  # (an unsubmitted launch: its output is freed with it)
        _to_background(self.comp)  # nobody can read the output now
        self.value = None
        self.end()
        return True

    def abandon(self) -> None:
        """Its loop is closing or closed: it ends cancelled, its callbacks dropped (the loop
        would never run them); what it submitted goes to the background watcher."""
        self.callbacks = None
        self.cancel(None)

    # -- its state -----------------------------------------------------------------------
    def remove(self, fn: Callback) -> int:
        callbacks = self.callbacks
        if callbacks is None:
            return 0
        if type(callbacks) is not list:
            callbacks = [callbacks, self.context]
        kept = [x for f, c in zip(callbacks[::2], callbacks[1::2], strict=True) if f != fn
                for x in (f, c)]  # fmt: skip
        self.callbacks = kept or None
        return (len(callbacks) - len(kept)) // 2

    def cancelled_error(self) -> asyncio.CancelledError:
        return asyncio.CancelledError("" if self.message is None else self.message)

    def outcome(self) -> Any:
        """The output, or raise how it ended (finished only)."""
        if self.cancelled:
            raise self.cancelled_error()
        if self.error is not None:
            raise self.error
        comp = self.comp
        return self.value if comp is None else comp.result()

    def waiting(self, op: Any) -> Generator[Any, Any, Any]:
        """``await op`` once handed over: the task parks on the op itself (and watches it
        with ``add_done_callback``); then the outcome."""
        if self.cancelled and not self.started:  # (as a closed coroutine would)
            raise OpConsumedError(op._consumed_message())
        if not self.finished:
            self.blocking = True
            yield op
        return self.outcome()


def start_pass(adapter: Any) -> None:
    """The loop's pass that starts the ops handed over since the last one (one that
    fails fails alone: the others start, and are looked at). What stops the pass (^C,
    SystemExit) ends the op it stopped in with it, and the ops after it start in the
    next pass."""
    watched, adapter.starting = adapter.starting, []
    launched = None
    try:
        launched = Watched.start_each(watched, _failed)
    finally:  # (an error that is not an op's: those launched are still looked at)
        if launched is None:
            _to_start(adapter, [w for w in watched if not (w.started or w.finished)], first=True)
        _looking(adapter, launched if launched is not None else [w for w in watched if w.launched])


def _to_start(adapter: Any, watched: list[Watched], first: bool = False) -> None:
    """Queue ``watched`` to start in the loop's next pass (``first``: before those queued
    already), scheduling the pass where none is."""
    if watched:
        starting = adapter.starting
        if not starting:
            watched[0].loop.call_soon(start_pass, adapter)
        if first:
            starting[:0] = watched
        else:
            starting.extend(watched)


def _failed(watched: Watched, error: BaseException) -> None:
    """A step of one op raised: that op fails alone (its completion, if it has one by
    then, goes to the background watcher); what stops a pass (^C) ends it too."""
    _to_background(watched.comp)
    watched.fail(error)


def _to_background(comp: Completion | None) -> None:
    """A completion still pending that nobody will read: abandoned (what it holds is
    released when it lands) and handed to the background watcher."""
    if comp is not None and comp.state < DONE:
        comp.abandon()
        (PROCESS.hub or get_hub()).watch_in_background(comp)


def _looking(adapter: Any, watched: list[Watched]) -> None:
    """Look at the launches of ``watched`` in the loop's next pass."""
    if watched:
        adapter.looking.append(watched)
        watched[0].loop.call_soon(_look_pass, adapter)


def _look_pass(adapter: Any) -> None:
    """A pass looking at launches started in an earlier one (the oldest batch)."""
    batch = adapter.looking.pop(0)
    again = None
    try:
        again, parked = Watched.look_each(batch, PROCESS.hub, _failed)
        adapter.parked += parked
    finally:  # (an error that is not an op's: those still launched are looked at again)
        _looking(adapter, again if again is not None else [w for w in batch if w.launched])


class AsyncioFuture:
    """The hooks of asyncio's future protocol on :class:`~cuasync.DeviceOp` (see the
    module). The protocol itself (``_asyncio_future_blocking``, ``get_loop``,
    ``add_done_callback``, ``remove_done_callback``, ``done``, ``cancelled``, ``result``,
    ``exception``, ``cancel``) is the native base's, ``OpCore``'s
    (``reactor/python/op_future.c``); what it calls back is here.

    >>> results = await asyncio.gather(*(step(r) for r in batch))   # no Task per op
    >>> op = cuasync.exp(x); asyncio.ensure_future(op) is op
    True
    """

    __slots__ = ()
    _future: Watched | None  # (the native base's fields: OpCore's)

    if TYPE_CHECKING:

        def _take(self) -> None: ...  # (DeviceOp's)

    @staticmethod
    def _hand_over(op: Any) -> Watched | None:
        """The handover of this class's ops in C: its Watched, made and queued, or None
        where :meth:`_handed_over` hands it over in Python (here: always). A launch and a
        TensorOp set their await's ``LaunchAwait.hand_over``."""
        return None

    def _handed_over(self) -> Watched:
        """Its :class:`Watched`, made in Python (the op taken, queued to start), where the
        class's :meth:`_hand_over` declined it."""
        watched = self._future
        if watched is not None:
            return watched
        adapter = running_adapter()
        loop = _get_running_loop()
        if loop is None or not isinstance(adapter, AsyncioAdapter):
            raise RuntimeError("an op is an asyncio future only inside a running asyncio loop")
        self._take()  # (raises for an op already used)
        # (OpCore's field, which mypy does not see through this base's empty __slots__)
        watched = self._future = Watched(self, loop, adapter)  # type: ignore[misc]
        try:
            watched.prepare()
            scope = SCOPE.get()
            if scope is not None:
                scope._adopt(watched)  # (cancelled with it: it may skip the op's work)
            _to_start(adapter, [watched])
        except BaseException:  # (^C: taken, never queued; awaiting it raises, not hangs)
            self._future = None  # type: ignore[misc]
            raise
        return watched

    def _express_launch(self, stream: Any) -> Any:
        """The raw launch op the native core submits for this op on ``stream`` when it is
        handed over as a future, or None: it is submitted with ``_start``."""
        return None

    def _submit_declined(self, stream: Any) -> Any:
        """This launch (an ``_express_launch``) submitted the generic way, as it was
        handed over, where the core declined it: its completion."""
        return self._start(stream, True)  # type: ignore[attr-defined]
