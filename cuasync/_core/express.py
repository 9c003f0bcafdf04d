"""The Python side of the native op core: choosing its mode, and what it leaves to Python.

``await kernel[grid, block](x, n)`` is the most common op and the shortest work, and the
generic path (``DeviceOp._start``, ``_enqueue``, ``_declare``, ``Hub.attach``) spends
more host time in its layers than the driver spends launching. The native module does
the steps of a launch in one call (``_reactor.Express``, one per hub, ``hub.express``:
:func:`make_core`): the execution lock, the stream's sequence number, the access records
of its tensors, a completion slot, the launch with its flag write and, for an await or a
``sync()``, the spin on it (after the lock is released). A small ``from_host`` has its
own call on the same core (``Express.upload``: ``cuasync._small_upload``).

There is one submission of each: the core's. This module holds what the core calls
back into or leaves to Python: the rest of an await whose work did not land within the
spin (:func:`_finish_await`: stepping aside in a burst; parking is the hub's native
``suspend``, which the core returns for an await it made a completion for), of a ``sync()``
(:func:`finish_sync`), the :class:`Completion` of such work (:func:`_completion_of`),
and the handlers of a submission that failed or was abandoned. Work that lands within
the spin needs no :class:`~.context.ExecutionContext` and no :class:`Completion`.

The core returns :data:`GENERIC`, having done nothing, whenever the op is not its common
case; the op then takes the generic path (``DeviceOp._start`` and ``await_started``,
``DeviceOp._sync``), which handles it and words its errors. So does every op where there
is no core (no native module, host-callback completions, ``CUASYNC_NATIVE=off``). The
generic path is taken for:

- tracing (NVTX ranges), a stream capturing a graph, a device fault seen;
- the execution lock held by another thread, or this one (``ReentrancyError``);
- a stream of another device than the op was built for;
- awaits that complete through host callbacks, no free slot, no stream memory ops;
- a tensor on another device or a read-only tensor written to.

>>> comp = express.submit(op, stream) or DeviceOp._start(op, stream, True)
"""

from __future__ import annotations

from asyncio import _get_running_loop
from collections.abc import Callable, Generator
from time import monotonic, monotonic_ns
from typing import Any

from .. import _config
from .._cancel_var import SCOPE
from .._first_use import Unprepared, prepare_off_loop
from .._native import NATIVE, PROCESS, Suspension
from . import completion as _completion
from . import loops as _loops
from . import op_future
from .completion import DONE, INLINE, Completion, await_spin_us
from .context import ExecutionContext
from .device import Stream, get_default_device
from .loops import running_adapter
from .op import DeviceFuture, DeviceOp, _release_when_drained, await_started, synchronize
from .output import Output, _Ready
from .scheduling import _policy, stream_for

__all__ = [
    "GENERIC",
    "await_launch",
    "finish_sync",
    "generic_future",
    "make_core",
    "settle_look",
    "submit",
    "submit_future",
    "sync_launch",
]

#: Steps aside an await in a burst takes, at most, while the submitter has not made its
#: launch (each lets every other ready task run once); then it parks, as any await can.
_STEPS_MAX = 16

#: The native core's modes (``Express.launch``, ``Express.upload``): no spin (a future),
#: an await's spin, a blocking ``sync()``'s, or (a launch only) an await in a burst, its
#: launch queued for the native submitter where it can be (``MODE_*`` of
#: reactor/python/express.h).
NO_SPIN, AWAIT, BLOCK, BURST = 0, 1, 2, 4


#: What the native core returns when it did nothing: the generic path takes the op.
GENERIC: Any = type("Generic", (), {"__repr__": lambda self: "express.GENERIC"})()


class _Box(list[BaseException]):
    """The errors of one express launch: its own ``errors()`` (the backend's error box),
    so that the launch needs no :class:`~.context.ExecutionContext` to report them."""

    __slots__ = ()

    def __call__(self) -> list[BaseException]:
        return self


def _core() -> Any:
    """The hub's native core, or None (no hub yet, no core: the generic path)."""
    hub = PROCESS.hub
    return hub.express if hub is not None else None


