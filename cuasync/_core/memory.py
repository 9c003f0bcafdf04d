"""Device allocations: stream-ordered alloc/free and the access records that order streams.

An :class:`Allocation` remembers which stream last wrote it and which streams read it
since, each with that stream's execution sequence number. An execution on another
stream that conflicts (read after write, write after read, write after write) is made
to wait on an event of the earlier stream; once an earlier execution is known to have
completed, no wait is needed. The memory is freed stream-ordered after its last use,
when the last reference to the allocation goes away.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from .._backends import get_backend
from .._backends.base import LEGACY_STREAM
from .._exceptions import report_once, warn_leak
from .._native import PROCESS, AllocationCore
from ..errors import ArgumentError, OutOfMemoryError
from . import block_cache
from .device import Stream
from .pools import _selected
from .process_local import ProcessLocal

if TYPE_CHECKING:
    from .device import Device, Stream

log = logging.getLogger("cuasync.memory")


def _default_pool_alloc(device: Device, size: int, stream: Stream) -> int:
    """``size`` bytes from the default pool, ordered on ``stream``; out of memory, the
    block cache is freed and the allocation tried once more."""
    backend = get_backend()
    try:
        return backend.mem_alloc_async(size, stream.handle)
    except OutOfMemoryError:
        if not block_cache.flush(device):
            raise
    return backend.mem_alloc_async(size, stream.handle)


class Allocation(ProcessLocal, AllocationCore):
    """``nbytes`` of device memory on ``device`` at address ``ptr``."""

    # ptr, nbytes, device, _write, _reads, _pool, _class and readonly (whether cuasync ops
    # may only read it: memory a producer exported read-only) are the native base's
    # fields (``AllocationCore``: the native core reads them)
    __slots__ = ("__weakref__",)
    #: Whether another library allocated it (``ForeignAllocation``: adopted by DLPack or
    #: ``__cuda_array_interface__``).
    foreign = False

    def __init__(self, device: Device, nbytes: int, stream: Stream) -> None:
        if nbytes < 0:
            raise ArgumentError(f"nbytes must be >= 0, got {nbytes}")
        if device._utility is None:
            device._utility_stream()  # now, not in __del__: creating a stream may start a thread
        self.device = device
        selected = _selected.get()  # (current_pool(device), inline: every allocation)
        # held: the pool outlives its allocations
        pool = self._pool = None if selected is None else selected.get(device.ordinal)
        device._charge(nbytes)  # raises past Device.set_memory_limit, before the driver
        try:
            if pool is None:
                # small: rounded to its class, kept for reuse once freed (block_cache)
                size = nbytes if nbytes > 1 else 1
                cls = self._class = -1
                if size <= block_cache.SMALL_MAX:
                    cls = self._class = max((size - 1).bit_length(), block_cache.MIN_CLASS)
                    size = 1 << cls
                owned = cls >= 0 and stream.owned
                ptr = block_cache.take(device, stream, cls) if owned else 0
                self.ptr = ptr or _default_pool_alloc(device, size, stream)
            else:
                self._class = -1
                self.ptr = get_backend().pool_alloc_async(
                    max(nbytes, 1), pool.handle, stream.handle
                )
                pool._charge(nbytes)
        except BaseException:
            device._discharge(nbytes)
            raise
        self.nbytes = nbytes  # only once allocated: __del__ of a failed one subtracts nothing
        # The allocation itself is ordered on ``stream``: count it as a write there.
        self._write: tuple[Stream, int] | None = (stream, stream._submitted)
        self._reads: dict[Stream, int] = {}

    def __repr__(self) -> str:
        return f"<Allocation {self.nbytes} B at {self.ptr:#x} on device {self.device.ordinal}>"

    def use(self, stream: Stream, seq: int, write: bool) -> None:
        """Order ``stream`` after conflicting earlier uses, then record this use.

        Called only while enqueuing, under the execution lock, which serializes it.
        """
        last = self._write
        if last is not None and last[0] is not stream:
            stream._order_after(last[0], last[1])
        if write:
            if self._reads:
                for reader, reader_seq in self._reads.items():
                    if reader is not stream:
                        stream._order_after(reader, reader_seq)
                self._reads.clear()
            self._write = (stream, seq)
        else:
            self._reads[stream] = seq

    def _last_uses(self) -> list[tuple[Stream, int]]:
        uses = list(self._reads.items())
        if self._write is not None:
            uses.append(self._write)
        # Foreign streams are left out: their owner may have destroyed the handle already,
        # and work on them that used this allocation has completed (contexts retain it);
        # but not the legacy default stream, which lives as long as the process (a DLPack
        # consumer's reads there are recorded: _interop.foreign.order_free_after_foreign).
        return [
            (s, q)
            for s, q in uses
            if (s.owned or s.handle == LEGACY_STREAM) and s._alive[0] and s._pending(q)
        ]

    def _finalize(self) -> None:
        """The Python finalizer: what the native one (``AllocationCore``'s, which this
        class inherits: a small block back to the block cache on its stream, in C) does
        not take. The device's accounting discharged, the memory freed on the stream of
        its last use (or kept in the block cache there)."""
        try:
            device = self.device
            nbytes = self.nbytes  # AttributeError: the allocation failed, nothing to free
        except AttributeError:
            return
        try:
            device._discharge(nbytes)
            pool = self._pool
            if pool is not None:
                pool._discharge(nbytes)
            backend = get_backend()
            if backend.fault_seen and device.fault is not None:
                warn_leak(device, "its allocations")
                return
            if sys.is_finalizing():
                return  # the process is exiting: the driver releases everything
            write = self._write
            if not self._reads and write is not None and write[0].owned and write[0]._alive[0]:
                stream = write[0]  # (the common case: its last use, the write, is there)
            else:
                pending = self._last_uses()
                # (freed on a stream of cuasync's own: not on the legacy default stream a
                # DLPack consumer read it on, which it waits for instead)
                owned = [s for s, _ in pending if s.owned]
                if owned:
                    stream = owned[-1]
                elif write is not None and write[0].owned and write[0]._alive[0]:
                    stream = write[0]
                else:
                    stream = device._utility_stream()
                    if not stream._alive[0]:
                        # (destroyed: at exit, by the streams' finalizers' exit hook, before
                        # the interpreter finalizes; the driver releases everything)
                        return
                for other, seq in pending:
                    stream._order_after(other, seq)
            cls = self._class
            if (
                cls >= 0
                and stream.device is device  # (a peer's stream may free it: never reused there)
                and stream is not device._utility
                and block_cache.put(device, stream, cls, self.ptr)
            ):
                return  # kept for the next allocation of its size on that stream
            backend.mem_free_async(self.ptr, stream.handle)
            if pool is not None:
                pool._freed_on(stream.handle)
        except Exception as exc:
            # Shutdown or a fault raced with us: leaking is the safe choice.
            report_once("cuasync.memory", "free device memory", exc)


#: The Python finalizer (the native finalizer's fallback; tests call it directly).
_python_del = Allocation._finalize
# (what the native core calls into, handed over once: the finalizer's fallback, and the
# access records that order a stream after another's uses)
PROCESS.alloc_release = Allocation._finalize
PROCESS.alloc_use = Allocation.use
