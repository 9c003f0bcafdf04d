"""``DeviceOp``: a lazy, single-use device operation, and its combinators.

Building an op enqueues nothing. Executing it (``await op``, ``op.sync()``,
``op.sync_on(stream)``, ``op.submit()``, ``op.schedule(policy)``) picks a stream,
enqueues the work under the execution lock and returns (or awaits) the output.
"""

from __future__ import annotations

import asyncio
import operator
import os
import threading
import traceback
import warnings
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Never, NoReturn, TypeVar, overload

from .._backends import get_backend
from .._cancel_var import SCOPE, detached
from .._config import debug_origins
from .._exceptions import fresh, report_unraisable
from .._first_use import prepare_off_loop
from .._native import NATIVE, PROCESS, FutureCore, OpCore
from .._tensor import Tensor
from ..errors import (
    ArgumentError,
    InvalidDeviceError,
    NotAwaitedError,
    OpConsumedError,
    SchedulingError,
)
from . import trace
from .completion import (
    BLOCKING,
    DONE,
    PENDING,
    Completion,
    _leaked,
    get_hub,
    raise_if_faulted,
    wait,
)
from .context import LOCAL, LOCK, ExecutionContext, check_not_submitting, no_capture, released
from .device import Device, Stream
from .loops import check_blocking_allowed, running_adapter
from .op_future import AsyncioFuture
from .output import Output
from .process_local import ProcessLocal
from .scheduling import SchedulingPolicy, stream_for, stream_from

if TYPE_CHECKING:
    import numpy as np

    from .._ops.tensorop import ShapeLike
    from .._tensor import Tensor
    from .graph import CudaGraph

__all__ = ["DeviceFuture", "DeviceOp", "SharedOp", "value", "zip"]

T = TypeVar("T")
U = TypeVar("U")
# The element types of zip() and the tuple combinators (first, last, unzip).
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")
E = TypeVar("E")
F = TypeVar("F")


