"""A CPU model of the driver semantics cuasync relies on, for machines without a GPU.

* Each stream is a worker thread that runs its commands in FIFO order.
* Events record a generation when their record command runs; cross-stream waits block
  the waiting stream's worker until that generation is reached.
* Device memory is an emulated address space of numpy buffers. Allocation and free are
  stream-ordered; any command touching freed or unallocated memory faults the device
  with ``CUDA_ERRORCode.ILLEGAL_ADDRESS``.
* ``write_value32`` stores into real host memory, so the native reactor sees it.
* Kernels run their numpy twin (``emulate=``) on the stream's worker, with each array
  argument viewed as a numpy array of the emulated memory; the source is compiled with
  NVRTC only to check it (``CUASYNC_EMU_COMPILE``). A twin raising fails its launch
  (:class:`~cuasync.errors.KernelError`); an :class:`EmulatedFault` faults the device.
* A fault (illegal address, :class:`EmulatedFault`, :func:`inject_fault`) is sticky:
  queued work is dropped, flags stop landing, queries and later calls raise it.
* Host functions run on the stream's worker; a driver call made from inside one is
  refused with ``CUDA_ERRORCode.NOT_PERMITTED`` and remembered (the driver may deadlock).
* Stream capture records the commands enqueued on a stream; a graph launch replays them.
* Peers: every device can access every other one unless ``peer_access=False`` (a machine
  whose GPUs cannot reach each other); access is enabled per direction, and peer copies
  check that each pointer is memory of the device named for it, as the driver does.
* The default streams ``1`` (``CU_STREAM_LEGACY``) and ``2`` (``CU_STREAM_PER_THREAD``)
  exist per device, as ordinary FIFO streams (the legacy stream's implicit
  synchronization with other streams is not modelled); the device is this thread's
  "current" one: the last device a call named (``event_create(ordinal)`` and the like).
* Stream priorities (range ``(0, -5)`` as on current GPUs; lower is more urgent): a
  stream starts its next command only while no stream of the same device with a higher
  priority has work ready to run (a command queued or running that is not a wait whose
  condition is unmet). Running commands are never preempted. With equal priorities (the
  default) streams run independently, as before.
* Copies between device memory and host memory that is not pinned (not from
  ``host_alloc``) are accepted, as the driver accepts them, and counted in
  ``pageable_copies``: cuasync itself never issues one. They read or write the host
  memory when they run, not when enqueued (the weakest reading of the driver's "API
  synchronization behavior"); the driver's possible synchronization with the stream is
  not modelled.
* Knobs for tests: a per-command delay and a gate that holds every worker.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import itertools
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# (numpy imports ctypeslib lazily: here, not on a device thread, which interpreter
# shutdown may stop in the middle of an import, keeping the import lock for good)
import numpy.ctypeslib

from .. import _config
from .._curesult import Code
from .._exceptions import fresh, report_unraisable
from .._launch import nvrtc as _nvrtc
from ..errors import (
    DeviceError,
    DeviceFaultError,
    DriverError,
    KernelCompileError,
    KernelError,
    LaunchError,
    OutOfMemoryError,
    UsageError,
    driver_error,
)
from .base import (
    CANCEL_ADDRESS_BITS,
    CANCEL_PARAM,
    CAPTURE_RELAXED,
    Backend,
    DeviceArray,
    EmulatedFault,
    KernelCode,
    PreparedKernel,
    check_device_attribute,
)

Command = Callable[[], None]

try:
    from .._reactor import store32 as _store32
except ImportError:  # built without a C compiler
    _store32 = None  # type: ignore[assignment]


#: Each device owns a 1 TiB window of the emulated address space.
_DEVICE_WINDOW = 1 << 40
_ALIGN = 256
#: Context handles: each device's primary context, then those create_context() makes.
_PRIMARY_CONTEXTS = 0xC0_0000
_CREATED_CONTEXTS = 0xC1_0000
#: How long a first kernel load waits for streams held by host-memory words to go on
#: before it reports the hang a GPU would have (seconds).
_LOAD_WAIT_S = 5.0
#: ``(least, greatest)`` stream priority, as ``cuCtxGetStreamPriorityRange`` reports on
#: current GPUs.
PRIORITY_RANGE = (0, -5)


class _Wait:
    """A command that only waits: ``ready()`` tells whether its condition is met;
    ``on_host``: the condition is a host-memory word (``cuStreamWaitValue32``), which
    only the host can satisfy."""

    __slots__ = ("on_host", "ready", "run")

    def __init__(self, run: Command, ready: Callable[[], bool], on_host: bool = False) -> None:
        self.run = run
        self.ready = ready
        self.on_host = on_host

    def __call__(self) -> None:
        self.run()


class _IllegalAddress(EmulatedFault):
    code = Code.ILLEGAL_ADDRESS


@dataclass(eq=False)
class _Device:
    ordinal: int
    total_memory: int
    fault: DeviceFaultError | None = None
    used: int = 0
    #: What the modelled default pool holds from the device: it grows with its allocations
    #: and keeps freed memory (cuasync sets the release threshold to its maximum) until trimmed.
    reserved: int = 0
    #: Bytes of live allocations from the default pool (``used`` counts every pool's).
    default_used: int = 0
    #: Explicit pools by handle, and the pool of each allocation made from one.
    pools: dict[int, _Pool] = field(default_factory=dict)
    pool_of: dict[int, _Pool] = field(default_factory=dict)
    next_address: int = 0
    bases: list[int] = field(default_factory=list)
    buffers: dict[int, np.ndarray] = field(default_factory=dict)
    streams: set[_Stream] = field(default_factory=set)
    # Reentrant, as the backend's lock: a finalizer (a collected Stream's stream_destroy,
    # a Tensor's free) runs on whichever thread the cyclic GC interrupts, possibly one
    # inside a critical section of this lock.
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: Live streams created with a priority above the default (0), replaced (never
    #: changed in place) under ``lock``: a command reads it without the lock, and while
    #: it is empty no stream has anything to yield to.
    urgent: tuple[_Stream, ...] = ()
    #: Kernels prepared on this device (a GPU loads each module once).
    loaded: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)


@dataclass(eq=False)
class _Pool:
    """An explicit memory pool (``cuMemPoolCreate``): what it reserves and what is in use.

    Memory above ``threshold`` that no allocation uses is released when an allocation of
    the pool is freed (the driver does it at the next synchronization).
    """

    handle: int
    threshold: int
    reserved: int = 0
    used: int = 0


def _raised_at(exc: BaseException, inner: int = 3, outer: int = 2) -> str:
    """Where an emulated command raised: its innermost ``inner`` frames and, past them,
    the ``outer`` frames it began in (" (raised in f, a.py:12 <- g, a.py:34 <- ... <-
    cmd, b.py:5)"): a fault's message travels without its traceback (another process, a
    log line), and a RecursionError's frames say what looped and what started it."""
    stack = traceback.extract_tb(exc.__traceback__)[1:]  # (below the worker's own frame)
    if not stack:
        return ""

    def name(f: traceback.FrameSummary) -> str:
        return f"{f.name}, {f.filename.rsplit('/', 1)[-1]}:{f.lineno}"

    shown = [name(f) for f in reversed(stack[-inner:])]
    if len(stack) > inner:
        first = stack[: min(outer, len(stack) - inner)]
        gap = ["..."] if len(stack) > inner + outer else []
        shown += gap + [name(f) for f in reversed(first)]
    return f" (raised in {' <- '.join(shown)})"


