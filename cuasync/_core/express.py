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
:func:`await_launch` and :func:`sync_launch` build ``await op`` and ``op.sync()`` on it.
The generic path is taken for:

- tracing (NVTX ranges), a stream capturing a graph, a device fault seen;
- a thread already submitting (``ReentrancyError``);
- a stream of another device than the op was built for;
- awaits that complete through host callbacks, no free slot, no stream memory ops;
- a tensor on another device or a read-only tensor written to.

>>> comp = express.submit(op, stream) or DeviceOp._start(op, stream, True)
"""

from __future__ import annotations

from collections.abc import Generator
from time import monotonic
from typing import TYPE_CHECKING, Any

from . import completion as _completion
from . import trace
from .completion import INLINE, Completion, await_spin_us, suspend
from .context import LOCAL, LOCK, ExecutionContext
from .loops import running_adapter
from .op import DeviceOp, _release_when_drained, await_started, synchronize
from .output import _Ready
from .scheduling import stream_for

if TYPE_CHECKING:
    from .device import Stream

__all__ = ["await_launch", "submit", "sync_launch"]

#: ``_enqueue``'s spin modes: none (a future), an await's, a blocking ``sync()``'s.
NO_SPIN, AWAIT, BLOCK = 0, 1, 2


class _Box(list[BaseException]):
    """The errors of one express launch: its own ``errors()`` (the backend's error box),
    so that the launch needs no :class:`~.context.ExecutionContext` to report them."""

    __slots__ = ()

    def __call__(self) -> list[BaseException]:
        return self


def submit(op: Any, stream: Stream) -> Completion | None:
    """Enqueue the launch op ``op`` (taken by the caller) on ``stream`` with its flag
    write; its completion, or None when the generic path must do it."""
    sent = _enqueue(op, stream, NO_SPIN, None)
    if sent is None:
        return None
    return _completion_of(op, stream, *sent[:6])


def await_launch(op: Any) -> Generator[Any, Any, Any]:
    """``await op`` for a launch op (its ``__await__``): the express submission and its
    spin; only work that did not land within it gets a :class:`Completion`.

    Landed inline, nothing but the slot and the counters needs settling: the output is
    the op's output argument, and what the launch used is still held by the op.
    """
    adapter = running_adapter()  # before submitting: an unsupported loop leaks nothing
    if op._consumed:
        op._take()  # raises
    op._consumed = True
    stream = stream_for(op._device)
    sent = _enqueue(op, stream, AWAIT, adapter)
    if sent is None:
        return (yield from await_started(DeviceOp._start(op, stream, True), adapter))
    hub, box, slot, gen, address, seq, spin_us, landed = sent
    if landed and not box:  # (_settle, inline: the path of most awaits)
        adapter.long_ops = False
        if seq > stream._completed:
            stream._completed = seq
        hub.free.append(slot)
        hub.stats.completed_inline += 1
        return op._output
    comp = _completion_of(op, stream, hub, box, slot, gen, address, seq)
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
    sent = _enqueue(op, stream, BLOCK, None)
    if sent is None:
        return DeviceOp._sync(op, stream)
    hub, box, slot, gen, address, seq, _, landed = sent
    if landed and not box:
        _settle(hub, stream, slot, seq)
        return op._output
    comp = _completion_of(op, stream, hub, box, slot, gen, address, seq)
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
    op: Any, stream: Stream, hub: Any, box: _Box, slot: int, gen: int, address: int, seq: int
) -> Completion:
    """The completion of an express launch that did not land within its spin."""
    retained = [tensor._alloc for tensor, _ in op._tensors]
    comp = Completion(ExecutionContext.submitted(stream, seq, retained, box), _Ready(op._output))
    comp.slot, comp.gen, comp.address = slot, gen, address
    comp.armed_at = monotonic()
    hub.table[slot] = comp
    return comp


def _enqueue(
    op: Any, stream: Stream, spin: int, adapter: Any
) -> tuple[Any, _Box, int, int, int, int, int | None, bool] | None:
    """The submission, spinning as ``spin`` says: ``(hub, errors, slot, gen, flag address,
    seq, spin_us, landed)``, or None (nothing done)."""
    hub = _completion._hub
    if (
        hub is None
        or not hub.use_reactor
        or trace.enabled
        or stream._capturing
        or stream.device is not op._device
        or getattr(LOCAL, "active", False)
    ):
        return None
    backend = hub.backend
    if backend.fault_seen or hub._memops.get(stream.device.ordinal) is not True:
        return None  # (the first attach on a device fills _memops)
    device = stream.device
    tensors = op._tensors
    for tensor, param in tensors:
        alloc = tensor._alloc
        if alloc.device is not device or (alloc.readonly and not param.const):
            return None
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
            backend.launch_kernel(
                op._prepared,
                op._grid,
                op._block,
                op._shared_mem,
                stream.handle,
                op._args,
                box,
                address,
                gen,
            )
        except BaseException:
            hub._free_slot(slot)
            retained = [tensor._alloc for tensor, _ in tensors]
            _release_when_drained(ExecutionContext.submitted(stream, seq, retained, box))
            raise
        finally:
            LOCAL.active = False
    # The spin, outside the lock: other threads submit meanwhile.
    spin_us: int | None = 0
    if spin == AWAIT:
        spin_us = hub.spin_budget_us
        if spin_us and (adapter.long_ops or stream._completed < seq - 1):
            spin_us = await_spin_us(hub, adapter, stream, seq)  # (the common case inline)
    elif spin == BLOCK and stream._completed >= seq - 1:
        spin_us = hub.spin_budget_us
    landed = bool(spin_us) and hub.native.spin_wait(address, gen, (spin_us or 0) * 1000)
    return hub, box, slot, gen, address, seq, spin_us, landed