class DeviceOp(ProcessLocal, OpCore, AsyncioFuture, Generic[T]):
    """A lazy device operation producing a ``T``; single-use, like a coroutine.

    Inside an asyncio loop it is also an asyncio future (:mod:`.op_future`):
    ``asyncio.gather(*ops)`` and ``as_completed`` watch it without a Task.

    >>> x = await cuasync.from_host(np.arange(4.0))          # asyncio, uvloop or trio
    >>> y = cuasync.from_host(np.ones(4)).map(lambda t: t.shape).sync()
    >>> fut = op.submit(); ...; result = await fut
    >>> a, b = await asyncio.gather(cuasync.exp(x), cuasync.sum(x))
    """

    _local_hint = (
        "send its inputs (numpy arrays, Python values) and build the op in the process "
        "that awaits it"
    )

    __slots__ = ()  # _consumed, _device, _origin, _running: the native base's (``OpCore``)

    #: Captures an op into a graph (:meth:`graph`); graphs are built on ops, so
    #: cuasync/_core/graph.py fills this when imported.
    _capture: ClassVar[Callable[[DeviceOp[Any], Stream | None, str], CudaGraph[Any]]]
    #: The op's await while an asyncio task runs the op as its coroutine (``send``).
    _running: Generator[Any, Any, Any] | None

    #: The type users know it as, in messages (never a private subclass's name).
    _public_name = "DeviceOp"
    #: What kind of op it is, in its repr and trace (a private subclass's own name).
    _kind = "DeviceOp"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # A private subclass (``_Then``, ``_FnOp``) is shown as its public type, so that
        # Python's own messages ("'DeviceOp' object is not callable") name a type users
        # know; its own name stays in ``_kind``.
        super().__init_subclass__(**kwargs)
        cls._kind = cls.__name__.lstrip("_")
        if cls.__name__.startswith("_"):
            cls.__name__ = cls.__qualname__ = cls._public_name

    def __init__(self, device: Device | None = None) -> None:
        self._consumed = False
        self._device = device
        if debug_origins():
            self._origin = _origin()

    def __repr__(self) -> str:
        consumed = " (consumed)" if getattr(self, "_consumed", False) else ""
        return f"<cuasync.DeviceOp {self._kind}{consumed}>"

    # -- a forgotten await: the op used as its result --------------------------------------
    def _not_awaited(self, what: str, instead: str) -> NotAwaitedError:
        return NotAwaitedError(
            f"{what}: it is an op, and its result does not exist until it runs (a forgotten "
            f"await?); await it first: {instead}"
        )

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        name = self._public_name
        raise self._not_awaited(f"numpy cannot convert a {name}", "`np.asarray(await op)`")

    def __getitem__(self, item: Never) -> NoReturn:
        """Refused with :class:`~cuasync.errors.NotAwaitedError` (a forgotten await?):
        to mypy no index fits; index the result: ``(await op)[0]``."""
        name = self._public_name
        raise self._not_awaited(f"a {name} cannot be indexed", "`(await op)[...]`")

    if not TYPE_CHECKING:  # (type checkers keep flagging unknown attributes)

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(
                    f"{self._public_name!r} object has no attribute {name!r}", name=name, obj=self
                )
            what = f"a {self._public_name} has no attribute {name!r}"
            exc = self._not_awaited(what, f"`(await op).{name}`")
            exc.name, exc.obj = name, self
            raise exc

    # -- to implement ------------------------------------------------------------------
    def _enqueue(self, ctx: ExecutionContext) -> Output[T]:
        """Enqueue the work on ``ctx.stream`` and return its (stream-ordered) output."""
        raise NotImplementedError

    @property
    def device(self) -> Device | None:
        """The device this op's inputs live on (None: any, the default device's policy)."""
        return self._device

    def _take(self) -> None:
        if self._consumed:
            raise OpConsumedError(self._consumed_message())
        self._consumed = True

    def _consumed_message(self) -> str:
        watched = getattr(self, "_future", None)  # (handed to asyncio as a future)
        if watched is not None and watched.cancelled and not watched.started:
            return (
                f"this {self._public_name} was cancelled before it started (op.cancel(), a "
                "wait_for timeout or a cancelled gather) and ran nothing; ops are "
                "single-use, like coroutines: build it again to run the work"
            )
        return (
            f"this {self._public_name} was already used: executed (await, sync(), "
            "submit()) or built into another op (then(), map(), zip()); ops are single-use, "
            "like coroutines. Call .shared() before using it to run the work once and reuse "
            "the result any number of times."
        )

    # -- execution -----------------------------------------------------------------------
    def _start(self, stream: Stream, notify: bool) -> Completion:
        """Enqueue on ``stream`` (the caller has taken the op) and track the completion."""
        if NATIVE.tracing() and not getattr(LOCAL, "traced", False):
            return self._start_traced(stream, notify)
        device = self._device
        if get_backend().fault_seen or (device is not None and stream.device is not device):
            _check_stream(stream, device)
        if stream._capturing:
            no_capture(stream, "executing an op")
        if getattr(LOCAL, "active", False):
            check_not_submitting("executing an op")
        with LOCK:
            LOCAL.active = True
            ctx = ExecutionContext(stream)
            if notify:
                ctx.fuse = self
            try:
                out = self._enqueue(ctx)
                if notify:
                    return (PROCESS.hub or get_hub()).attach(ctx, out)
                return Completion(ctx, out)
            except BaseException:
                _release_when_drained(ctx)
                raise
            finally:
                LOCAL.active = False

    def _start_traced(self, stream: Stream, notify: bool) -> Completion:
        """:meth:`_start` inside NVTX ranges (see :mod:`.trace`)."""
        with trace.submitting(self._trace_name()) as flight:
            LOCAL.traced = True
            try:
                comp = self._start(stream, notify)
            finally:
                LOCAL.traced = False
            # Every traced op gets its in-flight range, even one that already finished (a
            # host callback on another thread can finish it before this line): under the
            # state lock, finish() either comes after (and ends the range) or came before
            # (and the range is opened and closed here).
            with comp._lock:
                trace.start_flight(comp, flight)
                finished = comp.state != PENDING
            if finished:
                trace.end_flight(comp)
        return comp

    def _trace_name(self) -> str:
        """The op's name in NVTX ranges."""
        return self._kind

    def _pick_stream(self) -> Stream:
        """The stream ``await``, ``sync()`` and ``submit()`` use: the policy's next one."""
        return stream_for(self._device)

    def sync(self, *, allow_in_loop: bool = False) -> T:
        """Execute on the policy's next stream and block until done; returns the output.

        Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a running event loop
        (``await`` the op there instead) unless ``allow_in_loop=True``.
        """
        check_blocking_allowed(".sync()", allow_in_loop)
        self._take()
        return self._sync(self._pick_stream())

    def sync_on(self, stream: Stream, *, allow_in_loop: bool = False) -> T:
        """Execute on ``stream`` and block until done."""
        check_blocking_allowed(".sync_on()", allow_in_loop)
        if not isinstance(stream, Stream):
            raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
        self._take()
        return self._sync(stream)

    def _sync(self, stream: Stream) -> T:
        return synchronize(self._start(stream, notify=False), stream)

    def submit(self) -> DeviceFuture[T]:
        """Enqueue now on the policy's next stream; returns an awaitable :class:`DeviceFuture`.

        A future is never skipped by a cancel scope (others may await it): its work is
        enqueued outside the current scope (docs/cancellation.md)."""
        self._take()
        return self._future_on(self._pick_stream())

    def _future_on(self, stream: Stream) -> DeviceFuture[T]:
        """A :class:`DeviceFuture` of this op (taken) enqueued on ``stream``, outside any
        cancel scope."""
        if SCOPE.get() is None:
            return DeviceFuture(self._start(stream, True))
        with detached():
            return DeviceFuture(self._start(stream, True))

    def schedule(self, policy: SchedulingPolicy) -> DeviceFuture[T]:
        """Enqueue now on ``policy.next_stream()``; returns a :class:`DeviceFuture`."""
        if not isinstance(policy, SchedulingPolicy):
            raise ArgumentError(
                f"policy must be a cuasync.SchedulingPolicy, got {type(policy).__name__}"
            )
        self._take()
        return self._future_on(stream_from(policy, self._device))

    def submit_on(self, stream: Stream) -> DeviceFuture[T]:
        """Enqueue now on ``stream``; returns a :class:`DeviceFuture`."""
        if not isinstance(stream, Stream):
            raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
        self._take()
        return self._future_on(stream)

    def __await__(self) -> Generator[Any, Any, T]:
        """Execute on the policy's next stream and suspend the task until done.

        Cancellation: cancelling the awaiting task (a timeout, a task group's cancel
        scope) raises ``CancelledError`` (trio: ``Cancelled``) here at once, without
        blocking. The device work is not cancelled: it goes on, and what it uses stays
        alive until it lands, then is released; its result is dropped. The op is consumed
        either way: to await the result after a cancellation, ``submit()`` and await the
        :class:`DeviceFuture` instead. Nothing is enqueued when no asyncio, uvloop or trio
        loop runs in this thread. See docs/cancellation.md.

        >>> with anyio.move_on_after(0.05):
        ...     t = await cuasync.zeros((1 << 20,))
        """
        watched = self._future
        if watched is not None:  # handed to asyncio as a future: that execution's outcome
            return (yield from watched.waiting(self))
        adapter = running_adapter()  # before submitting: an unsupported loop leaks nothing
        if self._consumed:
            self._take()  # raises
        self._consumed = True
        return (yield from self._await_on(self._pick_stream(), adapter))

    def _await_on(self, stream: Stream, adapter: Any) -> Generator[Any, Any, T]:
        """The rest of ``await op`` once taken and its stream chosen: its kernels
        prepared, then submitted and the task suspended until done (an op with a shorter
        submission overrides it: a TensorOp of a seen expression)."""
        first = self._first_use(stream.device)
        if first:  # kernels to compile and load: on the compile thread, the task parked
            yield from prepare_off_loop(first, adapter)
        return (yield from await_started(self._start(stream, True), adapter))

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        """The ``(kernel, device)`` pairs this op would launch that are not yet prepared
        for ``device``, found before it is submitted: its ``await`` prepares them off the
        event loop (:mod:`cuasync._first_use`). None by default: an op that does not
        name its kernels prepares them inline, when enqueued."""
        return ()

    # -- the coroutine protocol ----------------------------------------------------------
    # asyncio runs an awaitable that is not a coroutine (``ensure_future``, ``wait_for``,
    # ``gather``) inside a wrapper coroutine of its own, which a task cancelled before
    # its first step drops without a call to the op: the op then warned "was never
    # executed". With ``send``/``throw``/``close`` the op is a coroutine to asyncio (the
    # ``collections.abc.Coroutine`` protocol), run by the task itself, and a cancellation
    # before it began consumes it as it closes a coroutine.
    def send(self, value: Any) -> Any:
        """Run the op's await one step (what an asyncio task calls; see ``__await__``)."""
        it = getattr(self, "_running", None)  # (unset in ops the native module builds)
        if it is None:
            it = self._running = self.__await__()
        try:
            return it.send(value)
        except BaseException:
            self._running = None  # finished: no cycle through the await's frame
            raise

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise an exception in the op's await; before it began, the op is consumed
        (closed, as a coroutine would be) and the exception raised at once."""
        exc = typ if val is None else val
        it = getattr(self, "_running", None)
        if it is None:
            self._consumed = True  # consumed by the cancellation: nothing was enqueued
            raise exc
        try:
            return it.throw(exc)
        except BaseException:
            self._running = None
            raise

    def close(self) -> None:
        """Close the op's await (an unstarted op is consumed without running)."""
        it = getattr(self, "_running", None)
        self._running = None
        if it is None:
            self._consumed = True
        else:
            it.close()

    # -- combinators ---------------------------------------------------------------------
    def then(self, f: Callable[[T], DeviceOp[U]]) -> DeviceOp[U]:
        """Chain dependent device work on the same stream.

        ``f`` runs during submission with this op's output (device tensors are usable at
        once: the next op is stream-ordered after this one) and returns the next op.
        Executing other ops inside ``f`` raises :class:`~cuasync.errors.ReentrancyError`.

        >>> y = await cuasync.zeros((4,)).then(lambda t: cuasync.fill(t, 2.0))
        """
        return _Then(self, f, unchecked=False)

    def then_unchecked(self, f: Callable[[T], DeviceOp[U]]) -> DeviceOp[U]:
        """Like :meth:`then`, but ``f`` runs outside the execution lock.

        ``f`` may execute other ops; their ordering with this chain is then the caller's job.
        """
        return _Then(self, f, unchecked=True)

    def map(self, f: Callable[[T], U]) -> DeviceOp[U]:
        """Transform the output on the host, no GPU work; ``f`` runs once the work completed.

        >>> total = await t.to_host().map(lambda a: a.sum())
        """
        return _Map(self, f)

    def inspect(self, f: Callable[[T], Any]) -> DeviceOp[T]:
        """Call ``f(output)`` on the host when the output is delivered; passes it through."""

        def passthrough(v: T) -> T:
            f(v)
            return v

        return _Map(self, passthrough)

    # -- ops whose output is a tensor (a kernel launch, a then() chain, a TensorOp) -------
    def to_host(self: DeviceOp[Tensor]) -> DeviceOp[np.ndarray]:
        """An op running this one, then copying its output tensor into a new numpy array.

        >>> y = await k[grid, block](cuasync.zeros(n), x, n).to_host()
        """
        return _Then(self, lambda t: _tensor_output(t, "to_host").to_host(), unchecked=False)

    def reshape(self: DeviceOp[Tensor], shape: ShapeLike) -> DeviceOp[Tensor]:
        """An op running this one, then viewing its output tensor in another shape,
        zero-copy (:meth:`Tensor.reshape`; -1 infers). The shape is checked against the
        tensor when the op runs (a :class:`~cuasync.TensorOp` checks it now).

        >>> m = await k[grid, block](cuasync.zeros(12), x, 12).reshape((4, -1))
        """
        return _Then(self, lambda t: _Value(_tensor_output(t, "reshape").reshape(shape)), False)

    @overload
    def first(self: DeviceOp[tuple[A, *tuple[Any, ...]]]) -> DeviceOp[A]: ...
    @overload
    def first(self) -> DeviceOp[Any]: ...
    def first(self) -> DeviceOp[Any]:
        """The first element of a tuple output."""
        return _Map(self, operator.itemgetter(0))

    @overload
    def last(self: DeviceOp[tuple[*tuple[Any, ...], A]]) -> DeviceOp[A]: ...
    @overload
    def last(self) -> DeviceOp[Any]: ...
    def last(self) -> DeviceOp[Any]:
        """The last element of a tuple output."""
        return _Map(self, operator.itemgetter(-1))

    # Tuples of unknown length (and of more than 6) first: they would match the fixed ones.
    @overload
    def unzip(
        self: DeviceOp[tuple[Any, Any, Any, Any, Any, Any, Any, *tuple[Any, ...]]],
        n: int | None = None,
    ) -> tuple[DeviceOp[Any], ...]: ...
    @overload
    def unzip(self: DeviceOp[tuple[A]], n: int | None = None) -> tuple[DeviceOp[A]]: ...
    @overload
    def unzip(
        self: DeviceOp[tuple[A, B]], n: int | None = None
    ) -> tuple[DeviceOp[A], DeviceOp[B]]: ...
    @overload
    def unzip(
        self: DeviceOp[tuple[A, B, C]], n: int | None = None
    ) -> tuple[DeviceOp[A], DeviceOp[B], DeviceOp[C]]: ...
    @overload
    def unzip(
        self: DeviceOp[tuple[A, B, C, D]], n: int | None = None
    ) -> tuple[DeviceOp[A], DeviceOp[B], DeviceOp[C], DeviceOp[D]]: ...
    @overload
    def unzip(
        self: DeviceOp[tuple[A, B, C, D, E]], n: int | None = None
    ) -> tuple[DeviceOp[A], DeviceOp[B], DeviceOp[C], DeviceOp[D], DeviceOp[E]]: ...
    @overload
    def unzip(
        self: DeviceOp[tuple[A, B, C, D, E, F]], n: int | None = None
    ) -> tuple[DeviceOp[A], DeviceOp[B], DeviceOp[C], DeviceOp[D], DeviceOp[E], DeviceOp[F]]: ...
    @overload
    def unzip(self, n: int | None = None) -> tuple[DeviceOp[Any], ...]: ...
    def unzip(self, n: int | None = None) -> tuple[DeviceOp[Any], ...]:
        """Split a tuple-producing op into ``n`` ops that share one execution.

        ``n`` is inferred for ``cuasync.zip(...)``; pass it for other ops.

        >>> a_op, b_op = cuasync.zip(a, b).unzip()
        """
        if n is None:
            n = self._arity()
            if n is None:
                raise ArgumentError(
                    "unzip() cannot tell how many elements this op produces; pass n, "
                    "e.g. op.unzip(2)"
                )
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ArgumentError(f"n must be an int >= 1, got {n!r}")
        shared = self.shared()
        return tuple(_Map(shared, operator.itemgetter(i)) for i in range(n))

    def _arity(self) -> int | None:
        return None

    def graph(self, stream: Stream | None = None, *, mode: str = "relaxed") -> CudaGraph[T]:
        """Capture this op into a :class:`cuasync.CudaGraph` (instantiated and uploaded).

        ``stream`` is the graph's stream (a new one by default); ``mode`` is ``"relaxed"``
        (default), ``"global"`` or ``"thread_local"``. Allocating ops cannot be captured.

        >>> graph = kernel[grid, block](x, y).graph()
        >>> await graph.launch()
        """
        return DeviceOp._capture(self, stream, mode)

    def shared(self) -> SharedOp[T]:
        """A reusable, execute-once op: the work runs once, every execution gets its output.

        Executions may happen concurrently from tasks or threads; one on another stream is
        ordered after the producing work with an event.
        """
        self._take()
        return SharedOp(self)


