"""Every exception cuasync raises, in one tree.

Two roots, as httpx separates transport failures from misuse: :class:`DeviceError` is
what can go wrong at run time, however correct the program; :class:`UsageError` is a
bug in the calling code, and is never a ``DeviceError``, so ``except DeviceError``
around an ``await`` does not hide it. :class:`InternalError` is a bug in cuasync.

::

    CuasyncError                       base of everything cuasync raises
    ├── DeviceError                    runtime failures: catch these
    │   ├── BackendUnavailableError    the requested backend cannot run here (no driver, ...)
    │   │   └── LibraryUnavailableError  a CUDA library (cuBLAS) cannot be loaded here
    │   ├── LibraryError               a CUDA library call failed (.status, .name)
    │   ├── DriverError                a failed CUresult (.code, .name, .explanation)
    │   │   ├── DeviceFaultError       sticky context fault: trap, illegal address, ...
    │   │   └── OutOfMemoryError       also a MemoryError; names the size requested
    │   ├── KernelError                a kernel failed without faulting the device
    │   │   └── CastOverflowError      a checked cast met a value its dtype cannot hold
    │   ├── KernelCompileError         NVRTC failed; carries the log
    │   └── BusyResourceError          a pinned buffer is in flight
    ├── UsageError                     misuse: fix the calling code
    │   ├── TransferRejected           a transfer was refused; ``.package`` hands back the
    │   │   │                          inputs (also a DeviceError until 0.3, as in 0.1)
    │   │   └── BusyTransferRejected   ... because its buffer is in flight (also Busy...)
    │   ├── ArgumentError              also a ValueError: a bad argument, named
    │   │   ├── DTypeError             also a TypeError: unknown or mismatched dtype
    │   │   ├── ScalarOverflowError    also an OverflowError: a Python int past an op's dtype
    │   │   ├── ShapeError             negative/non-integer shapes, bad slices, size mismatches
    │   │   │   ├── IndexOutOfRangeError   also an IndexError: past an axis, too many indices
    │   │   │   └── UnsupportedIndexError  also an IndexError: arrays, lists, floats, ...
    │   │   ├── InvalidDeviceError     ordinal out of range, object on another device
    │   │   ├── AliasingError          a written tensor overlaps another argument's memory
    │   │   └── LaunchError            kernel launch preconditions; nothing was enqueued
    │   ├── SchedulingError            a policy returned something unusable
    │   ├── OpConsumedError            also a RuntimeError: a single-use op executed twice
    │   ├── ReentrancyError            also a RuntimeError: executing an op inside ``then``
    │   ├── SyncInEventLoopError       also a RuntimeError: ``.sync()`` inside a running loop
    │   ├── HostArrayError             also a TypeError: numpy data and device data mixed
    │   ├── NotAwaitedError            also a TypeError/AttributeError: an op used as its result
    │   ├── ProcessLocalError          also a TypeError: a tensor, op, stream, ... was pickled
    │   ├── CaptureError               also a RuntimeError: graph capture misuse
    │   └── MissingDependencyError     also an ImportError: a feature's optional package is missing
    └── InternalError                  also a RuntimeError: a bug in cuasync; please report it

Builtin bases stay, so idiomatic ``except ValueError`` / ``IndexError`` still works.
Messages name the argument, what was expected, what was given and what to do.

>>> try:
...     t = await cuasync.from_host(data)
... except cuasync.DeviceError:   # out of memory, a device fault, ...: degrade or retry
...     t = None                  # a wrong argument is a UsageError: it propagates
"""

from __future__ import annotations

from typing import Any

from ._curesult import RESULTS, STICKY

__all__ = [
    "AliasingError",
    "ArgumentError",
    "BackendUnavailableError",
    "BusyResourceError",
    "BusyTransferRejected",
    "CaptureError",
    "CastOverflowError",
    "CuasyncError",
    "DTypeError",
    "DeviceError",
    "DeviceFaultError",
    "DriverError",
    "HostArrayError",
    "IndexOutOfRangeError",
    "InternalError",
    "InvalidDeviceError",
    "KernelCompileError",
    "KernelError",
    "LaunchError",
    "LibraryError",
    "LibraryUnavailableError",
    "MissingDependencyError",
    "NotAwaitedError",
    "OpConsumedError",
    "OutOfMemoryError",
    "ProcessLocalError",
    "ReentrancyError",
    "ScalarOverflowError",
    "SchedulingError",
    "ShapeError",
    "SyncInEventLoopError",
    "TransferRejected",
    "UnsupportedIndexError",
    "UsageError",
]


