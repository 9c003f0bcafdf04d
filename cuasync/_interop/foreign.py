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

>>> alloc = ForeignAllocation(Device(0), ptr, nbytes, owner=producer, producer=stream)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from .._backends import get_backend
from .._backends.base import LEGACY_STREAM, PER_THREAD_STREAM
from .._core.context import LOCK, submitting
from .._core.device import Device, Stream
from .._core.memory import Allocation
from .._exceptions import report_once


@contextlib.contextmanager
def submission_lock() -> Iterator[None]:
    """The execution lock, unless this thread already holds it (inside a ``then``)."""
    if submitting():
        yield
        return
    with LOCK:
        yield


class ForeignAllocation(Allocation):
    """Device memory another library owns; cuasync never frees it.

    ``owner`` is kept alive as long as the allocation; ``release()`` runs once, when
    the allocation goes away. ``producer`` is a cuasync stream that was made to wait
    for the owner's pending writes: it is recorded as the last write, so ops on other
    streams are ordered after it.
    """

    __slots__ = ("_release", "owner", "readonly")

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
        self.readonly = readonly
        self._release = release
        self._reads: dict[Stream, int] = {}
        self._write: tuple[Stream, int] | None = None
        if producer is not None:
            with submission_lock():
                self._write = (producer, producer._next_seq())

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


def foreign_stream(handle: int, device: Device, owner: Any = None) -> Stream:
    """A :class:`Stream` for a foreign handle that cuasync neither owns nor destroys."""
    return Stream._new(handle, device, owned=False, owner=owner)


def wait_for_foreign(stream: Stream, handle: int) -> None:
    """Make ``stream`` wait (on the device) for the work enqueued so far on ``handle``.

    The event is created on ``stream``'s device first: that makes the device's context
    current, which is where the default-stream handles 1 and 2 are looked up.
    """
    backend = get_backend()
    event = backend.event_create(stream.device.ordinal)
    try:
        backend.event_record(event, handle)
        backend.stream_wait_event(stream.handle, event)
    finally:
        backend.event_destroy(event)  # the driver releases it once the wait is done


def order_foreign_after(alloc: Allocation, handle: int) -> None:
    """Make the foreign stream ``handle`` wait for cuasync's pending uses of ``alloc``.

    Pending writes and reads both count: the consumer may write. The waits are events
    recorded on cuasync's streams; nothing blocks the host.
    """
    with submission_lock():
        uses = alloc._last_uses()
        if not uses:
            return
        consumer = foreign_stream(handle, alloc.device)
        if handle in (LEGACY_STREAM, PER_THREAD_STREAM):
            # Make the device's context current: default handles are looked up there.
            get_backend().event_destroy(get_backend().event_create(alloc.device.ordinal))
        for stream, seq in uses:
            consumer._order_after(stream, seq)


def order_free_after_foreign(alloc: Allocation, handle: int) -> None:
    """Make the eventual free of ``alloc`` wait for the work enqueued so far on ``handle``.

    Recorded as a read of ``alloc`` by the device's utility stream, which waits for
    ``handle``: :class:`Allocation` frees after its pending reads.
    """
    utility = alloc.device._utility_stream()
    with submission_lock():
        wait_for_foreign(utility, handle)
        alloc.use(utility, utility._next_seq(), write=False)
