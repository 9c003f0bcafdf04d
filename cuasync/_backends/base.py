"""The driver-level interface both backends implement.

Handles (streams, events, device pointers, modules, functions, graphs) are plain
ints, as in the driver API. Every method raises :class:`cuasync.errors.DriverError`
(or a subclass) on failure; once a device's context has faulted, every call that
touches that device raises :class:`cuasync.errors.DeviceFaultError`.

Nothing here knows about ops, tensors or event loops: the dependency direction is
public modules -> ``_core`` -> ``_backends``. Kernels cross the boundary as a
:class:`KernelCode` (what to prepare) and their array arguments as :class:`DeviceArray`
(what to launch on); only the backend knows whether that means the driver or a numpy twin.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .._curesult import Code
from .._native import BackendCore, PreparedCore
from ..errors import ArgumentError, driver_error

if TYPE_CHECKING:
    import numpy as np

    from .._launch.signature import Param


class EmulatedFault(BaseException):
    """Raised inside emulated device work to fault the device, as a GPU kernel can.

    An illegal memory access or a ``__trap()`` makes a GPU context sticky-faulted; an
    emulated kernel signals the same by raising a subclass of this. It derives from
    ``BaseException`` so that code catching a numpy twin's own errors (``except
    Exception``) lets it through to the emulator.
    """

    code: int = Code.LAUNCH_FAILED


class EmulatedTrap(EmulatedFault):
    """``__trap()`` in an emulated kernel (see :func:`cuasync.testing.trap`)."""


#: Host-task sync modes of ``cuLaunchHostFunc_v2``, as in ``CUhostTaskSyncMode``: how the
#: driver thread that runs host functions waits for the next one (spin: lower latency,
#: a busy core; block: sleeps).
HOST_TASK_BLOCKING = 0
HOST_TASK_SPINWAIT = 1

#: The name of a kernel's trailing cancel-word parameter (``unsigned long long``: 0, or a
#: word's address in its low 48 bits and a scope's generation in the high 16; see
#: ``cuasync/kernels/cancel.cuh``). A backend skips a launch whose word, read when the
#: kernel runs, holds that generation: the GPU's kernels return at once (they check it
#: per block), the emulator does not run the twin, which never receives the parameter.
CANCEL_PARAM = "cuasync_cancel_word_"
CANCEL_ADDRESS_BITS = 48

#: Stream handles with a meaning of their own: the legacy default stream (one per
#: context) and the per-thread default stream, which names a different stream on each
#: thread that uses it.
LEGACY_STREAM = 1
PER_THREAD_STREAM = 2

#: Stream capture modes, as in ``CUstreamCaptureMode``.
CAPTURE_GLOBAL = 0
CAPTURE_THREAD_LOCAL = 1
CAPTURE_RELAXED = 2


class KernelCode(Protocol):
    """What a backend prepares: a kernel, as :class:`cuasync.Kernel` describes one.

    ``compile_image(arch)`` compiles the source for ``arch`` (``"sm_90"``) and returns the
    cubin and the function's lowered name, ``check_compiles(arch)`` only finds a source's
    errors (the emulator's check); a kernel of a loaded :class:`cuasync.Module`
    has that module's handle as ``module_handle`` instead, and a borrowed function its
    handle as ``function_handle`` (both 0 otherwise). ``emulate`` is the numpy twin the
    emulator runs.
    """

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> Sequence[Param]: ...

    @property
    def emulate(self) -> Callable[..., Any] | None: ...

    @property
    def module_handle(self) -> int: ...

    @property
    def function_handle(self) -> int: ...

    def compile_image(self, arch: str) -> tuple[bytes, str]: ...

    def check_compiles(self, arch: str) -> None: ...


class DeviceArray(Protocol):
    """A strided array in device memory, as a pointer argument of a launch (a Tensor is one).

    ``ptr`` is the address of its first element, ``strides`` count elements and may be
    negative. The CUDA backend passes ``ptr``; the emulator hands the twin a numpy view.
    """

    @property
    def ptr(self) -> int: ...

    @property
    def dtype(self) -> np.dtype[Any]: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def strides(self) -> tuple[int, ...]: ...


def matrix_layout(rows: int, cols: int, row_stride: int, col_stride: int) -> tuple[str, int] | None:
    """How a BLAS library can read a strided matrix: ``("row", ld)``, ``("col", ld)`` or None.

    "row": rows are contiguous (``col_stride == 1``), ``ld`` the distance between rows;
    "col": columns are. The stride of an axis of length 1 does not matter. None when
    neither holds (a copy is needed).

    >>> matrix_layout(4, 3, 3, 1), matrix_layout(4, 3, 1, 4), matrix_layout(4, 3, 6, 2)
    (('row', 3), ('col', 4), None)
    """
    if cols == 1 or col_stride == 1:
        ld = row_stride if rows > 1 else max(1, cols)
        if ld >= max(1, cols):
            return "row", ld
    if rows == 1 or row_stride == 1:
        ld = col_stride if cols > 1 else max(1, rows)
        if ld >= max(1, rows):
            return "col", ld
    return None


class PreparedKernel(PreparedCore):
    """A kernel ready to launch on one device: what :meth:`Backend.prepare_kernel` returns.

    ``handle`` is the driver's ``CUfunction`` where there is one (0 on the emulator);
    the rest belongs to the backend that made it. ``fast``: what the backend's
    :attr:`Backend.fast_launch` takes for it, or None. ``kernel``: the kernel it was
    prepared from (``Kernel._prepare`` sets it; None until then), which prepares it on
    another device.
    """

    __slots__ = ("kernel",)  # name, ordinal, handle, fast: the native base's (``PreparedCore``)

    def __init__(self, name: str, ordinal: int, handle: int = 0) -> None:
        self.name = name
        self.ordinal = ordinal
        self.handle = handle
        self.fast: Any = None
        self.kernel: Any = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on device {self.ordinal}>"


#: The device attributes :meth:`Backend.device_attribute` reads: the driver's
#: ``CU_DEVICE_ATTRIBUTE_<NAME>`` names in lower case (``cuasync.DeviceProperties``
#: has one property for each).
DEVICE_ATTRIBUTES = frozenset(
    {
        "async_engine_count",
        "can_map_host_memory",
        "clock_rate",
        "cluster_launch",
        "concurrent_kernels",
        "concurrent_managed_access",
        "cooperative_launch",
        "ecc_enabled",
        "global_memory_bus_width",
        "integrated",
        "l2_cache_size",
        "managed_memory",
        "max_block_dim_x",
        "max_block_dim_y",
        "max_block_dim_z",
        "max_blocks_per_multiprocessor",
        "max_grid_dim_x",
        "max_grid_dim_y",
        "max_grid_dim_z",
        "max_registers_per_block",
        "max_registers_per_multiprocessor",
        "max_shared_memory_per_block",
        "max_shared_memory_per_block_optin",
        "max_shared_memory_per_multiprocessor",
        "max_threads_per_block",
        "max_threads_per_multiprocessor",
        "memory_clock_rate",
        "memory_pools_supported",
        "multiprocessor_count",
        "pci_bus_id",
        "pci_device_id",
        "pci_domain_id",
        "stream_priorities_supported",
        "total_constant_memory",
        "unified_addressing",
        "warp_size",
    }
)


def check_device_attribute(name: str) -> None:
    """Raise an ArgumentError unless ``name`` is one of :data:`DEVICE_ATTRIBUTES`."""
    if name not in DEVICE_ATTRIBUTES:
        raise ArgumentError(
            f"unknown device attribute {name!r}; known: {', '.join(sorted(DEVICE_ATTRIBUTES))}"
        )


class Backend(BackendCore, ABC):
    """One implementation of the driver semantics cuasync is built on."""

    # ``fast_launch``, ``current`` and ``fault_seen`` are the native base's fields
    # (``BackendCore``: every submission reads them). ``fast_launch``: the express path's
    # launch, where the backend has a native one (else None): ``fast_launch(*kernel.fast,
    # grid..., block..., shared_mem, stream, args, flag_address, flag_value)`` launches
    # and writes the flag in one call, 0 when both were done; any other result goes to
    # ``launch_failed``, which raises why. Used only on a stream the backend owns, of the
    # kernel's device, while ``current.ordinal`` (its record of this thread's current
    # context) is the kernel's. ``fault_seen``: whether any device of this backend has
    # faulted: until one has, a submission's fault check (``raise_if_faulted``) is this
    # attribute alone.
    #
    # ``launch_kernel``, ``launch_failed``, ``context_handle`` and ``copy_and_write`` are
    # fields of the native base too (the calls the native core makes of a backend): each
    # is the backend's own method of that name with a leading underscore, bound here once,
    # so that the core calls a declared field and a replacement set on the instance (a
    # test's, a benchmark's stub) is the one both paths call. A backend implements the
    # underscored methods.

    def __init__(self) -> None:
        self.launch_kernel = self._launch_kernel
        self.launch_failed = self._launch_failed
        self.context_handle = self._context_handle
        self.copy_and_write = self._copy_and_write

    #: ``"cuda"`` or ``"emulator"``: for messages and reports; code asks for a capability.
    name: str = ""

    #: Whether handles are the CUDA driver's own (``CUstream``, ``CUdeviceptr``,
    #: ``CUfunction``): usable with ``cuda.bindings`` and other CUDA libraries.
    driver_handles: bool = False

    #: Whether a Python thread writes the completion flag words (the emulator's device):
    #: then every spin on them releases the GIL at once (else the early wake's spin for a
    #: launch or a library call keeps it for a while:
    #: :data:`cuasync._core.completion.SPIN_HOLD_NS`).
    python_writes_flags: bool = False

    #: How to get more devices than :meth:`device_count` gives, for error messages.
    more_devices_hint: str = ""

    #: The CUDA version the driver supports (1000 * major + 10 * minor); 0 without one.
    driver_version: int = 0

    # -- devices -------------------------------------------------------------------
    @abstractmethod
    def device_count(self) -> int: ...

    @abstractmethod
    def device_name(self, ordinal: int) -> str: ...

    @abstractmethod
    def device_total_memory(self, ordinal: int) -> int: ...

    @abstractmethod
    def device_compute_capability(self, ordinal: int) -> tuple[int, int]: ...

    @abstractmethod
    def device_synchronize(self, ordinal: int) -> None: ...

    @abstractmethod
    def device_fault(self, ordinal: int) -> BaseException | None:
        """The sticky fault of ``ordinal``'s context if one is known, else None."""

    def supports_stream_memops(self, ordinal: int) -> bool:
        """Whether ``write_value32`` works on this device (the reactor needs it)."""
        return True

    @abstractmethod
    def device_attribute(self, ordinal: int, name: str) -> int:
        """The device attribute ``name`` (one of :data:`DEVICE_ATTRIBUTES`: the driver's
        ``CU_DEVICE_ATTRIBUTE_<NAME>`` in lower case), as ``cuDeviceGetAttribute`` reads it.

        >>> backend.device_attribute(0, "multiprocessor_count")
        132
        """

    # -- peers ---------------------------------------------------------------------
    @abstractmethod
    def device_can_access_peer(self, ordinal: int, peer: int) -> bool:
        """Whether ``ordinal`` can reach ``peer``'s memory directly (``cuDeviceCanAccessPeer``).

        False when ``ordinal == peer``, as the driver answers.
        """

    @abstractmethod
    def enable_peer_access(self, ordinal: int, peer: int) -> None:
        """Let ``ordinal`` access ``peer``'s memory, stream-ordered pool memory included.

        One direction only; idempotent. Raises :class:`~cuasync.errors.DriverError`
        (``CUDA_ERROR_PEER_ACCESS_UNSUPPORTED``) where :meth:`device_can_access_peer` says no.
        """

    @abstractmethod
    def memcpy_peer_async(
        self, dst: int, dst_ordinal: int, src: int, src_ordinal: int, nbytes: int, stream: int
    ) -> None:
        """Copy ``nbytes`` from ``src`` (memory of device ``src_ordinal``) to ``dst`` (of
        ``dst_ordinal``) on ``stream`` (``cuMemcpyPeerAsync``); direct where peer access is
        enabled."""

    # -- streams -------------------------------------------------------------------
    @abstractmethod
    def stream_create(self, ordinal: int, priority: int = 0) -> int:
        """A new non-blocking stream of ``ordinal``; ``priority`` is in CUDA's numbers
        (lower is more urgent) and already checked against :meth:`stream_priority_range`."""

    @abstractmethod
    def stream_priority_range(self, ordinal: int) -> tuple[int, int]:
        """``(least, greatest)`` stream priorities of ``ordinal``
        (``cuCtxGetStreamPriorityRange``); ``greatest`` is the most urgent and the lowest."""

    @abstractmethod
    def stream_priority(self, stream: int) -> int:
        """The priority a (possibly foreign) stream was created with (``cuStreamGetPriority``)."""

    @abstractmethod
    def stream_destroy(self, stream: int) -> None: ...

    @abstractmethod
    def stream_device(self, stream: int) -> int:
        """The ordinal of the device a (possibly foreign) stream belongs to."""

    @abstractmethod
    def stream_query(self, stream: int) -> bool:
        """True when all work on the stream has completed; raises on a fault."""

    @abstractmethod
    def stream_synchronize(self, stream: int) -> None: ...

    @abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None:
        """Make ``stream`` wait for ``event``. A default stream handle
        (:data:`LEGACY_STREAM`, :data:`PER_THREAD_STREAM`) means the default stream of
        the event's device, whatever context is current (as for :meth:`event_record`)."""

    # -- events --------------------------------------------------------------------
    @abstractmethod
    def event_create(self, ordinal: int, *, timing: bool = False) -> int: ...

    @abstractmethod
    def event_destroy(self, event: int) -> None: ...

    @abstractmethod
    def event_record(self, event: int, stream: int) -> None:
        """Record ``event`` on ``stream``; a default stream handle means the default
        stream of the event's device (a foreign library's, e.g. torch's, on that device)."""

    @abstractmethod
    def event_query(self, event: int) -> bool: ...

    @abstractmethod
    def event_synchronize(self, event: int) -> None: ...

    @abstractmethod
    def event_elapsed_ms(self, start: int, end: int) -> float: ...

    # -- memory --------------------------------------------------------------------
    @abstractmethod
    def mem_alloc_async(self, nbytes: int, stream: int) -> int:
        """Stream-ordered allocation from the device's pool; OutOfMemoryError on failure."""

    @abstractmethod
    def mem_free_async(self, ptr: int, stream: int) -> None: ...

    @abstractmethod
    def mem_get_info(self, ordinal: int) -> tuple[int, int]:
        """``(free, total)`` bytes of the device as the driver sees it (``cuMemGetInfo``)."""

    @abstractmethod
    def mem_pool_usage(self, ordinal: int) -> tuple[int, int]:
        """``(reserved, used)`` bytes of the device's default memory pool: what the pool
        holds from the device, and what of it live allocations use."""

    @abstractmethod
    def mem_pool_trim(self, ordinal: int, keep_bytes: int) -> None:
        """Release the pool's idle memory until it reserves at most ``keep_bytes``
        (``cuMemPoolTrimTo``); memory in use is never released."""

    # -- explicit memory pools (cuasync.lowlevel.MemoryPool) ----------------------------
    @abstractmethod
    def pool_create(self, ordinal: int, release_threshold: int) -> int:
        """A new stream-ordered memory pool of device ``ordinal`` (``cuMemPoolCreate``)
        that keeps up to ``release_threshold`` idle bytes reserved across synchronizations;
        peers given access to the device so far may access it too."""

    @abstractmethod
    def pool_set_release_threshold(self, pool: int, nbytes: int) -> None: ...

    @abstractmethod
    def pool_alloc_async(self, nbytes: int, pool: int, stream: int) -> int:
        """Stream-ordered allocation from ``pool`` (``cuMemAllocFromPoolAsync``); freed with
        :meth:`mem_free_async`. OutOfMemoryError on failure."""

    @abstractmethod
    def pool_usage(self, pool: int) -> tuple[int, int]:
        """``(reserved, used)`` bytes of ``pool``, as :meth:`mem_pool_usage` for a device's."""

    @abstractmethod
    def pool_trim(self, pool: int, keep_bytes: int) -> None:
        """Release ``pool``'s idle memory until it reserves at most ``keep_bytes``."""

    @abstractmethod
    def host_alloc(self, nbytes: int) -> int:
        """Page-locked, device-mapped, portable host memory; returns its address."""

    @abstractmethod
    def host_free(self, ptr: int) -> None: ...

    @abstractmethod
    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Copy from host address ``src`` (pinned) to device pointer ``dst``."""

    @abstractmethod
    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: int) -> None:
        """Copy from device pointer ``src`` to host address ``dst`` (pinned)."""

    @abstractmethod
    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: int) -> None: ...

    @abstractmethod
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
        """Copy ``height`` rows of ``width`` bytes; ``kind`` is "htod", "dtoh" or "dtod"."""

    @abstractmethod
    def memset_d8_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None: ...

    def pointer_device(self, ptr: int) -> int:
        """The ordinal of the device whose memory ``ptr`` points into; -1 if unknown
        (``cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)``)."""
        return -1

    # -- completion primitives -----------------------------------------------------
    @abstractmethod
    def write_value32(self, stream: int, address: int, value: int) -> None:
        """After prior work on ``stream``, store ``value`` into the host word at ``address``."""

    def _copy_and_write(
        self, dst: int, src: int, nbytes: int, stream: int, address: int, value: int
    ) -> None:
        """``copy_and_write``: :meth:`memcpy_htod_async`, then :meth:`write_value32` on the
        same stream (a small upload's DMA and its completion flag; one native call where
        the backend has one).

        >>> backend.copy_and_write(alloc.ptr, block.address, 4096, stream.handle, word, gen)
        """
        self.memcpy_htod_async(dst, src, nbytes, stream)
        self.write_value32(stream, address, value)

    # -- cancel words (cuasync/_launch/cancel.py) -------------------------------------
    @abstractmethod
    def device_words_alloc(self, ordinal: int, nbytes: int, stream: int) -> int:
        """``nbytes`` of device memory of ``ordinal`` outside every pool (never freed:
        kernels still queued may read it), for words :meth:`write_device_word` sets;
        zeroed on ``stream`` (the urgent stream the words are written on) before it
        returns: a wait for one memset, on a stream that carries nothing else.

        >>> slab = backend.device_words_alloc(0, 4096, urgent)
        """

    @abstractmethod
    def write_device_word(self, stream: int, address: int, value: int) -> None:
        """Store ``value`` into the 32-bit *device* word at ``address`` (of
        :meth:`device_words_alloc`) in stream order on ``stream``: an enqueue, never a
        wait. (:meth:`write_value32` writes host words: its address is a host address.)

        >>> backend.write_device_word(urgent, slab + 4 * i, generation)
        """

    @abstractmethod
    def stream_wait_value32(self, stream: int, address: int, value: int) -> None:
        """Make later work on ``stream`` wait until the host word at ``address`` reaches
        ``value`` (``cuStreamWaitValue32`` with ``CU_STREAM_WAIT_VALUE_GEQ``: the 32-bit
        difference ``word - value`` read as signed is >= 0, so values may wrap)."""

    @abstractmethod
    def launch_host_func(
        self, stream: int, fn: Callable[[], None], sync_mode: int | None = None
    ) -> None:
        """Run ``fn()`` on a driver thread after prior work on ``stream``.

        ``fn`` must not call the driver. It is kept alive until it has run. Python on a
        driver thread needs the GIL there, which may deadlock the driver against a
        thread that holds the GIL in a driver call: prefer :meth:`launch_host_signal`.
        ``sync_mode`` (``HOST_TASK_SPINWAIT`` or ``HOST_TASK_BLOCKING``) asks for
        ``cuLaunchHostFunc_v2``; only where :meth:`host_task_modes_problem` is None.
        """

    @abstractmethod
    def launch_host_signal(
        self, stream: int, fn: int, data: int, sync_mode: int | None = None
    ) -> None:
        """Call the C function at address ``fn`` (``void fn(void *data)``) on a driver
        thread after prior work on ``stream``; it must take no GIL and call no driver
        API (``cuasync._reactor.HOST_SIGNAL_FN`` is such a function). ``sync_mode`` as
        for :meth:`launch_host_func`."""

    def host_task_modes_problem(self) -> str | None:
        """None when host functions take a ``sync_mode`` (``cuLaunchHostFunc_v2``); else
        why not, in one line."""
        return f"the {self.name} backend has no host-task sync modes"

    # -- modules and kernels ---------------------------------------------------------
    @abstractmethod
    def module_load(self, ordinal: int, image: bytes) -> int:
        """Load a cubin, fatbin or PTX image into ``ordinal``'s context."""

    @abstractmethod
    def module_unload(self, module: int) -> None: ...

    @abstractmethod
    def module_function(self, module: int, name: str) -> int: ...

    def function_name(self, function: int) -> str:
        """The name of a function handle (``cuFuncGetName``); empty when unknown."""
        return ""

    def arch(self, ordinal: int) -> str:
        """The architecture kernels are compiled for on ``ordinal`` (``"sm_90"``)."""
        major, minor = self.device_compute_capability(ordinal)
        return f"sm_{major}{minor}"

    def prepare_gemm(self, ordinal: int) -> None:
        """Load what :meth:`gemm` needs on device ``ordinal`` before its first call (CUDA:
        cuBLAS's libraries and handle, hundreds of milliseconds once per process), so a
        first matrix product's ``await`` can do it on the compile thread. Nothing here.
        """

    @abstractmethod
    def prepare_kernel(
        self, ordinal: int, kernel: KernelCode, *, compile_only: bool = False
    ) -> PreparedKernel:
        """Make ``kernel`` launchable on device ``ordinal``; :meth:`launch_kernel` takes the result.

        CUDA compiles the source for the device's architecture (or takes the function
        from the kernel's module) and loads it; the emulator compiles the source only to
        check it (``CUASYNC_EMU_COMPILE``) and keeps the numpy twin. Raises what stops the
        kernel from running here: :class:`~cuasync.errors.KernelCompileError`, a driver
        error, or on the emulator a :class:`~cuasync.errors.LaunchError` when there is no
        twin (not with ``compile_only``, which checks the device code and nothing else).
        """

    @abstractmethod
    def _launch_kernel(
        self,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        errors: Callable[[], list[BaseException]],
        flag_address: int = 0,
        flag_value: int = 0,
    ) -> None:
        """``launch_kernel``: launch a :class:`PreparedKernel` of this backend on ``stream``.

        ``args`` match the kernel's parameters: a :class:`DeviceArray` or an int address
        for each pointer, a Python scalar in range for each value. ``errors()`` gives the
        list a launch that fails without faulting the device appends its error to (the
        emulator's twin raising); it is called, if at all, before this returns. A
        ``flag_address`` also enqueues :meth:`write_value32` of ``flag_value`` after the
        launch (a completion's flag); a launch that fails writes no flag. This is on the
        path of every launch: backends keep it to one call into the driver.
        """

    def _launch_failed(
        self,
        rc: int,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        flag_address: int = 0,
        flag_value: int = 0,
    ) -> None:
        """``launch_failed``: raise why :attr:`fast_launch` returned ``rc`` for this launch
        (backends that have one say more; this default only has the code)."""
        raise driver_error(abs(rc), "cuLaunchKernel" if rc > 0 else "cuStreamWriteValue32")

    # -- bursts of awaits (the native submitter) -----------------------------------------
    def make_submitter(self, reactor: Any, slab: int) -> Any:
        """The native thread that makes the launches bursts of awaits queue, writing their
        flags into ``slab`` (``reactor``'s); None where launches are cheap to make here
        (this default) or there is no native module."""
        return None

    def forget_submitter(self) -> None:
        """A forked child: the parent's submitter is not waited for any more."""

    def queue_launch(
        self,
        submitter: Any,
        kernel: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_mem: int,
        stream: int,
        args: Sequence[Any],
        errors: Callable[[], list[BaseException]],
        flag_address: int,
        slot: int,
        flag_value: int,
    ) -> int | None:
        """Launch as :meth:`launch_kernel` does, for an await in a burst: queued for
        ``submitter``'s thread, which writes the flag of ``slot`` after it (its ticket:
        made once ``submitter.done`` is past it), or None when it cannot be (the caller
        launches it). This default launches at once (the emulator's launches only queue
        work for its streams) and returns -1: nothing to wait for before spinning."""
        self.launch_kernel(
            kernel, grid, block, shared_mem, stream, args, errors, flag_address, flag_value
        )
        return -1

    def _context_handle(self, ordinal: int) -> int:
        """``context_handle``: the driver context (an integer handle) that the submitter's
        thread makes current for launches on device ``ordinal``; 0 where the backend has
        none (this default). A backend that caches them in its ``_context_handles`` dict (a field of
        ``BackendCore``) has them read from there by the native core."""
        return 0

    def queued_error(self, submitter: Any, slot: int, stream: int) -> BaseException | None:
        """Why the launch queued for ``slot`` failed in ``submitter``'s thread, once its
        flag has landed; None if it did not (this default: nothing is queued)."""
        return None

    # -- contractions ----------------------------------------------------------------
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
        """Enqueue ``c[i] = alpha * a[i] @ b[i] + beta * c[i]`` for each ``i`` on ``stream``.

        ``a`` is ``(batch, m, k)``, ``b`` ``(batch, k, n)``, ``c`` ``(batch, m, n)``, all
        of one float or complex dtype, ``batch``, ``m``, ``n`` > 0 and ``k`` >= 0 (0 gives
        ``beta * c``); each matrix has a :func:`matrix_layout`, the batch strides are
        >= 0 (0 repeats a matrix), and ``c`` does not overlap ``a`` or ``b``. ``beta == 0``
        means ``c`` is not read (NaNs in it do not propagate). ``precision`` is
        ``"highest"`` (float32 products in full float32) or ``"tf32"`` (float32 inputs
        rounded to TF32 on tensor cores); float16 and bfloat16 accumulate in float32.
        ``errors`` as in :meth:`launch_kernel`.
        """
        raise NotImplementedError(f"the {self.name} backend has no matrix products")

    # -- guarded regions and graphs ---------------------------------------------------
    #: The kinds of :meth:`guarded` region used (``cuasync._launch.guard.KINDS``: a
    #: backend may have some or all off).
    guards: frozenset[str] = frozenset(("memset", "library", "copy"))

    def guarded(self, stream: int, word: int, guard: int) -> AbstractContextManager[None]:
        """A region of ``stream`` that runs only if the cancel word ``word`` (see
        ``cuasync/kernels/cancel.cuh``) is unset when it starts on the device: what the
        block enqueues on ``stream`` is held back and enqueued as one unit in its place
        (on a GPU, the body of a conditional graph node whose condition the kernel
        ``guard``, a ``CUfunction`` of ``ca_cancel_guard``, sets). Nothing else may be
        enqueued on ``stream`` meanwhile; a block that raises enqueues nothing.

        >>> with backend.guarded(stream, word, guard):
        ...     backend.memset_d8_async(ptr, 0, nbytes, stream)
        """
        raise NotImplementedError

    @abstractmethod
    def stream_begin_capture(self, stream: int, mode: int = CAPTURE_RELAXED) -> None: ...

    @abstractmethod
    def stream_end_capture(self, stream: int) -> int:
        """End capture and return the recorded graph's handle."""

    @abstractmethod
    def stream_is_capturing(self, stream: int) -> bool: ...

    @abstractmethod
    def graph_instantiate(self, graph: int) -> int: ...

    @abstractmethod
    def graph_upload(self, graph_exec: int, stream: int) -> None: ...

    @abstractmethod
    def graph_launch(
        self,
        graph_exec: int,
        stream: int,
        errors: Callable[[], list[BaseException]] | None = None,
    ) -> None:
        """Launch an instantiated graph on ``stream``; ``errors``: the launch's error box
        (where a backend reports a failure of a node it can tell, as the emulator a twin
        that raised; the driver reports none there)."""

    @abstractmethod
    def graph_destroy(self, graph: int) -> None: ...

    @abstractmethod
    def graph_exec_destroy(self, graph_exec: int) -> None: ...

    # -- native fast paths -----------------------------------------------------------
    def driver_entry_points(self, names: Sequence[str]) -> dict[str, int]:
        """Addresses of driver functions for the native reactor; empty when not available."""
        return {}
