"""The express submission of a lone kernel launch: one function from op to flag write.

``await kernel[grid, block](x, n)`` is the most common op and the shortest work, and the
generic path (``DeviceOp._start``, ``_enqueue``, ``_declare``, ``Hub.attach``) spends
more host time in its layers than the driver spends launching. :func:`submit` does the
same steps for a kernel launch op in one frame: the execution lock, the stream's
sequence number, the access records of its tensors, a completion slot, and one native
call that launches and writes the flag.

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


def submit(op: Any, stream: Stream) -> Completion | None:
    """Enqueue the launch op ``op`` (taken by the caller) on ``stream`` with its flag
    write; its completion, or None when the generic path must do it."""
    sent = _enqueue(op, stream)
    if sent is None:
        return None
    hub, ctx, slot, gen, address = sent
    return _completion_of(hub, op, ctx, slot, gen, address)


def await_launch(op: Any) -> Generator[Any, Any, Any]:
    """``await op`` for a launch op (its ``__await__``): the express submission, then
    the spin; only work that did not land within it gets a :class:`Completion`.

    Landed inline, nothing but the slot and the counters needs settling: the output is
    the op's output argument, and what the launch used is released with ``ctx``.
    """
    adapter = running_adapter()  # before submitting: an unsupported loop leaks nothing
    if op._consumed:
        op._take()  # raises
    op._consumed = True
    stream = stream_for(op._device)
    sent = _enqueue(op, stream)
    if sent is None:
        return (yield from await_started(DeviceOp._start(op, stream, True), adapter))
    hub, ctx, slot, gen, address = sent
    seq = ctx.seq
    spin_us = await_spin_us(hub, adapter, stream, seq)
    if spin_us and hub.native.spin_wait(address, gen, spin_us * 1000) and not ctx.errors:
        adapter.long_ops = False
        if seq > stream._completed:
            stream._completed = seq
        hub.free.append(slot)  # (Hub._free_slot: its table entry was never set)
        hub.stats.completed_inline += 1
        return op._output
    comp = _completion_of(hub, op, ctx, slot, gen, address)
    del ctx
    if comp.landed():  # after no spin, or with errors (finish raises them)
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
    submission, the spin, and ``cuStreamSynchronize`` only for work that did not land
    within it; short work returns as soon as an ``await`` would."""
    comp = submit(op, stream)
    if comp is None:
        return DeviceOp._sync(op, stream)
    hub = _completion._hub
    assert hub is not None
    if hub.settle(comp):
        return comp.result()
    return synchronize(comp, stream)


def _completion_of(
    hub: Any, op: Any, ctx: ExecutionContext, slot: int, gen: int, address: int
) -> Completion:
    comp = Completion(ctx, _Ready(op._output))
    comp.slot, comp.gen, comp.address = slot, gen, address
    comp.armed_at = monotonic()
    hub.table[slot] = comp
    return comp


def _enqueue(op: Any, stream: Stream) -> tuple[Any, ExecutionContext, int, int, int] | None:
    """The submission: ``(hub, ctx, slot, gen, flag address)``, or None (nothing done)."""
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
    with LOCK:
        try:
            slot = hub.free.pop()
        except IndexError:
            return None  # the generic path falls back to a host callback, and logs it
        LOCAL.active = True
        ctx = ExecutionContext(stream)
        try:
            seq = ctx.seq
            retained = ctx.retained
            for tensor, param in tensors:
                alloc = tensor._alloc
                alloc.use(stream, seq, not param.const)
                retained.append(alloc)
            gen = (hub.gens[slot] + 1) & 0xFFFFFFFF
            hub.gens[slot] = gen
            address = hub.slab + 4 * slot
            backend.launch_kernel(
                op._prepared,
                op._grid,
                op._block,
                op._shared_mem,
                stream.handle,
                op._args,
                ctx.error_box,
                address,
                gen,
            )
        except BaseException:
            hub._free_slot(slot)
            _release_when_drained(ctx)
            raise
        finally:
            LOCAL.active = False
    return hub, ctx, slot, gen, address