class _Stream:
    """A FIFO of commands run by one worker thread."""

    def __init__(
        self, backend: EmulatorBackend, handle: int, device: _Device, priority: int = 0
    ) -> None:
        self.backend = backend
        self.handle = handle
        self.device = device
        self.priority = priority
        self.commands: deque[Command | None] = deque()
        self.current: Command | None = None
        self.pending = 0
        self.cond = threading.Condition()
        self.capture: list[Command] | None = None
        self.worker = threading.Thread(
            target=self._run, name=f"cuasync-emu-stream-{handle:x}", daemon=True
        )
        self.worker.start()

    def put(self, command: Command | None) -> None:
        with self.cond:
            if command is not None:
                self.pending += 1
            self.commands.append(command)
            self.cond.notify_all()

    def _run(self) -> None:
        backend = self.backend
        _device_thread.active = True  # (what runs here is the device's: see host_free)
        while True:
            with self.cond:
                while not self.commands:
                    self.cond.wait()
                command = self.commands.popleft()
                self.current = command
            if command is None:
                return
            backend._gate.wait()
            if self.device.urgent and not isinstance(command, _Wait):
                self._yield_to_urgent()
            if backend.delay_us and self.device.fault is None:
                time.sleep(backend.delay_us / 1e6)
            if self.device.fault is None:
                try:
                    command()
                except EmulatedFault as exc:
                    detail = str(exc) or f"emulated kernel raised {type(exc).__name__}"
                    backend._fault(self.device, exc.code, detail)
                except Exception as exc:  # (the command itself is broken: say where)
                    detail = "".join(traceback.format_exception_only(exc)).strip()
                    backend._fault(
                        self.device,
                        Code.LAUNCH_FAILED,
                        f"emulated kernel raised {detail}{_raised_at(exc)}",
                        cause=exc,
                    )
            command = None  # drop what the command captured before waiting for the next
            with self.cond:
                self.current = None
                self.pending -= 1
                self.cond.notify_all()

    def held_by_host(self) -> bool:
        """Whether the stream waits on a host-memory word that is not yet set (a gate)."""
        with self.cond:
            command = self.current
            if command is None and self.commands:
                command = self.commands[0]
        return isinstance(command, _Wait) and command.on_host and not command.ready()

    def busy(self) -> bool:
        """Whether the stream has work ready to run (or running) on the device."""
        with self.cond:
            command = self.current
            if command is None and self.commands:
                command = self.commands[0]
        if command is None:
            return False
        return command.ready() if isinstance(command, _Wait) else True

    def _yield_to_urgent(self) -> None:
        """Wait while a stream of this device with a higher priority has work ready."""
        device = self.device
        pause = 1e-5
        while device.fault is None:
            # only the urgent streams (a device may have hundreds of others), read whole
            above = [s for s in device.urgent if s.priority < self.priority]
            if not any(s.busy() for s in above):
                return
            time.sleep(pause)  # a wait's condition changes without notice: poll
            pause = min(pause * 2, 1e-3)

    def wait_idle(self) -> None:
        with self.cond:
            while self.pending and self.device.fault is None:
                self.cond.wait(0.05)


class _Event:
    def __init__(self, device: _Device, timing: bool) -> None:
        self.device = device
        self.timing = timing
        self.recorded = 0
        self.completed = 0
        self.time = 0.0
        self.cond = threading.Condition()

    def reached(self, generation: int) -> bool:
        return self.completed >= generation


@dataclass
class _Graph:
    commands: list[Command]


@dataclass(frozen=True)
class _Strided:
    """A :class:`DeviceArray` as it was when the work was enqueued."""

    ptr: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    strides: tuple[int, ...]


#: Dynamic shared memory a launch may ask for without
#: ``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` (48 KiB on every CUDA GPU).
_DYNAMIC_SHARED_MAX = 48 * 1024

#: What ``device_attribute`` answers on every emulated device: an H200's numbers (SXM,
#: as its driver reports them; documented in docs/emulator.md), but for the PCI location,
#: which is the ordinal's (bus ``ordinal``, domain and device 0).
PROFILE: dict[str, int] = {
    "multiprocessor_count": 132,
    "max_threads_per_block": 1024,
    "max_threads_per_multiprocessor": 2048,
    "max_blocks_per_multiprocessor": 32,
    "warp_size": 32,
    "max_block_dim_x": 1024,
    "max_block_dim_y": 1024,
    "max_block_dim_z": 64,
    "max_grid_dim_x": 2**31 - 1,
    "max_grid_dim_y": 65535,
    "max_grid_dim_z": 65535,
    "max_shared_memory_per_block": _DYNAMIC_SHARED_MAX,  # 48 KiB
    "max_shared_memory_per_block_optin": 227 * 1024,
    "max_shared_memory_per_multiprocessor": 228 * 1024,
    "max_registers_per_block": 65536,
    "max_registers_per_multiprocessor": 65536,
    "total_constant_memory": 64 * 1024,
    "l2_cache_size": 50 * 1024 * 1024,
    "clock_rate": 1_980_000,  # kHz
    "memory_clock_rate": 3_201_000,  # kHz
    "global_memory_bus_width": 6144,  # bits
    "async_engine_count": 3,
    "can_map_host_memory": 1,
    "cluster_launch": 1,
    "concurrent_kernels": 1,
    "concurrent_managed_access": 1,
    "cooperative_launch": 1,
    "ecc_enabled": 1,
    "integrated": 0,
    "managed_memory": 1,
    "memory_pools_supported": 1,
    "stream_priorities_supported": 1,
    "unified_addressing": 1,
    "pci_domain_id": 0,
    "pci_device_id": 0,
}

#: ml_dtypes' types and the unsigned integer of their size.
_ML_BITS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 (or complex64) values rounded to TF32's 10-bit significand, to nearest even."""
    bits = np.ascontiguousarray(x).view(np.uint32)
    low = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0xFFF) + low) & np.uint32(0xFFFFE000)
    finite = np.isfinite(np.ascontiguousarray(x).view(np.float32))
    return np.where(finite, rounded, bits).view(x.dtype).reshape(x.shape)


class _EmulatedKernel(PreparedKernel):
    """A kernel's numpy twin, its pointer parameters and the numpy type of each scalar one."""

    __slots__ = ("cancel", "pointers", "scalars", "twin")

    def __init__(
        self, kernel: KernelCode, ordinal: int, twin: Callable[..., Any] | None = None
    ) -> None:
        super().__init__(kernel.name, ordinal)
        self.twin = twin or kernel.emulate
        params = kernel.params
        self.pointers = tuple(i for i, p in enumerate(params) if p.pointer)
        self.scalars = [None if p.pointer or p.dtype is None else p.dtype.type for p in params]
        #: Whether the last parameter is a cancel word (CANCEL_PARAM), not the twin's.
        self.cancel = bool(params) and params[-1].name == CANCEL_PARAM


_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