class CuasyncError(Exception):
    """Base class of every exception cuasync raises."""


class DeviceError(CuasyncError):
    """A runtime failure: the driver, the device, memory, a kernel, a busy resource.

    What to catch around an ``await``; programming errors raise :class:`UsageError`.
    """


class UsageError(CuasyncError):
    """The calling code misused cuasync; the message says what to change.

    Not a :class:`DeviceError`: ``except DeviceError`` does not catch it.
    """


class InternalError(CuasyncError, RuntimeError):
    """A cuasync bug (an invariant broke); please report it with the traceback."""


class BackendUnavailableError(DeviceError):
    """The requested backend cannot be used on this machine; the message says why."""


class LibraryUnavailableError(BackendUnavailableError):
    """A CUDA library an op needs (cuBLAS for matrix products) cannot be loaded here;
    the message says which and how to install it."""


class LibraryError(DeviceError):
    """A call into a CUDA library (cuBLAS) returned an error status.

    ``status`` is the library's numeric status, ``name`` its enum name and ``call`` the
    library function that failed.
    """

    def __init__(self, status: int, name: str, call: str) -> None:
        self.status = int(status)
        self.name = name
        self.call = call
        super().__init__(f"{call}: {name} (status {self.status})")


# CUresult names and explanations, and the sticky codes: one table, in _curesult.
_RESULTS = RESULTS

#: CUresult codes after which the context is unusable ("sticky" errors).
STICKY_CODES = STICKY


class DriverError(DeviceError):
    """A driver call returned an error.

    ``code`` is the numeric ``CUresult``, ``name`` its enum name and ``explanation``
    what it means; ``call`` is the driver function that failed (may be empty). Use
    :func:`driver_error` to build the fitting subclass.
    """

    def __init__(self, code: int, call: str = "", detail: str = "") -> None:
        self.code = int(code)
        self.name, self.explanation = _RESULTS.get(
            self.code, (f"CUresult {self.code}", "see the CUDA driver API documentation")
        )
        self.call = call
        where = f"{call}: " if call else ""
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{where}{self.name}: {self.explanation}{extra}")


class DeviceFaultError(DriverError):
    """The device context hit a sticky fault; every later call on that device fails."""


class OutOfMemoryError(DriverError, MemoryError):
    """A device or pinned allocation failed for lack of memory; ``nbytes`` was requested.

    >>> try:
    ...     t = await cuasync.empty((1 << 40,))
    ... except cuasync.errors.OutOfMemoryError as exc:
    ...     print(exc.nbytes)
    """

    def __init__(self, nbytes: int, where: str = "device memory") -> None:
        self.nbytes = nbytes
        super().__init__(
            2,
            call="allocation",
            detail=f"{nbytes} bytes of {where} requested; free tensors or allocate less",
        )


def driver_error(code: int, call: str = "", detail: str = "") -> DriverError:
    """Return the :class:`DriverError` subclass that fits ``code``."""
    if int(code) in STICKY_CODES:
        return DeviceFaultError(code, call, detail)
    return DriverError(code, call, detail)


class ArgumentError(UsageError, ValueError):
    """An argument was not acceptable; the message names it and says what to pass."""


class DTypeError(ArgumentError, TypeError):
    """A dtype name is unknown or a dtype does not match what is required."""


class ScalarOverflowError(ArgumentError, OverflowError):
    """A Python int operand does not fit the dtype an op computes in (``int32`` and
    ``2**40``), or any float; raised when the op is built, as numpy 2 raises
    :class:`OverflowError`. A float dtype takes any int a float holds.

    >>> cuasync.add(x_int32, 2**40)        # raises ScalarOverflowError
    """


class ShapeError(ArgumentError):
    """A shape, index, slice or element count is not acceptable."""


class IndexOutOfRangeError(ShapeError, IndexError):
    """An integer index is outside its axis, or there are more indices than axes.

    Also an :class:`IndexError`, as in numpy, so iterating with ``__getitem__`` stops
    at the end of the first axis.
    """


class UnsupportedIndexError(ShapeError, IndexError, TypeError):
    """An index that basic (zero-copy) indexing does not take.

    Integer or boolean arrays and lists (gathering or masking copies data: use
    ``cuasync.take`` / ``cuasync.where``), floats, strings, ... Also an
    :class:`IndexError`, as numpy raises for indices it does not understand, and a
    :class:`TypeError` (the index's type is the problem).
    """