def await_started(comp: Completion, adapter: Any) -> Generator[Any, Any, Any]:
    """The rest of ``await op`` once ``op`` is submitted: wait for ``comp``; a cancelled
    await abandons the output (nobody can read it any more) and lets the work go on."""
    try:
        return (yield from wait(comp, adapter))
    except BaseException:
        comp.abandon()
        raise


def synchronize(comp: Completion, stream: Stream) -> Any:
    """The rest of ``op.sync_on(stream)`` once ``op`` is submitted: block on the stream,
    finish ``comp`` and return its output (a failed synchronize fails it)."""
    try:
        get_backend().stream_synchronize(stream.handle)
    except BaseException as exc:
        comp.fail(exc)
        raise
    comp.finish(BLOCKING)
    if comp.state < DONE:  # (another thread is finishing it: wait for that)
        get_hub().block(comp)
    return comp.result()


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _origin() -> str:
    """Where the op being built was built: the caller's frames, outside cuasync."""
    frames = [f for f in traceback.extract_stack() if not f.filename.startswith(_PACKAGE_DIR)]
    return "".join(traceback.format_list(frames[-8:]))


def _warn_never_executed(op: DeviceOp[Any]) -> None:
    """Like a coroutine that was never awaited: building an op does nothing, so an op
    collected unexecuted is almost always a forgotten ``await``. Every op's finalizer is
    its native base's (``OpCore``): an executed op (nearly every one) costs no call, and
    nothing is said at interpreter shutdown; an op collected unexecuted calls this."""
    origin = getattr(op, "_origin", None)
    where = (
        f"; it was built at (most recent call last):\n{origin}"
        if origin
        else " (run with -X dev or PYTHONASYNCIODEBUG=1 to see where it was built)"
    )
    warnings.warn(
        f"{op!r} was never executed: building an op does nothing until it is awaited (or "
        f"run with .sync(), .submit()){where}",
        RuntimeWarning,
        stacklevel=2,
        source=op,
    )


