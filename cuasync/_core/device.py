"""Devices, streams and events: thin, owning wrappers around backend handles."""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from .._backends import get_backend
from .._exceptions import report_once
from .._native import PROCESS, DeviceCore, StreamCore
from ..errors import ArgumentError, InvalidDeviceError, OutOfMemoryError
from . import block_cache
from .context import LOCK, submitting
from .loops import check_blocking_allowed, in_thread
from .priority import StreamPriorityRange, check_priority, priority_range
from .process_local import ProcessLocal
from .properties import DeviceProperties, supports

if TYPE_CHECKING:
    from .properties import DeviceProperties

__all__ = [
    "Device",
    "Event",
    "MemoryInfo",
    "MemoryStats",
    "SchedulingPolicy",
    "Stream",
    "device_count",
    "get_default_device",
    "set_default_device",
    "use_device",
]


_memory_log = logging.getLogger("cuasync.memory")


def _check_nbytes(nbytes: object, argument: str) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ArgumentError(f"{argument} must be an int >= 0 (bytes), got {nbytes!r}")
    return nbytes


class MemoryInfo(NamedTuple):
    """``used``: bytes of cuasync's live device allocations; ``total``: the device's memory."""

    used: int
    total: int


class MemoryStats(NamedTuple):
    """One look at a device's memory, from :meth:`Device.memory_stats` (bytes throughout).

    ``driver_free``/``driver_total``: the device as the driver sees it (all processes);
    ``pool_reserved``/``pool_used``: what the default memory pool holds from the device,
    and what of it live allocations use (this process); ``live_bytes``: cuasync's live
    allocations (as ``memory_info().used``), ``peak_live_bytes`` their high-watermark
    since the last :meth:`Device.reset_peak_memory`, ``live_allocations`` their count;
    ``limit``: the cap set with :meth:`Device.set_memory_limit`, or None.

    >>> s = cuasync.Device(0).memory_stats()
    >>> s.pool_reserved - s.pool_used   # idle memory that trim_pool() would give back
    """

    driver_free: int
    driver_total: int
    pool_reserved: int
    pool_used: int
    live_bytes: int
    peak_live_bytes: int
    live_allocations: int
    limit: int | None


def device_count() -> int:
    """Number of devices the current backend exposes."""
    return get_backend().device_count()


def _check_ordinal(ordinal: object, argument: str = "ordinal") -> int:
    if isinstance(ordinal, Device):
        return ordinal.ordinal
    if not isinstance(ordinal, int) or isinstance(ordinal, bool):
        raise InvalidDeviceError(
            f"{argument} must be an int device ordinal or a cuasync.Device, "
            f"got {type(ordinal).__name__} {ordinal!r}"
        )
    count = device_count()
    if not 0 <= ordinal < count:
        backend = get_backend()
        hint = backend.more_devices_hint
        raise InvalidDeviceError(
            f"{argument}={ordinal} is out of range: this {backend.name} backend has "
            f"{count} device(s), ordinals 0..{count - 1}" + (f" ({hint})" if hint else "")
        )
    return ordinal


class SchedulingPolicy(ABC):
    """Decides on which stream the next op runs.

    >>> class Busiest(cuasync.SchedulingPolicy):
    ...     def next_stream(self): return my_stream
    """

    @abstractmethod
    def next_stream(self) -> Stream:
        """The stream for the next op."""


