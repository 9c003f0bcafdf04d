"""The CUDA backend: :class:`~cuasync._backends.base.Backend` on ``cuda.bindings.driver``.

What lives here:

* :func:`probe` says whether this backend can run on this machine (driver present,
  ``cuInit`` succeeds, at least one device) and, if not, why, in one line.
* :class:`CudaBackend` maps every backend method onto one driver call. Handles are
  plain ints in and out; the backend remembers which device each stream, event,
  module and graph it created belongs to, so that it can make that device's primary
  context current on the calling thread before the call (a per-thread cache of the
  current ordinal keeps that to one comparison on the hot path).
* The caller's context: a method that made a context current puts the one it found
  back before it returns (:meth:`CudaBackend._switch` says which, ``_put_back`` restores
  it), so code mixing cuasync with torch, CuPy or Numba keeps its own current context.
  A thread with no context current keeps the device's primary context, as after a
  CUDA runtime call. When the current context already is the device's primary one
  (the cache says so), no driver call is added.
* Errors: every ``CUresult`` other than ``CUDA_SUCCESS`` becomes a
  :class:`~cuasync.errors.DriverError` (or the subclass that fits); a sticky code
  (:data:`~cuasync.errors.STICKY_CODES`) is remembered per device and reported by
  :meth:`CudaBackend.device_fault`.
* The host-function trampoline: one ``ctypes`` C callback, created once, that runs
  the Python callables queued with :meth:`CudaBackend.launch_host_func`.

``cuda.bindings`` is imported lazily, so importing this module never fails on a
machine without an NVIDIA driver.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .._curesult import STICKY, Code
from .._exceptions import report_unraisable
from .._native import NATIVE
from .._native import NATIVE as _reactor
from ..errors import (
    ArgumentError,
    BackendUnavailableError,
    DriverError,
    InvalidDeviceError,
    OutOfMemoryError,
    driver_error,
)
from ._params import ParamBlock
from .base import (
    CAPTURE_RELAXED,
    LEGACY_STREAM,
    PER_THREAD_STREAM,
    Backend,
    KernelCode,
    PreparedKernel,
    check_device_attribute,
)
from .conditional import ENTRY_POINTS as _CONDITIONAL_ENTRY_POINTS
from .conditional import ConditionalGraph
from .conditional import Driver as _ConditionalDriver
from .cublas import Blas

__all__ = ["CudaBackend", "probe"]

_memory_log = logging.getLogger("cuasync.memory")

#: ``cuda.bindings.driver`` once :func:`_load_driver` has imported it.
_d: Any = None

# CUresult codes the backend branches on, as plain ints (CUresult is an int subclass in
# cuda.bindings): the hot paths compare against them.
_NOT_READY = int(Code.NOT_READY)
_OUT_OF_MEMORY = int(Code.OUT_OF_MEMORY)
# Codes that may mean "another library switched this thread's current context".
_CONTEXT_CODES = frozenset(
    int(c) for c in (Code.INVALID_CONTEXT, Code.INVALID_HANDLE, Code.CONTEXT_IS_DESTROYED)
)
_QUERIES = frozenset({"cuStreamQuery", "cuEventQuery"})
#: The default streams' handles: which stream they name depends on the current context.
_DEFAULT_HANDLES = (LEGACY_STREAM, PER_THREAD_STREAM)

# Values of driver flags and enums (checked against cuda.bindings 13.4 at load time).
_STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING
_EVENT_DEFAULT = 0  # CU_EVENT_DEFAULT
_EVENT_DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING
_HOSTALLOC_FLAGS = 0x1 | 0x2  # CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP
_MEMORYTYPE_HOST = 1  # CU_MEMORYTYPE_HOST
_MEMORYTYPE_DEVICE = 2  # CU_MEMORYTYPE_DEVICE
_LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_ACCESS_READWRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_UINT64_MAX = (1 << 64) - 1

# Filled by _load_driver(): enum members that cuda.bindings wants as enums, not ints.
_ATTR_CC_MAJOR: Any = None
_ATTR_CC_MINOR: Any = None
_ATTR_STREAM_MEM_OPS: Any = None
_POOL_RELEASE_THRESHOLD: Any = None
_POOL_RESERVED_CURRENT: Any = None
_POOL_USED_CURRENT: Any = None
_CAPTURE_MODES: tuple[Any, ...] = ()
_CAPTURE_STATUS_NONE = 0  # CU_STREAM_CAPTURE_STATUS_NONE
_PROC_ADDRESS_DEFAULT = 0  # CU_GET_PROC_ADDRESS_DEFAULT
_PROC_ADDRESS_SUCCESS = 0  # CU_GET_PROC_ADDRESS_SUCCESS

_load_lock = threading.Lock()

#: ``CUdevice_attribute`` members by cuasync's name (``device_attribute``), looked up once.
_ATTRIBUTES: dict[str, Any] = {}


def _attribute_enum(name: str) -> Any:
    """The ``CUdevice_attribute`` member ``CU_DEVICE_ATTRIBUTE_<NAME>`` of ``name``."""
    check_device_attribute(name)
    member = getattr(_d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name.upper()}", None)
    if member is None:
        raise driver_error(
            Code.NOT_SUPPORTED,
            "cuDeviceGetAttribute",
            f"the installed cuda-bindings have no CU_DEVICE_ATTRIBUTE_{name.upper()}",
        )
    return member


def _no_fence() -> None:
    pass


class _FencedDriver:
    """``cuda.bindings.driver`` whose functions first wait for the native submitter's
    queued launches (``fence``): what the backend enqueues after them follows them.

    >>> _d = _FencedDriver(_d, submitter.fence)   # (CudaBackend.make_submitter)
    """

    def __init__(self, driver: Any, fence: Callable[[], None]) -> None:
        self._driver = driver
        self._fence = fence

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._driver, name)
        if callable(value) and not isinstance(value, type):
            value = self._fenced(value, name)
        setattr(self, name, value)  # looked up once
        return value

    def _fenced(self, call: Callable[..., Any], name: str) -> Callable[..., Any]:
        def fenced(*args: Any) -> Any:
            self._fence()
            return call(*args)

        fenced.__name__ = fenced.__qualname__ = name
        return fenced


def _load_driver() -> Any:
    """Import ``cuda.bindings.driver`` and cache the enum members the backend uses."""
    global _d, _ATTR_CC_MAJOR, _ATTR_CC_MINOR, _ATTR_STREAM_MEM_OPS
    global _POOL_RELEASE_THRESHOLD, _POOL_RESERVED_CURRENT, _POOL_USED_CURRENT, _CAPTURE_MODES
    if _d is not None:
        return _d
    with _load_lock:
        if _d is not None:
            return _d
        from cuda.bindings import driver

        attr = driver.CUdevice_attribute
        _ATTR_CC_MAJOR = attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        _ATTR_CC_MINOR = attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
        # Named CAN_USE_STREAM_MEM_OPS before CUDA 12 and ..._V1 since.
        _ATTR_STREAM_MEM_OPS = getattr(
            attr,
            "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1",
            getattr(attr, "CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS", None),
        )
        pool_attr = driver.CUmemPool_attribute
        _POOL_RELEASE_THRESHOLD = pool_attr.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        _POOL_RESERVED_CURRENT = pool_attr.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT
        _POOL_USED_CURRENT = pool_attr.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
        mode = driver.CUstreamCaptureMode
        _CAPTURE_MODES = (
            mode.CU_STREAM_CAPTURE_MODE_GLOBAL,
            mode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            mode.CU_STREAM_CAPTURE_MODE_RELAXED,
        )
        assert int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING) == _STREAM_NON_BLOCKING
        assert int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING) == _EVENT_DISABLE_TIMING
        assert driver.CU_MEMHOSTALLOC_PORTABLE | driver.CU_MEMHOSTALLOC_DEVICEMAP == (
            _HOSTALLOC_FLAGS
        )
        assert int(driver.CUmemorytype.CU_MEMORYTYPE_HOST) == _MEMORYTYPE_HOST
        assert int(driver.CUmemorytype.CU_MEMORYTYPE_DEVICE) == _MEMORYTYPE_DEVICE
        assert int(driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE) == _LOCATION_DEVICE
        assert int(driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE) == (
            _ACCESS_READWRITE
        )
        _d = driver
        return driver


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _cuda_version(version: int) -> str:
    """``12080`` → ``"12.8"`` (the driver API's 1000 * major + 10 * minor)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _driver_too_old(driver: Any) -> str | None:
    """Why the driver cannot serve these bindings (an older CUDA major), or None."""
    err, version = driver.cuDriverGetVersion()  # answers with or without cuInit
    if err:
        return None  # cuInit's own error says more
    major = int(driver.CUDA_VERSION) // 1000  # the CUDA headers the bindings were built on
    if int(version) >= major * 1000:
        return None
    old = int(version) // 1000
    return (
        f"the NVIDIA driver supports CUDA {_cuda_version(int(version))}, but cuda-bindings "
        f"{major} needs a driver for CUDA {major}.0 or newer; upgrade the NVIDIA driver"
        f"{' (R580 or newer)' if major == 13 else ''}, or install cuda-bindings {old} with "
        f"nvidia-cuda-nvrtc-cu{old} (that combination is not tested)"
    )


def _init_driver() -> tuple[Any, str | None]:
    """Load the bindings and run ``cuInit(0)``; return ``(driver, reason_or_None)``."""
    try:
        driver = _load_driver()
    except Exception as exc:
        return None, f"cuda-bindings could not be imported ({_one_line(exc)})"
    try:
        (err,) = driver.cuInit(0)
        # Checked before cuInit's result: a driver older than the bindings may fail
        # cuInit (or calls after it) with a code that does not say why.
        too_old = _driver_too_old(driver)
    except Exception as exc:
        # cuda.pathfinder's DynamicLibNotFoundError (a RuntimeError) or an OSError
        # when libcuda.so.1 is missing; anything else is reported as it is.
        name = type(exc).__name__
        if "DynamicLib" in name or "NotFound" in name or isinstance(exc, OSError):
            return None, "no NVIDIA driver found (libcuda could not be loaded)"
        return None, f"the CUDA driver could not be initialised ({_one_line(exc)})"
    if too_old is not None:
        return None, too_old
    if err:
        if int(err) == Code.NO_DEVICE:
            return None, "no CUDA-capable device is present (cuInit: CUDA_ERROR_NO_DEVICE)"
        return None, f"cuInit failed: {driver_error(int(err), 'cuInit')}"
    try:
        err, count = driver.cuDeviceGetCount()
    except Exception as exc:
        return None, f"cuDeviceGetCount failed ({_one_line(exc)})"
    if err:
        return None, f"cuDeviceGetCount failed: {driver_error(int(err), 'cuDeviceGetCount')}"
    if count < 1:
        return None, "the NVIDIA driver sees no device (check CUDA_VISIBLE_DEVICES)"
    return driver, None


def probe() -> str | None:
    """None when the CUDA backend can run here, else a one-line reason why not.

    Loads the driver and runs ``cuInit(0)`` and ``cuDeviceGetCount``; creates no
    context. Never raises.
    """
    try:
        return _init_driver()[1]
    except Exception as exc:  # pragma: no cover - defensive: probe must never raise
        return f"the CUDA backend could not be probed ({_one_line(exc)})"


# -- host functions ------------------------------------------------------------------
# One C callback for every cuLaunchHostFunc: userData is an integer id that selects
# the Python callable in _host_fns. cuda.bindings calls the trampoline with the GIL
# held (from a driver thread); ctypes makes that safe.

_host_fns: dict[int, Callable[[], None]] = {}
_host_ids = itertools.count(1)  # 0 would be passed as NULL


def _run_host_fn(data: int | None) -> None:
    fn = _host_fns.pop(data or 0, None)
    if fn is None:
        return
    try:
        fn()
    except BaseException as exc:  # never let anything unwind into the driver
        report_unraisable(exc, fn, "Exception ignored in cuasync host function", "cuasync.host")


_HOST_FN_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_trampoline = _HOST_FN_TYPE(_run_host_fn)  # kept alive for the life of the process
_TRAMPOLINE_ADDRESS: int = ctypes.cast(_trampoline, ctypes.c_void_p).value or 0


# -- 2D copies -----------------------------------------------------------------------
_KINDS_2D = {
    "htod": (_MEMORYTYPE_HOST, _MEMORYTYPE_DEVICE),
    "dtoh": (_MEMORYTYPE_DEVICE, _MEMORYTYPE_HOST),
    "dtod": (_MEMORYTYPE_DEVICE, _MEMORYTYPE_DEVICE),
}


def _memcpy2d_params(
    dst: int, dst_pitch: int, src: int, src_pitch: int, width: int, height: int, kind: str
) -> Any:
    """A filled ``CUDA_MEMCPY2D`` for :meth:`CudaBackend.memcpy_2d_async`."""
    try:
        src_type, dst_type = _KINDS_2D[kind]
    except KeyError:
        raise ArgumentError(
            f"memcpy_2d_async: kind must be 'htod', 'dtoh' or 'dtod'; got {kind!r}"
        ) from None
    p = _load_driver().CUDA_MEMCPY2D()
    p.srcMemoryType = src_type
    p.dstMemoryType = dst_type
    if src_type == _MEMORYTYPE_HOST:
        p.srcHost = src
    else:
        p.srcDevice = src
    if dst_type == _MEMORYTYPE_HOST:
        p.dstHost = dst
    else:
        p.dstDevice = dst
    p.srcPitch = src_pitch
    p.dstPitch = dst_pitch
    p.WidthInBytes = width
    p.Height = height
    return p


class _CudaKernel(PreparedKernel):
    """A loaded ``CUfunction`` and the parameter block its launches pack into."""

    __slots__ = ("params",)

    def __init__(self, kernel: KernelCode, ordinal: int, function: int) -> None:
        super().__init__(kernel.name, ordinal, function)
        self.params = ParamBlock(kernel.params)


def _current() -> Any:
    """The ordinal whose primary context this backend last made current on this thread
    (``.ordinal``, -1 at first): the native module's ``CurrentOrdinal``, a C int per
    thread, which the express core reads without a lookup."""
    return NATIVE.CurrentOrdinal()


class CudaBackend(Backend):
    """The driver semantics of cuasync, on a real GPU through ``cuda.bindings``.

    One instance per process is enough; it is thread-safe. Raises
    :class:`~cuasync.errors.BackendUnavailableError` when the driver cannot be used
    (see :func:`probe`).
    """

    name = "cuda"
    driver_handles = True
    more_devices_hint = "CUDA_VISIBLE_DEVICES decides which GPUs this process sees"

    def __init__(self) -> None:
        super().__init__()
        driver, reason = _init_driver()
        if reason is not None:
            raise BackendUnavailableError(f"the cuda backend cannot run here: {reason}")
        # Reentrant: the cyclic GC may run a finalizer that frees pinned memory
        # (host_free takes this lock) on a thread already inside a critical section.
        self._lock = threading.RLock()
        self._tls = _current()
        self.current = self._tls  # (the express path's check; see Backend.fast_launch)
        self._faults: dict[int, DriverError] = {}
        err, version = driver.cuDriverGetVersion()
        self._check(err, "cuDriverGetVersion")
        #: CUDA version the driver supports, as 1000 * major + 10 * minor.
        self.driver_version: int = int(version)
        err, count = driver.cuDeviceGetCount()
        self._check(err, "cuDeviceGetCount")
        self._count = int(count)
        self._devices: list[Any] = []  # CUdevice per ordinal
        for ordinal in range(self._count):
            err, dev = driver.cuDeviceGet(ordinal)
            self._check(err, "cuDeviceGet")
            self._devices.append(dev)
        self._device_ordinal = {int(dev): i for i, dev in enumerate(self._devices)}
        self._contexts: dict[int, Any] = {}  # ordinal -> retained primary CUcontext
        self._context_ordinal: dict[int, int] = {}  # int(CUcontext) -> ordinal
        self._pools_configured: set[int] = set()
        self._pools: dict[int, Any] = {}  # ordinal -> CUmemoryPool
        self._user_pools: dict[int, tuple[Any, int]] = {}  # handle -> (CUmemoryPool, ordinal)
        self._can_access_peer: dict[tuple[int, int], bool] = {}  # (ordinal, peer) -> answer
        self._peers_enabled: set[tuple[int, int]] = set()  # (ordinal, peer): ordinal reaches peer
        # handle -> ordinal, for what this backend created.
        self._streams: dict[int, int] = {}
        self._events: dict[int, int] = {}
        self._modules: dict[int, int] = {}
        self._graphs: dict[int, int] = {}
        self._graph_execs: dict[int, int] = {}
        # (ordinal, lowered name, image) -> CUfunction, and (ordinal, image) -> its
        # module, for prepare_kernel (a program's kernels share one image: one module)
        self._functions: dict[tuple[int, str, bytes], int] = {}
        self._image_modules: dict[tuple[int, bytes], int] = {}
        self._functions_lock = threading.Lock()
        # Pinned allocations whose device pointer differs from the host address
        # (never on 64-bit Linux with UVA; kept sorted by host address).
        self._host_remap = []  # (host, nbytes, device): BackendCore's
        self._has_stream_get_device = hasattr(driver, "cuStreamGetDevice")
        self._has_ctx_get_device_v2 = hasattr(driver, "cuCtxGetDevice_v2")
        self._native: Any = self._native_entry_points()
        if self._native is not None:
            self.fast_launch = self._native.launch_packed
        self._submitter: Any = None  # see make_submitter
        self._conditional: _ConditionalDriver | None = None  # see guarded
        # (graph exec, its completion event, ordinal, stream): see _reap_guards
        self._guard_execs: list[tuple[Any, int, int, int]] = []
        self._guard_lock = threading.Lock()
        #: The kinds of :meth:`guarded` region used (cuasync._launch.guard): memsets
        #: (the whole suite passed with them on an H200, session 42), cuBLAS calls (on
        #: an H100, session 48) and device copies (on an H100 with ``CUASYNC_GUARDS=on``,
        #: session 49): every kind (docs/cancellation.md).
        self.guards: frozenset[str] = frozenset(("memset", "library", "copy"))
        self._context_handles = {}  # ordinal -> int(CUcontext): BackendCore's
        self._blas: Any = None  # cublas.Blas, made by the first matrix product
        self._hopper: dict[int, bool] = {}  # ordinal -> compute capability >= 9.0
        self._words_by_memset = False  # see write_device_word

    def _native_entry_points(self) -> Any:
        """The native module with the driver's launch and flag-write entry points set.

        Calling them from C skips the bindings' per-call argument wrapping (several
        microseconds for cuLaunchKernel): the two calls on the path of every await.
        """
        names = ["cuStreamWriteValue32", "cuLaunchKernel", "cuCtxSetCurrent", "cuStreamSynchronize"]
        entry = self.driver_entry_points([*names, "cuMemcpyHtoDAsync"])
        if "cuStreamWriteValue32" not in entry or "cuLaunchKernel" not in entry:
            return None  # (the other two only serve the submitter, which then is not made)
        _reactor.set_entry_points(
            write_value32=entry.get("cuStreamWriteValue32", 0),
            launch_kernel=entry.get("cuLaunchKernel", 0),
            ctx_set_current=entry.get("cuCtxSetCurrent", 0),
            stream_synchronize=entry.get("cuStreamSynchronize", 0),
            memcpy_htod=entry.get("cuMemcpyHtoDAsync", 0),
        )
        self._native_copy = "cuMemcpyHtoDAsync" in entry and hasattr(_reactor, "copy_and_write")
        return _reactor

    # -- the native submitter (launches of a burst of awaits, on a thread of its own) ----
    def make_submitter(self, reactor: Any, slab: int) -> Any:
        """A native ``Submitter`` making launches over ``reactor``'s slab, or None.

        From here on every driver call of this backend first waits for the launches it
        has queued (``_FencedDriver``; the native launches and flag writes through
        ``set_launch_fence``), so that stream order stays submission order.
        """
        global _d
        native = self._native
        if native is None or self.host_device_pointer(slab) != slab:
            return None  # (a flag's address must be the same for the host and the device)
        try:
            submitter = native.Submitter(reactor)
        except RuntimeError:  # an entry point the driver did not give
            return None
        if isinstance(_d, _FencedDriver):
            _d._fence = submitter.fence
        else:
            _d = _FencedDriver(_d, submitter.fence)
        native.set_launch_fence(submitter)
        self._submitter = submitter
        return submitter

    def forget_submitter(self) -> None:
        if isinstance(_d, _FencedDriver):
            _d._fence = _no_fence
        self._submitter = None

    def queue_launch(
        self,
        submitter: Any,
        kernel: _CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Any,
        errors: Callable[[], list[BaseException]],
        flag_address: int,
        slot: int,
        value: int,
    ) -> int | None:
        # The context is the stream's device's: the submitter's thread makes it current.
        ordinal = self._streams.get(stream)
        layout = kernel.params.layout
        if submitter is None or ordinal is None or layout is None:
            return None  # a foreign stream, or parameters packed in Python: launched here
        gx, gy, gz = grid
        bx, by, bz = block
        context = self.context_handle(ordinal)
        ticket: int = submitter.push(
            kernel.handle, gx, gy, gz, bx, by, bz, shared_mem, stream, context, layout,
            args if type(args) in (tuple, list) else list(args), slot, value,
        )  # fmt: skip
        return ticket if ticket >= 0 else None  # (-1: full, or too many parameters)

    def _context_handle(self, ordinal: int) -> int:
        context: int = self._context_handles.get(ordinal) or int(self._context(ordinal))
        self._context_handles[ordinal] = context
        return context

    def queued_error(self, submitter: Any, slot: int, stream: int) -> BaseException | None:
        status = submitter.status(slot)
        if not status:
            return None
        ordinal = self._streams.get(stream, -1)
        if status < 0:
            return self._fail(-status, "cuStreamWriteValue32", ordinal)
        return self._fail(status, "cuLaunchKernel", ordinal)

    # -- errors and contexts ---------------------------------------------------------
    def _fail(self, err: Any, call: str, ordinal: int = -1) -> DriverError:
        """The exception for a failed call; remembers sticky faults per device."""
        code = int(err)
        exc = driver_error(code, call=call)
        if code in STICKY:
            if ordinal < 0:
                ordinal = self._tls.ordinal
            if ordinal >= 0:
                self._faults.setdefault(ordinal, exc)
                self.fault_seen = True
        return exc

    def _check(self, err: Any, call: str, ordinal: int = -1) -> None:
        if err:
            raise self._fail(err, call, ordinal)

    def _call(self, ordinal: int, call: str, *args: Any) -> tuple[Any, ...]:
        """``driver.<call>(*args)`` with ``ordinal``'s context current; its results, or raise.

        Every driver call that names a stream or event goes through here (after
        :meth:`_enter` or :meth:`_enter_event`), except the few on the path of every
        op -- ``launch_kernel``, ``write_value32``, ``launch_host_signal`` and the two
        queries -- which inline it: one Python call more per op counts there.
        """
        res = getattr(_d, call)(*args)
        if res[0]:
            res = self._redo(res, ordinal, call, *args)
        return res

    def _call_on(self, stream: int, call: str, *args: Any) -> tuple[Any, ...]:
        """:meth:`_call` with the context of ``stream``'s device current; the caller's
        context is put back afterwards."""
        ordinal = self._streams.get(stream)
        if ordinal is not None and self._tls.ordinal == ordinal:  # (the cache: no switch)
            return self._call(ordinal, call, *args)
        ordinal, caller = self._enter(stream)
        try:
            return self._call(ordinal, call, *args)
        finally:
            if caller is not None:
                self._put_back(caller)

    def _call_on_event(self, event: int, call: str, *args: Any) -> tuple[Any, ...]:
        """:meth:`_call` with the context of ``event``'s device current (as ``_call_on``)."""
        ordinal, caller = self._enter_event(event)
        try:
            return self._call(ordinal, call, *args)
        finally:
            if caller is not None:
                self._put_back(caller)

    def _redo(self, res: tuple[Any, ...], ordinal: int, call: str, *args: Any) -> tuple[Any, ...]:
        """Slow path after ``res[0]`` was an error.

        If another library made a different context current on this thread behind
        the backend's back, make ``ordinal``'s context current, retry once and put the
        other library's context back; otherwise (or if the retry fails too) raise.
        """
        code = int(res[0])
        if code in _CONTEXT_CODES and ordinal >= 0 and ordinal in self._contexts:
            caller = self._switch(ordinal)
            if caller is not None:  # it was another context: worth a retry
                try:
                    res = getattr(_d, call)(*args)
                finally:
                    self._put_back(caller)
                code = int(res[0])
                if code == 0 or (code == _NOT_READY and call in _QUERIES):
                    return res
        raise self._fail(code, call, ordinal)

    def _retain(self, ordinal: int) -> Any:
        """Retain ``ordinal``'s primary context (once per process) and return it."""
        with self._lock:
            ctx = self._contexts.get(ordinal)
            if ctx is not None:
                return ctx
            dev = self._device(ordinal)
            err, ctx = _d.cuDevicePrimaryCtxRetain(dev)
            self._check(err, "cuDevicePrimaryCtxRetain", ordinal)
            self._context_ordinal[int(ctx)] = ordinal
            self._contexts[ordinal] = ctx
            return ctx

    def _context(self, ordinal: int) -> Any:
        """``ordinal``'s primary context, retained on first use."""
        ctx = self._contexts.get(ordinal)
        return ctx if ctx is not None else self._retain(ordinal)

    def _switch(self, ordinal: int) -> Any:
        """Make ``ordinal``'s primary context current on this thread (whatever the cache
        says); return the caller's context it replaced, for :meth:`_put_back`, or None.

        None when the primary context already was current, or no context was (the
        thread keeps the primary context then, as after a CUDA runtime call). Every
        method that switches puts the returned context back before it returns: the one
        owner of "the caller's current context" (one ``cuCtxGetCurrent`` per switch).
        """
        ctx = self._contexts.get(ordinal)
        if ctx is None:
            ctx = self._retain(ordinal)
        err, caller = _d.cuCtxGetCurrent()
        if err or not int(caller):
            caller = None
        elif int(caller) == int(ctx):
            self._tls.ordinal = ordinal
            return None
        (err,) = _d.cuCtxSetCurrent(ctx)
        if err:
            self._tls.ordinal = -1
            raise self._fail(err, "cuCtxSetCurrent", ordinal)
        self._tls.ordinal = ordinal
        return caller

    def _put_back(self, caller: Any) -> None:
        """Make ``caller`` (from :meth:`_switch`) current again on this thread.

        The cache then names its device when it is one of the primary contexts this
        backend retained (torch and CuPy use those too), else nothing (-1), so the next
        call on a device switches again, and puts it back again.
        """
        (err,) = _d.cuCtxSetCurrent(caller)  # (fails only for a context destroyed meanwhile)
        self._tls.ordinal = -1 if err else self._context_ordinal.get(int(caller), -1)

    def _use(self, ordinal: int) -> Any:
        """Make ``ordinal``'s context current unless the per-thread cache says it is;
        the caller's context to put back, or None (see :meth:`_switch`)."""
        if self._tls.ordinal != ordinal:
            return self._switch(ordinal)
        return None

    def _enter(self, stream: int) -> tuple[int, Any]:
        """Make the context of ``stream``'s device current; return the ordinal and the
        caller's context to put back (or None, see :meth:`_switch`).

        Hot paths inline the fast case (a stream this backend created, whose context
        the per-thread cache says is current) and call this otherwise.
        """
        ordinal = self._streams.get(stream)
        if ordinal is None:
            ordinal = self.stream_device(stream)
        if self._tls.ordinal != ordinal:
            return ordinal, self._switch(ordinal)
        return ordinal, None

    def _device(self, ordinal: int) -> Any:
        if not 0 <= ordinal < self._count:
            raise InvalidDeviceError(
                f"device ordinal must be in 0..{self._count - 1} (this machine has "
                f"{self._count} CUDA device(s)); got {ordinal!r}"
            )
        return self._devices[ordinal]

    def _ordinal_of_device(self, dev: Any) -> int:
        ordinal = self._device_ordinal.get(int(dev))
        if ordinal is None:  # pragma: no cover - CUdevice handles are the ordinals
            raise InvalidDeviceError(f"unknown CUdevice handle {int(dev)}")
        return ordinal

    def _default_ordinal(self) -> int:
        ordinal = self._tls.ordinal
        return ordinal if ordinal >= 0 else 0

    # -- devices ---------------------------------------------------------------------
    def device_count(self) -> int:
        return self._count

    def device_name(self, ordinal: int) -> str:
        err, raw = _d.cuDeviceGetName(256, self._device(ordinal))
        self._check(err, "cuDeviceGetName", ordinal)
        return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")

    def device_total_memory(self, ordinal: int) -> int:
        err, nbytes = _d.cuDeviceTotalMem(self._device(ordinal))
        self._check(err, "cuDeviceTotalMem", ordinal)
        return int(nbytes)

    def device_compute_capability(self, ordinal: int) -> tuple[int, int]:
        dev = self._device(ordinal)
        err, major = _d.cuDeviceGetAttribute(_ATTR_CC_MAJOR, dev)
        self._check(err, "cuDeviceGetAttribute", ordinal)
        err, minor = _d.cuDeviceGetAttribute(_ATTR_CC_MINOR, dev)
        self._check(err, "cuDeviceGetAttribute", ordinal)
        return int(major), int(minor)

    def device_attribute(self, ordinal: int, name: str) -> int:
        attr = _ATTRIBUTES.get(name)
        if attr is None:
            attr = _ATTRIBUTES[name] = _attribute_enum(name)
        err, value = _d.cuDeviceGetAttribute(attr, self._device(ordinal))
        self._check(err, "cuDeviceGetAttribute", ordinal)
        return int(value)

    def device_synchronize(self, ordinal: int) -> None:
        self._device(ordinal)
        caller = self._switch(ordinal)
        try:
            (err,) = _d.cuCtxSynchronize()
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuCtxSynchronize", ordinal)

    def device_fault(self, ordinal: int) -> BaseException | None:
        return self._faults.get(ordinal)

    def supports_stream_memops(self, ordinal: int) -> bool:
        # Since CUDA 12 the driver always enables stream memory operations
        # (cuStreamWriteValue32 and friends). The legacy attribute
        # CAN_USE_STREAM_MEM_OPS(_V1) only describes the pre-12 opt-in and may read
        # 0 even so: the reference run on an H200 (driver 13.0) printed
        # "stream mem ops 0" while cuStreamWriteValue32 worked. So: supported when
        # the driver is 12.0 or newer, or when the legacy attribute says so.
        dev = self._device(ordinal)
        if self.driver_version >= 12000:
            return True
        if _ATTR_STREAM_MEM_OPS is None:
            return False
        err, value = _d.cuDeviceGetAttribute(_ATTR_STREAM_MEM_OPS, dev)
        return not err and bool(value)

    # -- peers -----------------------------------------------------------------------
    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        known = self._can_access_peer.get((ordinal, peer))
        if known is not None:
            return known
        dev, peer_dev = self._device(ordinal), self._device(peer)
        if ordinal == peer:
            return False
        err, can = _d.cuDeviceCanAccessPeer(dev, peer_dev)
        self._check(err, "cuDeviceCanAccessPeer", ordinal)
        self._can_access_peer[(ordinal, peer)] = bool(can)  # the topology never changes
        return bool(can)

    def enable_peer_access(self, ordinal: int, peer: int) -> None:
        if (ordinal, peer) in self._peers_enabled:
            return
        if not self.device_can_access_peer(ordinal, peer):
            raise driver_error(
                Code.PEER_ACCESS_UNSUPPORTED,
                "cuCtxEnablePeerAccess",
                f"device {ordinal} cannot access device {peer} (cuDeviceCanAccessPeer is 0)",
            )
        peer_ctx = self._context(peer)
        caller = self._switch(ordinal)
        # From ``ordinal``'s context: access is one-way. Another thread may have won the
        # race to enable it (ALREADY_ENABLED), which is as good.
        try:
            (err,) = _d.cuCtxEnablePeerAccess(peer_ctx, 0)
        finally:
            if caller is not None:
                self._put_back(caller)
        if err and int(err) != Code.PEER_ACCESS_ALREADY_ENABLED:
            raise self._fail(err, "cuCtxEnablePeerAccess", ordinal)
        # Pool allocations (cuMemAllocAsync, all of cuasync's) do not follow the context's
        # peer access: the pool itself must grant it.
        err, pool = _d.cuDeviceGetDefaultMemPool(self._devices[peer])
        self._check(err, "cuDeviceGetDefaultMemPool", peer)
        with self._lock:
            pools = [pool] + [p for p, o in list(self._user_pools.values()) if o == peer]
            for pool in pools:
                self._grant_pool_access(pool, ordinal, peer)
            self._peers_enabled.add((ordinal, peer))

    def _grant_pool_access(self, pool: Any, ordinal: int, peer: int) -> None:
        """Let device ``ordinal`` read and write allocations of ``pool`` (of device ``peer``)."""
        access = _d.CUmemAccessDesc()
        access.location.type = _LOCATION_DEVICE
        access.location.id = int(self._devices[ordinal])
        access.flags = _ACCESS_READWRITE
        (err,) = _d.cuMemPoolSetAccess(pool, [access], 1)
        self._check(err, "cuMemPoolSetAccess", peer)

    def memcpy_peer_async(
        self, dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int, stream: int
    ) -> None:
        dst_ctx, src_ctx = self._context(dst_ordinal), self._context(src_ordinal)
        args = (dst, dst_ctx, src, src_ctx, nbytes, stream)
        self._call_on(stream, "cuMemcpyPeerAsync", *args)

    # -- streams ---------------------------------------------------------------------
    def stream_create(self, ordinal: int, priority: int = 0) -> int:
        self._device(ordinal)
        caller = self._switch(ordinal)
        try:
            if priority:
                call = "cuStreamCreateWithPriority"
                err, stream = _d.cuStreamCreateWithPriority(_STREAM_NON_BLOCKING, priority)
            else:
                call = "cuStreamCreate"
                err, stream = _d.cuStreamCreate(_STREAM_NON_BLOCKING)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, call, ordinal)
        handle = int(stream)
        self._streams[handle] = ordinal
        return handle

    def stream_priority_range(self, ordinal: int) -> tuple[int, int]:
        self._device(ordinal)
        caller = self._switch(ordinal)
        try:
            err, least, greatest = _d.cuCtxGetStreamPriorityRange()
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuCtxGetStreamPriorityRange", ordinal)
        return int(least), int(greatest)

    def stream_priority(self, stream: int) -> int:
        _, priority = self._call_on(stream, "cuStreamGetPriority", stream)
        return int(priority)

    def stream_destroy(self, stream: int) -> None:
        if self._blas is not None:
            self._blas.forget_stream(stream)  # its workspace, freed after its work
        self._call_on(stream, "cuStreamDestroy", stream)
        self._streams.pop(stream, None)

    def stream_device(self, stream: int) -> int:
        ordinal = self._streams.get(stream)
        if ordinal is not None:
            return ordinal
        if stream in (0, 1, 2):  # NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
            return self._default_ordinal()
        if self._has_stream_get_device:
            try:
                err, dev = _d.cuStreamGetDevice(stream)
            except RuntimeError:  # the driver predates cuStreamGetDevice (CUDA 12.8)
                self._has_stream_get_device = False
            else:
                self._check(err, "cuStreamGetDevice")
                return self._ordinal_of_device(dev)
        return self._stream_device_from_context(stream)

    def _stream_device_from_context(self, stream: int) -> int:
        """``stream_device`` for drivers without ``cuStreamGetDevice``."""
        err, ctx = _d.cuStreamGetCtx(stream)
        self._check(err, "cuStreamGetCtx")
        ordinal = self._context_ordinal.get(int(ctx))
        if ordinal is not None:
            return ordinal
        if self._has_ctx_get_device_v2:
            try:
                err, dev = _d.cuCtxGetDevice_v2(ctx)
            except RuntimeError:  # driver older than CUDA 13.0
                self._has_ctx_get_device_v2 = False
            else:
                self._check(err, "cuCtxGetDevice_v2")
                return self._ordinal_of_device(dev)
        # Push the stream's context, ask for its device, pop it again.
        (err,) = _d.cuCtxPushCurrent(ctx)
        self._check(err, "cuCtxPushCurrent")
        try:
            err, dev = _d.cuCtxGetDevice()
            self._check(err, "cuCtxGetDevice")
        finally:
            _d.cuCtxPopCurrent()
        return self._ordinal_of_device(dev)

    def stream_query(self, stream: int) -> bool:
        # Polled while completions are pending: inline (see _call); NOT_READY is no error.
        ordinal = self._streams.get(stream)
        caller = None  # (set when this call made a context current: put back by _answer)
        if ordinal is None or self._tls.ordinal != ordinal:
            ordinal, caller = self._enter(stream)
        return self._answer(_d.cuStreamQuery, "cuStreamQuery", stream, ordinal, caller)

    def _answer(
        self, query: Callable[[Any], Any], call: str, handle: int, ordinal: int, caller: Any
    ) -> bool:
        """Whether a polled query (``cuStreamQuery``/``cuEventQuery`` of ``handle``) found
        the work done; NOT_READY is no error. Puts the caller's context back, if any."""
        try:
            (err,) = query(handle)
            if not err:
                return True
            if err == _NOT_READY:
                return False
            return not self._redo((err,), ordinal, call, handle)[0]
        finally:
            if caller is not None:
                self._put_back(caller)

    def stream_synchronize(self, stream: int) -> None:
        self._call_on(stream, "cuStreamSynchronize", stream)

    def stream_wait_event(self, stream: int, event: int) -> None:
        if stream in _DEFAULT_HANDLES:  # the default stream of the event's device
            self._call_on_event(event, "cuStreamWaitEvent", stream, event, 0)
            return
        self._call_on(stream, "cuStreamWaitEvent", stream, event, 0)

    # -- events ----------------------------------------------------------------------
    def event_create(self, ordinal: int, *, timing: bool = False) -> int:
        self._device(ordinal)
        caller = self._switch(ordinal)
        flags = _EVENT_DEFAULT if timing else _EVENT_DISABLE_TIMING
        try:
            err, event = _d.cuEventCreate(flags)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuEventCreate", ordinal)
        handle = int(event)
        self._events[handle] = ordinal
        return handle

    def _enter_event(self, event: int) -> tuple[int, Any]:
        """Make the context of an event this backend created current; its ordinal (-1 if
        foreign) and the caller's context to put back (or None, see :meth:`_switch`)."""
        ordinal = self._events.get(event, -1)
        if ordinal >= 0 and self._tls.ordinal != ordinal:
            return ordinal, self._switch(ordinal)
        return ordinal, None

    def event_destroy(self, event: int) -> None:
        self._call_on_event(event, "cuEventDestroy", event)
        self._events.pop(event, None)

    def event_record(self, event: int, stream: int) -> None:
        if stream in _DEFAULT_HANDLES:  # the default stream of the event's device
            self._call_on_event(event, "cuEventRecord", event, stream)
            return
        self._call_on(stream, "cuEventRecord", event, stream)

    def event_query(self, event: int) -> bool:
        # Polled: inline (see _call); NOT_READY is no error.
        ordinal = self._events.get(event, -1)
        caller = None  # (as in stream_query)
        if ordinal >= 0 and self._tls.ordinal != ordinal:
            caller = self._switch(ordinal)
        return self._answer(_d.cuEventQuery, "cuEventQuery", event, ordinal, caller)

    def event_synchronize(self, event: int) -> None:
        self._call_on_event(event, "cuEventSynchronize", event)

    def event_elapsed_ms(self, start: int, end: int) -> float:
        res = self._call_on_event(start, "cuEventElapsedTime", start, end)
        return float(res[1])

    # -- memory ----------------------------------------------------------------------
    def _configure_pool(self, ordinal: int) -> None:
        """Keep freed memory in the device's default pool for reuse (once per device)."""
        with self._lock:
            if ordinal in self._pools_configured:
                return
            err, pool = _d.cuDeviceGetDefaultMemPool(self._devices[ordinal])
            self._check(err, "cuDeviceGetDefaultMemPool", ordinal)
            (err,) = _d.cuMemPoolSetAttribute(
                pool, _POOL_RELEASE_THRESHOLD, _d.cuuint64_t(_UINT64_MAX)
            )
            self._check(err, "cuMemPoolSetAttribute", ordinal)
            self._pools[ordinal] = pool
            self._pools_configured.add(ordinal)

    def _trim_pool(self, ordinal: int) -> None:
        """Give the pool's idle memory back to the device (after an allocation failed).

        A failed oversized request can leave the pool holding everything it reserved
        while trying; with the release threshold at its maximum nothing would ever give
        it back, and other processes could not even create a context.
        """
        pool = self._pools.get(ordinal)
        if pool is not None:
            _d.cuMemPoolTrimTo(pool, 0)
            _memory_log.debug("device %d: an allocation failed; trimmed its pool", ordinal)

    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        ordinal = self._streams.get(stream)
        caller = None  # (as in stream_query)
        try:
            if ordinal is None or self._tls.ordinal != ordinal:
                ordinal, caller = self._enter(stream)
            if ordinal not in self._pools_configured:
                self._configure_pool(ordinal)
            res = _d.cuMemAllocAsync(nbytes, stream)
            if res[0]:
                if res[0] == _OUT_OF_MEMORY:
                    self._trim_pool(ordinal)  # idle cached memory may satisfy it once released
                    res = _d.cuMemAllocAsync(nbytes, stream)
                    if res[0] == _OUT_OF_MEMORY:
                        self._trim_pool(ordinal)
                        raise OutOfMemoryError(nbytes, "device memory")
                if res[0]:
                    res = self._redo(res, ordinal, "cuMemAllocAsync", nbytes, stream)
            return int(res[1])
        finally:
            if caller is not None:
                self._put_back(caller)

    def mem_get_info(self, ordinal: int) -> tuple[int, int]:
        self._device(ordinal)
        caller = self._switch(ordinal)  # cuMemGetInfo answers for the current context's device
        try:
            err, free, total = _d.cuMemGetInfo()
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuMemGetInfo", ordinal)
        return int(free), int(total)

    def _default_pool(self, ordinal: int) -> Any:
        pool = self._pools.get(ordinal)
        if pool is None:
            err, pool = _d.cuDeviceGetDefaultMemPool(self._device(ordinal))
            self._check(err, "cuDeviceGetDefaultMemPool", ordinal)
        return pool

    def mem_pool_usage(self, ordinal: int) -> tuple[int, int]:
        pool = self._default_pool(ordinal)
        values = []
        for attribute in (_POOL_RESERVED_CURRENT, _POOL_USED_CURRENT):
            err, value = _d.cuMemPoolGetAttribute(pool, attribute)
            self._check(err, "cuMemPoolGetAttribute", ordinal)
            values.append(int(value))
        return values[0], values[1]

    def mem_pool_trim(self, ordinal: int, keep_bytes: int) -> None:
        (err,) = _d.cuMemPoolTrimTo(self._default_pool(ordinal), keep_bytes)
        self._check(err, "cuMemPoolTrimTo", ordinal)

    # -- explicit memory pools ---------------------------------------------------------
    def pool_create(self, ordinal: int, release_threshold: int) -> int:
        self._device(ordinal)
        props = _d.CUmemPoolProps()
        props.allocType = _d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = _d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_NONE
        props.location.type = _d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        props.location.id = int(self._devices[ordinal])
        err, pool = _d.cuMemPoolCreate(props)
        if err == _OUT_OF_MEMORY:
            raise OutOfMemoryError(0, f"a memory pool on device {ordinal}")
        self._check(err, "cuMemPoolCreate", ordinal)
        handle = int(pool)
        try:
            self.pool_set_release_threshold(handle, release_threshold, pool)
            with self._lock:
                for user, peer in self._peers_enabled:
                    if peer == ordinal:
                        self._grant_pool_access(pool, user, peer)
                self._user_pools[handle] = (pool, ordinal)
        except BaseException:
            _d.cuMemPoolDestroy(pool)
            raise
        return handle

    def _user_pool(self, handle: int) -> tuple[Any, int]:
        found = self._user_pools.get(handle)
        if found is None:
            raise DriverError(Code.INVALID_HANDLE, "memory pool", f"unknown pool {handle:#x}")
        return found

    def pool_set_release_threshold(self, pool: int, nbytes: int, raw: Any = None) -> None:
        ordinal = -1
        if raw is None:
            raw, ordinal = self._user_pool(pool)
        value = _d.cuuint64_t(min(nbytes, _UINT64_MAX))
        (err,) = _d.cuMemPoolSetAttribute(raw, _POOL_RELEASE_THRESHOLD, value)
        self._check(err, "cuMemPoolSetAttribute", ordinal)

    def pool_alloc_async(self, nbytes: int, pool: int, stream: int) -> int:
        raw, ordinal = self._user_pool(pool)
        caller = self._enter(stream)[1]
        try:
            res = _d.cuMemAllocFromPoolAsync(nbytes, raw, stream)
            if res[0] == _OUT_OF_MEMORY:
                _d.cuMemPoolTrimTo(raw, 0)  # its idle memory may satisfy the request once freed
                res = _d.cuMemAllocFromPoolAsync(nbytes, raw, stream)
                if res[0] == _OUT_OF_MEMORY:
                    where = f"device memory (a memory pool of device {ordinal})"
                    raise OutOfMemoryError(nbytes, where)
            if res[0]:
                res = self._redo(res, ordinal, "cuMemAllocFromPoolAsync", nbytes, raw, stream)
            return int(res[1])
        finally:
            if caller is not None:
                self._put_back(caller)

    def pool_usage(self, pool: int) -> tuple[int, int]:
        raw, ordinal = self._user_pool(pool)
        values = []
        for attribute in (_POOL_RESERVED_CURRENT, _POOL_USED_CURRENT):
            err, value = _d.cuMemPoolGetAttribute(raw, attribute)
            self._check(err, "cuMemPoolGetAttribute", ordinal)
            values.append(int(value))
        return values[0], values[1]

    def pool_trim(self, pool: int, keep_bytes: int) -> None:
        raw, ordinal = self._user_pool(pool)
        (err,) = _d.cuMemPoolTrimTo(raw, keep_bytes)
        self._check(err, "cuMemPoolTrimTo", ordinal)

    def pointer_device(self, ptr: int) -> int:
        # A stream-ordered allocation is named by its pool (each device's default pool
        # is known); other memory by the device ordinal the driver records for it.
        pool = self._pointer_attribute(
            ptr, _d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
        )
        if pool:
            for ordinal in range(self._count):
                if int(self._default_pool(ordinal)) == int(pool):
                    return ordinal
        value = self._pointer_attribute(
            ptr, _d.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        )
        if value is None:  # not device memory this process can name
            return -1
        try:
            return self._ordinal_of_device(int(value))
        except InvalidDeviceError:
            return -1

    @staticmethod
    def _pointer_attribute(ptr: int, attribute: Any) -> Any:
        """``cuPointerGetAttribute``'s value, or None where the driver has none for ``ptr``."""
        try:
            err, value = _d.cuPointerGetAttribute(attribute, ptr)
        except Exception:  # not a pointer the bindings accept
            return None
        return None if err else value

    def mem_free_async(self, ptr: int, stream: int) -> None:
        self._call_on(stream, "cuMemFreeAsync", ptr, stream)

    def host_alloc(self, nbytes: int) -> int:
        ordinal = self._default_ordinal()
        caller = self._switch(ordinal)
        try:
            err, ptr = _d.cuMemHostAlloc(nbytes, _HOSTALLOC_FLAGS)
            if err:
                if err == _OUT_OF_MEMORY:
                    raise OutOfMemoryError(nbytes, "pinned host memory")
                raise self._fail(err, "cuMemHostAlloc", ordinal)
            host = int(ptr)
            # With unified addressing the host address is the device pointer; verify it
            # and remember the exceptions (see host_device_pointer).
            err, dptr = _d.cuMemHostGetDevicePointer(host, 0)
            if err:
                _d.cuMemFreeHost(host)
                raise self._fail(err, "cuMemHostGetDevicePointer", ordinal)
        finally:
            if caller is not None:
                self._put_back(caller)
        if int(dptr) != host:
            with self._lock:
                bisect.insort(self._host_remap, (host, nbytes, int(dptr)))
        return host

    def host_free(self, ptr: int) -> None:
        if self._host_remap:
            with self._lock:
                self._host_remap = [r for r in self._host_remap if r[0] != ptr]
        caller = self._use(self._default_ordinal())
        try:
            (err,) = _d.cuMemFreeHost(ptr)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuMemFreeHost")

    def host_device_pointer(self, ptr: int) -> int:
        """The device pointer of host address ``ptr`` inside a :meth:`host_alloc` block.

        The same number wherever unified addressing lets the device use the host
        address (every 64-bit Linux system CUDA supports today).
        """
        remap = self._host_remap
        if not remap:
            return ptr
        i = bisect.bisect_right(remap, (ptr, _UINT64_MAX, _UINT64_MAX)) - 1
        if i >= 0:
            host, nbytes, device = remap[i]
            if host <= ptr < host + nbytes:
                return device + (ptr - host)
        return ptr

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call_on(stream, "cuMemcpyHtoDAsync", dst, src, nbytes, stream)

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call_on(stream, "cuMemcpyDtoHAsync", dst, src, nbytes, stream)

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        self._call_on(stream, "cuMemcpyDtoDAsync", dst, src, nbytes, stream)

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
        params = _memcpy2d_params(dst, dst_pitch, src, src_pitch, width, height, kind)
        self._call_on(stream, "cuMemcpy2DAsync", params, stream)

    def memset_d8_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        self._call_on(stream, "cuMemsetD8Async", ptr, value, nbytes, stream)

    # -- completion primitives -------------------------------------------------------
    def write_value32(self, stream: int, address: int, value: int) -> None:
        # On the path of every await: inline (see _call), and the store itself in C.
        ordinal = self._streams.get(stream)
        caller = None  # (as in stream_query)
        try:
            if ordinal is None or self._tls.ordinal != ordinal:
                ordinal, caller = self._enter(stream)
            if self._host_remap:
                address = self.host_device_pointer(address)
            # flags 0 (CU_STREAM_WRITE_VALUE_DEFAULT): the write is fenced after prior work.
            native = self._native
            if native is not None:
                if native.write_value32(stream, address, value) == 0:
                    return
                res = _d.cuStreamWriteValue32(stream, address, value, 0)
            else:
                res = _d.cuStreamWriteValue32(stream, address, value, 0)
            if res[0]:
                self._redo(res, ordinal, "cuStreamWriteValue32", stream, address, value, 0)
        finally:
            if caller is not None:
                self._put_back(caller)

    def _copy_and_write(
        self, dst: int, src: int, nbytes: int, stream: int, address: int, value: int
    ) -> None:
        # A small upload's two calls in one native call (the bindings' argument wrapping
        # of cuMemcpyHtoDAsync costs more than the copy of a few KiB).
        ordinal = self._streams.get(stream)
        caller = None  # (as in stream_query)
        try:
            if ordinal is None or self._tls.ordinal != ordinal:
                caller = self._enter(stream)[1]
            native = self._native
            if native is None or not self._native_copy:
                return Backend._copy_and_write(self, dst, src, nbytes, stream, address, value)
            flag = self.host_device_pointer(address) if self._host_remap else address
            rc = native.copy_and_write(dst, src, nbytes, stream, flag, value)
            if rc > 0:  # nothing enqueued: the bindings' calls redo it (another context) or raise
                Backend._copy_and_write(self, dst, src, nbytes, stream, address, value)
            elif rc < 0:  # the copy is enqueued, the write failed: the same for the write
                self.write_value32(stream, address, value)
            return None
        finally:
            if caller is not None:
                self._put_back(caller)

    # -- cancel words ----------------------------------------------------------------
    def device_words_alloc(self, ordinal: int, nbytes: int, stream: int) -> int:
        # cuMemAlloc, not the stream-ordered pool: a plain allocation that stream memory
        # operations accept, and that no pool trim or release threshold touches. Zeroed
        # on `stream` and waited for: cuMemsetD8 would run on the legacy stream, which
        # non-blocking streams do not wait for, so a word written on the urgent stream
        # could land before the zeroing and be wiped (seen on the H200).
        self._device(ordinal)
        caller = self._switch(ordinal)
        try:
            err, ptr = _d.cuMemAlloc(nbytes)
            if err == _OUT_OF_MEMORY:
                raise OutOfMemoryError(nbytes, "device memory (cancel words)")
            self._check(err, "cuMemAlloc", ordinal)
            (err,) = _d.cuMemsetD8Async(ptr, 0, nbytes, stream)
            self._check(err, "cuMemsetD8Async", ordinal)
            (err,) = _d.cuStreamSynchronize(stream)
            self._check(err, "cuStreamSynchronize", ordinal)
        finally:
            if caller is not None:
                self._put_back(caller)
        return int(ptr)

    def write_device_word(self, stream: int, address: int, value: int) -> None:
        # A device address as it is (write_value32 maps host addresses). The stream
        # memory operation needs no SM; where the driver refuses it for this memory,
        # cuMemsetD32Async (a one-word memset) does the same store, from then on.
        value &= 0xFFFFFFFF
        if not self._words_by_memset:
            try:
                self._call_on(stream, "cuStreamWriteValue32", stream, address, value, 0)
                return
            except DriverError as exc:
                if exc.code in STICKY:
                    raise
                self._words_by_memset = True
                _memory_log.debug("cuStreamWriteValue32 of a device word: %s; memset", exc)
        self._call_on(stream, "cuMemsetD32Async", address, value, 1, stream)

    def stream_wait_value32(self, stream: int, address: int, value: int) -> None:
        if self._host_remap:
            address = self.host_device_pointer(address)
        # flags 0 (CU_STREAM_WAIT_VALUE_GEQ): a cyclic greater-or-equal on 32 bits.
        self._call_on(stream, "cuStreamWaitValue32", stream, address, value & 0xFFFFFFFF, 0)

    def host_task_modes_problem(self) -> str | None:
        """cuLaunchHostFunc_v2 came with CUDA 13.2: the bindings and the driver need it."""
        if not hasattr(_d, "cuLaunchHostFunc_v2"):
            return "the installed cuda-bindings have no cuLaunchHostFunc_v2 (13.2 and later do)"
        if self.driver_version < 13020:
            return (
                f"the driver supports CUDA {_cuda_version(self.driver_version)}; "
                "cuLaunchHostFunc_v2 needs a driver for CUDA 13.2 or later"
            )
        if not self.driver_entry_points(["cuLaunchHostFunc_v2"]):
            return "the driver does not provide cuLaunchHostFunc_v2 (cuGetProcAddress)"
        return None

    def launch_host_func(
        self, stream: int, fn: Callable[[], None], sync_mode: int | None = None
    ) -> None:
        """Run ``fn()`` on a driver thread once prior work on ``stream`` is done.

        ``fn`` must not call the CUDA driver (directly or through this backend): the
        driver forbids it in host functions and may deadlock. Exceptions it raises
        are reported through ``sys.unraisablehook`` and go no further. If the context
        faults first, the driver never runs ``fn``.
        """
        key = next(_host_ids)
        _host_fns[key] = fn
        try:
            if sync_mode is None:
                self._call_on(stream, "cuLaunchHostFunc", stream, _TRAMPOLINE_ADDRESS, key)
            else:
                args = (stream, _TRAMPOLINE_ADDRESS, key, sync_mode)
                self._call_on(stream, "cuLaunchHostFunc_v2", *args)
        except BaseException:
            _host_fns.pop(key, None)
            raise

    def launch_host_signal(
        self, stream: int, fn: int, data: int, sync_mode: int | None = None
    ) -> None:
        # On the path of every await in callback mode: inline, as in launch_kernel.
        ordinal = self._streams.get(stream)
        caller = None  # (as in stream_query)
        try:
            if ordinal is None or self._tls.ordinal != ordinal:
                ordinal, caller = self._enter(stream)
            if sync_mode is None:
                res = _d.cuLaunchHostFunc(stream, fn, data)
                if res[0]:
                    self._redo(res, ordinal, "cuLaunchHostFunc", stream, fn, data)
            else:
                res = _d.cuLaunchHostFunc_v2(stream, fn, data, sync_mode)
                if res[0]:
                    self._redo(res, ordinal, "cuLaunchHostFunc_v2", stream, fn, data, sync_mode)
        finally:
            if caller is not None:
                self._put_back(caller)

    # -- modules and kernels ---------------------------------------------------------
    def module_load(self, ordinal: int, image: bytes) -> int:
        self._device(ordinal)
        data = bytes(image)
        if not data.endswith(b"\0"):
            data += b"\0"  # PTX must be NUL-terminated; harmless after a cubin/fatbin
        caller = self._switch(ordinal)
        try:
            err, module = _d.cuModuleLoadData(data)  # `data` stays alive across the call
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuModuleLoadData", ordinal)
        handle = int(module)
        self._modules[handle] = ordinal
        return handle

    def module_unload(self, module: int) -> None:
        ordinal = self._modules.pop(module, -1)
        caller = self._use(ordinal) if ordinal >= 0 else None
        try:
            (err,) = _d.cuModuleUnload(module)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuModuleUnload", ordinal)

    def module_function(self, module: int, name: str) -> int:
        ordinal = self._modules.get(module, -1)
        caller = self._use(ordinal) if ordinal >= 0 else None
        try:
            err, function = _d.cuModuleGetFunction(module, name.encode())
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuModuleGetFunction", ordinal)
        return int(function)

    def function_name(self, function: int) -> str:
        if not hasattr(_d, "cuFuncGetName"):  # CUDA 12.3 and later
            return ""
        try:
            err, name = _d.cuFuncGetName(function)
        except Exception:  # not a handle the bindings accept
            return ""
        if err or not name:
            return ""
        return name.decode(errors="replace") if isinstance(name, bytes) else str(name)

    def prepare_kernel(
        self, ordinal: int, kernel: KernelCode, *, compile_only: bool = False
    ) -> _CudaKernel:
        if kernel.function_handle:
            function = kernel.function_handle  # borrowed: the caller vouches for it
        elif kernel.module_handle:
            caller = self._use(ordinal)  # a borrowed module is not in self._modules
            try:
                function = self.module_function(kernel.module_handle, kernel.name)
            finally:
                if caller is not None:
                    self._put_back(caller)
        else:
            image, lowered = kernel.compile_image(self.arch(ordinal))
            function = self._load_function(ordinal, image, lowered)
        prepared = _CudaKernel(kernel, ordinal, function)
        layout = prepared.params.layout
        if self._native is not None and layout is not None:
            prepared.fast = (prepared.handle, layout)
        return prepared

    def _load_function(self, ordinal: int, image: bytes, lowered: str) -> int:
        """The function ``lowered`` of ``image`` on ``ordinal``, loaded once per process.

        Kernels compiled in one program (:func:`~cuasync._launch.kernel.program_kernels`)
        share its image, and so its module: loaded once.
        """
        key = (ordinal, lowered, image)
        function = self._functions.get(key)
        if function is None:
            with self._functions_lock:
                function = self._functions.get(key)
                if function is None:
                    module = self._image_modules.get((ordinal, image))
                    if module is None:
                        module = self.module_load(ordinal, image)
                        self._image_modules[ordinal, image] = module
                    function = self._functions[key] = self.module_function(module, lowered)
        return function

    def _launch_kernel(
        self,
        kernel: _CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        errors: Callable[[], list[BaseException]],
        flag_address: int = 0,
        flag_value: int = 0,
    ) -> None:
        # On the path of every launch: the context check and the native call are inline.
        ordinal = self._streams.get(stream)
        caller = None  # (as in stream_query)
        try:
            if ordinal is None or self._tls.ordinal != ordinal:
                ordinal, caller = self._enter(stream)
            function = kernel.handle
            gx, gy, gz = grid
            bx, by, bz = block
            native = self._native
            param_block = kernel.params
            if native is not None:
                # One call, GIL released once: cuLaunchKernel, then the flag's
                # cuStreamWriteValue32. 0: both done; > 0: the launch failed (redone below
                # to raise its error); < 0: the launch is enqueued and the flag write failed.
                # The native module packs the parameters itself where it can (layout).
                layout = param_block.layout
                if layout is not None:
                    rc = native.launch_packed(
                        function, gx, gy, gz, bx, by, bz, shared_mem, stream, layout,
                        args if type(args) in (tuple, list) else list(args),
                        flag_address, flag_value,
                    )  # fmt: skip
                else:
                    rc = native.launch_and_write(
                        function, gx, gy, gz, bx, by, bz, shared_mem, stream,
                        param_block.pack(args) if args else 0, flag_address, flag_value,
                    )  # fmt: skip
                if rc:
                    self.launch_failed(
                        rc, kernel, grid, block, shared_mem, stream, args, flag_address,
                        flag_value,
                    )  # fmt: skip
                return
            self._launch_in_python(
                kernel, grid, block, shared_mem, stream, args, ordinal, flag_address, flag_value
            )
        finally:
            if caller is not None:
                self._put_back(caller)

    def _launch_failed(
        self,
        rc: int,
        kernel: _CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        flag_address: int = 0,
        flag_value: int = 0,
    ) -> None:
        ordinal = self._streams.get(stream, kernel.ordinal)
        if rc < 0:  # the launch is enqueued, its flag write failed
            raise self._fail(-rc, "cuStreamWriteValue32", ordinal)
        # the launch failed: made again from Python, which raises its error
        self._launch_in_python(
            kernel, grid, block, shared_mem, stream, args, ordinal, flag_address, flag_value
        )

    def _launch_in_python(
        self,
        kernel: _CudaKernel,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        ordinal: int,
        flag_address: int,
        flag_value: int,
    ) -> None:
        function = kernel.handle
        gx, gy, gz = grid
        bx, by, bz = block
        params = kernel.params.pack(args) if args else 0
        # kernelParams given as an int is used as the void** address as it is.
        launch = (function, gx, gy, gz, bx, by, bz, shared_mem, stream, params, 0)
        res = _d.cuLaunchKernel(*launch)
        if res[0]:
            self._redo(res, ordinal, "cuLaunchKernel", *launch)
        if flag_address:
            self.write_value32(stream, flag_address, flag_value)

    # -- contractions ----------------------------------------------------------------
    def _gemm_ready(self, ordinal: int) -> tuple[Blas, bool]:
        """cuBLAS made (once per process) and whether ``ordinal`` is sm_90 or newer
        (which wants a bigger workspace); the device's context current."""
        blas = self._blas
        if blas is None:
            with self._lock:
                if self._blas is None:
                    self._blas = Blas(
                        self.mem_alloc_async, self.mem_free_async, self.stream_is_capturing
                    )
                blas = self._blas
        hopper = self._hopper.get(ordinal)
        if hopper is None:
            hopper = self._hopper[ordinal] = self.device_compute_capability(ordinal)[0] >= 9
        return blas, hopper

    def prepare_gemm(self, ordinal: int) -> None:
        caller = self._switch(ordinal)
        try:
            blas, _ = self._gemm_ready(ordinal)
            blas.prepare(ordinal)  # (loads libcublas and libcublasLt, makes the handles)
        finally:
            if caller is not None:
                self._put_back(caller)

    def gemm(
        self,
        stream: int,
        a: Any,
        b: Any,
        c: Any,
        alpha: complex,
        beta: complex,
        precision: str,
        errors: Callable[[], list[BaseException]],
    ) -> None:
        if self._submitter is not None:  # cuBLAS calls the driver itself
            self._submitter.fence()
        ordinal, caller = self._enter(stream)
        try:
            blas, hopper = self._gemm_ready(ordinal)
            blas.gemm(ordinal, stream, hopper, a, b, c, alpha, beta, precision)
        finally:
            if caller is not None:
                self._put_back(caller)

    # -- guarded regions (conditional graph nodes) -------------------------------------
    @contextlib.contextmanager
    def guarded(self, stream: int, word: int, guard: int) -> Iterator[None]:
        ordinal = self.stream_device(stream)
        if self._submitter is not None:  # (its queued launches must not join the capture)
            self._submitter.fence()
        driver = self._conditional
        if driver is None:
            addresses = self.driver_entry_points(_CONDITIONAL_ENTRY_POINTS)
            # (errors name the device whose context is current: each region's own)
            driver = self._conditional = _ConditionalDriver(addresses, self._check)
        region = ConditionalGraph(driver, self._context_handle(ordinal), stream, guard, word)
        with self._context_of(ordinal):
            region.__enter__()
        try:
            yield
        except BaseException as exc:
            with self._context_of(ordinal):
                region.__exit__(type(exc), exc, exc.__traceback__)
            raise
        with self._context_of(ordinal):
            region.__exit__(None, None, None)
            if region.launched is not None:  # destroyed once it has run (see _reap_guards)
                event = self.event_create(ordinal)
                self.event_record(event, stream)
                with self._guard_lock:
                    self._guard_execs.append((region.launched, event, ordinal, stream))
        self._reap_guards()

    def _reap_guards(self) -> None:
        """Destroy the guarded regions' executable graphs once none is in flight anywhere
        and each one's stream is idle (or gone). On an H200, ``cuGraphExecDestroy`` of a
        region that had run (its event seen) blocked while a later region waited behind
        a host-side wait on the stream (``tools/probes/guard_gate.py``: reaped on the
        event alone it hung; once the stream was idle it never did). Loops of several
        threads share the list: each takes it whole and puts back what it keeps."""
        with self._guard_lock:
            pending, self._guard_execs = self._guard_execs, []
        driver = self._conditional
        if driver is None or not all(self.event_query(event) for _, event, _, _ in pending):
            kept = pending
        else:
            kept = []
            for graph_exec, event, ordinal, stream in pending:
                if stream in self._streams and not self.stream_query(stream):
                    kept.append((graph_exec, event, ordinal, stream))
                    continue
                with self._context_of(ordinal):
                    driver("cuGraphExecDestroy", graph_exec)
                self.event_destroy(event)
        with self._guard_lock:
            self._guard_execs += kept

    @contextlib.contextmanager
    def _context_of(self, ordinal: int) -> Iterator[None]:
        caller = self._use(ordinal)
        try:
            yield
        finally:
            if caller is not None:
                self._put_back(caller)

    # -- graphs ----------------------------------------------------------------------
    def stream_begin_capture(self, stream: int, mode: int = CAPTURE_RELAXED) -> None:
        self._call_on(stream, "cuStreamBeginCapture", stream, _CAPTURE_MODES[mode])

    def stream_end_capture(self, stream: int) -> int:
        ordinal = self.stream_device(stream)
        res = self._call_on(stream, "cuStreamEndCapture", stream)
        graph = int(res[1])
        if not graph:  # invalidated capture without an error code
            raise self._fail(Code.STREAM_CAPTURE_INVALIDATED, "cuStreamEndCapture", ordinal)
        self._graphs[graph] = ordinal
        return graph

    def stream_is_capturing(self, stream: int) -> bool:
        res = self._call_on(stream, "cuStreamIsCapturing", stream)
        # ACTIVE or INVALIDATED: both still need cuStreamEndCapture.
        return int(res[1]) != _CAPTURE_STATUS_NONE

    def graph_instantiate(self, graph: int) -> int:
        ordinal = self._graphs.get(graph, -1)
        caller = self._use(ordinal) if ordinal >= 0 else None
        try:
            err, graph_exec = _d.cuGraphInstantiate(graph, 0)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuGraphInstantiate", ordinal)
        handle = int(graph_exec)
        self._graph_execs[handle] = ordinal if ordinal >= 0 else self._default_ordinal()
        return handle

    def graph_upload(self, graph_exec: int, stream: int) -> None:
        self._call_on(stream, "cuGraphUpload", graph_exec, stream)

    def graph_launch(
        self,
        graph_exec: int,
        stream: int,
        errors: Callable[[], list[BaseException]] | None = None,
    ) -> None:
        self._call_on(stream, "cuGraphLaunch", graph_exec, stream)  # (a fault is sticky)

    def graph_destroy(self, graph: int) -> None:
        ordinal = self._graphs.pop(graph, -1)
        caller = self._use(ordinal) if ordinal >= 0 else None
        try:
            (err,) = _d.cuGraphDestroy(graph)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuGraphDestroy", ordinal)

    def graph_exec_destroy(self, graph_exec: int) -> None:
        ordinal = self._graph_execs.pop(graph_exec, -1)
        caller = self._use(ordinal) if ordinal >= 0 else None
        try:
            (err,) = _d.cuGraphExecDestroy(graph_exec)
        finally:
            if caller is not None:
                self._put_back(caller)
        self._check(err, "cuGraphExecDestroy", ordinal)

    # -- native fast paths -----------------------------------------------------------
    def driver_entry_points(self, names: Sequence[str]) -> dict[str, int]:
        """Addresses of driver functions, resolved with ``cuGetProcAddress``.

        Asked for at this driver's own CUDA version, so each address is the newest
        ABI of that name: call it through the typedef in the current ``cuda.h``
        (e.g. ``cuStreamWriteValue32`` resolves to ``cuStreamWriteValue32_v2``).
        Names the driver does not know are left out.
        """
        found: dict[str, int] = {}
        for name in names:
            try:
                res = _d.cuGetProcAddress(name.encode(), self.driver_version, _PROC_ADDRESS_DEFAULT)
            except Exception:
                continue
            if res[0] or res[1] is None:
                continue
            if len(res) > 2 and res[2] is not None and int(res[2]) != _PROC_ADDRESS_SUCCESS:
                continue
            address = int(res[1])
            if address:
                found[name] = address
        return found
