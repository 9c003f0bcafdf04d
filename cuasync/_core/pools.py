"""Explicit memory pools: :class:`MemoryPool` and :func:`use_memory_pool`.

Every cuasync allocation is stream-ordered and comes from a pool: by default the
device's own (``cuDeviceGetDefaultMemPool``, which cuasync keeps all freed memory in). A
:class:`MemoryPool` is a separate one (``cuMemPoolCreate``) with its own release
threshold, statistics and trim, so a phase of a program (a request, a model) can be
measured and given back on its own. ``with use_memory_pool(pool):`` makes the ops
*executed* in the block allocate on ``pool.device`` from it; the selection is
context-local (a contextvar: each asyncio task and thread sees its own), like
:func:`cuasync.use_policy`.

A pool lives as long as anything allocated from it: every allocation holds a reference,
so the pool goes only once the last of them is gone. The driver's pool is then not
destroyed but recycled: ``cuMemPoolDestroy`` is documented to defer the release of
memory whose free is still pending, but on an H200 (driver 580.159, CUDA 13.0)
destroying a pool then makes a later driver call crash (SIGSEGV or SIGFPE in
``cuStreamSynchronize``, ``cuCtxSynchronize``, ``cuMemAllocFromPoolAsync``;
``tools/probes/pool_destroy.py``). Destroyed on the thread that freed, once an event
after the frees had completed, it did not crash in 4000 tries; destroyed that way by
cuasync's background thread while the main thread allocated from other pools, it did.
So the driver's pools are never destroyed before the process exits: each free records
an event; a dropped pool waits in
the :class:`_Graveyard` until they have completed (the background watcher looks,
without blocking), is then trimmed to nothing and handed to the next
:class:`MemoryPool` of its device. The process holds at most as many driver pools as it
ever had alive at once; the spares hold no memory.
"""

from __future__ import annotations

import contextvars
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._backends import get_backend
from .._exceptions import report_once
from .._native import PROCESS
from ..errors import ArgumentError
from .completion import get_hub
from .device import Device, MemoryStats, _check_nbytes, get_default_device

__all__ = ["MemoryPool", "current_pool", "use_memory_pool"]

_UINT64_MAX = (1 << 64) - 1

#: ``{ordinal: pool}`` selected by :func:`use_memory_pool` in this context.
_selected: contextvars.ContextVar[dict[int, MemoryPool] | None] = contextvars.ContextVar(
    "cuasync_memory_pool", default=None
)


