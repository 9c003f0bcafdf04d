"""Foreign memory and foreign streams: what another library owns, used without copying.

A :class:`ForeignAllocation` is an :class:`~cuasync._core.memory.Allocation` that
cuasync never frees. It holds its owner (the producer's object) and calls ``release``
(a DLPack deleter, say) once the last cuasync view and the last op using it are gone:
ops retain the allocations they use until their completion is observed, so the producer
gets its memory back only after cuasync's work on it is done.

Ordering across the boundary uses cuasync's access records: the producer's pending
work is recorded as a write on a cuasync stream that waits for it, so every later op
is ordered after it with the usual events, and a foreign stream that consumes cuasync
memory is made to wait for cuasync's pending uses of it.

Foreign metadata is not trusted: :func:`foreign_extent` checks a producer's layout
(shape, strides, pointer) before any of it becomes a tensor.

>>> nbytes = foreign_extent(ptr, shape, strides, itemsize, "x.__cuda_array_interface__")
>>> alloc = ForeignAllocation(Device(0), ptr, nbytes, owner=producer, producer=stream)
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Callable
from typing import Any

from .._backends import get_backend
from .._backends.base import LEGACY_STREAM
from .._core.context import LOCAL, LOCK, submitting
from .._core.device import Device, Stream
from .._core.memory import Allocation
from .._exceptions import report_once
from ..errors import ArgumentError, ShapeError


def submission_lock() -> contextlib.AbstractContextManager[Any]:
    """The execution lock, unless this thread already holds it (inside a ``then``): a
    context manager (the lock itself, or one that does nothing).

    >>> with submission_lock():
    ...     alloc.use(stream, stream._next_seq(), write=False)
    """
    return _HELD if submitting() else LOCK


_HELD = contextlib.nullcontext()


#: Byte counts and addresses a layout must stay within: int64 sizes, a 64-bit address space.
_MAX_BYTES = (1 << 63) - 1
_ADDRESS_END = 1 << 64


def foreign_extent(
    ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int, what: str
) -> int:
    """The bytes a foreign array spans from ``ptr``; raise if its layout cannot be memory.

    ``strides`` are in elements, one per dimension. ``what`` names the metadata in the
    messages (``"x.__cuda_array_interface__"``). Refused: negative dimensions, negative
    strides (cuasync views go forward only), a NULL or misaligned pointer (CuPy and torch
    expect data aligned to its itemsize), and a layout whose byte count does not fit in
    int64 or whose last byte lies past the 64-bit address space.

    >>> foreign_extent(0x7F0000000000, (3, 4), (4, 1), 4, "x.__cuda_array_interface__")
    48
    """
    if ptr and not ptr % itemsize and len(strides) == len(shape):  # the common case, one pass
        size, span = 1, 0
        for d, st in zip(shape, strides, strict=True):
            if d < 0 or (st < 0 and d > 1):
                break
            size *= d
            span += st * (d - 1)
        else:
            nbytes = itemsize * (1 + span)
            if size and size * itemsize <= _MAX_BYTES and ptr + nbytes <= _ADDRESS_END:
                return nbytes
    # (the checks one at a time: which one fails is worded)
    if len(strides) != len(shape):
        raise ShapeError(
            f"{what} gives {len(strides)} strides {strides} for the {len(shape)} dimensions "
            f"of shape {shape}; the producer must give one stride per dimension"
        )
    if any(d < 0 for d in shape):
        raise ShapeError(
            f"{what} gives the shape {shape}, with a negative dimension; dimensions are "
            "sizes (>= 0): the producer's metadata is broken"
        )
    if any(s < 0 for s, d in zip(strides, shape, strict=True) if d > 1):
        raise ArgumentError(
            f"{what} gives negative strides {strides} (in elements); cuasync views go "
            "forward only: make a contiguous copy in the producer first"
        )
    size = math.prod(shape)
    if size == 0:
        return 0  # no byte is read: any pointer will do (CuPy gives 0 for empty arrays)
    if ptr == 0:
        raise ArgumentError(
            f"{what} gives a NULL data pointer for {size} elements; only an empty array "
            "may have no memory"
        )
    if ptr % itemsize:
        raise ArgumentError(
            f"{what} gives the data pointer {ptr:#x}, not aligned to its {itemsize}-byte "
            "elements; CUDA kernels (cuasync's, CuPy's, torch's) need aligned data: make an "
            "aligned copy in the producer first"
        )
    nbytes = itemsize * (1 + sum(s * (d - 1) for s, d in zip(strides, shape, strict=True)))
    if size * itemsize > _MAX_BYTES or ptr + nbytes > _ADDRESS_END:
        raise ShapeError(
            f"{what} describes {size} elements of {itemsize} bytes spanning {nbytes} bytes "
            f"from {ptr:#x}: more than int64 byte counts or the 64-bit address space hold; "
            "the producer's shape or strides are broken"
        )
    return nbytes


class ForeignAllocation(Allocation):
    """Device memory another library owns; cuasync never frees it.

    ``owner`` is kept alive as long as the allocation; ``release()`` runs once, when
    the allocation goes away. ``producer`` is a cuasync stream that was made to wait
    for the owner's pending writes: it is recorded as the last write, so ops on other
    streams are ordered after it.
    """

    __slots__ = ("_release", "owner")  # (readonly: AllocationCore's)
    foreign = True

    def __init__(
        self,
        device: Device,
        ptr: int,
        nbytes: int,
        *,
        owner: Any,
        release: Callable[[], None] | None = None,
        readonly: bool = False,
        producer: Stream | None = None,
    ) -> None:
        if device._utility is None:
            device._utility_stream()  # now, not in a deleter: creating a stream may start a thread
        self.device = device
        self._pool = None
        self.ptr = ptr
        self.nbytes = nbytes
        self.owner = owner
        self.readonly = bool(readonly)
        self._release = release
        self._reads: dict[Stream, int] = {}
        self._write: tuple[Stream, int] | None = None
        if producer is None:
            return
        # (producer._next_seq(), inline)
        if LOCAL.active:  # (inside a ``then``: this thread holds the lock)
            producer._submitted += 1
            self._write = (producer, producer._submitted)
        else:
            with LOCK:
                producer._submitted += 1
                self._write = (producer, producer._submitted)

    def __repr__(self) -> str:
        return (
            f"<ForeignAllocation {self.nbytes} B at {self.ptr:#x} on device "
            f"{self.device.ordinal}, owned by {type(self.owner).__name__}>"
        )

    def __del__(self) -> None:
        release = getattr(self, "_release", None)
        self._release = None
        if release is None or sys.is_finalizing():
            return  # at exit the producer's memory goes away with the process
        try:
            release()
        except Exception as exc:
            report_once("cuasync.interop", "release foreign memory", exc)


def only_legacy_uses(alloc: Allocation, legacy: Stream) -> bool:
    """Whether no stream but ``legacy`` (its device's legacy default stream) may still be
    using ``alloc``: then a consumer there owes nothing (:func:`order_foreign_after` would
    do nothing). Read without the lock: a use another thread enqueues meanwhile is not
    ordered before the caller's anyway; a pending one answers False.

    >>> only_legacy_uses(t.allocation, legacy_stream(t.device))
    True
    """
    write, reads = alloc._write, alloc._reads
    if write is not None and write[0] is not legacy and write[0]._pending(write[1]):
        return False
    if not reads or (len(reads) == 1 and legacy in reads):
        return True
    # (ops' reads that completed: a snapshot, one C call, as another thread may add one)
    return all(s is legacy or not s._pending(q) for s, q in tuple(reads.items()))


def legacy_stream(device: Device) -> Stream:
    """The legacy default stream of ``device`` (:data:`LEGACY_STREAM`), one object per
    device: :func:`foreign_stream` for the handle DLPack and CuPy default to."""
    stream = device._legacy
    if stream is None:
        stream = device._legacy = Stream._new(LEGACY_STREAM, device, owned=False)
    return stream


def foreign_stream(handle: int, device: Device, owner: Any = None) -> Stream:
    """A :class:`Stream` for a foreign handle that cuasync neither owns nor destroys.

    A device's legacy default stream (:data:`LEGACY_STREAM`) is one object, made once:
    the backends read a default handle as the default stream of the device of the event
    recorded on it, or waited for. (A per-thread default stream is another stream on each
    thread: it gets an object each time.)
    """
    if handle == LEGACY_STREAM and owner is None:
        return legacy_stream(device)
    return Stream._new(handle, device, owned=False, owner=owner)


def _forget_legacy_streams() -> None:
    """A forked child makes its own legacy streams (``Device._legacy``): the parent's
    carry its sequence numbers and events."""
    for device in Device._instances.values():
        device._legacy = None


os.register_at_fork(after_in_child=_forget_legacy_streams)


def wait_for_foreign(stream: Stream, handle: int) -> None:
    """Make ``stream`` wait (on the device) for the work enqueued so far on ``handle``.

    Called under the execution lock. The event is one per device, made once and recorded
    again each time (a wait already enqueued keeps the record it was given, as the driver
    defines it): two driver calls per wait, no event made or destroyed. It is made on
    ``stream``'s device, where the default-stream handles 1 and 2 are looked up.
    """
    wait_for_foreign_handle(stream.device.ordinal, stream.handle, handle)


def wait_for_foreign_handle(ordinal: int, stream: int, handle: int) -> None:
    """:func:`wait_for_foreign` of the stream handle ``stream`` of device ``ordinal``
    (for work that has the handle alone: a library call's)."""
    backend = get_backend()
    event = _wait_events.get(ordinal)
    if event is None:
        event = _wait_events[ordinal] = backend.event_create(ordinal)
    backend.event_record(event, handle)
    backend.stream_wait_event(stream, event)


#: The event :func:`wait_for_foreign` records, per device ordinal (lives as long as the
#: process; a forked child makes its own).
_wait_events: dict[int, int] = {}
os.register_at_fork(after_in_child=_wait_events.clear)


def order_foreign_after(alloc: Allocation, handle: int) -> None:
    """Make the foreign stream ``handle`` wait for cuasync's pending uses of ``alloc``.

    Pending writes and reads both count: the consumer may write. The waits are events
    recorded on cuasync's streams; nothing blocks the host.
    """
    with submission_lock():
        uses = alloc._last_uses()
        if not uses:
            return
        # (a default handle is the default stream of the tensor's device: the backends
        # read it as that of the recorded event's device)
        consumer = foreign_stream(handle, alloc.device)
        for stream, seq in uses:
            consumer._order_after(stream, seq)


def order_free_after_foreign(alloc: Allocation, handle: int) -> None:
    """Make the eventual free of ``alloc`` wait for the work enqueued so far on ``handle``.

    The legacy default stream is recorded as a reader of ``alloc`` itself (it lives as
    long as the process): the free, and any later write, wait for its work then, and an
    export to that same stream waits for nothing. Another handle (a per-thread default
    stream) is waited for now by the device's utility stream, recorded as the reader:
    :class:`Allocation` frees after its pending reads.
    """
    if handle == LEGACY_STREAM:
        legacy = legacy_stream(alloc.device)
        if LOCAL.active:  # (inside a ``then``: this thread holds the lock)
            alloc.use(legacy, legacy._next_seq(), write=False)
        else:
            with LOCK:
                alloc.use(legacy, legacy._next_seq(), write=False)
        return
    utility = alloc.device._utility_stream()
    with submission_lock():
        wait_for_foreign(utility, handle)
        alloc.use(utility, utility._next_seq(), write=False)
