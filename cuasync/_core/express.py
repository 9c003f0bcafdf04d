"""The express submission of a lone kernel launch: one function from op to flag write.

``await kernel[grid, block](x, n)`` is the most common op and the shortest work, and the
generic path (``DeviceOp._start``, ``_enqueue``, ``_declare``, ``Hub.attach``) spends
more host time in its layers than the driver spends launching. :func:`_enqueue` does the
same steps for a kernel launch op in one frame: the execution lock, the stream's
sequence number, the access records of its tensors, a completion slot, one native call
that launches and writes the flag and, for an await or a ``sync()``, the spin on it
(after the lock is released).

Work that lands within that spin needs no :class:`~.context.ExecutionContext` and no
:class:`Completion`: the slot and the counters are settled and the output returned. Only
work that did not land (or a future) gets them, made after the launch.

It returns None, having done nothing, whenever the op is not the common case; the
caller then takes the generic path, which handles it (and words its errors).
:func:`await_launch` and :func:`sync_launch` build ``await op`` and ``op.sync()`` on it;
another kind of op with an express path (a small ``from_host``: ``cuasync._small_upload``)
passes its own submission to them, and to :func:`submit`, as ``enqueue``.
The generic path is taken for:

- tracing (NVTX ranges), a stream capturing a graph, a device fault seen;
- a thread already submitting (``ReentrancyError``);
- a stream of another device than the op was built for;
- awaits that complete through host callbacks, no free slot, no stream memory ops;
- a tensor on another device or a read-only tensor written to.

The native module does the same steps for a launch in one call where it can
(``_reactor.Express``, one per hub: :func:`make_core`); it returns :data:`GENERIC`
when the op is not its common case, and :func:`_enqueue` then takes the op.

>>> comp = express.submit(op, stream) or DeviceOp._start(op, stream, True)
"""

from __future__ import annotations

from asyncio import _get_running_loop
from collections.abc import Callable, Generator
from time import monotonic
from typing import Any

from .._first_use import Unprepared, prepare_off_loop
from . import completion as _completion
from . import loops as _loops
from . import trace
from .completion import INLINE, Completion, await_spin_us, suspend
from .context import LOCAL, LOCK, ExecutionContext
from .device import Stream, get_default_device
from .loops import running_adapter
from .op import DeviceFuture, DeviceOp, _release_when_drained, await_started, synchronize
from .output import Output, _Ready
from .scheduling import SingleStream, StreamPoolRoundRobin, _policy, stream_for

__all__ = [
    "GENERIC",
    "await_launch",
    "finish_sync",
    "make_core",
    "submit",
    "submit_future",
    "sync_launch",
]

#: Steps aside an await in a burst takes, at most, while the submitter has not made its
#: launch (each lets every other ready task run once); then it parks, as any await can.
_STEPS_MAX = 16

#: ``_enqueue``'s modes: no spin (a future), an await's spin, a blocking ``sync()``'s, or
#: an await in a burst (the launch queued for the native submitter where it can be).
NO_SPIN, AWAIT, BLOCK, BURST = 0, 1, 2, 3


#: What the native core's ``launch`` returns when it did nothing: Python's path takes it.
GENERIC: Any = type("Generic", (), {"__repr__": lambda self: "express.GENERIC"})()


class _Box(list[BaseException]):
    """The errors of one express launch: its own ``errors()`` (the backend's error box),
    so that the launch needs no :class:`~.context.ExecutionContext` to report them."""

    __slots__ = ()

    def __call__(self) -> list[BaseException]:
        return self


def submit(op: Any, stream: Stream, enqueue: Enqueue | None = None) -> Completion | None:
    """Enqueue the launch op ``op`` (taken by the caller) on ``stream`` with its flag
    write; its completion, or None when the generic path must do it. ``enqueue``: the
    submission of another kind of express op (default: a launch's)."""
    core = _completion._hub.express if enqueue is None and _completion._hub else None
    sent: Any = GENERIC if core is None else core.launch(op, stream, NO_SPIN, None)
    if sent is GENERIC:
        sent = (enqueue or _enqueue)(op, stream, NO_SPIN, None)
    if sent is None:
        return None
    hub, box, slot, gen, address, seq = sent[:6]
    return _completion_of(op, stream, hub, box, slot, gen, address, seq, held=sent[9])


def submit_future(op: Any, stream: Stream) -> DeviceFuture[Any]:
    """``op.submit_on(stream)`` for a launch op (not yet taken): the native core takes it,
    launches it and makes its :class:`DeviceFuture` in one call where it can; else the
    generic ``submit_on`` (which checks the stream and raises for a consumed op)."""
    hub = _completion._hub
    core = hub.express if hub is not None else None
    if core is None or not isinstance(stream, Stream):
        return DeviceOp.submit_on(op, stream)
    future = core.submit(op, stream)
    if future is not GENERIC:
        return future
    op._take()  # (raises for a consumed op) the core declined: Python's paths, not it again
    return DeviceFuture(submit(op, stream, _enqueue) or DeviceOp._start(op, stream, True))