class InvalidDeviceError(ArgumentError):
    """A device ordinal is out of range or an object lives on another device."""


class AliasingError(ArgumentError):
    """A tensor an op writes partly overlaps memory another of its arguments uses, so the
    result would be undefined (a kernel's output parameter, ``memcpy``'s ``dst``).

    The very same view (same address, shape, strides and item size) is allowed: in place.

    >>> cuasync.memcpy(x[1:], x[:-1])      # raises AliasingError; use x[:-1].dup() first
    """


class LaunchError(ArgumentError):
    """A kernel launch precondition failed; nothing was enqueued."""


class SchedulingError(UsageError):
    """A scheduling policy returned something that cannot run the op."""


class OpConsumedError(UsageError, RuntimeError):
    """A single-use :class:`~cuasync.DeviceOp` was executed a second time."""


class ReentrancyError(UsageError, RuntimeError):
    """An op was executed from inside a ``then`` closure, under the execution lock."""


class SyncInEventLoopError(UsageError, RuntimeError):
    """A blocking call was made from inside a running event loop."""


class HostArrayError(UsageError, TypeError):
    """numpy and device data were mixed: a host array where a device tensor is needed
    (``tensor + ndarray``: upload it with ``cuasync.from_host``), or a device tensor
    given to numpy (``np.sum(tensor)``: use ``cuasync.sum``, or copy it to the host)."""


class NotAwaitedError(UsageError, TypeError, AttributeError):
    """An op was used where its result is needed, most often a forgotten ``await``:
    ``np.asarray(t.to_host())``, ``t.to_host()[0]``, ``op.sum()``. Await it first. Also
    an :class:`AttributeError` (for an attribute the op lacks) and a :class:`TypeError`."""


class ProcessLocalError(UsageError, TypeError):
    """An object that lives in one process (a tensor, an op, a stream, an event, a graph,
    a pinned buffer, a loaded module) was pickled or copied, e.g. to send it to another
    process (multiprocessing, a Ray actor). Send host data (``await t.to_host()``) and
    build the device objects in the process that uses them; ``Device`` and ``Kernel``
    pickle (as an ordinal, as source and twin)."""


class CaptureError(UsageError, RuntimeError):
    """Graph capture was misused (allocation recorded, sync during capture, ...)."""


class MissingDependencyError(UsageError, ImportError):
    """A feature that was turned on needs an optional package that is not installed;
    the message names the package and the extra that installs it.

    >>> cuasync.trace(True)      # without nvtx: MissingDependencyError, pip install 'cuasync[nvtx]'
    """


class KernelError(DeviceError):
    """A kernel failed while it ran, without faulting the device; on the emulator, its
    numpy twin raised (the twin's exception is the ``__cause__``). The op fails; the
    device stays usable."""


class CastOverflowError(KernelError, OverflowError):
    """A checked cast (``astype(dtype, casting="checked")``) met a value ``dtype``
    cannot hold: out of an integer's range, NaN or infinity to an integer, or a finite
    float that became infinite. Found on the device, raised when the op lands; the
    output tensor is not handed out.

    >>> await x.astype("int8", casting="checked")   # x holds 1e10: CastOverflowError
    """


class KernelCompileError(DeviceError):
    """NVRTC could not compile a kernel; ``log`` holds its output."""

    def __init__(self, message: str, log: str = "") -> None:
        self.log = log
        super().__init__(f"{message}\n{log}" if log else message)


class BusyResourceError(DeviceError):
    """A resource is in use by in-flight device work and cannot be touched yet."""


class TransferRejected(UsageError, DeviceError):
    """A transfer was refused before anything was enqueued: misuse of the calling code.

    ``package`` holds what was given, untouched, so the caller can reuse it. Still a
    :class:`DeviceError` in 0.2 (as in 0.1), so that existing ``except DeviceError``
    handlers keep working; that base goes in 0.3.
    """

    def __init__(self, message: str, package: Any) -> None:
        self.package = package
        super().__init__(message)


class BusyTransferRejected(TransferRejected, BusyResourceError):
    """A transfer refused because its buffer is still in flight.

    Both a :class:`TransferRejected` (``.package`` hands the inputs back) and a
    :class:`BusyResourceError`.
    """