def submit(op: Any, stream: Stream, enqueue: Enqueue | None = None) -> Completion | None:
    """Enqueue the launch op ``op`` (taken by the caller) on ``stream`` with its flag
    write; its completion, or None when the generic path must do it. ``enqueue``: the
    core's submission of another kind of express op (default: a launch's)."""
    if enqueue is not None:
        sent = enqueue(op, stream, NO_SPIN, None)
    else:
        core = _core()
        sent = None if core is None else core.launch(op, stream, NO_SPIN, None)
    if sent is None or sent is GENERIC:
        return None
    hub, box, slot, gen, address, seq = sent[:6]
    return _completion_of(op, stream, hub, box, slot, gen, address, seq, held=sent[9])


def submit_future(op: Any, stream: Stream) -> DeviceFuture[Any]:
    """``op.submit_on(stream)`` for a launch op (not yet taken): the native core takes it,
    launches it and makes its :class:`DeviceFuture` in one call where it can; else the
    generic ``submit_on`` (which checks the stream and raises for a consumed op)."""
    core = _core()
    if core is None or not isinstance(stream, Stream):
        return DeviceOp.submit_on(op, stream)
    future = core.submit(op, stream)
    if future is not GENERIC:
        return future
    return generic_future(op, stream)


def generic_future(op: Any, stream: Stream) -> DeviceFuture[Any]:
    """The future of a launch op the core declined: taken (raises for a consumed op) and
    submitted the generic way."""
    op._take()
    return DeviceFuture(DeviceOp._start(op, stream, True))


def await_launch(op: Any, enqueue: Enqueue | None = None) -> Generator[Any, Any, Any]:
    """``await op`` for a launch op (its ``__await__``; ``enqueue``: another kind's
    submission): the core's submission and its spin; only work that did not land
    within it gets a :class:`Completion`. The native ``LaunchAwait`` does this in C, and
    calls it where it cannot (no core, an op already taken).

    Landed inline, nothing but the slot and the counters needs settling: the output is
    the op's output argument, and what the launch used is still held by the op.
    """
    watched = op._future
    if watched is not None:  # handed to asyncio as a future: that execution's outcome
        return (yield from watched.waiting(op))
    # (running_adapter() and stream_for(), their common cases inline: every await)
    ref, adapter = PROCESS.last
    if ref() is not _get_running_loop() or adapter is None:
        adapter = running_adapter()  # before submitting: an unsupported loop leaks nothing
    if op._consumed:
        op._take()  # raises
    op._consumed = True
    device = op._device
    own = getattr(op, "_stream", None)  # (a launch op's own stream: a wait's, the one waited for)
    if own is not None:
        stream = own
    else:
        policy = _policy.get()
        if policy is None:
            policy = (device or get_default_device()).policy
        stream = policy.next_stream()
        if type(stream) is not Stream or (device is not None and stream.device is not device):
            stream = stream_for(device)  # (the checks, worded)
    if enqueue is None and op._prepared.__class__ is Unprepared:  # a first use: off the loop
        yield from _first_use(op, adapter)
    return (yield from _submit_await(op, stream, adapter, enqueue))


def _submit_await(
    op: Any, stream: Stream, adapter: Any, enqueue: Enqueue | None
) -> Generator[Any, Any, Any]:
    """:func:`await_launch` once the op is taken and its stream chosen."""
    if enqueue is not None:  # (an upload: its output when the core settled it)
        sent = enqueue(op, stream, AWAIT, adapter)
        if sent is not None and sent.__class__ is not tuple:
            return sent
    else:
        hub = PROCESS.hub
        if hub is None or hub.express is None:
            sent = None
        else:  # the native core: the whole submission, spin and settling
            burst = hub.step_aside and adapter.steps_aside and adapter.others_ready()
            sent = hub.express.launch(op, stream, BURST if burst else AWAIT, adapter)
            if sent is op._output:  # landed within the spin, and settled
                return sent
            if sent.__class__ is Suspension:  # not landed: its completion made, to park on
                return (yield from sent)
    return (yield from _finish_await(op, stream, adapter, sent))


def _first_use(op: Any, adapter: Any) -> Generator[Any, Any, None]:
    """Make the launch op ``op``, built before its kernel was prepared for its device,
    launchable: prepared on the compile thread, the task parked meanwhile (or at once,
    where another await has prepared the kernel since the op was built)."""
    unprepared = op._prepared
    prepared = unprepared.kernel._prepared.get(unprepared.device.ordinal)
    if prepared is None:
        (prepared,) = yield from prepare_off_loop([(unprepared.kernel, unprepared.device)], adapter)
    op._prepared = prepared