def await_launch(op: Any, enqueue: Enqueue | None = None) -> Generator[Any, Any, Any]:
    """``await op`` for a launch op (its ``__await__``; ``enqueue``: another kind's
    submission): the express submission and its spin; only work that did not land
    within it gets a :class:`Completion`.

    Landed inline, nothing but the slot and the counters needs settling: the output is
    the op's output argument, and what the launch used is still held by the op.
    """
    # (running_adapter() and stream_for(), their common cases inline: every await)
    ref, adapter = _loops._last
    if ref() is not _get_running_loop() or adapter is None:
        adapter = running_adapter()  # before submitting: an unsupported loop leaks nothing
    if op._consumed:
        op._take()  # raises
    op._consumed = True
    device = op._device
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
    hub = _completion._hub
    burst = hub is not None and hub.step_aside and adapter.steps_aside and adapter.others_ready()
    core = None if hub is None or burst or enqueue else hub.express
    if core is not None:  # the native core: the whole submission, spin and settling
        sent = core.launch(op, stream, AWAIT, adapter)
        if sent is op._output:  # landed within the spin, and settled
            return sent
    else:
        sent = (enqueue or _enqueue)(op, stream, BURST if burst else AWAIT, adapter)
        if sent.__class__ is not tuple and sent is not None:
            return sent  # (an upload's output: the native core settled it)
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
    """The rest of ``await op`` once submitted (``sent``: what the submission returned;
    :data:`GENERIC`: the native core declined it, so Python's express path submits it):
    stepping aside in a burst, settling, parking. The native ``_Launch.__await__``
    (``_reactor.LaunchAwait``) returns this for work that did not land in its spin."""
    if sent is GENERIC:
        if op._prepared.__class__ is Unprepared:  # a first use: the core declined it
            yield from _first_use(op, adapter)
            return (yield from _submit_await(op, stream, adapter, None))  # (a burst's too)
        sent = _enqueue(op, stream, AWAIT, adapter)
    if sent is None:
        return (yield from await_started(DeviceOp._start(op, stream, True), adapter))
    hub, box, slot, gen, address, seq, spin_us, landed, ticket, held = sent
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
            comp = _completion_of(op, stream, hub, box, slot, gen, address, seq, ticket >= 0, held)
            comp.abandon()
            hub.watch_in_background(comp)
            raise
        hub.stats.burst_awaits += 1
        if not landed:  # launched, and still on the device: a short spin, as any await
            spin_us = await_spin_us(hub, adapter, stream, seq)
            landed = look(address, gen, (spin_us or 0) * 1000)
        if landed and ticket >= 0:  # (made by the submitter: its status word says how)
            error = hub.backend.queued_error(hub.submitter, slot, stream.handle)
            if error is not None:
                box.append(error)  # finish raises it
    if landed and not box:  # (_settle, inline: the path of most awaits)
        adapter.long_ops = False
        if seq > stream._completed:
            stream._completed = seq
        hub.free.append(slot)
        hub.stats.completed_inline += 1
        return op._output
    comp = _completion_of(op, stream, hub, box, slot, gen, address, seq, ticket >= 0, held)
    if landed or comp.landed():  # landed with errors (finish raises them), or after no spin
        comp.finish(INLINE)
    else:
        if spin_us is not None:
            adapter.long_ops = True
        try:
            yield from suspend(hub, comp, adapter)
        except BaseException:
            comp.abandon()
            raise
    return comp.result()


def sync_launch(op: Any, stream: Stream) -> Any:
    """``op.sync_on(stream)`` for a launch op (taken by the caller): the express
    submission and its spin, and ``cuStreamSynchronize`` only for work that did not land
    within it; short work returns as soon as an ``await`` would."""
    hub = _completion._hub
    core = hub.express if hub is not None else None
    if core is None:
        sent = _enqueue(op, stream, BLOCK, None)
    else:
        sent = core.launch(op, stream, BLOCK, None)
        if sent is op._output:  # landed within the spin, and settled
            return sent
        if sent is GENERIC:
            sent = _enqueue(op, stream, BLOCK, None)
    return finish_sync(op, stream, sent)