# (the native finalizer's one call into Python, handed over once)
PROCESS.op_unexecuted = _warn_never_executed


def _check_stream(stream: Stream, device: Device | None) -> None:
    raise_if_faulted(stream.device)
    if device is not None and stream.device is not device:
        raise SchedulingError(
            f"the op's inputs live on device {device.ordinal} but the stream is on device "
            f"{stream.device.ordinal}; use a stream of device {device.ordinal}"
        )


def _release_when_drained(ctx: ExecutionContext) -> None:
    """A submission failed part-way: keep what it enqueued alive until the stream drains."""
    if not ctx.retained:
        return
    try:
        hub = get_hub()
        comp = hub.attach(ctx, Output.ready(None))
    except BaseException:
        _leaked.append(ctx.retained)  # a faulted device: never free under it
        return
    hub.watch_in_background(comp)


class DeviceFuture(ProcessLocal, FutureCore, Generic[T]):
    """Submitted work; awaitable any number of times, from any number of tasks and loops.

    Cancellation: cancelling a task that awaits the future raises ``CancelledError``
    (trio: ``Cancelled``) in that task at once, and cancels the wait, not the work: the
    future stays valid and can be awaited again, by this task or another. A future
    collected unawaited lets its work finish and releases what it used once it lands.

    >>> fut = op.submit()
    >>> fut.done()        # never blocks; True also once the work failed (device fault)
    >>> await fut         # or fut.wait() outside an event loop
    """

    _local_hint = "await it here and send what it produced as host data"

    __slots__ = ()  # _comp: the native base's (``FutureCore``)

    def __init__(self, comp: Completion) -> None:
        self._comp = comp

    @property
    def stream(self) -> Stream:
        """The stream the work was submitted on.

        >>> fut = op.submit(); fut.stream
        """
        return self._comp.stream

    def done(self) -> bool:
        """Whether the work has completed (or failed); never blocks."""
        return self._comp.poll()

    def result(self) -> T:
        """The output; raises the work's error, or ``InvalidStateError`` if not done yet."""
        if not self._comp.poll():
            raise asyncio.InvalidStateError(
                "the device work has not completed yet: await the future, call .wait(), "
                "or check .done() first"
            )
        return self._comp.result()

    def exception(self) -> BaseException | None:
        """The work's error, or None if it succeeded; ``InvalidStateError`` if not done.

        >>> fut = op.submit(); fut.wait(); fut.exception()
        """
        if not self._comp.poll():
            raise asyncio.InvalidStateError("the device work has not completed yet")
        return self._comp.error

    def wait(self, *, allow_in_loop: bool = False) -> T:
        """Block until done and return the output (not inside a running event loop)."""
        check_blocking_allowed(f"{type(self).__name__}.wait()", allow_in_loop)
        comp = self._comp
        get_hub().block(comp, self._wait_spin_us())
        return comp.result()

    def _wait_spin_us(self) -> int | None:
        """How long a blocking ``wait()`` spins before sleeping (None: the await's spin)."""
        return None

    def __await__(self) -> Generator[Any, Any, T]:
        """Suspend the task until the work is done; a cancelled wait leaves the work going."""
        try:
            return (yield from wait(self._comp, running_adapter()))
        except BaseException:
            # A cancelled await leaves this frame in a traceback, often inside a reference
            # cycle: it must not keep the future (and so its output) alive.
            del self
            raise

    def __del__(self) -> None:
        comp = getattr(self, "_comp", None)
        if comp is None:
            return
        comp.abandon()  # the future was the only way to read the output
        if comp.state == PENDING:
            try:
                get_hub().watch_in_background(comp)
            except Exception as exc:
                report_unraisable(
                    exc,
                    self,
                    f"Exception ignored in {type(self).__name__} finalizer",
                    "cuasync.completion",
                )

    def __repr__(self) -> str:
        comp = self._comp
        state = "pending" if comp.state < DONE else ("failed" if comp.error else "done")
        return f"<cuasync.DeviceFuture {state} on {self._comp.stream!r}>"


