"""Page-locked host buffers and the pool that reuses them.

A :class:`PinnedHostBuffer` is host memory the GPU can copy from and to without the
host waiting (``cuMemHostAlloc``). Allocating it costs milliseconds for large sizes, so
take buffers from a :class:`PinnedPool` (``PinnedPool.default()`` is the process's) and
give them back; never allocate one per transfer.

While a pending transfer (:func:`cuasync.upload_pending`, :func:`cuasync.download_pending`)
uses a buffer, the buffer is *in flight*: taking a view with :meth:`~PinnedHostBuffer.array`
or submitting it again raises :class:`~cuasync.errors.BusyResourceError`, naming the
transfer to wait for.

>>> pool = cuasync.PinnedPool.default()
>>> with pool.acquire(4096, "float32") as buf:
...     buf.array()[:] = 1.0
...     t, buf = await cuasync.upload_pending(buf, tensor)
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._backends import get_backend
from .._config import CONFIG
from .._core.process_local import ProcessLocal
from .._dtypes import DTypeLike, as_dtype, dtype_name
from .._tensor import check_shape, is_size
from ..errors import ArgumentError, BusyResourceError, OutOfMemoryError, ShapeError
from .staging import ORPHANS, PinnedBlock, PoolStats, StagingPool, size_class, staging_pool

if TYPE_CHECKING:
    from types import TracebackType

    from .._core.completion import Completion
    from .._core.device import Stream
    from .._ops.tensorop import ShapeLike

__all__ = ["PinnedHostBuffer", "PinnedPool", "PoolStats"]


class _Flight:
    """The mark a pending transfer leaves on the buffer it uses.

    ``comp`` is set once the submission returned; until then (and forever, if the
    submission failed after its copy was enqueued) the buffer counts as in flight.
    It holds no reference to the transfer handle, so dropping the handle still lets the
    handle's finalizer hand its completion to the background watcher.
    """

    __slots__ = ("comp", "error", "kind", "stream")

    def __init__(self, kind: str, stream: Stream) -> None:
        self.kind = kind
        self.stream = stream
        self.comp: Completion | None = None
        self.error: BaseException | None = None

    def pending(self) -> bool:
        """Whether the device may still touch the buffer (never blocks)."""
        comp = self.comp
        if comp is None:
            return True
        return not comp.poll()  # finishes it here if the copy has landed

    def describe(self) -> str:
        stream = self.stream
        where = f"{self.kind} on stream {stream.handle:#x} (device {stream.device.ordinal})"
        if self.comp is None and self.error is not None:
            return (
                f"{where}, whose submission failed part-way ({self.error}); the copy may still "
                "be running, so the buffer cannot be used again: release it and acquire another"
            )
        return (
            f"{where} is using it; await the PendingTransfer that {self.kind}() returned (or "
            "call its .wait(); .is_ready() tells without waiting)"
        )


def _check_nbytes(nbytes: Any) -> int:
    if not is_size(nbytes) or nbytes < 0:
        raise ArgumentError(f"nbytes must be an int >= 0, got {type(nbytes).__name__} {nbytes!r}")
    if nbytes >= 1 << 64:  # the driver's size_t could not even express it
        raise OutOfMemoryError(int(nbytes), "pinned host memory")
    return int(nbytes)


def _check_dtype(dtype: DTypeLike, nbytes: int) -> np.dtype[Any] | None:
    if dtype is None:
        return None
    dt = as_dtype(dtype)
    if nbytes % dt.itemsize:
        raise ShapeError(
            f"nbytes={nbytes} is not a whole number of {dtype_name(dt)} elements "
            f"(itemsize {dt.itemsize})"
        )
    return dt


class PinnedHostBuffer(ProcessLocal):
    """``nbytes`` of page-locked host memory, optionally typed with ``dtype``.

    Made directly, it owns its memory, which cuasync's background watcher frees
    (``host_free``) once the buffer is collected or released and nothing of cuasync's is
    in flight (the free waits for the device: it must not hold an event loop;
    ``cuasync.testing.settle()`` waits for it); taken from a :class:`PinnedPool`, the
    memory goes back to the pool instead. Either way the
    memory is kept while a numpy view of it or an in-flight transfer still uses it.
    ``release()`` (or leaving a ``with`` block) gives it back as soon as nothing uses it
    and makes the buffer unusable.

    >>> buf = cuasync.PinnedHostBuffer(1 << 20, "float32")
    >>> buf.array()[:] = np.arange(1 << 18)           # a numpy view of the pinned memory
    >>> t, buf = await cuasync.upload_pending(buf, tensor)
    """

    _local_hint = "send a numpy copy of its contents (buf.array().copy())"

    __slots__ = ("__weakref__", "_block", "_busy", "_pool", "dtype", "nbytes")

    nbytes: int
    #: The element type the buffer holds, or None for raw bytes (any dtype may use it).
    dtype: np.dtype[Any] | None

    def __init__(self, nbytes: int, dtype: DTypeLike = None) -> None:
        n = _check_nbytes(nbytes)
        dt = _check_dtype(dtype, n)
        ORPHANS.watch()  # (its free may be left to the background watcher)
        address = get_backend().host_alloc(max(n, 1))
        self._setup(PinnedBlock(None, address, size_class(n), max(n, 1)), n, dt, None)

    def _setup(
        self, block: PinnedBlock, nbytes: int, dtype: np.dtype[Any] | None, pool: PinnedPool | None
    ) -> None:
        self._block: PinnedBlock | None = block
        self._busy: _Flight | None = None
        self._pool = pool
        self.nbytes = nbytes
        self.dtype = dtype

    @classmethod
    def _pooled(
        cls, block: PinnedBlock, nbytes: int, dtype: np.dtype[Any] | None, pool: PinnedPool
    ) -> PinnedHostBuffer:
        self = cls.__new__(cls)
        self._setup(block, nbytes, dtype, pool)
        return self

    # -- state -----------------------------------------------------------------------------
    @property
    def address(self) -> int:
        """The host address of the first byte."""
        return self._live("reading .address").address

    @property
    def pool(self) -> PinnedPool | None:
        """The pool the memory goes back to, or None for a buffer that owns its memory."""
        return self._pool

    @property
    def released(self) -> bool:
        """Whether :meth:`release` was called; a released buffer cannot be used."""
        return self._block is None

    @property
    def in_flight(self) -> bool:
        """Whether a pending transfer may still be using the buffer (never blocks)."""
        flight = self._busy
        if flight is None:
            return False
        if flight.pending():
            return True
        if self._busy is flight:
            self._busy = None
        return False

    def _live(self, what: str) -> PinnedBlock:
        """The memory, for ``what``; raises if the buffer is in flight or released."""
        flight = self._busy
        if flight is not None:
            if flight.pending():
                raise BusyResourceError(
                    f"{self!r} is in flight, so it cannot be used for {what}: "
                    f"{flight.describe()} before using the buffer again"
                )
            if self._busy is flight:
                self._busy = None
        block = self._block
        if block is None:
            raise ArgumentError(
                f"this PinnedHostBuffer was released, so it cannot be used for {what}; "
                "acquire another one from the pool"
            )
        return block

    # -- access ------------------------------------------------------------------------------
    def array(self, dtype: DTypeLike = None, shape: ShapeLike | None = None) -> np.ndarray:
        """A writable numpy view of the whole buffer.

        ``dtype`` defaults to the buffer's dtype (``uint8`` for raw buffers) and ``shape``
        to one dimension; ``shape`` and ``dtype`` together must cover exactly ``nbytes``.
        The view keeps the memory alive. Raises :class:`~cuasync.errors.BusyResourceError`
        while a transfer is in flight. A view taken before submitting a transfer is not
        guarded: do not touch it until the transfer is done.

        >>> buf.array("float32", (256, 4))[0] = 1.0
        """
        block = self._block
        if self._busy is not None or block is None:
            block = self._live("taking a view with .array()")
        if dtype is None:
            dt = self.dtype if self.dtype is not None else np.dtype(np.uint8)
        else:
            dt = as_dtype(dtype)
        nbytes = self.nbytes
        if shape is None:
            if nbytes % dt.itemsize:
                raise ShapeError(
                    f"the buffer's {nbytes} bytes are not a whole number of {dtype_name(dt)} "
                    f"elements (itemsize {dt.itemsize})"
                )
            dims: tuple[int, ...] = (nbytes // dt.itemsize,)
        else:
            dims = check_shape(shape)
            need = math.prod(dims) * dt.itemsize
            if need != nbytes:
                raise ShapeError(
                    f"shape={dims} of {dtype_name(dt)} covers {need} bytes but the buffer holds "
                    f"{nbytes}; the view must cover the whole buffer"
                )
        return block.array(dt, dims)

    def release(self) -> None:
        """Give the memory back (to the pool, or to the driver) once nothing uses it.

        Views taken with :meth:`array` and an in-flight transfer keep the memory until
        they are gone; the buffer itself is unusable afterwards. Idempotent.
        """
        self._block = None

    def __enter__(self) -> PinnedHostBuffer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        block = self._block
        kind = f" {dtype_name(self.dtype)}" if self.dtype is not None else ""
        where = f"at {block.address:#x}" if block is not None else "released"
        return f"<cuasync.PinnedHostBuffer {self.nbytes} B{kind} {where}>"


#: ``PinnedPool(idle_timeout=...)``'s default: ``CUASYNC_PINNED_IDLE_S``.
FROM_ENV: Any = "CUASYNC_PINNED_IDLE_S"


def _check_timeout(seconds: Any) -> float | None:
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise ArgumentError(
            f"idle_timeout must be a number of seconds or None, got {type(seconds).__name__}"
        )
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ArgumentError(f"idle_timeout must be a finite number of seconds >= 0, got {seconds}")
    return float(seconds)


class PinnedPool(ProcessLocal):
    """Reuses pinned host buffers by power-of-two size class (4 KiB and up).

    ``acquire(n)`` hands out a :class:`PinnedHostBuffer` of ``n`` bytes backed by a
    block of the next size class; the block returns to the pool when the buffer is
    released, leaves its ``with`` block, or is collected (and no view or transfer uses
    it any more). ``PinnedPool.default()`` is shared by the whole process, including the
    staging that ``from_host``/``to_host`` do.

    Blocks idle for ``idle_timeout`` seconds are freed by cuasync's background thread
    (default: ``CUASYNC_PINNED_IDLE_S``, 60; None keeps them until :meth:`trim`), so a
    burst's high-water mark does not stay pinned forever. ``clock`` (seconds, monotonic)
    is for tests.

    >>> pool = cuasync.PinnedPool.default()
    >>> with pool.acquire(1 << 20) as buf: ...
    >>> pool.stats().reuses
    >>> quiet = cuasync.PinnedPool(idle_timeout=5.0)
    """

    _default: PinnedPool | None = None
    _default_lock = threading.Lock()

    def __init__(
        self, idle_timeout: float | None = FROM_ENV, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        timeout = CONFIG.pinned_idle_s if idle_timeout is FROM_ENV else _check_timeout(idle_timeout)
        if not callable(clock):
            raise ArgumentError(f"clock must be callable, got {type(clock).__name__}")
        self._blocks = StagingPool(timeout, clock)

    @classmethod
    def default(cls) -> PinnedPool:
        """The process's pool (it also serves ``from_host``/``to_host`` staging)."""
        pool = cls._default
        if pool is None:
            with cls._default_lock:
                pool = cls._default
                if pool is None:
                    pool = cls.__new__(cls)
                    pool._blocks = staging_pool()
                    cls._default = pool
        return pool

    def acquire(self, nbytes: int, dtype: DTypeLike = None) -> PinnedHostBuffer:
        """A buffer of ``nbytes`` (optionally typed), reusing an idle block if there is one."""
        n = _check_nbytes(nbytes)
        dt = _check_dtype(dtype, n) if dtype is not None else None
        return PinnedHostBuffer._pooled(self._blocks.acquire(n), n, dt, self)

    def stats(self) -> PoolStats:
        """``(allocations, reuses, bytes_allocated, bytes_cached, bytes_in_use)``."""
        return self._blocks.stats()

    def trim(self, idle_for: float | None = None) -> int:
        """Free idle blocks (``host_free``): all, or those idle for at least ``idle_for``
        seconds. Returns the number of bytes freed. Blocks in use, viewed or in flight
        are never freed.

        >>> pool.trim()                 # everything idle, now
        >>> pool.trim(idle_for=30.0)    # what the background sweep would free at 30 s
        """
        seconds = None if idle_for is None else _check_timeout(idle_for)
        return self._blocks.trim(seconds)

    @property
    def idle_timeout(self) -> float | None:
        """Seconds an idle block waits before it is freed in the background (None: never).

        >>> cuasync.PinnedPool.default().idle_timeout = 10.0
        """
        return self._blocks.idle_timeout

    @idle_timeout.setter
    def idle_timeout(self, seconds: float | None) -> None:
        self._blocks.set_idle_timeout(_check_timeout(seconds))

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"<cuasync.PinnedPool {s.bytes_in_use} B in use, {s.bytes_cached} B idle, "
            f"{s.allocations} allocations, {s.reuses} reuses>"
        )
