"""Pinned host blocks for staging copies, reused by size class.

Allocating page-locked memory costs milliseconds for large sizes, so blocks return to
a per-size-class free list when the last reference to them goes away. Copies between
device and pageable memory are never issued: they would block the calling thread
(the event loop) until the stream drains.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from .._backends import get_backend

_MIN_CLASS = 12  # 4 KiB


def size_class(nbytes: int) -> int:
    return max(_MIN_CLASS, (max(nbytes, 1) - 1).bit_length())


class PinnedBlock:
    """``capacity`` bytes of pinned host memory at ``address``; back to the pool on release."""

    __slots__ = ("__weakref__", "_pool", "address", "capacity", "size_class")

    def __init__(self, pool: StagingPool, address: int, size_class: int) -> None:
        self._pool = pool
        self.address = address
        self.size_class = size_class
        self.capacity = 1 << size_class

    def array(self, dtype: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A numpy view of the block's first bytes that keeps the block alive."""
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        raw = (ctypes.c_uint8 * max(nbytes, 1)).from_address(self.address)
        raw._owner = self  # type: ignore[attr-defined]
        return np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dt).reshape(shape)

    def __del__(self) -> None:
        try:
            self._pool._give_back(self.address, self.size_class)
        except Exception:
            pass


class StagingPool:
    """Free lists of pinned blocks by power-of-two size class."""

    def __init__(self) -> None:
        self._free: dict[int, list[int]] = {}
        self._lock = threading.Lock()
        self.allocated_bytes = 0

    def acquire(self, nbytes: int) -> PinnedBlock:
        cls = size_class(nbytes)
        with self._lock:
            free = self._free.get(cls)
            address = free.pop() if free else 0
        if not address:
            address = get_backend().host_alloc(1 << cls)
            self.allocated_bytes += 1 << cls
        return PinnedBlock(self, address, cls)

    def _give_back(self, address: int, cls: int) -> None:
        with self._lock:
            self._free.setdefault(cls, []).append(address)


_pool: StagingPool | None = None


def staging_pool() -> StagingPool:
    global _pool
    if _pool is None:
        _pool = StagingPool()
    return _pool