def _tensor_output(value: Any, method: str) -> Tensor:
    """``value``, the output of an op that ``.to_host()``/``.reshape()`` was called on,
    if it is a tensor; else an ArgumentError naming what the op produced."""

    if not isinstance(value, Tensor):
        raise ArgumentError(
            f"{method}() needs an op whose output is a cuasync.Tensor; this op produced "
            f"{type(value).__name__} {value!r}"[:300]
        )
    return value


class _Then(DeviceOp[U]):
    __slots__ = ("_f", "_inner", "_unchecked")

    def __init__(self, inner: DeviceOp[Any], f: Callable[[Any], DeviceOp[U]], unchecked: bool):
        if not callable(f):
            raise ArgumentError(f"then() needs a callable, got {type(f).__name__}")
        inner._take()  # (first: an op that raises here was never built, and never warns)
        super().__init__(inner.device)
        self._inner = inner
        self._f = f
        self._unchecked = unchecked

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        return self._inner._first_use(device)  # (f's op is only known once it has run)

    def _enqueue(self, ctx: ExecutionContext) -> Output[U]:
        value = self._inner._enqueue(ctx).get()
        ctx.retain(value)
        if self._unchecked:
            with released():
                nxt = self._f(value)
        else:
            nxt = self._f(value)
        if not isinstance(nxt, DeviceOp):
            raise ArgumentError(
                f"the function passed to then() must return a DeviceOp, got "
                f"{type(nxt).__name__}; use map() for host-side transforms"
            )
        nxt._take()
        return nxt._enqueue(ctx)


