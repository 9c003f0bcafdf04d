"""Pinned host blocks, reused by size class: the memory behind staging copies and
:class:`cuasync.PinnedPool`.

Allocating page-locked memory costs milliseconds for large sizes, so pooled blocks return
to a per-size-class free list when the last reference to them goes away (a numpy view of
a block keeps it alive). A block made without a pool owns its memory and frees it with
``host_free`` when collected. Copies between device and pageable memory are never
issued: they would block the calling thread (the event loop) until the stream drains.

The process's :func:`staging_pool` serves ``from_host``/``to_host`` staging and
:meth:`cuasync.PinnedPool.default` alike, so both draw on one set of pinned blocks.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from typing import Any, NamedTuple

import numpy as np

from ._backends import get_backend
from ._exceptions import report_once

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


class PinnedBlock:
    """``capacity`` bytes of pinned host memory at ``address``.

    Pooled blocks go back to their pool's free list when collected; a block without a
    pool frees its memory with the backend's ``host_free``.
    """

    __slots__ = ("__weakref__", "_pool", "address", "capacity", "size_class")

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
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(self.address)
        raw._owner = self
        return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dt).reshape(shape)

    def __del__(self) -> None:
        try:
            pool = self._pool
            if pool is None:
                get_backend().host_free(self.address)
            else:
                pool._give_back(self.address, self.size_class)
        except Exception as exc:  # shutdown: the process is releasing everything anyway
            report_once("cuasync.staging", "free a pinned host block", exc)


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

    def __init__(self) -> None:
        self._free: dict[int, list[int]] = {}
        self._chunks: dict[int, int] = {}  # chunk base address -> size class carved from it
        self._lock = threading.Lock()
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
        if not address:
            address = self._allocate(cls)
        return PinnedBlock(self, address, cls)

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
            self.cached_bytes += len(siblings) << cls
        return base

    def _give_back(self, address: int, cls: int) -> None:
        with self._lock:
            self._free.setdefault(cls, []).append(address)
            self.cached_bytes += 1 << cls

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(
                self.allocations,
                self.reuses,
                self.allocated_bytes,
                self.cached_bytes,
                self.allocated_bytes - self.cached_bytes,
            )

    def trim(self) -> int:
        """Free idle memory with ``host_free``: every idle large block, and every chunk
        whose blocks are all idle. Returns the bytes freed."""
        release: list[int] = []
        freed = 0
        with self._lock:
            for cls in list(self._free):
                addresses = self._free[cls]
                if cls >= _CHUNKED_BELOW:
                    release += addresses
                    freed += len(addresses) << cls
                    del self._free[cls]
                    continue
                idle = set(addresses)
                per_chunk = 1 << (_CHUNK_CLASS - cls)
                for base, chunk_cls in list(self._chunks.items()):
                    blocks = {base + (i << cls) for i in range(per_chunk)}
                    if chunk_cls == cls and blocks <= idle:
                        idle -= blocks
                        del self._chunks[base]
                        release.append(base)
                        freed += 1 << _CHUNK_CLASS
                self._free[cls] = [a for a in addresses if a in idle]
            self.cached_bytes -= freed
            self.allocated_bytes -= freed
        backend = get_backend()
        for address in release:
            backend.host_free(address)
        if freed:
            log.debug("trimmed %d B of idle pinned staging memory", freed)
        return freed


_pool: StagingPool | None = None
_pool_lock = threading.Lock()


def staging_pool() -> StagingPool:
    global _pool
    pool = _pool
    if pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = StagingPool()
            pool = _pool
    return pool