def _finish_await(op: Any, stream: Stream, adapter: Any, sent: Any) -> Generator[Any, Any, Any]:
    """The rest of ``await op`` once submitted (``sent``: what the core's submission
    returned; :data:`GENERIC`: the core declined it; None: there was no core): stepping
    aside in a burst, settling, parking, or the generic path. The native
    ``_Launch.__await__`` (``_reactor.LaunchAwait``) returns this where its core did not
    finish the await itself (a burst's launch it handed over, an error in its box)."""
    if sent is GENERIC and op._prepared.__class__ is Unprepared:
        # a first use the core declined: prepared off the loop, then the core again
        yield from _first_use(op, adapter)
        return (yield from _submit_await(op, stream, adapter, None))
    if sent is None or sent is GENERIC:
        try:
            return (yield from await_started(DeviceOp._start(op, stream, True), adapter))
        except BaseException:  # (cancelled: see _let_go)
            _let_go(op)
            raise
    hub, box, slot, gen, address, seq, spin_us, landed, ticket, held = sent
    # when the wait began: the launch was just made, and spun on for spin_us (what the
    # early wake's estimate counts from, whatever Python ran since)
    since = monotonic_ns() - (spin_us or 0) * 1000
    queued = landed is None
    if queued:  # a burst: the other ready tasks submit meanwhile
        look = hub.native.spin_wait
        submitter = hub.submitter
        try:
            yield  # (a bare yield: the task runs again after them)
            landed = look(address, gen, 0)
            steps = 1
            while not landed and ticket >= 0 and submitter.done <= ticket:
                if steps == _STEPS_MAX:  # the submitter is stuck (a held stream): park
                    break
                yield  # the submitter has not made the launch yet: the loop goes on
                steps += 1
                landed = look(address, gen, 0)
        except BaseException:  # cancelled while stepping aside: the work goes on
            left = _completion_of(op, stream, hub, box, slot, gen, address, seq, ticket >= 0, held)
            left.abandon()
            hub.watch_in_background(left)
            _let_go(op)
            raise
        hub.stats.burst_awaits += 1
        if not landed:  # launched, and still on the device: a short spin, as any await
            spin_us = await_spin_us(hub, adapter, stream, seq)
            if spin_us and hub.express.parks_at_once(op, spin_us):
                spin_us = 0
                hub.stats.spins_skipped_long += 1
            # the wait of a launch the submitter made while this one stepped aside counts
            # from here; one made at once (ticket -1), from when this generator took it
            # over (the native await's own steps aside before that are not counted)
            if ticket >= 0:
                since = monotonic_ns()
            landed = look(address, gen, (spin_us or 0) * 1000)
    output, comp = settle_look(op, stream, hub, box, slot, gen, address, seq, ticket, held, landed)
    if comp is None:  # (the path of most awaits)
        adapter.long_ops = False
        return output
    if spin_us is not None and comp.state < DONE:  # the spin ran out: parked
        adapter.long_ops = True
    return (yield from hub.suspend(comp, adapter, since, op))


def settle_look(
    op: Any,
    stream: Stream,
    hub: Any,
    box: _Box | None,
    slot: int,
    gen: int,
    address: int,
    seq: int,
    ticket: int,
    held: list[Any] | None,
    landed: bool,
) -> tuple[Any, Completion | None]:
    """What a look at a core launch's flag found, settled (an await's, and a watched
    op's: :mod:`.op_future`): ``(output, None)`` where it ``landed`` and nothing failed
    (no :class:`Completion`: the stream's number, the slot and the counter settled
    inline); else ``(None, its completion)``, finished where it landed (its ``result()``
    raises the error), else pending. A launch the submitter made (``ticket`` >= 0) says in
    its slot's status word whether it failed."""
    if landed and ticket >= 0:
        error = hub.backend.queued_error(hub.submitter, slot, stream.handle)
        if error is not None:
            box = _Box() if box is None else box
            box.append(error)  # finish raises it
    if landed and not box:
        _settle(hub, stream, slot, seq)
        return op._output, None
    comp = _completion_of(op, stream, hub, box, slot, gen, address, seq, ticket >= 0, held)
    if landed or comp.landed():  # landed with errors (finish raises them), or since
        comp.finish(INLINE)
    return None, comp