#: The error box of the graph launch a stream's worker is replaying now (``box``; none
#: outside a replay): a command recorded in a capture reports there, not in the
#: capture's own box, which nobody reads after it.
_replay = threading.local()


def _failed(box: list[BaseException], error: BaseException) -> None:
    """A command's failure (a twin that raised), reported to its submission: the graph
    launch replaying it, else the one that enqueued it."""
    replaying = getattr(_replay, "box", None)
    (box if replaying is None else replaying).append(error)


def _replaying(command: Command, box: list[BaseException]) -> Command:
    """``command`` (recorded in a graph) run for a launch of it whose error box is ``box``."""

    def run() -> None:
        _replay.box = box
        try:
            command()
        finally:
            _replay.box = None

    return run


#: ``active`` while this thread runs a host function (``launch_host_func``).
_host_function = threading.local()
#: ``active`` on a stream's worker thread: the emulated device's (see ``host_free``).
_device_thread = threading.local()


class _Counts:
    """What the emulator counts for tests: commands accepted (for tests that check
    laziness), ``memcpy_peer_async`` calls, copies with a host side outside pinned
    memory, and launches and guarded regions skipped by their cancel word."""

    __slots__ = ("enqueued", "pageable_copies", "peer_copies", "skipped")

    def __init__(self) -> None:
        self.enqueued = self.peer_copies = self.pageable_copies = self.skipped = 0