class _Map(DeviceOp[U]):
    __slots__ = ("_f", "_inner")

    def __init__(self, inner: DeviceOp[Any], f: Callable[[Any], U]) -> None:
        if not callable(f):
            raise ArgumentError(f"map() needs a callable, got {type(f).__name__}")
        if not isinstance(inner, SharedOp):
            inner._take()  # (first, as then()'s)
        super().__init__(inner.device)
        self._inner = inner
        self._f = f

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        return self._inner._first_use(device)

    def _enqueue(self, ctx: ExecutionContext) -> Output[U]:
        return self._inner._enqueue(ctx).then(self._f)


class _Zip(DeviceOp[tuple[Any, ...]]):
    __slots__ = ("_ops",)

    def __init__(self, ops: Sequence[DeviceOp[Any]]) -> None:
        devices = {op.device for op in ops if op.device is not None}
        if len(devices) > 1:
            raise InvalidDeviceError(
                "zip() members live on devices "
                f"{sorted(d.ordinal for d in devices)}; zip runs them on one stream, so they "
                "must share a device (await them separately, e.g. with asyncio.gather)"
            )
        for op in ops:
            if op._consumed:
                op._take()  # raises, before any member is taken (they stay usable)
        for op in ops:
            op._take()
        super().__init__(devices.pop() if devices else None)
        self._ops = tuple(ops)

    def _arity(self) -> int:
        return len(self._ops)

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        return [pair for op in self._ops for pair in op._first_use(device)]

    def _enqueue(self, ctx: ExecutionContext) -> Output[tuple[Any, ...]]:
        outs = [op._enqueue(ctx) for op in self._ops]
        return Output(lambda: tuple(o.get() for o in outs))