#: A cancelled await's launch op lets go of its output and arguments (native:
#: ``_reactor.let_go``; the hub's ``suspend`` does it for a parked await).
_let_go: Callable[[Any], None] = NATIVE.let_go


def sync_launch(op: Any, stream: Stream) -> Any:
    """``op.sync_on(stream)`` for a launch op (taken by the caller): the core's
    submission and its spin, and ``cuStreamSynchronize`` only for work that did not land
    within it; short work returns as soon as an ``await`` would."""
    core = _core()
    if core is None:
        return DeviceOp._sync(op, stream)
    sent = core.launch(op, stream, BLOCK, None)
    if sent is op._output:  # landed within the spin, and settled
        return sent
    return finish_sync(op, stream, None if sent is GENERIC else sent)


def finish_sync(op: Any, stream: Stream, sent: Sent | None) -> Any:
    """The rest of ``op.sync_on(stream)`` once the core's submission (of any kind)
    returned ``sent`` (None: it declined, and the generic path runs the op): settling
    work that landed within the spin, else waiting for it."""
    if sent is None:
        return DeviceOp._sync(op, stream)
    hub, box, slot, gen, address, seq, _, landed, _, held = sent
    if landed and not box:
        _settle(hub, stream, slot, seq)
        return op._output
    comp = _completion_of(op, stream, hub, box, slot, gen, address, seq, held=held)
    if landed:  # finished here, or by another thread already finishing it
        hub.block(comp, 0)
        return comp.result()
    return synchronize(comp, stream)


def _settle(hub: Any, stream: Stream, slot: int, seq: int) -> None:
    """What work that landed within the spin leaves to do: the stream's completed
    number, the slot (its table entry was never set) and the counter."""
    if seq > stream._completed:
        stream._completed = seq
    hub.slots.release(slot)
    hub.stats.completed_inline += 1


def _completion_of(
    op: Any,
    stream: Stream,
    hub: Any,
    box: _Box | None,
    slot: int,
    gen: int,
    address: int,
    seq: int,
    queued: bool = False,
    held: list[Any] | None = None,
) -> Completion:
    """The completion of an express launch that did not land within its spin; it keeps
    the op's tensors and what the submission ``held`` alive until it lands (``box``:
    the launch's error box, None for a native launch, which reports none later).

    The output of a launch a burst ``queued`` for the native submitter checks, once its
    flag has landed, whether the submitter's launch failed (``Backend.queued_error``):
    then it raises why. (A burst's launch made at once has no status word of its own.)
    """
    retained = [tensor._alloc for tensor in op._tensors]
    if held:
        retained += held
    output = op._output
    if not queued:
        out: Output[Any] = _Ready(output)
    else:

        def out_checked() -> Any:
            error = hub.backend.queued_error(hub.submitter, slot, stream.handle)
            if error is not None:
                raise error
            return output

        out = Output(out_checked)
    if box is None:
        box = _Box()
    comp = Completion(ExecutionContext.submitted(stream, seq, retained, box), out)
    comp.slot, comp.gen, comp.address = slot, gen, address
    comp.armed_at = monotonic()
    hub.slots.arm(slot, comp)
    return comp


#: What the core's submission returns when the work is still to finish: ``(hub, errors,
#: slot, gen, flag address, seq, spin_us, landed, ticket, held)``. ``landed`` is None for
#: a launch a burst queued (``ticket``: the submitter's, -1 where it was made at once);
#: ``held``: what the work uses beyond the op's tensors (an upload's), or None.
Sent = tuple[
    Any, "_Box | None", int, int, int, int, "int | None", "bool | None", int, "list[Any] | None"
]
#: The core's submission of another kind of op: ``(op, stream, spin, adapter)`` to
#: :data:`Sent`, None (declined: the generic path takes the op) or, for an upload the
#: core settled within an await's or a blocking call's spin, the output itself.
Enqueue = Callable[[Any, "Stream", int, Any], Any]