class Device(DeviceCore):
    """A GPU (or emulated device), identified by its ordinal.

    ``Device(i)`` always returns the same object for the same ordinal, ``i`` its
    ``ordinal``.

    >>> dev = cuasync.Device(0)
    >>> dev.name, dev.memory_info()
    """

    _instances: dict[int, Device] = {}
    _instances_lock = threading.Lock()
    #: Makes a device's default policy (a 4-stream round robin); the policies are built
    #: on devices and streams, so cuasync/_core/scheduling.py fills this when imported.
    _default_policy: ClassVar[Callable[[Device], SchedulingPolicy]]

    # ordinal, _lock, _used, _count, _peak, _limit, _utility, _policy and _legacy (its
    # legacy default stream, made by the first DLPack or CAI exchange on it) are the
    # native base's fields (``DeviceCore``: the native core reads them)
    _name: str | None
    _cc: tuple[int, int] | None
    _properties: DeviceProperties | None

    def __new__(cls, ordinal: int | Device = 0) -> Device:
        known = cls._instances.get(ordinal) if type(ordinal) is int else None
        if known is not None:
            return known
        ordinal = _check_ordinal(ordinal)
        with cls._instances_lock:
            device = cls._instances.get(ordinal)
            if device is None:
                device = super().__new__(cls)
                device.ordinal = ordinal
                device._used = 0
                device._peak = 0
                device._count = 0
                device._limit = None
                device._policy = None
                # Reentrant: a finalizer (Allocation.__del__) may run inside a section.
                device._lock = threading.RLock()
                device._name = None
                device._cc = None
                device._properties = None
                device._utility = None
                device._legacy = None
                cls._instances[ordinal] = device
        return device

    def __repr__(self) -> str:
        return f"<cuasync.Device {self.ordinal}: {self.name}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Device, (self.ordinal,))

    @property
    def name(self) -> str:
        """The device's name, as the driver reports it.

        >>> cuasync.Device(0).name
        'NVIDIA H200'
        """
        if self._name is None:
            self._name = get_backend().device_name(self.ordinal)
        return self._name

    @property
    def compute_capability(self) -> tuple[int, int]:
        """``(major, minor)``, e.g. ``(9, 0)`` for an H100/H200."""
        if self._cc is None:
            self._cc = get_backend().device_compute_capability(self.ordinal)
        return self._cc

    @property
    def properties(self) -> DeviceProperties:
        """The device's attributes: SM count, memory bus width and peak bandwidth, L2
        size, shared memory and thread limits, clocks, ... (:class:`DeviceProperties`;
        each read from the driver once).

        >>> p = cuasync.Device(0).properties
        >>> p.multiprocessor_count, p.max_shared_memory_per_block_optin
        (132, 232448)
        """
        if self._properties is None:
            self._properties = DeviceProperties(self)
        return self._properties

    def supports(self, feature: str) -> bool:
        """Whether this device, with this driver and cuda-bindings, can do ``feature``.

        ``feature``: ``"stream_memops"``, ``"memory_pools"``, ``"host_task_modes"``,
        ``"cooperative_launch"``, ``"cluster_launch"``, ``"managed_memory"``,
        ``"stream_priorities"``, or ``"peer:N"`` (direct access to device ``N``'s memory;
        False where there is no device ``N``). Anything else is an
        :class:`~cuasync.errors.ArgumentError` listing them.

        >>> if cuasync.Device(0).supports("peer:1"): ...
        >>> cuasync.Device(0).supports("host_task_modes")   # CUASYNC_HOST_SYNC=callback-spin
        True
        """

        return supports(self, feature)

    def can_access_peer(self, other: int | Device) -> bool:
        """Whether this device can read and write ``other``'s memory directly.

        Copies between two devices that can reach each other go device to device (NVLink
        or PCIe peer to peer; cuasync enables the access on first use); others are staged
        through pinned host memory. A device always reaches its own memory.

        >>> cuasync.Device(0).can_access_peer(1)
        True
        """
        peer = _check_ordinal(other, "other")
        return peer == self.ordinal or get_backend().device_can_access_peer(self.ordinal, peer)

    def new_stream(self, priority: int | None = None) -> Stream:
        """A new stream owned by cuasync (destroyed when the object is collected).

        ``priority`` (CUDA's numbers: lower is more urgent; None is the default, 0) must
        lie in :attr:`stream_priority_range`, else :class:`~cuasync.errors.ArgumentError`.
        Kernels on a more urgent stream are scheduled first when the device is busy.

        >>> urgent = dev.new_stream(priority=dev.stream_priority_range.greatest)
        >>> urgent.priority
        -5
        """
        return Stream._create(self, check_priority(self.ordinal, priority))

    @property
    def stream_priority_range(self) -> StreamPriorityRange:
        """``(least, greatest)`` stream priority (``cuCtxGetStreamPriorityRange``).

        >>> cuasync.Device(0).stream_priority_range
        StreamPriorityRange(least=0, greatest=-5)
        """
        return priority_range(self.ordinal)

    def synchronize(self, *, allow_in_loop: bool = False) -> None:
        """Block the calling thread until all work on this device has finished (raises
        on a device fault).

        Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a running event loop
        (``await dev.synchronized()`` there) unless ``allow_in_loop=True``.
        """
        check_blocking_allowed(
            "Device.synchronize()", allow_in_loop, "use 'await device.synchronized()'"
        )
        covered = self._enqueued_on_streams()
        get_backend().device_synchronize(self.ordinal)
        _mark_completed(covered)

    async def synchronized(self) -> None:
        """Wait, without blocking the event loop, until all work on this device (every
        stream, cuasync's and other libraries') has finished; raises on a device fault.

        A thread makes the blocking wait while the task is parked. For one stream or
        event, ``await cuasync.wait(stream)`` is cheaper (it blocks no thread).

        >>> del batch                      # its free is stream-ordered
        >>> await dev.synchronized()       # landed: trim_pool() can give it back
        """
        covered = self._enqueued_on_streams()
        await in_thread(functools.partial(get_backend().device_synchronize, self.ordinal))
        _mark_completed(covered)

    def _enqueued_on_streams(self) -> list[tuple[Stream, int]]:
        """For each stream with host-callback completions pending on this device, the
        last sequence number enqueued there: a device synchronization covers them, so
        their futures are done once it returns, not when the callback's signal reaches
        the background watcher (the flag slots' words have landed by then anyway)."""
        hub = PROCESS.hub
        if hub is None or not hub.callback_pending:
            return []
        with hub.lock:
            pending = [c.stream for c in hub.callback_pending if c.device.ordinal == self.ordinal]
        streams = {id(stream): stream for stream in pending}
        return [(stream, stream._enqueued()) for stream in streams.values()]

    def memory_info(self) -> MemoryInfo:
        """Bytes of cuasync's live allocations on this device, and the device's total.

        >>> used, total = cuasync.Device(0).memory_info()
        """
        return MemoryInfo(self._used, get_backend().device_total_memory(self.ordinal))

    def memory_stats(self) -> MemoryStats:
        """The driver's, the pool's and cuasync's view of this device's memory.

        >>> s = cuasync.Device(0).memory_stats()
        >>> s.live_bytes, s.peak_live_bytes, s.driver_free
        """
        backend = get_backend()
        free, total = backend.mem_get_info(self.ordinal)
        reserved, used = backend.mem_pool_usage(self.ordinal)
        with self._lock:
            live, peak, count, limit = self._used, self._peak, self._count, self._limit
        return MemoryStats(free, total, reserved, used, live, peak, count, limit)

    def reset_peak_memory(self) -> None:
        """Restart ``memory_stats().peak_live_bytes`` from the current live bytes."""
        with self._lock:
            self._peak = self._used

    def trim_pool(self, keep_bytes: int = 0) -> int:
        """Give idle memory of the device's pool back to the device, keeping at most
        ``keep_bytes`` reserved (``cuMemPoolTrimTo``); returns the bytes released.

        cuasync's pool keeps freed memory for reuse; a service sharing a GPU can trim
        it when idle. Memory in use (or freed by work still pending) stays.

        >>> cuasync.Device(0).trim_pool()
        """
        keep = _check_nbytes(keep_bytes, "keep_bytes")
        backend = get_backend()
        block_cache.flush(self)  # the small blocks kept for reuse: idle too
        before = backend.mem_pool_usage(self.ordinal)[0]
        backend.mem_pool_trim(self.ordinal, keep)
        released = max(0, before - backend.mem_pool_usage(self.ordinal)[0])
        if released:
            _memory_log.debug("device %d: trimmed %d B of its pool", self.ordinal, released)
        return released

    def set_memory_limit(self, nbytes: int | None) -> None:
        """Cap cuasync's live bytes on this device; None removes the cap.

        An allocation that would take ``memory_stats().live_bytes`` past it raises
        :class:`~cuasync.errors.OutOfMemoryError` before the driver is asked, so
        services sharing a GPU can each keep to a budget. Allocations made earlier
        are not affected.

        >>> cuasync.Device(0).set_memory_limit(8 << 30)   # 8 GiB for this process
        """
        limit = None if nbytes is None else _check_nbytes(nbytes, "nbytes")
        with self._lock:
            self._limit = limit

    def _charge(self, nbytes: int) -> None:
        """Count an allocation of ``nbytes`` about to be made; raise past the limit."""
        with self._lock:
            used = self._used + nbytes
            if self._limit is not None and used > self._limit:
                raise OutOfMemoryError(
                    nbytes,
                    f"device {self.ordinal} memory with {self._used} B live and a limit of "
                    f"{self._limit} B (Device.set_memory_limit)",
                )
            self._used = used
            self._count += 1
            if used > self._peak:
                self._peak = used

    def _discharge(self, nbytes: int) -> None:
        """Count an allocation of ``nbytes`` as gone (freed, failed or leaked)."""
        with self._lock:
            self._used -= nbytes
            self._count -= 1

    @property
    def fault(self) -> BaseException | None:
        """The sticky fault of this device's context, if it has faulted."""
        return get_backend().device_fault(self.ordinal)

    @property
    def policy(self) -> SchedulingPolicy:
        """This device's default scheduling policy (a 4-stream round robin)."""
        if self._policy is None:
            with self._lock:
                if self._policy is None:
                    self._policy = Device._default_policy(self)
        return self._policy

    @policy.setter
    def policy(self, policy: SchedulingPolicy) -> None:
        if not isinstance(policy, SchedulingPolicy):
            raise ArgumentError(
                f"policy must be a cuasync.SchedulingPolicy, got {type(policy).__name__}"
            )
        self._policy = policy

    def _utility_stream(self) -> Stream:
        """A cuasync-private stream for frees and bookkeeping that no op is ordered on."""
        if self._utility is None:
            with self._lock:
                if self._utility is None:
                    self._utility = Stream._create(self)
        return self._utility


