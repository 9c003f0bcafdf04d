"""Small device blocks kept for reuse on the stream that freed them.

A stream-ordered allocation and its free cost two driver calls (about 6 µs on the
H200 from Python), more than a small op's own work. :class:`Allocation` therefore
rounds requests of at most :data:`SMALL_MAX` bytes from the device's default pool up
to a power of two and, when the last one is dropped, keeps the block here under
``(stream handle, size class)`` instead of freeing it. The next allocation of that class
on the same stream takes it back with no driver call: everything that used the block
before is ordered before it on that stream (a free first orders its stream after the
other streams that still read it, as a free to the driver does).

Bounds: :data:`DEVICE_MAX` bytes per device, and :data:`PER_KEY` blocks and
:data:`KEY_MAX` bytes per stream and class (in force: ``CACHE.device_max``,
``CACHE.per_key`` and ``CACHE.key_max``); beyond them a block is freed as before. The
cache's state is :data:`CACHE`, a native ``BlockCacheCore``, whose fields
``Allocation``'s native fast paths read and write under its lock as this module does.
Cached blocks are freed to the driver (stream-ordered, on their stream) when their
stream is destroyed, when an allocation runs out of memory (then retried), by
:meth:`Device.trim_pool`, and never reused after a fault; a forked child forgets them.
They are not live allocations: ``memory_info()``, ``live_bytes`` and memory limits
leave them out, while the pool counts them as used.

Classes are ``Allocation``'s: a request of ``n`` bytes gets ``1 << cls`` with ``cls`` the
bit length of ``n - 1``, at least :data:`MIN_CLASS`.

>>> block_cache.take(device, stream, cls)      # a pointer, or 0
>>> block_cache.put(device, stream, cls, ptr)  # False: free it yourself
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

from .._backends import get_backend
from .._native import PROCESS, BlockCacheCore

if TYPE_CHECKING:
    from .device import Device, Stream

__all__ = [
    "CACHE",
    "DEVICE_MAX",
    "KEY_MAX",
    "MIN_CLASS",
    "PER_KEY",
    "SMALL_MAX",
    "drop_stream",
    "flush",
    "put",
    "take",
]

#: Allocations of at most this many bytes are rounded up to a power of two and reused
#: (1 MiB, as torch's caching allocator's small pool; 64 KiB until session 52: a 256 x 256
#: float32 product's result, 256 KiB, paid a stream-ordered allocation and free of about
#: 7 us of host time on every call).
SMALL_MAX = 1024 * 1024
#: The smallest class: 512 B.
MIN_CLASS = 9
#: Cached bytes per device, at most.
DEVICE_MAX = 32 * 1024 * 1024
#: Cached blocks per stream and size class, at most...
PER_KEY = 256
#: ...and cached bytes per stream and size class (a quarter of :data:`DEVICE_MAX`: one
#: stream's blocks of one size never take the whole cache; 1 MiB blocks, 8 of them).
KEY_MAX = DEVICE_MAX // 4

#: The cache's state: ``lock``, reentrant (a collection inside a critical section may
#: finalize a stream, whose finalizer drops its blocks, drop_stream, on this same
#: thread); ``blocks``, (stream handle, size class) -> pointers; ``bytes``, per device
#: ordinal, the cached bytes; ``taking``, True while _take_all runs (a block freed inside
#: it, by a collection on this thread, is not kept, else it could land under a stream
#: whose owner entry is being removed); the bounds.
CACHE = BlockCacheCore()


CACHE.lock = threading.RLock()
CACHE.blocks, CACHE.bytes, CACHE.taking = {}, {}, False
CACHE.device_max, CACHE.per_key, CACHE.min_class = DEVICE_MAX, PER_KEY, MIN_CLASS
CACHE.key_max = KEY_MAX
PROCESS.block_cache = CACHE  # (what Allocation's native finalizer keeps blocks in)
#: stream handle -> (device ordinal, weak reference to the Stream): to free a stream's
#: blocks when it goes, and to keep it alive while :func:`flush` frees them on it.
_owners: dict[int, tuple[int, weakref.ref[Stream]]] = {}


def take(device: Device, stream: Stream, cls: int) -> int:
    """A cached block of class ``cls`` last used on ``stream``, or 0."""
    blocks = CACHE.blocks
    if not blocks:
        return 0
    key = (stream.handle, cls)
    with CACHE.lock:
        free = blocks.get(key)
        if not free:
            return 0
        CACHE.bytes[device.ordinal] -= 1 << cls
        return free.pop()


def put(device: Device, stream: Stream, cls: int, ptr: int) -> bool:
    """Keep ``ptr`` (class ``cls``, its last use on ``stream``) for reuse; False where it
    cannot be (a bound reached, or the cache busy: called from ``__del__``, it never
    waits for the lock), and the caller frees it."""
    key = (stream.handle, cls)
    lock = CACHE.lock
    if not lock.acquire(blocking=False):
        return False
    try:
        if CACHE.taking:
            return False
        blocks, counted = CACHE.blocks, CACHE.bytes
        held = counted.get(device.ordinal, 0)
        size = 1 << cls
        free = blocks.get(key)
        kept = 0 if free is None else len(free)
        if (
            held + size > CACHE.device_max
            or kept >= CACHE.per_key
            or (kept + 1) * size > CACHE.key_max
        ):
            return False
        if free is None:
            free = blocks[key] = []
            _owners[key[0]] = (device.ordinal, weakref.ref(stream))
        free.append(ptr)
        counted[device.ordinal] = held + size
        return True
    finally:
        lock.release()


def drop_stream(stream: int) -> None:
    """Free the blocks cached on the stream of handle ``stream`` (its finalizer: it is
    destroyed right after), on it."""
    with CACHE.lock:
        taken = _take_all({stream}) if stream in _owners else []
    _free(taken)


def flush(device: Device) -> int:
    """Free every block cached for ``device`` (each on its stream); the bytes freed.

    The streams are held while their blocks are freed on them, so that none is destroyed
    meanwhile; a stream already being finalized is left to its finalizer."""
    with CACHE.lock:
        held = []
        for ordinal, ref in list(_owners.values()):
            stream = ref() if ordinal == device.ordinal else None
            if stream is not None:
                held.append(stream)
        taken = _take_all({s.handle for s in held})
    freed = _free(taken)
    del held  # (may finalize a stream: its blocks are gone already)
    return freed


def _take_all(streams: set[int]) -> list[tuple[int, int, int]]:
    """Remove the blocks cached on ``streams``: ``(stream, class, pointer)`` (lock held;
    a finalizer may run inside and drop some first, and nothing is kept meanwhile)."""
    out: list[tuple[int, int, int]] = []
    blocks, counted = CACHE.blocks, CACHE.bytes
    outer, CACHE.taking = CACHE.taking, True
    try:
        for key in [k for k in blocks if k[0] in streams]:
            stream, cls = key
            ptrs = blocks.pop(key, None)
            if ptrs is None:
                continue  # (dropped by a finalizer inside)
            owner = _owners.get(stream)
            if owner is not None:
                counted[owner[0]] -= len(ptrs) << cls
            out += [(stream, cls, p) for p in ptrs]
        for stream in streams:
            _owners.pop(stream, None)
    finally:
        CACHE.taking = outer
    return out


def _free(taken: list[tuple[int, int, int]]) -> int:
    backend = get_backend()
    freed = 0
    for stream, cls, ptr in taken:
        backend.mem_free_async(ptr, stream)
        freed += 1 << cls
    return freed


def _after_fork_in_child() -> None:
    CACHE.lock = threading.RLock()
    CACHE.blocks, CACHE.bytes, CACHE.taking = {}, {}, False
    _owners.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