class EmulatorBackend(Backend):
    """The emulator backend; see the module docstring."""

    name = "emulator"
    more_devices_hint = "set CUASYNC_EMU_DEVICES for more"
    python_writes_flags = True  # (its device is a Python thread)

    def __init__(
        self, devices: int = 1, memory: int = 1 << 30, delay_us: int = 0, peer_access: bool = True
    ) -> None:
        super().__init__()
        self._devices = [
            _Device(i, memory, next_address=(i + 1) * _DEVICE_WINDOW) for i in range(devices)
        ]
        self._streams: dict[int, _Stream] = {}
        self._events: dict[int, _Event] = {}
        self._graphs: dict[int, _Graph] = {}
        self._execs: dict[int, list[Command]] = {}
        self._host: dict[int, np.ndarray] = {}
        self._pool_device: dict[int, _Device] = {}  # pool handle -> its device
        # load_twins modules: handle -> (ordinal, twins by name); functions -> (module, name)
        self._modules: dict[int, tuple[int, dict[str, Callable[..., Any]]]] = {}
        self._functions: dict[int, tuple[int, str]] = {}
        self._handles = itertools.count(0x1000)
        # Reentrant: an allocation under it can run the cyclic GC, whose finalizers
        # (stream_destroy, mem_free_async) come back here on the same thread.
        self._lock = threading.RLock()
        self._gate = threading.Event()
        self._gate.set()
        self.delay_us = delay_us
        # (counters kept off this object's __dict__: the native core keeps what it reads of
        # that dict while the dict is unchanged, and a count there would change it always)
        self.counts = _Counts()
        #: Whether the emulated devices can reach each other's memory (a knob).
        self.peer_capable = peer_access
        self._peers_enabled: set[tuple[int, int]] = set()
        self._host_starts: list[int] = []  # sorted addresses of the host_alloc blocks
        self._host_ends: dict[int, int] = {}  # each block's end address
        #: Driver calls refused because they came from inside a host function (a bug).
        self.host_function_calls: list[str] = []
        self._defaults: dict[tuple[int, int, int], _Stream] = {}
        # The thread's current context (``.ctx``, 0: none), as the driver keeps it. Each
        # device has a primary context; create_context() makes others, as cuCtxCreate.
        self._current = threading.local()
        self._primaries = [_PRIMARY_CONTEXTS + i for i in range(devices)]
        self._context_device: dict[int, int] = {c: i for i, c in enumerate(self._primaries)}
        self._context_ids = itertools.count(_CREATED_CONTEXTS)

    # -- knobs ---------------------------------------------------------------------
    def pause(self) -> None:
        """Hold every stream worker before its next command."""
        self._gate.clear()

    def resume(self) -> None:
        self._gate.set()

    def set_peer_access(self, capable: bool) -> None:
        """Model a machine whose devices can (or cannot) access each other's memory."""
        self.peer_capable = capable
        if not capable:
            self._peers_enabled.clear()

    def peer_access_enabled(self, ordinal: int, peer: int) -> bool:
        return (ordinal, peer) in self._peers_enabled

    def inject_fault(self, ordinal: int, code: int = Code.ILLEGAL_INSTRUCTION) -> None:
        self._fault(self._device(ordinal), code, "injected by cuasync.emulator.inject_fault")

    def _fault(
        self, device: _Device, code: int, detail: str, cause: BaseException | None = None
    ) -> None:
        with device.lock:
            if device.fault is None:
                error = driver_error(code, "emulated device", detail)
                if not isinstance(error, DeviceFaultError):
                    error = DeviceFaultError(code, "emulated device", detail)
                error.__cause__ = cause  # (its traceback: where the command failed)
                device.fault = error
                self.fault_seen = True
            streams = list(device.streams)
        for stream in streams:
            with stream.cond:
                stream.cond.notify_all()
        with self._lock:
            events = [e for e in self._events.values() if e.device is device]
        for event in events:
            with event.cond:
                event.cond.notify_all()

    # -- helpers ---------------------------------------------------------------------
    def _refuse_in_host_function(self, what: str) -> None:
        """CUDA forbids driver calls from a host function (they may deadlock the driver):
        refuse them loudly, and remember each in :attr:`host_function_calls`, since the
        caller may be a finalizer that swallows the error."""
        if getattr(_host_function, "active", False):
            self.host_function_calls.append(what)
            raise DriverError(
                Code.NOT_PERMITTED,
                what,
                "a driver call from inside a host function (cuLaunchHostFunc)",
            )

    def _device(self, ordinal: int) -> _Device:
        """The device of a call; as the cuda backend, the call runs in the device's
        primary context and leaves the caller's current context as it found it (a
        thread with none keeps the primary context, as after a CUDA runtime call)."""
        self._refuse_in_host_function("device call")
        if not 0 <= ordinal < len(self._devices):
            raise DriverError(Code.INVALID_DEVICE, "device", f"ordinal {ordinal}")
        if not getattr(self._current, "ctx", 0):
            self._current.ctx = self._primaries[ordinal]
        return self._devices[ordinal]

    # -- contexts (a model of the driver's, for tests: see cuasync.emulator) -----------
    def current_context(self) -> int:
        """The context current on this thread (``cuCtxGetCurrent``); 0: none."""
        ctx: int = getattr(self._current, "ctx", 0)
        return ctx

    def set_current_context(self, ctx: int) -> None:
        """Make ``ctx`` current on this thread (``cuCtxSetCurrent``); 0: none."""
        if ctx and ctx not in self._context_device:
            raise DriverError(Code.INVALID_CONTEXT, "cuCtxSetCurrent", f"unknown context {ctx:#x}")
        self._current.ctx = ctx

    def create_context(self, ordinal: int) -> int:
        """A new context on device ``ordinal``, made current on this thread (``cuCtxCreate``)."""
        self._device(ordinal)
        with self._lock:
            ctx = next(self._context_ids)
            self._context_device[ctx] = ordinal
        self._current.ctx = ctx
        return ctx

    def destroy_context(self, ctx: int) -> None:
        """Destroy a :meth:`create_context` context (``cuCtxDestroy``); no longer current."""
        with self._lock:
            if ctx in self._primaries or self._context_device.pop(ctx, None) is None:
                raise DriverError(Code.INVALID_CONTEXT, "cuCtxDestroy", f"not created: {ctx:#x}")
        if self.current_context() == ctx:
            self._current.ctx = 0

    def primary_context(self, ordinal: int) -> int:
        """Device ``ordinal``'s primary context (``cuDevicePrimaryCtxRetain``)."""
        return self._primaries[ordinal]

    def _check(self, device: _Device) -> None:
        if device.fault is not None:
            raise fresh(device.fault)  # sticky: raised by every call, so a copy each time

    def _stream(self, handle: int) -> _Stream:
        """The stream of a call; a thread with no current context gets the primary
        context of the stream's device (as in :meth:`_device`)."""
        self._refuse_in_host_function("stream call")
        try:
            stream = self._streams[handle]
        except KeyError:
            if handle in (1, 2):
                return self._default_stream(handle)
            raise DriverError(
                Code.INVALID_HANDLE, "stream", f"unknown stream {handle:#x}"
            ) from None
        if not getattr(self._current, "ctx", 0):
            self._current.ctx = self._primaries[stream.device.ordinal]
        return stream

    def _default_stream(self, handle: int, device: _Device | None = None) -> _Stream:
        """The legacy (1) or per-thread (2) default stream of ``device`` (default: this
        thread's current device)."""
        if device is None:
            device = self._devices[self._context_device.get(self.current_context(), 0)]
        key = (handle, device.ordinal, threading.get_ident() if handle == 2 else 0)
        with self._lock:
            stream = self._defaults.get(key)
            if stream is None:
                stream = self._defaults[key] = _Stream(self, handle, device)
        with device.lock:
            device.streams.add(stream)
        return stream

    def _event(self, handle: int) -> _Event:
        self._refuse_in_host_function("event call")
        try:
            return self._events[handle]
        except KeyError:
            raise DriverError(Code.INVALID_HANDLE, "event", f"unknown event {handle:#x}") from None

    def _enqueue(self, handle: int, command: Command, device: _Device | None = None) -> None:
        """Put ``command`` on stream ``handle`` (a default handle: of ``device`` if given)."""
        if device is not None and handle in (1, 2):
            self._refuse_in_host_function("stream call")
            stream = self._default_stream(handle, device)
        else:
            stream = self._stream(handle)
        self._check(stream.device)
        self.counts.enqueued += 1
        if stream.capture is not None:
            stream.capture.append(command)
        else:
            stream.put(command)

    def _resolve(self, ptr: int, nbytes: int, owner: _Device | None = None) -> np.ndarray:
        """The bytes ``[ptr, ptr + nbytes)`` of emulated device memory (of ``owner`` if
        given), or an illegal access."""
        device_index = ptr // _DEVICE_WINDOW - 1
        if not 0 <= device_index < len(self._devices):
            raise _IllegalAddress(f"address {ptr:#x} is not device memory")
        device = self._devices[device_index]
        if owner is not None and device is not owner:
            raise _IllegalAddress(
                f"address {ptr:#x} is memory of device {device.ordinal}, not of device "
                f"{owner.ordinal}"
            )
        with device.lock:
            i = bisect.bisect_right(device.bases, ptr) - 1
            base = device.bases[i] if i >= 0 else -1
            buffer = device.buffers.get(base)
        if buffer is None or ptr + nbytes > base + buffer.nbytes:
            raise _IllegalAddress(
                f"{nbytes} bytes at {ptr:#x} are not inside a live allocation "
                "(freed or never allocated)"
            )
        return buffer[ptr - base : ptr - base + nbytes]

    def pointer_device(self, ptr: int) -> int:
        device_index = ptr // _DEVICE_WINDOW - 1
        return device_index if 0 <= device_index < len(self._devices) else -1

    def device_view(self, ptr: int, nbytes: int) -> np.ndarray:
        """Bytes of emulated device memory; raises an illegal-address fault."""
        return self._resolve(ptr, nbytes)

    def _array(self, a: DeviceArray) -> np.ndarray:
        """A writable numpy view of a strided device array, for a twin's arguments."""
        dtype, shape, strides = a.dtype, a.shape, a.strides
        lo = hi = 0  # the elements it touches, [lo, hi) relative to its first
        if all(shape):
            for s, d in zip(strides, shape, strict=True):
                if s < 0:
                    lo += s * (d - 1)
                else:
                    hi += s * (d - 1)
            hi += 1
        size = dtype.itemsize
        raw = self._resolve(a.ptr + lo * size, (hi - lo) * size)
        # as_strided goes through __array_interface__, whose typestr numpy cannot read back
        # for some of ml_dtypes' types (float8_e5m2 says '<f1'): stride their bits instead
        bits = _ML_BITS.get(dtype.name)
        strided = np.lib.stride_tricks.as_strided(
            raw.view(bits or dtype)[-lo:], shape, tuple(s * size for s in strides), writeable=True
        )
        return strided.view(dtype) if bits else strided

    @staticmethod
    def _host_view(address: int, nbytes: int) -> np.ndarray:
        if nbytes == 0:
            return np.empty(0, np.uint8)
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))

    # -- devices -------------------------------------------------------------------
    def device_count(self) -> int:
        return len(self._devices)

    def device_name(self, ordinal: int) -> str:
        self._device(ordinal)
        return f"cuasync emulator device {ordinal}"

    def device_total_memory(self, ordinal: int) -> int:
        return self._device(ordinal).total_memory

    def device_compute_capability(self, ordinal: int) -> tuple[int, int]:
        self._device(ordinal)
        return (9, 0)

    def device_attribute(self, ordinal: int, name: str) -> int:
        self._device(ordinal)
        if name == "pci_bus_id":
            return ordinal
        check_device_attribute(name)
        return PROFILE[name]

    def device_synchronize(self, ordinal: int) -> None:
        device = self._device(ordinal)
        for stream in list(device.streams):
            stream.wait_idle()
        self._check(device)

    def device_fault(self, ordinal: int) -> BaseException | None:
        return self._device(ordinal).fault

    # -- peers ---------------------------------------------------------------------
    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        self._device(ordinal)
        self._device(peer)
        return ordinal != peer and self.peer_capable

    def enable_peer_access(self, ordinal: int, peer: int) -> None:
        if not self.device_can_access_peer(ordinal, peer):
            raise driver_error(
                Code.PEER_ACCESS_UNSUPPORTED,
                "cuCtxEnablePeerAccess",
                f"emulated device {ordinal} cannot access device {peer}",
            )
        self._peers_enabled.add((ordinal, peer))

    def memcpy_peer_async(
        self, dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int, stream: int
    ) -> None:
        dst_device, src_device = self._device(dst_ordinal), self._device(src_ordinal)

        def copy() -> None:
            self._resolve(dst, nbytes, dst_device)[:] = self._resolve(src, nbytes, src_device)

        self._enqueue(stream, copy)
        self.counts.peer_copies += 1

    # -- streams -------------------------------------------------------------------
    def stream_create(self, ordinal: int, priority: int = 0) -> int:
        device = self._device(ordinal)
        self._check(device)
        least, greatest = PRIORITY_RANGE
        priority = min(max(priority, greatest), least)  # clamped, as the driver does
        handle = next(self._handles)
        stream = _Stream(self, handle, device, priority)
        with self._lock:
            self._streams[handle] = stream
        with device.lock:
            device.streams.add(stream)
            if priority < 0:
                device.urgent = (*device.urgent, stream)
        return handle

    def stream_priority_range(self, ordinal: int) -> tuple[int, int]:
        self._device(ordinal)
        return PRIORITY_RANGE

    def stream_priority(self, stream: int) -> int:
        return self._stream(stream).priority

    def stream_destroy(self, stream: int) -> None:
        with self._lock:
            s = self._streams.pop(stream, None)
        if s is None:
            raise DriverError(Code.INVALID_HANDLE, "cuStreamDestroy", f"unknown stream {stream:#x}")
        with s.device.lock:
            s.device.streams.discard(s)
            if s.priority < 0:
                s.device.urgent = tuple(u for u in s.device.urgent if u is not s)
        s.put(None)  # the worker drains what is queued, then exits

    def stream_device(self, stream: int) -> int:
        return self._stream(stream).device.ordinal

    def stream_query(self, stream: int) -> bool:
        s = self._stream(stream)
        if s.capture is not None:
            raise DriverError(
                Code.STREAM_CAPTURE_UNSUPPORTED, "cuStreamQuery", "the stream is capturing"
            )
        self._check(s.device)
        return s.pending == 0

    def stream_synchronize(self, stream: int) -> None:
        s = self._stream(stream)
        if s.capture is not None:
            raise DriverError(
                Code.STREAM_CAPTURE_UNSUPPORTED, "cuStreamSynchronize", "the stream is capturing"
            )
        s.wait_idle()
        self._check(s.device)

    def stream_wait_event(self, stream: int, event: int) -> None:
        e = self._event(event)
        target = e.recorded

        def wait() -> None:
            with e.cond:
                while not e.reached(target) and e.device.fault is None:
                    e.cond.wait(0.05)

        # (a default handle: the default stream of the event's device, as on a GPU here)
        self._enqueue(stream, _Wait(wait, lambda: e.reached(target)), e.device)

    # -- events --------------------------------------------------------------------
    def event_create(self, ordinal: int, *, timing: bool = False) -> int:
        device = self._device(ordinal)
        handle = next(self._handles)
        with self._lock:
            self._events[handle] = _Event(device, timing)
        return handle

    def event_destroy(self, event: int) -> None:
        with self._lock:
            if self._events.pop(event, None) is None:
                raise DriverError(
                    Code.INVALID_HANDLE, "cuEventDestroy", f"unknown event {event:#x}"
                )

    def event_record(self, event: int, stream: int) -> None:
        e = self._event(event)
        if stream not in (1, 2):  # (a default handle: the event's device's default stream)
            self._check(self._stream(stream).device)
        e.recorded += 1
        generation = e.recorded

        def record() -> None:
            with e.cond:
                e.time = time.perf_counter()
                e.completed = max(e.completed, generation)
                e.cond.notify_all()

        self._enqueue(stream, record, e.device)

    def event_query(self, event: int) -> bool:
        e = self._event(event)
        self._check(e.device)
        return e.reached(e.recorded)

    def event_synchronize(self, event: int) -> None:
        e = self._event(event)
        target = e.recorded
        with e.cond:
            while not e.reached(target) and e.device.fault is None:
                e.cond.wait(0.05)
        self._check(e.device)

    def event_elapsed_ms(self, start: int, end: int) -> float:
        a, b = self._event(start), self._event(end)
        if not (a.timing and b.timing):
            raise DriverError(
                Code.INVALID_HANDLE, "cuEventElapsedTime", "events created without timing"
            )
        if not (a.reached(a.recorded) and b.reached(b.recorded)) or not (a.recorded and b.recorded):
            raise DriverError(Code.NOT_READY, "cuEventElapsedTime")
        return (b.time - a.time) * 1e3

    # -- memory --------------------------------------------------------------------
    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        return self._alloc(nbytes, stream, None)

    def _alloc(self, nbytes: int, stream: int, pool: _Pool | None) -> int:
        return self._alloc_on(self._stream(stream).device, nbytes, pool)

    def _alloc_on(
        self, device: _Device, nbytes: int, pool: _Pool | None, pooled: bool = True
    ) -> int:
        """Device memory of ``pool`` (None: the default pool; ``pooled=False``: none,
        as ``cuMemAlloc``)."""
        self._check(device)
        size = max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        with device.lock:
            if device.used + size > device.total_memory:
                raise OutOfMemoryError(nbytes, f"emulated device {device.ordinal} memory")
            try:
                buffer = np.zeros(size, np.uint8)
            except MemoryError:  # the host ran out first: the same error a device gives
                raise OutOfMemoryError(nbytes, f"emulated device {device.ordinal} memory") from None
            device.used += size
            ptr = device.next_address
            if not pooled:
                pass
            elif pool is None:
                device.default_used += size
                device.reserved = max(device.reserved, device.default_used)
            else:
                pool.used += size
                pool.reserved = max(pool.reserved, pool.used)
                device.pool_of[ptr] = pool
            device.next_address += size + _ALIGN  # a gap so overruns are illegal accesses
            device.buffers[ptr] = buffer
            device.bases.append(ptr)  # addresses only grow: the list stays sorted
        return ptr

    def mem_free_async(self, ptr: int, stream: int) -> None:
        device = self._stream(stream).device

        def free() -> None:
            with device.lock:
                buffer = device.buffers.pop(ptr, None)
                if buffer is None:
                    raise _IllegalAddress(f"free of {ptr:#x}, which is not a live allocation")
                device.bases.pop(bisect.bisect_left(device.bases, ptr))
                device.used -= buffer.nbytes
                pool = device.pool_of.pop(ptr, None)
                if pool is None:
                    device.default_used -= buffer.nbytes
                    return
                pool.used -= buffer.nbytes
                pool.reserved = max(pool.used, min(pool.reserved, pool.threshold))

        self._enqueue(stream, free)

    def mem_get_info(self, ordinal: int) -> tuple[int, int]:
        device = self._device(ordinal)
        with device.lock:
            reserved = device.reserved + sum(p.reserved for p in device.pools.values())
            return device.total_memory - reserved, device.total_memory

    def mem_pool_usage(self, ordinal: int) -> tuple[int, int]:
        device = self._device(ordinal)
        with device.lock:
            return device.reserved, device.default_used

    def mem_pool_trim(self, ordinal: int, keep_bytes: int) -> None:
        device = self._device(ordinal)
        with device.lock:
            device.reserved = max(device.default_used, min(device.reserved, keep_bytes))

    # -- explicit memory pools ---------------------------------------------------------
    def pool_create(self, ordinal: int, release_threshold: int) -> int:
        device = self._device(ordinal)
        self._check(device)
        handle = next(self._handles)
        with device.lock:
            device.pools[handle] = _Pool(handle, release_threshold)
        with self._lock:
            self._pool_device[handle] = device
        return handle

    def _pool(self, handle: int) -> tuple[_Device, _Pool]:
        device = self._pool_device.get(handle)
        pool = None if device is None else device.pools.get(handle)
        if device is None or pool is None:
            raise DriverError(Code.INVALID_HANDLE, "memory pool", f"unknown pool {handle:#x}")
        return device, pool

    def pool_set_release_threshold(self, pool: int, nbytes: int) -> None:
        device, found = self._pool(pool)
        with device.lock:
            found.threshold = nbytes

    def pool_alloc_async(self, nbytes: int, pool: int, stream: int) -> int:
        device, found = self._pool(pool)
        if self._stream(stream).device is not device:
            raise DriverError(
                Code.INVALID_VALUE,
                "cuMemAllocFromPoolAsync",
                f"a pool of device {device.ordinal} on a stream of another device",
            )
        return self._alloc(nbytes, stream, found)

    def pool_usage(self, pool: int) -> tuple[int, int]:
        device, found = self._pool(pool)
        with device.lock:
            return found.reserved, found.used

    def pool_trim(self, pool: int, keep_bytes: int) -> None:
        device, found = self._pool(pool)
        with device.lock:
            found.reserved = max(found.used, min(found.reserved, keep_bytes))

    def host_alloc(self, nbytes: int) -> int:
        try:
            buffer = np.zeros(max(nbytes, 1) + 64, np.uint8)
        except (MemoryError, ValueError):  # ValueError: more than numpy can index
            raise OutOfMemoryError(nbytes, "pinned host memory") from None
        start = buffer.ctypes.data
        address = start + (-start) % 64
        with self._lock:
            self._host[address] = buffer
            self._host_ends[address] = start + buffer.nbytes
            bisect.insort(self._host_starts, address)
        return address

    def host_free(self, ptr: int) -> None:
        self._refuse_in_host_function("cuMemFreeHost")
        # As the driver: freeing page-locked memory waits until the devices have finished
        # the work queued before it (a synchronizing call), so a free made with work held
        # behind a host-side wait blocks its thread here too. Not on a stream's own
        # thread: a finalizer the emulated work's Python set off (a collection inside a
        # numpy twin), which no GPU would run, must not wait for that work.
        if not getattr(_device_thread, "active", False):
            for device in self._devices:
                for stream in list(device.streams):
                    stream.wait_idle()
        with self._lock:
            if self._host.pop(ptr, None) is None:
                raise DriverError(
                    Code.INVALID_VALUE, "cuMemFreeHost", f"{ptr:#x} is not pinned memory"
                )
            del self._host_starts[bisect.bisect_left(self._host_starts, ptr)]
            del self._host_ends[ptr]

    def _count_pageable(self, address: int, nbytes: int) -> None:
        """Count a copy whose host bytes are not inside one pinned block."""
        with self._lock:
            i = bisect.bisect_right(self._host_starts, address) - 1
            end = self._host_ends[self._host_starts[i]] if i >= 0 else -1
            if address + nbytes > end:
                self.counts.pageable_copies += 1

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._count_pageable(src, nbytes)

        def copy() -> None:
            self._resolve(dst, nbytes)[:] = self._host_view(src, nbytes)

        self._enqueue(stream, copy)

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._count_pageable(dst, nbytes)

        def copy() -> None:
            self._host_view(dst, nbytes)[:] = self._resolve(src, nbytes)

        self._enqueue(stream, copy)

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        def copy() -> None:
            self._resolve(dst, nbytes)[:] = self._resolve(src, nbytes)

        self._enqueue(stream, copy)

    def memcpy_2d_async(
        self,
        dst: int,
        dst_pitch: int,
        src: int,
        src_pitch: int,
        width: int,
        height: int,
        stream: int,
        kind: str,
    ) -> None:
        if kind not in ("htod", "dtoh", "dtod"):
            raise DriverError(Code.INVALID_VALUE, "cuMemcpy2DAsync", f"kind {kind!r}")
        if height > 1 and min(src_pitch, dst_pitch) < width:
            # the driver's contract: WidthInBytes exceeds neither pitch (a GPU given a
            # pitch-0 source does not broadcast its row; it reads other memory)
            raise DriverError(
                Code.INVALID_VALUE,
                "cuMemcpy2DAsync",
                f"WidthInBytes {width} exceeds srcPitch {src_pitch} or dstPitch {dst_pitch}",
            )
        src_view = self._host_view if kind == "htod" else self._resolve
        dst_view = self._host_view if kind == "dtoh" else self._resolve
        if kind != "dtod" and height and width:
            host, pitch = (src, src_pitch) if kind == "htod" else (dst, dst_pitch)
            self._count_pageable(host, pitch * (height - 1) + width)

        def copy() -> None:
            if height == 0 or width == 0:
                return
            span_src = src_pitch * (height - 1) + width
            span_dst = dst_pitch * (height - 1) + width
            s = np.lib.stride_tricks.as_strided(
                src_view(src, span_src), (height, width), (src_pitch, 1)
            )
            d = np.lib.stride_tricks.as_strided(
                dst_view(dst, span_dst), (height, width), (dst_pitch, 1)
            )
            d[...] = s

        self._enqueue(stream, copy)

    def memset_d8_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        def memset() -> None:
            self._resolve(ptr, nbytes)[:] = value & 0xFF

        self._enqueue(stream, memset)

    # -- completion primitives -----------------------------------------------------
    def write_value32(self, stream: int, address: int, value: int) -> None:
        value &= 0xFFFFFFFF
        if _store32 is not None:

            def write() -> None:  # a release store, ordered after the work's writes
                try:
                    _store32(address, value)
                except ValueError:  # not a word of a reactor's slab: store32 refuses those
                    ctypes.c_uint32.from_address(address).value = value

        else:
            word = ctypes.c_uint32.from_address(address)

            def write() -> None:
                word.value = value

        self._enqueue(stream, write)

    # -- cancel words --------------------------------------------------------------
    def device_words_alloc(self, ordinal: int, nbytes: int, stream: int) -> int:
        self._stream(stream)  # (checked as a GPU's call would)
        return self._alloc_on(self._device(ordinal), nbytes, None, pooled=False)  # zeroed

    def write_device_word(self, stream: int, address: int, value: int) -> None:
        word = self._resolve(address, 4, self._stream(stream).device).view(np.uint32)
        value &= 0xFFFFFFFF

        def write() -> None:
            word[0] = value

        self._enqueue(stream, write)

    def _cancelled(self, word: int, device: _Device) -> bool:
        """Whether a launch's cancel word (see ``cuasync/kernels/cancel.cuh``) holds its
        generation, read when the kernel runs, as each block of a GPU kernel reads it
        when it starts: a word in ``device``'s memory (another's is an illegal access)."""
        if not word:
            return False
        address = word & ((1 << CANCEL_ADDRESS_BITS) - 1)
        held = self._resolve(address, 4, device).view(np.uint32)[0]
        return int(held) == word >> CANCEL_ADDRESS_BITS

    def stream_wait_value32(self, stream: int, address: int, value: int) -> None:
        word = ctypes.c_uint32.from_address(address)
        value &= 0xFFFFFFFF
        device = self._stream(stream).device

        def reached() -> bool:
            return ((word.value - value) & 0xFFFFFFFF) < 0x80000000

        def wait() -> None:
            # The emulated device polls the word, as the GPU's front end does; the pause
            # grows to 1 ms so that a long wait costs little CPU.
            pause = 1e-5
            while not reached() and device.fault is None:
                time.sleep(pause)
                pause = min(pause * 2, 1e-3)

        self._enqueue(stream, _Wait(wait, reached, on_host=True))

    def host_task_modes_problem(self) -> str | None:
        return None  # accepted, and modelled as plain host functions (one worker per stream)

    def launch_host_func(
        self, stream: int, fn: Callable[[], None], sync_mode: int | None = None
    ) -> None:
        def host() -> None:
            _host_function.active = True
            try:
                fn()
            except BaseException as exc:  # as on a driver thread: nothing unwinds further
                report_unraisable(
                    exc, fn, "Exception ignored in cuasync host function", "cuasync.host"
                )
            finally:
                _host_function.active = False

        self._enqueue(stream, host)

    def launch_host_signal(
        self, stream: int, fn: int, data: int, sync_mode: int | None = None
    ) -> None:
        c_fn = _HOST_FN_TYPE(fn)  # a foreign call: no GIL held, as on a driver thread

        def host() -> None:
            c_fn(data)

        self._enqueue(stream, host)

    # -- modules and kernels ---------------------------------------------------------
    def module_load(self, ordinal: int, image: bytes) -> int:
        raise DeviceError(
            "the emulator cannot run cubin or PTX images; give the kernel an emulate= function "
            "or run with CUASYNC_BACKEND=cuda on a machine with a GPU"
        )

    def load_twins(self, ordinal: int, twins: dict[str, Callable[..., Any]]) -> int:
        """A module handle whose functions are the numpy ``twins`` by name (a knob: what
        an image is to the driver, for :meth:`cuasync.Module.from_handle`)."""
        self._device(ordinal)
        handle = next(self._handles)
        with self._lock:
            self._modules[handle] = (ordinal, dict(twins))
        return handle

    def module_unload(self, module: int) -> None:
        with self._lock:
            found = self._modules.pop(module, None)
            if found is not None:
                for function in [f for f, (m, _) in self._functions.items() if m == module]:
                    del self._functions[function]
        if found is None:
            raise DriverError(Code.INVALID_HANDLE, "cuModuleUnload", f"unknown module {module:#x}")

    def module_function(self, module: int, name: str) -> int:
        with self._lock:
            found = self._modules.get(module)
            if found is None:
                raise DriverError(
                    Code.INVALID_HANDLE, "cuModuleGetFunction", f"unknown module {module:#x}"
                )
            if name not in found[1]:
                raise DriverError(Code.NOT_FOUND, "cuModuleGetFunction", f"no function {name!r}")
            for function, key in self._functions.items():
                if key == (module, name):
                    return function
            function = next(self._handles)
            self._functions[function] = (module, name)
            return function

    def function_name(self, function: int) -> str:
        found = self._functions.get(function)
        return "" if found is None else found[1]

    def _twin_of(self, ordinal: int, kernel: KernelCode) -> Callable[..., Any] | None:
        """The twin a borrowed module or function brings (None for a compiled kernel)."""
        if kernel.function_handle:
            with self._lock:
                key = self._functions.get(kernel.function_handle)
            if key is None:
                raise DriverError(
                    Code.INVALID_HANDLE,
                    "cuLaunchKernel",
                    f"{kernel.function_handle:#x} is not a function the emulator issued "
                    "(cuasync.emulator.load_module and module_function issue them)",
                )
            module, name = key
        elif kernel.module_handle:
            module = kernel.module_handle
            self.module_function(module, kernel.name)  # raises for an unknown module or name
            name = kernel.name
        else:
            return None
        with self._lock:
            owner, twins = self._modules[module]
        if owner != ordinal:
            raise DriverError(
                Code.INVALID_HANDLE,
                "cuModuleGetFunction",
                f"module {module:#x} was loaded on device {owner}, not {ordinal}",
            )
        return twins[name]

    def prepare_kernel(
        self, ordinal: int, kernel: KernelCode, *, compile_only: bool = False
    ) -> _EmulatedKernel:
        device = self._device(ordinal)
        if kernel not in device.loaded:  # a GPU keeps a loaded module: loads it once
            self._refuse_load_behind_host_wait(device, kernel.name)
            device.loaded.add(kernel)
        borrowed = self._twin_of(ordinal, kernel)
        if borrowed is not None:
            return _EmulatedKernel(kernel, ordinal, kernel.emulate or borrowed)
        # The twin runs, but a source that NVRTC rejects must fail here as it would on
        # a GPU, or broken device code passes CI.
        if self._compiles():
            kernel.check_compiles(self.arch(ordinal))
        if kernel.emulate is None and not compile_only:
            raise LaunchError(
                f"kernel {kernel.name!r} has no emulate= function, so it cannot run on the "
                "emulator backend; pass emulate=<numpy function taking the same arguments> to "
                "cuasync.Kernel, or run with CUASYNC_BACKEND=cuda on a GPU"
            )
        return _EmulatedKernel(kernel, ordinal)

    @staticmethod
    def _refuse_load_behind_host_wait(device: _Device, name: str) -> None:
        """A GPU may synchronize the context to load a kernel (CUDA's lazy loading): with
        a stream of the device held by a host-memory wait (a ``cuasync.testing.gate``),
        that load waits for the gate, which the loading thread was to open: a hang on
        the H200. The emulator says so instead of passing where a GPU would hang.

        Like the GPU it first waits for the holds to clear, for a bounded time: words
        that other threads write (the chunked staging of a large ``from_host``) clear
        on their own, and the load goes on, as it would on a GPU."""
        with device.lock:
            streams = list(device.streams)
        deadline = time.monotonic() + _LOAD_WAIT_S
        pause = 1e-4
        while any(s.held_by_host() for s in streams) and time.monotonic() < deadline:
            time.sleep(pause)  # a host word changes without notice: look again
            pause = min(pause * 2, 0.01)
        if any(s.held_by_host() for s in streams):
            raise UsageError(
                f"kernel {name!r} is loaded for the first time while a gate holds streams of "
                f"device {device.ordinal}; on a GPU, loading a kernel may synchronize the "
                "device (CUDA lazy loading) and so wait for the gate forever. Load it "
                "before closing the gate: run the op once, or `await cuasync.warmup(op)` "
                "(an op like it: it is not run), or kernel.compile(device) for a Kernel"
            )

    @staticmethod
    def _compiles() -> bool:
        """Whether kernel sources are compiled to check them (``CUASYNC_EMU_COMPILE``)."""
        mode = _config.CONFIG.emu_compile
        if mode == "off":
            return False
        problem = _nvrtc.nvrtc_problem()
        if problem is not None and mode == "on":
            raise KernelCompileError(
                "CUASYNC_EMU_COMPILE=on: the emulator compiles every kernel's source, but NVRTC "
                f"cannot be used: {problem}. Install it ('pip install nvidia-cuda-nvrtc'), or "
                "set CUASYNC_EMU_COMPILE=auto to skip the compile where NVRTC is missing"
            )
        return problem is None

    def _launch_kernel(
        self,
        kernel: _EmulatedKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        errors: Callable[[], list[BaseException]],
        flag_address: int = 0,
        flag_value: int = 0,
    ) -> None:
        twin, name, pointers, array = kernel.twin, kernel.name, kernel.pointers, self._array
        # scalars become numpy scalars of their C type; arrays are viewed when the twin runs
        values = [a if t is None else t(a) for a, t in zip(args, kernel.scalars, strict=True)]
        box = errors()

        if twin is None:
            raise LaunchError(f"kernel {name!r} was prepared with compile_only: it has no twin")
        if shared_mem > _DYNAMIC_SHARED_MAX:  # as the driver, for a kernel that did not opt in
            raise DriverError(
                Code.INVALID_VALUE,
                "cuLaunchKernel",
                f"{name} asks for {shared_mem} bytes of dynamic shared memory; a kernel gets "
                f"at most {_DYNAMIC_SHARED_MAX} without cuFuncSetAttribute",
            )
        device = self._stream(stream).device
        if device.ordinal != kernel.ordinal:  # as the driver: a function is of one context
            raise DriverError(
                Code.INVALID_HANDLE,
                "cuLaunchKernel",
                f"{name} was prepared for device {kernel.ordinal}, the stream is of device "
                f"{device.ordinal}",
            )

        cancel = kernel.cancel

        def run() -> None:
            try:
                call = list(values)  # a graph replays this command: values stay as given
                if cancel and self._cancelled(int(call.pop()), device):
                    self.counts.skipped += 1  # the kernel returned at once: no work done
                    return
                for i in pointers:
                    if not isinstance(call[i], int):  # an int is a raw address: as it is
                        call[i] = array(call[i])
                twin(*call)
            except Exception as exc:
                # A bug in this launch's twin fails this submission, not the device:
                # only real faults (EmulatedFault: illegal address, trap) are sticky.
                error = KernelError(f"the emulated kernel {name!r} raised {exc!r}")
                error.__cause__ = exc
                _failed(box, error)

        self._enqueue(stream, run)
        if flag_address:
            self.write_value32(stream, flag_address, flag_value)

    def gemm(
        self,
        stream: int,
        a: DeviceArray,
        b: DeviceArray,
        c: DeviceArray,
        alpha: complex,
        beta: complex,
        precision: str,
        errors: Callable[[], list[BaseException]],
    ) -> None:
        # numpy on the stream's worker: float16/bfloat16 in float32, TF32 by rounding.
        box = errors()
        shapes = (a.shape, a.strides, b.shape, b.strides, c.shape, c.strides)
        arrays = [_Strided(a.ptr, a.dtype, *shapes[0:2]), _Strided(b.ptr, b.dtype, *shapes[2:4])]
        out = _Strided(c.ptr, c.dtype, *shapes[4:6])
        array = self._array

        def run() -> None:
            try:
                dst = array(out)
                work = dst.dtype if dst.dtype.kind in "fc" and dst.itemsize >= 4 else np.float32
                if dst.dtype.kind in "iu":  # cuBLAS's int8 GEMM: exact, int32 out
                    work = np.dtype(np.int64)
                if a.shape[2] == 0:  # k == 0: nothing to read from a and b
                    r = np.zeros(dst.shape, work)
                else:
                    x, y = (array(v).astype(work) for v in arrays)
                    if precision == "tf32":
                        x, y = to_tf32(x), to_tf32(y)
                    r = np.matmul(x, y)
                with np.errstate(over="ignore"):  # (scales past the dtype: inf, as in C)
                    if alpha != 1:
                        r = r * (alpha if np.iscomplexobj(r) else alpha.real)
                    if beta != 0:
                        r = r + dst.astype(work) * (beta if np.iscomplexobj(r) else beta.real)
                    dst[...] = r.astype(dst.dtype)
            except Exception as exc:
                error = KernelError(f"the emulated matrix product raised {exc!r}")
                error.__cause__ = exc
                _failed(box, error)

        self._enqueue(stream, run)

    def launch_emulated(self, stream: int, fn: Callable[[], None]) -> None:
        """Run ``fn`` as device work on ``stream``; an exception faults the device."""
        self._enqueue(stream, fn)

    # -- guarded regions and graphs -----------------------------------------------
    @contextlib.contextmanager
    def guarded(self, stream: int, word: int, guard: int) -> Iterator[None]:
        # The GPU's conditional node: the region's commands held back, run as one command
        # that first reads the word (as the guard kernel does when the graph starts).
        self.stream_begin_capture(stream)
        s = self._stream(stream)
        body: list[Command] = []
        try:
            yield
        finally:
            body, s.capture = s.capture or [], None
        device = s.device

        def region() -> None:
            if self._cancelled(word, device):
                self.counts.skipped += 1
                return
            for command in body:
                command()

        self._enqueue(stream, region)

    def stream_begin_capture(self, stream: int, mode: int = CAPTURE_RELAXED) -> None:
        s = self._stream(stream)
        self._check(s.device)
        if s.capture is not None:
            raise DriverError(
                Code.STREAM_CAPTURE_UNSUPPORTED, "cuStreamBeginCapture", "already capturing"
            )
        s.capture = []

    def stream_end_capture(self, stream: int) -> int:
        s = self._stream(stream)
        if s.capture is None:
            raise DriverError(
                Code.INVALID_VALUE, "cuStreamEndCapture", "the stream is not capturing"
            )
        commands, s.capture = s.capture, None
        handle = next(self._handles)
        self._graphs[handle] = _Graph(commands)
        return handle

    def stream_is_capturing(self, stream: int) -> bool:
        return self._stream(stream).capture is not None

    def graph_instantiate(self, graph: int) -> int:
        try:
            commands = list(self._graphs[graph].commands)
        except KeyError:
            raise DriverError(Code.INVALID_HANDLE, "cuGraphInstantiate") from None
        handle = next(self._handles)
        self._execs[handle] = commands
        return handle

    def graph_upload(self, graph_exec: int, stream: int) -> None:
        if graph_exec not in self._execs:
            raise DriverError(Code.INVALID_HANDLE, "cuGraphUpload")

    def graph_launch(
        self,
        graph_exec: int,
        stream: int,
        errors: Callable[[], list[BaseException]] | None = None,
    ) -> None:
        try:
            commands = self._execs[graph_exec]
        except KeyError:
            raise DriverError(Code.INVALID_HANDLE, "cuGraphLaunch") from None
        box = None if errors is None else errors()
        for command in commands:
            self._enqueue(stream, command if box is None else _replaying(command, box))

    def graph_destroy(self, graph: int) -> None:
        if self._graphs.pop(graph, None) is None:
            raise DriverError(Code.INVALID_HANDLE, "cuGraphDestroy")

    def graph_exec_destroy(self, graph_exec: int) -> None:
        if self._execs.pop(graph_exec, None) is None:
            raise DriverError(Code.INVALID_HANDLE, "cuGraphExecDestroy")