_default_device: contextvars.ContextVar[int] = contextvars.ContextVar(
    "cuasync_default_device", default=0
)


def set_default_device(device: int | Device) -> None:
    """Make ``device`` the default for the current context (thread or asyncio task)."""
    _default_device.set(_check_ordinal(device, "device"))


@contextmanager
def use_device(device: int | Device) -> Iterator[Device]:
    """Make ``device`` the default inside the block, for this thread or asyncio task only.

    Ops built there without ``device=`` allocate on it, and ops whose tensors do not say
    run on its scheduling policy.

    >>> with cuasync.use_device(1):
    ...     t = await cuasync.zeros((4,))   # on device 1
    """
    token = _default_device.set(_check_ordinal(device, "device"))
    try:
        yield get_default_device()
    finally:
        _default_device.reset(token)


def get_default_device() -> Device:
    """The default device of the current context (device 0 unless set)."""
    ordinal = _default_device.get()
    return Device._instances.get(ordinal) or Device(ordinal)


def _destroy_stream(handle: int, alive: list[bool]) -> None:
    alive[0] = False  # first: objects collected in the same cycle must not use the handle
    try:
        block_cache.drop_stream(handle)  # (freed on it, before it goes)
        get_backend().stream_destroy(handle)
    except Exception as exc:  # a faulted context, or shutdown: leak it
        report_once("cuasync.device", "destroy a stream", exc)