class _Value(DeviceOp[T]):
    __slots__ = ("_value",)

    def __init__(self, x: T) -> None:
        super().__init__(None)
        self._value = x

    def _enqueue(self, ctx: ExecutionContext) -> Output[T]:
        return Output.ready(self._value)


class SharedOp(DeviceOp[T]):
    """An execute-once op that can be executed any number of times (see ``DeviceOp.shared``)."""

    _public_name = "SharedOp"
    #: Never an asyncio future (asyncio runs it in a Task): cancelling a future cancels it
    #: for every awaiter, and a shared op's other awaiters must not lose it.
    _asyncio_future_blocking = None  # type: ignore[override]

    __slots__ = (
        "_error",
        "_errors",
        "_inner",
        "_lock",
        "_out",
        "_producer",
        "_realized",
        "_result",
        "_retained",
    )

    def __init__(self, inner: DeviceOp[T]) -> None:
        super().__init__(inner.device)
        self._inner = inner
        self._lock = threading.Lock()
        self._producer: tuple[Stream, int] | None = None
        self._out: Output[T] | None = None
        self._error: BaseException | None = None
        self._realized = False
        self._result: Any = None
        self._retained: list[Any] = []
        self._errors: list[BaseException] | None = None

    def _take(self) -> None:
        self._consumed = True  # reusable: executing it (or building on it) counts as use

    def _handed_over(self) -> NoReturn:
        # (add_done_callback, cancel: a future's, which a shared op is not; see above)
        raise TypeError(
            "a shared op is not an asyncio future: cancelling a future cancels it for every "
            "awaiter. Await it (asyncio.gather runs it in a Task), or submit() it"
        )

    def shared(self) -> SharedOp[T]:
        """The op itself: it is already shared."""
        return self

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        return self._inner._first_use(device) if self._producer is None else ()

    def _realize(self) -> T:
        with self._lock:
            errors = self._errors
            if errors:  # the shared device work itself failed (an emulated kernel raised)
                raise fresh(errors[0])
            if not self._realized:
                assert self._out is not None
                try:
                    self._result = self._out.get()
                except BaseException as exc:
                    self._error = exc
                    self._realized = True
                    raise
                self._realized = True
            if self._error is not None:
                raise fresh(self._error)
            return self._result

    def _enqueue(self, ctx: ExecutionContext) -> Output[T]:
        self._consumed = True
        with self._lock:
            if self._error is not None and self._producer is None:
                raise fresh(self._error)
            if self._producer is None:
                try:  # never skipped: others may await it (outside any cancel scope)
                    if SCOPE.get() is None:
                        self._out = self._inner._enqueue(ctx)
                    else:
                        with detached():
                            self._out = self._inner._enqueue(ctx)
                except BaseException as exc:
                    self._error = exc
                    raise
                self._producer = (ctx.stream, ctx.seq)
                # Whoever executes the shared op keeps the producer's work alive too, and
                # fails if that work fails.
                self._retained = ctx.retained
                self._errors = ctx.error_box()
            else:
                stream, seq = self._producer
                ctx.stream._order_after(stream, seq)
                ctx.retained.extend(self._retained)
        return Output(self._realize)


def value(x: T) -> DeviceOp[T]:
    """An op that does no device work and produces ``x``.

    >>> await cuasync.value(3).map(lambda v: v + 1)   # 4
    """
    return _Value(x)


@overload
def shared(x: DeviceOp[T], /) -> SharedOp[T]: ...
@overload
def shared(x: T, /) -> SharedOp[T]: ...
def shared(x: Any, /) -> SharedOp[Any]:
    """``x.shared()`` for an op, else ``value(x).shared()``: a reusable, execute-once op.

    >>> w = cuasync.shared(cuasync.from_host(weights))   # one upload, many consumers
    >>> r1, r2 = await asyncio.gather(w.then(f1), w.then(f2))
    >>> await cuasync.shared(3)                           # 3, as often as you like
    """
    if isinstance(x, DeviceOp):
        return x.shared()
    return _Value(x).shared()