def launch_awaiter(
    fallback: Callable[..., Any],
    tensor_launch: Callable[[Any, Stream], Any] | None = None,
) -> Any:
    """The await of a launch op: the native module's ``LaunchAwait`` (the preamble of
    :func:`await_launch` and the hub's core's launch in C; ``fallback`` where it is not
    its case). ``PROCESS.launch_await`` holds the one every launch op's ``__await__``
    (``LaunchCore``'s) calls. With ``tensor_launch`` (``launch_plan.express_launch``):
    the await of a TensorOp, whose raw launch on the chosen stream the core launches
    (``TensorOp.__await__``). An op it hands to asyncio as a future is adopted by the
    cancel scope current there (``scope``, the scope's ContextVar), as the Python
    handover's are (``AsyncioFuture._handed_over``)."""
    native = _completion._reactor
    import asyncio

    extra = {} if tensor_launch is None else {"tensor_launch": tensor_launch}
    return native.LaunchAwait(
        fallback=fallback, finish=_finish_await, get_running_loop=asyncio._get_running_loop,
        running_adapter=running_adapter, policy=_policy, stream_for=stream_for,
        current_tasks=_loops.current_tasks_table(), start_pass=op_future.start_pass,
        scope=SCOPE, **extra,
    )  # fmt: skip


def make_core(hub: Any) -> Any:
    """The native module's express core for ``hub`` (``hub.express``), or None without
    the module or its reactor, or with ``CUASYNC_NATIVE=off``; it reads the hub's state
    on every call, so flipping ``use_reactor`` or the spin budget takes effect at once."""
    native = hub.native
    if (
        native is None  # (a hub without the reactor)
        or hub.reactor is None
        or not _config.CONFIG.native  # CUASYNC_NATIVE=off: the generic path for every op
    ):
        return None
    # (the classes it makes and recognizes, Stream, Tensor, the launch op, Completion and
    # the rest, it knows by their core types: each recorded when it was declared; what it
    # hands back to Python, it reads from the hub's fields; its lock is context.LOCK)
    hub._box_type, hub._generic, hub._await_spin_us = _Box, GENERIC, await_spin_us
    hub._core_failed, hub._core_abandon = _core_failed, _core_abandon
    return native.Express(hub)


def _core_failed(hub: Any, op: Any, stream: Stream, seq: int, slot: int, box: _Box) -> None:
    """What a launch the native core submitted and that failed leaves (called under the
    lock, as ``_enqueue``'s own handler): the slot back, and the op's tensors released
    once the stream's earlier work has drained."""
    release_failed(hub, stream, seq, slot, box, [t._alloc for t in op._tensors])


def release_failed(
    hub: Any, stream: Stream, seq: int, slot: int, box: _Box, retained: list[Any]
) -> None:
    """What an express submission that failed leaves (under the lock): its slot back, and
    what it used (``retained``) released once the stream's earlier work has drained. A
    small upload's native submission calls it too."""
    hub.slots.release(slot)
    _release_when_drained(ExecutionContext.submitted(stream, seq, retained, box))


def _core_abandon(
    hub: Any,
    op: Any,
    stream: Stream,
    box: _Box | None,
    slot: int,
    gen: int,
    address: int,
    seq: int,
    held: list[Any] | None = None,
) -> None:
    """A launch (or a small upload, with what it ``held``) the native core made and could
    not settle (an error after the launch: out of memory): its completion, abandoned to
    the background watcher, which frees the slot and what the op holds once the work
    lands."""
    comp = _completion_of(
        op, stream, hub, box if box is not None else _Box(), slot, gen, address, seq,
        held=held,
    )  # fmt: skip
    comp.abandon()
    hub.watch_in_background(comp)


# The hub (below this layer) makes its native core with make_core, handed over once; a
# hub made before this module was imported gets its core now. A launch op's await
# (``LaunchCore``'s ``__await__``) is the one LaunchAwait made here.
PROCESS.launch_await = _LAUNCH_AWAIT = launch_awaiter(await_launch)
#: A launch op handed to asyncio as a future, in C (``_Launch._hand_over``).
hand_over_launch = _LAUNCH_AWAIT.hand_over
op_future.register_core(settle_look, _let_go)
PROCESS.make_core = make_core
PROCESS.upload_failed = release_failed  # (a small upload's failed copy: Express.upload)
if PROCESS.hub is not None and PROCESS.hub.express is None:
    PROCESS.hub.express = PROCESS.hub._core = make_core(PROCESS.hub)