def _mark_completed(covered: list[tuple[Stream, int]]) -> None:
    for stream, seq in covered:
        stream._mark_completed(seq)


class Stream(ProcessLocal, StreamCore):
    """An ordered queue of device work.

    Not constructed directly (as in cuda.core): :meth:`Device.new_stream` makes an owned
    stream; :meth:`from_handle` wraps a foreign one (PyTorch, CuPy, cuda.core, ...) that
    cuasync never destroys.

    >>> s = cuasync.Device(0).new_stream()
    >>> t = await cuasync.zeros(4).submit_on(s)
    """

    # handle, device, owned, _capturing, _submitted, _completed and _alive are the
    # native base's fields (``StreamCore``: the native core reads them)
    __slots__ = ("__weakref__", "_event", "_event_seq", "_lock", "_owner")

    def __new__(cls, *args: object, **kwargs: object) -> Stream:
        raise TypeError(
            "cuasync.Stream cannot be constructed directly; use Device.new_stream() for a "
            "new stream or Stream.from_handle() to wrap a foreign one"
        )

    @classmethod
    def _new(cls, handle: int, device: Device, owned: bool, owner: object = None) -> Stream:
        self = object.__new__(cls)
        self._init(handle, device, owned, owner)
        return self

    def _init(self, handle: int, device: Device, owned: bool, owner: object) -> None:
        self.handle = handle
        self.device = device
        self.owned = owned
        self._submitted = 0  # sequence number of the last execution submitted here
        self._completed = 0  # highest sequence number known to have completed
        self._event: int | None = None
        self._event_seq = -1
        self._capturing = False
        self._lock = threading.RLock()  # reentrant: finalizers may order frees inside it
        # Cleared when an owned stream's handle is destroyed. In a garbage cycle the
        # finalizer can run before another object's __del__ that still refers to us.
        self._alive = [True]
        self._owner = owner  # a foreign stream's object: its handle lives as long as it
        if owned:
            weakref.finalize(self, _destroy_stream, handle, self._alive)

    @classmethod
    def _create(cls, device: Device, priority: int = 0) -> Stream:
        handle = get_backend().stream_create(device.ordinal, priority)
        return cls._new(handle, device, owned=True)

    @property
    def priority(self) -> int:
        """The priority the driver gives this stream (``cuStreamGetPriority``).

        >>> cuasync.Device(0).new_stream(priority=-2).priority
        -2
        """
        return get_backend().stream_priority(self.handle)

    @classmethod
    def from_handle(cls, handle: int | Any, device: int | Device | None = None) -> Stream:
        """Wrap a foreign stream: an int handle or an object with ``__cuda_stream__``.

        The stream is never destroyed by cuasync; work enqueued there can be awaited. An
        object's ``__cuda_stream__()`` must return ``(0, handle)`` (protocol version 0);
        the object is kept alive as long as the returned :class:`Stream`, so its stream
        is not destroyed under cuasync. With a bare int, keeping the stream alive is the
        caller's job.

        >>> s = cuasync.Stream.from_handle(torch.cuda.current_stream())
        """
        owner = None
        if hasattr(handle, "__cuda_stream__"):
            owner = handle
            protocol = handle.__cuda_stream__()
            if not (isinstance(protocol, tuple) and len(protocol) == 2):
                raise ArgumentError(
                    "__cuda_stream__() must return a (version, handle) tuple, "
                    f"got {protocol!r} from {type(owner).__name__}"
                )
            version, handle = protocol
            if version != 0:
                raise ArgumentError(
                    f"{type(owner).__name__}.__cuda_stream__() speaks protocol version "
                    f"{version!r}; cuasync understands version 0"
                )
        if not isinstance(handle, int) or isinstance(handle, bool):
            raise ArgumentError(
                "handle must be an int CUstream or an object with __cuda_stream__(), "
                f"got {type(handle).__name__}"
            )
        if device is None:
            device = get_backend().stream_device(handle)
        device = Device(_check_ordinal(device, "device"))
        return cls._new(handle, device, owned=False, owner=owner)

    def __repr__(self) -> str:
        kind = "owned" if self.owned else "foreign"
        return f"<cuasync.Stream {self.handle:#x} on device {self.device.ordinal} ({kind})>"

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: ``(version, handle)``."""
        return (0, self.handle)

    def synchronize(self, *, allow_in_loop: bool = False) -> None:
        """Block the calling thread until all work on this stream has finished (raises
        on a device fault).

        Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a running event loop
        (``await cuasync.wait(stream)`` there) unless ``allow_in_loop=True``.
        """
        check_blocking_allowed(
            "Stream.synchronize()", allow_in_loop, "use 'await cuasync.wait(stream)'"
        )
        covered = self._enqueued()
        get_backend().stream_synchronize(self.handle)
        self._mark_completed(covered)

    def query(self) -> bool:
        """True when all work on this stream has finished; never blocks."""
        covered = self._enqueued()
        idle = get_backend().stream_query(self.handle)
        if idle:
            self._mark_completed(covered)
        return idle

    def _enqueued(self) -> int:
        """The last sequence number whose work is fully enqueued on this stream.

        Read under the execution lock: a submission numbers itself before it enqueues,
        so an unlocked read could count work that another thread has yet to enqueue,
        and a later read-after-write on another stream would skip its event.
        """
        if submitting():
            return self._submitted  # this thread holds the lock: nothing is half-enqueued
        with LOCK:
            return self._submitted

    @property
    def is_capturing(self) -> bool:
        """Whether this stream is recording into a CUDA graph (inside a graph scope).

        >>> with cuasync.graph_scope(stream):
        ...     assert stream.is_capturing
        """
        return self._capturing

    # -- cross-stream ordering ---------------------------------------------------------
    def _next_seq(self) -> int:
        self._submitted += 1
        return self._submitted

    def _mark_completed(self, seq: int) -> None:
        if seq > self._completed:
            self._completed = seq

    def _pending(self, seq: int) -> bool:
        return seq > self._completed

    def _order_after(self, other: Stream, seq: int) -> None:
        """Make this stream wait for ``other``'s work up to sequence number ``seq``."""
        if other is self or not other._pending(seq) or not other._alive[0]:
            return
        backend = get_backend()
        with other._lock:
            if other._event is None:
                other._event = backend.event_create(other.device.ordinal)
            if other._event_seq < seq:
                backend.event_record(other._event, other.handle)
                # The event covers everything enqueued on ``other`` so far: all of it when
                # this thread holds the execution lock, else (a finalizer freeing memory)
                # only what is known to be enqueued, ``seq``.
                other._event_seq = other._submitted if submitting() else seq
            event = other._event
        backend.stream_wait_event(self.handle, event)

    def __del__(self) -> None:
        event = self._event
        if event is not None:
            try:
                get_backend().event_destroy(event)
            except Exception as exc:
                report_once("cuasync.device", "destroy a stream's ordering event", exc)