@overload
def zip(a: DeviceOp[A], /) -> DeviceOp[tuple[A]]: ...
@overload
def zip(a: DeviceOp[A], b: DeviceOp[B], /) -> DeviceOp[tuple[A, B]]: ...
@overload
def zip(a: DeviceOp[A], b: DeviceOp[B], c: DeviceOp[C], /) -> DeviceOp[tuple[A, B, C]]: ...
@overload
def zip(
    a: DeviceOp[A], b: DeviceOp[B], c: DeviceOp[C], d: DeviceOp[D], /
) -> DeviceOp[tuple[A, B, C, D]]: ...
@overload
def zip(
    a: DeviceOp[A], b: DeviceOp[B], c: DeviceOp[C], d: DeviceOp[D], e: DeviceOp[E], /
) -> DeviceOp[tuple[A, B, C, D, E]]: ...
@overload
def zip(
    a: DeviceOp[A],
    b: DeviceOp[B],
    c: DeviceOp[C],
    d: DeviceOp[D],
    e: DeviceOp[E],
    f: DeviceOp[F],
    /,
) -> DeviceOp[tuple[A, B, C, D, E, F]]: ...
@overload  # 7 or more (a fallback for all arities would make the ones above ambiguous)
def zip(
    a: DeviceOp[Any],
    b: DeviceOp[Any],
    c: DeviceOp[Any],
    d: DeviceOp[Any],
    e: DeviceOp[Any],
    f: DeviceOp[Any],
    g: DeviceOp[Any],
    /,
    *ops: DeviceOp[Any],
) -> DeviceOp[tuple[Any, ...]]: ...
def zip(*ops: DeviceOp[Any]) -> DeviceOp[tuple[Any, ...]]:
    """One op running ``ops`` on one stream, producing the tuple of their outputs.

    >>> a, b = await cuasync.zip(x.to_host(), y.to_host())
    """
    if not ops:
        raise ArgumentError("zip() needs at least one op")
    for i, op in enumerate(ops):
        if not isinstance(op, DeviceOp):
            raise ArgumentError(
                f"zip() argument {i} must be a cuasync.DeviceOp, got {type(op).__name__}; "
                "wrap plain values with cuasync.value(x)"
            )
    return _Zip(ops)


class _FnOp(DeviceOp[T]):
    """An op whose work is one function of the execution context."""

    __slots__ = ("_first", "_fn", "_graph_node", "_name", "_output")

    def __init__(
        self,
        fn: Callable[[ExecutionContext], Output[T]],
        device: Device | None,
        name: str,
        graph_node: bool = False,
        first_use: FirstUse | None = None,
    ) -> None:
        super().__init__(device)
        self._fn = fn
        self._name = name
        self._graph_node = graph_node
        self._first = first_use
        #: the tensor it will output where known when built and not a new contiguous
        #: one (a view op's view: ``cuasync._ops.standin.will_output``), else None
        self._output: Any = None

    def _trace_name(self) -> str:
        return self._name

    def _first_use(self, device: Device) -> Sequence[tuple[Any, Device]]:
        return () if self._first is None else self._first(device)

    def _enqueue(self, ctx: ExecutionContext) -> Output[T]:
        if self._graph_node and SCOPE.get() is not None:
            # It writes a tensor it was given, which others may read: it always runs,
            # and so do the pending ops it reads (a skipped one would leave it garbage).
            with detached():
                return self._fn(ctx)
        return self._fn(ctx)

    def __repr__(self) -> str:
        return f"<cuasync.DeviceOp {self._name}{' (consumed)' if self._consumed else ''}>"


#: What an op's ``_first_use`` returns for a device: its kernels not yet prepared there.
FirstUse = Callable[[Device], Sequence[tuple[Any, Device]]]


def device_op(
    fn: Callable[[ExecutionContext], Output[T]],
    device: Device | None = None,
    name: str = "op",
    *,
    graph_node: bool = False,
    first_use: FirstUse | None = None,
) -> DeviceOp[T]:
    """Build an op from ``fn(ctx) -> Output``: enqueue on ``ctx.stream``, declare every
    device allocation read or written with ``ctx.read``/``ctx.write``, retain host objects
    with ``ctx.retain``. ``graph_node``: the op only writes into existing tensors, so
    ``CudaGraph.update`` accepts it. ``first_use(device)``: the ``(kernel, device)``
    pairs ``fn`` would launch that are not yet prepared there, which an ``await``
    prepares off the event loop first (cuasync's own ops)."""
    return _FnOp(fn, device, name, graph_node, first_use)


class _NativeLaunchBase(DeviceOp[T]):
    """Marker base of kernel launch ops (graph nodes)."""

    __slots__ = ()