def finish_sync(op: Any, stream: Stream, sent: Sent | None) -> Any:
    """The rest of ``op.sync_on(stream)`` once an express submission (of any kind)
    returned ``sent`` (None: it declined, and the generic path runs the op): settling
    work that landed within the spin, else waiting for it."""
    if sent is None:
        return DeviceOp._sync(op, stream)
    hub, box, slot, gen, address, seq, _, landed, _, held = sent
    if landed and not box:
        _settle(hub, stream, slot, seq)
        return op._output
    comp = _completion_of(op, stream, hub, box, slot, gen, address, seq, held=held)
    if landed:
        comp.finish(INLINE)
        return comp.result()
    return synchronize(comp, stream)


def _settle(hub: Any, stream: Stream, slot: int, seq: int) -> None:
    """What work that landed within the spin leaves to do: the stream's completed
    number, the slot (its table entry was never set) and the counter."""
    if seq > stream._completed:
        stream._completed = seq
    hub.free.append(slot)
    hub.stats.completed_inline += 1


def _completion_of(
    op: Any,
    stream: Stream,
    hub: Any,
    box: _Box,
    slot: int,
    gen: int,
    address: int,
    seq: int,
    queued: bool = False,
    held: list[Any] | None = None,
) -> Completion:
    """The completion of an express launch that did not land within its spin; it keeps
    the op's tensors and what the submission ``held`` alive until it lands.

    The output of a launch a burst ``queued`` for the native submitter checks, once its
    flag has landed, whether the submitter's launch failed (``Backend.queued_error``):
    then it raises why. (A burst's launch made at once has no status word of its own.)
    """
    retained = [tensor._alloc for tensor, _ in op._tensors]
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
    comp = Completion(ExecutionContext.submitted(stream, seq, retained, box), out)
    comp.slot, comp.gen, comp.address = slot, gen, address
    comp.armed_at = monotonic()
    hub.table[slot] = comp
    return comp


#: What an express submission returns: ``(hub, errors, slot, gen, flag address, seq,
#: spin_us, landed, ticket, held)``, or None (nothing done: the generic path does it).
Sent = tuple[Any, _Box, int, int, int, int, "int | None", "bool | None", int, "list[Any] | None"]
#: An express submission: ``(op, stream, spin, adapter)`` to :data:`Sent` (or, for an
#: upload the native core settled within an await's or a blocking call's spin, the
#: output itself).
Enqueue = Callable[[Any, "Stream", int, Any], Any]


def _enqueue(op: Any, stream: Stream, spin: int, adapter: Any) -> Sent | None:
    """The submission of a launch, spinning as ``spin`` says (see :data:`Sent`). For a
    launch a burst queued (``Backend.queue_launch``), which is not spun on here,
    ``landed`` is None and ``ticket`` the submitter's (-1: made at once); ``held`` is
    None (the op holds what its launch uses)."""
    hub = _completion._hub
    if (
        hub is None
        or not hub.use_reactor
        or trace.enabled
        or stream._capturing
        or stream.device is not op._device
        or LOCAL.active
    ):
        return None
    backend = hub.backend
    memops = hub._memops.get(stream.device.ordinal)
    if memops is None:  # (asked once per device: a process that only syncs asks here)
        memops = hub.stream_memops(stream.device.ordinal)
    if backend.fault_seen or memops is not True:
        return None
    device = stream.device
    tensors = op._tensors
    for tensor, param in tensors:
        alloc = tensor._alloc
        if alloc.device is not device or (alloc.readonly and not param.const):
            return None
    if op._prepared.__class__ is Unprepared:  # built in a loop, executed otherwise: inline
        op._prepared = op._prepared.resolve()
    box = _Box()
    with LOCK:
        try:
            slot = hub.free.pop()
        except IndexError:
            return None  # the generic path falls back to a host callback, and logs it
        LOCAL.active = True
        seq = stream._submitted = stream._submitted + 1
        try:
            for tensor, param in tensors:
                tensor._alloc.use(stream, seq, not param.const)
            gen = hub.gens[slot] = (hub.gens[slot] + 1) & 0xFFFFFFFF
            address = hub.slab + 4 * slot
            if spin == BURST:
                ticket = backend.queue_launch(
                    hub.submitter, op._prepared, op._grid, op._block, op._shared_mem,
                    stream.handle, op._args, box, address, slot, gen,
                )  # fmt: skip
                if ticket is not None:
                    return hub, box, slot, gen, address, seq, None, None, ticket, None
            prepared = op._prepared
            fast = prepared.fast
            launch = backend.fast_launch
            if (
                fast is not None
                and launch is not None
                and backend.current.ordinal == prepared.ordinal
                and stream.owned
            ):  # the backend's native launch, called here: one Python frame less
                (gx, gy, gz), (bx, by, bz) = op._grid, op._block
                handle, layout = fast
                rc = launch(
                    handle, gx, gy, gz, bx, by, bz, op._shared_mem, stream.handle, layout,
                    op._args, address, gen,
                )  # fmt: skip
                if rc:
                    backend.launch_failed(
                        rc, prepared, op._grid, op._block, op._shared_mem, stream.handle,
                        op._args, address, gen,
                    )  # fmt: skip
            else:
                backend.launch_kernel(
                    prepared, op._grid, op._block, op._shared_mem, stream.handle, op._args,
                    box, address, gen,
                )  # fmt: skip
        except BaseException:
            release_failed(hub, stream, seq, slot, box, [t._alloc for t, _ in tensors])
            raise
        finally:
            LOCAL.active = False
    # The spin, outside the lock: other threads submit meanwhile (spin_for, inline here:
    # a call less on every launch).
    spin_us: int | None = 0
    if spin in (AWAIT, BURST):  # (a burst whose launch was not queued spins too)
        spin_us = hub.spin_budget_us
        if spin_us and (adapter.long_ops or stream._completed < seq - 1):
            spin_us = await_spin_us(hub, adapter, stream, seq)  # (the common case inline)
    elif spin == BLOCK and stream._completed >= seq - 1:
        spin_us = hub.spin_budget_us
    landed = bool(spin_us) and hub.native.spin_wait(address, gen, (spin_us or 0) * 1000)
    return hub, box, slot, gen, address, seq, spin_us, landed, -1, None


