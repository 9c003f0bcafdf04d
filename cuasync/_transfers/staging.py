"""Pinned host blocks, reused by size class: the memory behind staging copies and
:class:`cuasync.PinnedPool`.

Allocating page-locked memory costs milliseconds for large sizes, so pooled blocks return
to a per-size-class free list when the last reference to them goes away (a numpy view of
a block keeps it alive). A block made without a pool owns its memory and frees it with
``host_free``: when collected, through the background watcher (:data:`ORPHANS`: the free
waits for the device, so a destructor never makes it).
Copies between device and pageable memory are never issued: they would block the
calling thread (the event loop) until the stream drains.

The process's :func:`staging_pool` serves ``from_host``/``to_host`` staging and
:meth:`cuasync.PinnedPool.default` alike, so both draw on one set of pinned blocks.

Idle blocks are freed once they have been idle for ``idle_timeout`` seconds
(``CUASYNC_PINNED_IDLE_S``, default 60): the completion hub's background watcher runs
the sweep (freeing pinned memory may wait for the device, so never on an event loop),
woken at the earliest expiry. Only blocks in the free lists are freed, and a block goes
back to a free list only when nothing references it any more: a pending copy holds its
block until the copy has landed, so the device never touches freed memory.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._backends import get_backend
from .._config import CONFIG
from .._core.completion import get_hub, work_in_flight
from .._exceptions import report_once
from .._native import PROCESS, BlockCore

log = logging.getLogger("cuasync.staging")

_MIN_CLASS = 12  # 4 KiB
#: Blocks below 64 KiB are carved out of 1 MiB chunks: each page-locked allocation has a
#: cost in the driver and in the system's locked memory well above 4 KiB, so thousands of
#: small transfers in flight must not mean thousands of allocations (seen on the H200:
#: other processes could no longer create a CUDA context).
_CHUNKED_BELOW = 16
_CHUNK_CLASS = 20


def size_class(nbytes: int) -> int:
    return max(_MIN_CLASS, (max(nbytes, 1) - 1).bit_length())


class PinnedBlock(BlockCore):
    """``capacity`` bytes of pinned host memory at ``address``.

    Pooled blocks go back to their pool's free list when collected; a block without a
    pool frees its memory with the backend's ``host_free``.
    """

    # address, capacity, size_class and _pool: the native base's (``BlockCore``)
    __slots__ = ("__weakref__",)

    def __init__(
        self, pool: StagingPool | None, address: int, size_class: int, capacity: int | None = None
    ) -> None:
        self._pool = pool
        self.address = address
        self.size_class = size_class
        self.capacity = (1 << size_class) if capacity is None else capacity

    def array(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of the block's first bytes that keeps the block alive."""
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize  # (numpy.prod costs microseconds here)
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(self.address)
        raw._owner = self
        return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dt).reshape(shape)

    def scratch(self, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` as a uint8 view that does *not* keep the block alive
        (cached per pooled block: cheaper than :meth:`array`). Only for a copy made while
        the caller holds the block; never hand it out."""
        pool = self._pool
        if pool is None:
            return self.array(np.uint8, (nbytes,))
        view = pool._views.get(self.address)
        if view is None:
            view = pool._view(self.address, self.size_class)
        return view[:nbytes]

    def __del__(self) -> None:
        try:
            pool = self._pool
            if pool is None:
                ORPHANS.free(self.address)
            else:
                pool._give_back(self.address, self.size_class)
        except Exception as exc:  # shutdown: the process is releasing everything anyway
            report_once("cuasync.staging", "free a pinned host block", exc)


class _Orphans:
    """Blocks without a pool, collected: the background watcher frees them.

    ``cuMemFreeHost`` waits for the device: called from a destructor, it would hold
    whatever thread dropped the block (an event loop's) until the work queued before
    it landed (cuasync's or another library's), or for ever behind a host-side wait (a
    gate, a foreign event). So a destructor only hands the address over; the watcher
    frees it once cuasync has nothing in flight, or after :attr:`patience_s` anyway.
    ``cuasync.testing.settle()`` waits for these frees too.
    """

    #: How long frees may wait for a moment with nothing in flight before the watcher
    #: makes them anyway (waiting for the device there): a service with work always in
    #: flight would otherwise never give the memory back.
    patience_s = 5.0

    def __init__(self) -> None:
        self.addresses: list[int] = []
        self.since = 0.0  # when the oldest waiting free was handed over (monotonic)
        self.freeing = 0  # frees the watcher has taken and not finished
        self.lock = threading.Lock()
        self.watcher: Any = None  # the background watcher running our chore

    def watch(self) -> None:
        """Have the process's background watcher run :meth:`chore` (called when a block
        without a pool is made, never from a destructor: it may start the watcher)."""
        background = get_hub().background
        if self.watcher is background:
            return
        with self.lock:
            if self.watcher is background:
                return
            self.watcher = background
        background.add_chore(self.chore)

    def free(self, address: int) -> None:
        """(From a destructor.) Have the watcher free ``address``: never blocks."""
        watcher = self.watcher
        if watcher is None:  # (no block of ours was made in this process's hub)
            get_backend().host_free(address)
            return
        with self.lock:
            if not self.addresses:
                self.since = time.monotonic()
            self.addresses.append(address)
        watcher.kick()

    def pending(self) -> int:
        """How many frees wait for the watcher or are being made."""
        with self.lock:
            return len(self.addresses) + self.freeing

    def chore(self) -> float | None:
        """On the watcher's thread: free what waits, once nothing is in flight (or, past
        :attr:`patience_s`, anyway)."""
        with self.lock:
            if not self.addresses:
                return None
            waited = time.monotonic() - self.since
            if work_in_flight() and waited < self.patience_s:
                return min(_BUSY_RETRY_S, self.patience_s - waited)
            addresses, self.addresses = self.addresses, []
            self.freeing = len(addresses)
        backend = get_backend()
        try:
            for address in addresses:
                try:
                    backend.host_free(address)
                except Exception as exc:
                    report_once("cuasync.staging", "free a pinned host block", exc)
        finally:
            with self.lock:
                self.freeing = 0
        return None


#: The process's blocks without a pool waiting to be freed.
ORPHANS = _Orphans()


class PoolStats(NamedTuple):
    """Counters of a pinned pool.

    ``allocations``: blocks allocated from the driver; ``reuses``: acquisitions served
    from the free lists; ``bytes_allocated``: pinned bytes the pool owns (in use and
    idle); ``bytes_cached``: idle bytes waiting in the free lists; ``bytes_in_use``:
    the difference.
    """

    allocations: int
    reuses: int
    bytes_allocated: int
    bytes_cached: int
    bytes_in_use: int


class StagingPool:
    """Free lists of pinned blocks by power-of-two size class (4 KiB and up).

    Classes below 64 KiB are carved out of 1 MiB chunks; larger blocks are allocated one
    by one. Idle blocks wait in the free lists; :meth:`trim` gives idle memory back.
    """

    def __init__(
        self, idle_timeout: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._free: dict[int, list[int]] = {}
        self._chunks: dict[int, int] = {}  # chunk base address -> size class carved from it
        self._idle_since: dict[int, float] = {}  # idle block address -> when it went idle
        self._views: dict[int, np.ndarray] = {}  # block address -> uint8 view (scratch)
        self._lock = threading.Lock()
        self._clock = clock
        #: Seconds an idle block may wait before the background sweep frees it (None: never).
        self.idle_timeout = idle_timeout
        self._due: float | None = None  # the earliest time a sweep can free something
        self._watched = False  # whether the background watcher runs this pool's chore
        self.allocated_bytes = 0
        self.cached_bytes = 0
        self.allocations = 0
        self.reuses = 0

    def acquire(self, nbytes: int) -> PinnedBlock:
        cls = size_class(nbytes)
        with self._lock:
            free = self._free.get(cls)
            address = free.pop() if free else 0
            if address:
                self.reuses += 1
                self.cached_bytes -= 1 << cls
                del self._idle_since[address]
        if not address:
            address = self._allocate(cls)
        if self.idle_timeout is not None and not self._watched:
            self._watch()
        return PinnedBlock(self, address, cls)

    def _view(self, address: int, cls: int) -> np.ndarray:
        """A uint8 view of the whole block at ``address``, cached until trimmed."""
        raw: Any = (ctypes.c_uint8 * (1 << cls)).from_address(address)
        view = self._views[address] = np.frombuffer(raw, dtype=np.uint8)
        return view

    # -- trimming idle blocks ------------------------------------------------------------
    def set_idle_timeout(self, seconds: float | None) -> None:
        """Free blocks idle for ``seconds`` from now on (None: keep them until :meth:`trim`);
        the background sweep is rescheduled at once."""
        with self._lock:
            self.idle_timeout = seconds
            self._due = self._next_due() if seconds is not None else None
            watched = self._watched
        if not watched:
            if seconds is not None:
                self._watch()
        else:
            get_hub().background.kick()

    def _watch(self) -> None:
        """Have the background watcher run :meth:`_chore` (never from a destructor: it
        may start the hub's thread)."""

        with self._lock:
            if self._watched:
                return
            self._watched = True
        get_hub().background.add_chore(self._chore)

    def _chore(self) -> float | None:
        """On the watcher's thread: sweep when a block has expired; the seconds to the
        next expiry, or None while nothing is idle."""
        timeout, due = self.idle_timeout, self._due
        if timeout is None or due is None:
            return None
        now = self._clock()
        if now < due:
            return due - now

        if work_in_flight():
            # cuMemFreeHost waits for the device: with work in flight it would hold this
            # thread (every background completion with it) and the driver's context lock
            # until that work lands, and work held behind a host-side wait (a gate, a
            # foreign event) never would: deadlock. Sweep once the device is quiet.
            return min(timeout, _BUSY_RETRY_S) or _BUSY_RETRY_S
        self.trim(idle_for=timeout)
        due = self._due
        return None if due is None else max(due - self._clock(), 0.001)

    def _next_due(self) -> float | None:
        """(Under the lock.) When the oldest freeable idle memory expires, or None."""
        timeout = self.idle_timeout
        if timeout is None:
            return None
        oldest: float | None = None
        for cls, addresses in self._free.items():
            if cls >= _CHUNKED_BELOW:
                times = [self._idle_since[a] for a in addresses]
            else:
                times = [t for t in self._idle_chunks(cls, addresses).values()]
            if times and (oldest is None or min(times) < oldest):
                oldest = min(times)
        return None if oldest is None else oldest + timeout

    def _idle_chunks(self, cls: int, addresses: list[int]) -> dict[int, float]:
        """(Under the lock.) Chunks of class ``cls`` whose blocks are all idle, with the
        time the last of them went idle."""
        idle = set(addresses)
        per_chunk = 1 << (_CHUNK_CLASS - cls)
        out = {}
        for base, chunk_cls in self._chunks.items():
            if chunk_cls != cls:
                continue
            blocks = [base + (i << cls) for i in range(per_chunk)]
            if all(b in idle for b in blocks):
                out[base] = max(self._idle_since[b] for b in blocks)
        return out

    def _allocate(self, cls: int) -> int:
        """A new block of class ``cls`` (and, for small classes, its chunk's siblings)."""
        if cls >= _CHUNKED_BELOW:
            address = get_backend().host_alloc(1 << cls)
            with self._lock:
                self.allocations += 1
                self.allocated_bytes += 1 << cls
            return address
        base = get_backend().host_alloc(1 << _CHUNK_CLASS)
        count = 1 << (_CHUNK_CLASS - cls)
        with self._lock:
            self.allocations += 1
            self.allocated_bytes += 1 << _CHUNK_CLASS
            self._chunks[base] = cls
            siblings = [base + (i << cls) for i in range(count - 1, 0, -1)]
            self._free.setdefault(cls, []).extend(siblings)
            now = self._clock()
            self._idle_since.update(dict.fromkeys(siblings, now))
            self.cached_bytes += len(siblings) << cls
        return base

    def _give_back(self, address: int, cls: int) -> None:
        # Called from PinnedBlock.__del__: takes the lock, kicks a thread, frees nothing.
        with self._lock:
            self._free.setdefault(cls, []).append(address)
            now = self._idle_since[address] = self._clock()
            self.cached_bytes += 1 << cls
            wake = self._due is None and self.idle_timeout is not None
            if wake:
                self._due = now + self.idle_timeout  # type: ignore[operator]
        if wake and self._watched:
            hub = PROCESS.hub  # never creates the hub (and its thread) from here
            if hub is not None:
                hub.background.kick()

    def stats(self) -> PoolStats:
        keeper = _keeper(self)
        kept = 0 if keeper is None else keeper.staging_idle_bytes
        reused = 0 if keeper is None else keeper.staging_reuses
        with self._lock:
            cached = self.cached_bytes + kept
            return PoolStats(
                self.allocations,
                self.reuses + reused,
                self.allocated_bytes,
                cached,
                self.allocated_bytes - cached,
            )

    def trim(self, idle_for: float | None = None) -> int:
        """Free idle memory with ``host_free``: every idle large block, and every chunk
        whose blocks are all idle; with ``idle_for``, only what has been idle that many
        seconds. Returns the bytes freed."""
        keeper = _keeper(self)
        if keeper is not None:
            keeper.drop_staging()  # (its blocks go idle here now)
        release: list[int] = []
        freed = 0
        with self._lock:
            cutoff = None if idle_for is None else self._clock() - idle_for
            since = self._idle_since
            for cls in list(self._free):
                addresses = self._free[cls]
                if cls >= _CHUNKED_BELOW:
                    old = [a for a in addresses if cutoff is None or since[a] <= cutoff]
                    release += old
                    freed += len(old) << cls
                    gone = set(old)
                    self._free[cls] = [a for a in addresses if a not in gone]
                    for a in old:
                        del since[a]
                        self._views.pop(a, None)
                    continue
                per_chunk = 1 << (_CHUNK_CLASS - cls)
                gone = set()
                for base, last in self._idle_chunks(cls, addresses).items():
                    if cutoff is None or last <= cutoff:
                        del self._chunks[base]
                        release.append(base)
                        freed += 1 << _CHUNK_CLASS
                        gone.update(base + (i << cls) for i in range(per_chunk))
                self._free[cls] = [a for a in addresses if a not in gone]
                for a in gone:
                    del since[a]
                    self._views.pop(a, None)
            self._free = {cls: a for cls, a in self._free.items() if a}
            self.cached_bytes -= freed
            self.allocated_bytes -= freed
            self._due = self._next_due()
        backend = get_backend()
        for address in release:
            backend.host_free(address)
        if freed:
            log.debug("trimmed %d B of idle pinned staging memory", freed)
        return freed


_pool: StagingPool | None = None
#: How soon an idle sweep put off by work in flight looks again (seconds).
_BUSY_RETRY_S = 1.0


_pool_lock = threading.Lock()


def staging_pool() -> StagingPool:
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = StagingPool(CONFIG.pinned_idle_s)
            pool = _pool
    return pool


def _keeper(pool: StagingPool) -> Any:
    """The keeper of ``pool``'s idle blocks outside its free lists, or None: for the
    process's staging pool, the hub's native core (``hub.express``), which keeps a few
    for small uploads (taken with :data:`PROCESS.staging_acquire <_acquire_block>`). Its
    ``staging_idle_bytes`` count as cached, its ``staging_reuses`` among the reuses, and
    ``drop_staging()`` gives them back (before a trim)."""
    hub = PROCESS.hub
    return None if hub is None or pool is not _pool else hub.express


def _acquire_block(nbytes: int) -> PinnedBlock:
    """A pinned staging block of at least ``nbytes`` from the process's pool (what the
    native core's small uploads take when they keep none of the class)."""
    return staging_pool().acquire(nbytes)


PROCESS.staging_acquire = _acquire_block