class MemoryPool:
    """A stream-ordered memory pool of one device, apart from the device's default pool.

    ``release_threshold`` is how many idle bytes (freed, not in use) the pool keeps
    reserved across synchronizations for reuse: None keeps all of them, as the default
    pool does in cuasync, 0 gives them back at every synchronization. Allocations
    made inside :func:`use_memory_pool` come from it; :meth:`stats` and :meth:`trim`
    are :meth:`Device.memory_stats` and :meth:`Device.trim_pool` for this pool alone.
    ``device`` is its device and ``handle`` the driver's ``CUmemoryPool``.

    >>> pool = cuasync.lowlevel.MemoryPool(0, release_threshold=64 << 20)
    >>> with cuasync.lowlevel.use_memory_pool(pool):
    ...     x = await cuasync.zeros(1 << 20)
    >>> pool.stats().live_bytes
    4194304
    """

    def __init__(self, device: int | Device | None = None, *, release_threshold: int | None = None):
        self.device = get_default_device() if device is None else Device(device)
        threshold = _threshold(release_threshold)
        self._threshold = release_threshold
        self._lock = threading.RLock()  # reentrant: finalizers of its allocations take it
        self._used = self._peak = self._count = 0
        self.device._utility_stream()  # now, not in a finalizer (it may start a thread)
        #: An event per stream its memory was freed on, recorded after the last free.
        self._frees: dict[int, int] = {}
        _GRAVEYARD.watch()  # now, not in the finalizer (it may start the watcher)
        #: The driver's ``CUmemoryPool`` handle (an emulator handle on the emulator).
        self.handle: int = _GRAVEYARD.reuse(self.device.ordinal, threshold)

    def __repr__(self) -> str:
        return (
            f"<cuasync.lowlevel.MemoryPool on device {self.device.ordinal}, "
            f"release_threshold={self._threshold}>"
        )

    @property
    def release_threshold(self) -> int | None:
        """Idle bytes kept reserved across synchronizations; None keeps all. Settable.

        >>> pool.release_threshold = 0   # give idle memory back at every synchronization
        """
        return self._threshold

    @release_threshold.setter
    def release_threshold(self, nbytes: int | None) -> None:
        get_backend().pool_set_release_threshold(self.handle, _threshold(nbytes))
        self._threshold = nbytes

    def stats(self) -> MemoryStats:
        """This pool's memory as :meth:`Device.memory_stats` gives the device's.

        ``pool_reserved``/``pool_used`` are this pool's; ``live_bytes``,
        ``peak_live_bytes`` and ``live_allocations`` count cuasync's live allocations
        from it; ``driver_free``/``driver_total`` are the device's; ``limit`` is the
        device's :meth:`Device.set_memory_limit` cap, which pool allocations count against.

        >>> s = pool.stats()
        >>> s.pool_reserved - s.pool_used   # idle memory that trim() would give back
        """
        backend = get_backend()
        free, total = backend.mem_get_info(self.device.ordinal)
        reserved, used = backend.pool_usage(self.handle)
        with self._lock:
            live, peak, count = self._used, self._peak, self._count
        return MemoryStats(free, total, reserved, used, live, peak, count, self.device._limit)

    def reset_peak_memory(self) -> None:
        """Restart ``stats().peak_live_bytes`` from the current live bytes.

        >>> pool.reset_peak_memory()
        """
        with self._lock:
            self._peak = self._used

    def trim(self, keep_bytes: int = 0) -> int:
        """Give idle memory back to the device, keeping at most ``keep_bytes`` reserved
        (``cuMemPoolTrimTo``); returns the bytes released. Memory in use stays.

        >>> pool.trim()
        """
        keep = _check_nbytes(keep_bytes, "keep_bytes")
        backend = get_backend()
        before = backend.pool_usage(self.handle)[0]
        backend.pool_trim(self.handle, keep)
        return max(0, before - backend.pool_usage(self.handle)[0])

    def _charge(self, nbytes: int) -> None:
        with self._lock:
            self._used += nbytes
            self._count += 1
            self._peak = max(self._peak, self._used)

    def _discharge(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes
            self._count -= 1

    def _freed_on(self, stream: int) -> None:
        """An allocation's free was enqueued on ``stream`` (a finalizer calls this): the
        driver's pool must outlive it (see the module's docs)."""
        backend = get_backend()
        with self._lock:
            event = self._frees.get(stream)
            if event is None:
                event = self._frees[stream] = backend.event_create(self.device.ordinal)
            backend.event_record(event, stream)

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle is None or sys.is_finalizing():
            return  # never created, or the process is exiting and the driver releases it
        if self.device.fault is not None:
            return  # a faulted context may still use it: leaked, as its allocations are
        _GRAVEYARD.bury(handle, list(getattr(self, "_frees", {}).values()))


class _Graveyard:
    """Driver pools whose Python object is gone: recycled once their frees have run.

    ``bury`` is called by finalizers (no blocking, no thread started); the background
    watcher's chore queries the events, trims what is free to go and keeps it for
    :meth:`reuse`.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # reentrant: finalizers may bury inside its sections
        self._dead: list[tuple[int, list[int]]] = []
        self._spare: dict[int, list[int]] = {}  # ordinal -> trimmed pools
        self._ordinals: dict[int, int] = {}  # pool -> ordinal
        self._watched = False

    def __len__(self) -> int:
        return len(self._dead)

    def watch(self) -> None:
        """Register the chore (once; from a constructor: it may start the watcher)."""
        if not self._watched:
            self._watched = True
            get_hub().background.add_chore(self._chore)

    def reuse(self, ordinal: int, threshold: int) -> int:
        """A spare pool of device ``ordinal`` with ``threshold`` set, else a new one."""
        backend = get_backend()
        with self._lock:
            spare = self._spare.get(ordinal)
            pool = spare.pop() if spare else None
        if pool is None:
            pool = backend.pool_create(ordinal, threshold)
            with self._lock:
                self._ordinals[pool] = ordinal
        else:
            backend.pool_set_release_threshold(pool, threshold)
        return pool

    def bury(self, pool: int, events: list[int]) -> None:
        with self._lock:
            self._dead.append((pool, events))
        self._chore_soon()

    def _chore_soon(self) -> None:
        hub = PROCESS.hub
        if hub is not None:
            hub.background.kick()

    def _chore(self) -> float | None:
        """On the watcher's thread: destroy the pools whose frees have all run; the
        seconds until the next look, or None when none is left. (Event queries never
        block: the lock is held throughout.)"""
        backend = get_backend()
        with self._lock:
            waiting = []
            for pool, events in self._dead:
                try:
                    if all(backend.event_query(e) for e in events):
                        for e in events:
                            backend.event_destroy(e)
                        backend.pool_trim(pool, 0)
                        self._spare.setdefault(self._ordinals[pool], []).append(pool)
                        continue
                except Exception as exc:  # a fault: the pool is leaked, as its memory is
                    report_once("cuasync.memory", "recycle a memory pool", exc)
                    continue
                waiting.append((pool, events))
            self._dead[:] = waiting
            return 0.01 if waiting else None


_GRAVEYARD = _Graveyard()


def _threshold(nbytes: int | None) -> int:
    return _UINT64_MAX if nbytes is None else _check_nbytes(nbytes, "release_threshold")


@contextmanager
def use_memory_pool(pool: MemoryPool) -> Iterator[MemoryPool]:
    """Allocate from ``pool`` what ops executed in this block allocate on its device.

    Context-local (safe across asyncio tasks and threads), and only for ``pool.device``:
    allocations on other devices keep their own selection. Nest one block per device to
    use pools of several. What counts is where the op is *executed* (awaited,
    submitted), not where it was built.

    >>> pool = cuasync.lowlevel.MemoryPool(0)
    >>> with cuasync.lowlevel.use_memory_pool(pool):
    ...     y = await (x * 2)          # y's memory comes from pool
    """
    if not isinstance(pool, MemoryPool):
        raise ArgumentError(
            f"pool must be a cuasync.lowlevel.MemoryPool, got {type(pool).__name__}; "
            "create one with cuasync.lowlevel.MemoryPool(device)"
        )
    selected = dict(_selected.get() or {})
    selected[pool.device.ordinal] = pool
    token = _selected.set(selected)
    try:
        yield pool
    finally:
        _selected.reset(token)


def current_pool(device: Device) -> MemoryPool | None:
    """The pool :func:`use_memory_pool` selected for ``device`` here; None: the default."""
    selected = _selected.get()
    return None if selected is None else selected.get(device.ordinal)


#: (the selected pools' ContextVar, which a small upload's native allocation reads)
PROCESS.selected_pools = _selected