def launch_awaiter(fallback: Callable[..., Any]) -> Any:
    """``_Launch.__await__``: the native module's (``_reactor.LaunchAwait``: the preamble
    of :func:`await_launch` and the hub's core's launch in C), else ``fallback``."""
    native = _completion._reactor
    if native is None or not hasattr(native, "LaunchAwait"):
        return fallback
    import asyncio

    return native.LaunchAwait(
        core=native.Express, fallback=fallback, finish=_finish_await, completion=_completion,
        loops=_loops, get_running_loop=asyncio._get_running_loop,
        running_adapter=running_adapter, policy=_policy, stream_for=stream_for,
        current_tasks=_loops.current_tasks_table(), round_robin=StreamPoolRoundRobin,
        single_stream=SingleStream,
    )  # fmt: skip


def make_core(hub: Any) -> Any:
    """The native module's express core for ``hub`` (``hub.express``), or None without
    the module or its reactor; it reads the hub's state on every call, so flipping
    ``use_reactor`` or the spin budget takes effect at once."""
    native = hub.native
    if native is None or hub.reactor is None or not hasattr(native, "Express"):
        return None
    from .._backends.base import PreparedKernel
    from .._launch.kernel import _Launch
    from .._tensor import Tensor
    from .memory import Allocation

    return native.Express(
        hub=hub, lock=LOCK, local=LOCAL, trace=trace, launch=_Launch, stream=Stream,
        tensor=Tensor, allocation=Allocation, prepared=PreparedKernel, box=_Box,
        generic=GENERIC, spin_us=await_spin_us, failed=_core_failed, abandon=_core_abandon,
        completion=Completion, context=ExecutionContext, ready=_Ready, future=DeviceFuture,
    )  # fmt: skip


def _core_failed(hub: Any, op: Any, stream: Stream, seq: int, slot: int, box: _Box) -> None:
    """What a launch the native core submitted and that failed leaves (called under the
    lock, as ``_enqueue``'s own handler): the slot back, and the op's tensors released
    once the stream's earlier work has drained."""
    release_failed(hub, stream, seq, slot, box, [t._alloc for t, _ in op._tensors])


def release_failed(
    hub: Any, stream: Stream, seq: int, slot: int, box: _Box, retained: list[Any]
) -> None:
    """What an express submission that failed leaves (under the lock): its slot back, and
    what it used (``retained``) released once the stream's earlier work has drained. A
    small upload's native submission calls it too."""
    hub._free_slot(slot)
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


def spin_for(
    hub: Any, stream: Stream, seq: int, address: int, gen: int, spin: int, adapter: Any
) -> tuple[int | None, bool]:
    """The spin of an express submission, as ``spin`` says, on its flag: ``(spin_us,
    landed)`` (see :func:`await_spin_us` for None)."""
    spin_us: int | None = 0
    if spin in (AWAIT, BURST):  # (a burst whose launch was not queued spins too)
        spin_us = hub.spin_budget_us
        if spin_us and (adapter.long_ops or stream._completed < seq - 1):
            spin_us = await_spin_us(hub, adapter, stream, seq)  # (the common case inline)
    elif spin == BLOCK and stream._completed >= seq - 1:
        spin_us = hub.spin_budget_us
    landed = bool(spin_us) and hub.native.spin_wait(address, gen, (spin_us or 0) * 1000)
    return spin_us, landed