class Event(ProcessLocal):
    """A marker in a stream's work; query it, wait for it, or time between two of them.

    ``device``: the device it belongs to; ``timing``: whether it records a time (for
    :meth:`elapsed_ms`); ``handle``: the driver's ``CUevent``, as an int.

    >>> start, end = cuasync.Event(timing=True), cuasync.Event(timing=True)
    >>> start.record(stream); ...; end.record(stream); end.synchronize()
    >>> start.elapsed_ms(end)
    """

    __slots__ = ("__weakref__", "device", "handle", "timing")

    def __init__(self, device: int | Device | None = None, *, timing: bool = False) -> None:
        self.device = get_default_device() if device is None else Device(_check_ordinal(device))
        self.timing = timing
        self.handle = get_backend().event_create(self.device.ordinal, timing=timing)
        weakref.finalize(self, _destroy_event, self.handle)

    def record(self, stream: Stream) -> Event:
        """Mark the work enqueued on ``stream`` so far; returns the event itself.

        The stream must be on the event's device. Recording again moves the marker.

        >>> done = cuasync.Event().record(stream)
        """
        if not isinstance(stream, Stream):
            raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
        if stream.device is not self.device:
            raise InvalidDeviceError(
                f"event is on device {self.device.ordinal} but stream is on device "
                f"{stream.device.ordinal}; create the event on the stream's device"
            )
        get_backend().event_record(self.handle, stream.handle)
        return self

    def query(self) -> bool:
        """Whether the work before the latest record has finished; never blocks.

        >>> event.query()   # False while the stream is still working towards it
        """
        return get_backend().event_query(self.handle)

    def synchronize(self, *, allow_in_loop: bool = False) -> None:
        """Block the calling thread until the work before the latest record has finished.

        Raises :class:`~cuasync.errors.SyncInEventLoopError` inside a running event loop
        (``await cuasync.wait(event)`` there: it waits without blocking the loop) unless
        ``allow_in_loop=True``.
        """
        check_blocking_allowed(
            "Event.synchronize()", allow_in_loop, "use 'await cuasync.wait(event)'"
        )
        get_backend().event_synchronize(self.handle)

    def wait(self, stream: Stream) -> None:
        """Make ``stream`` wait (on the device) until this event has completed.

        Only enqueues: the calling thread never waits (fine in a coroutine).
        """
        get_backend().stream_wait_event(stream.handle, self.handle)

    def elapsed_ms(self, end: Event) -> float:
        """Milliseconds between this event and ``end`` (both created with ``timing=True``)."""
        if not (self.timing and end.timing):
            raise ArgumentError("elapsed_ms needs two events created with timing=True")
        return get_backend().event_elapsed_ms(self.handle, end.handle)


def _destroy_event(handle: int) -> None:
    try:
        get_backend().event_destroy(handle)
    except Exception as exc:
        report_once("cuasync.device", "destroy an event", exc)


# What from_host's native build reads (``_reactor.build_upload``): the default device's
# ContextVar and the Devices made, by ordinal (declared fields of PROCESS, set here once).
PROCESS.default_device = _default_device
PROCESS.devices = Device._instances
