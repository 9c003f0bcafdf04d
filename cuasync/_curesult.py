"""CUresult codes: the one table of driver error codes that cuasync names, explains or raises.

Both backends raise these (the emulator models the driver's codes), and
:class:`cuasync.errors.DriverError` takes its ``name`` and ``explanation`` from here.

>>> Code.NOT_READY == 600, RESULTS[Code.NOT_READY][0]
(True, 'CUDA_ERROR_NOT_READY')
"""

from __future__ import annotations

from enum import IntEnum


class Code(IntEnum):
    """The ``CUresult`` values cuasync knows, named as in ``cuda.h`` without ``CUDA_ERROR_``.

    Members are ints: they compare equal to the driver's own codes.
    """

    INVALID_VALUE = 1
    OUT_OF_MEMORY = 2
    NOT_INITIALIZED = 3
    DEINITIALIZED = 4
    NO_DEVICE = 100
    INVALID_DEVICE = 101
    INVALID_IMAGE = 200
    INVALID_CONTEXT = 201
    NO_BINARY_FOR_GPU = 209
    PEER_ACCESS_UNSUPPORTED = 217
    INVALID_PTX = 218
    INVALID_HANDLE = 400
    NOT_FOUND = 500
    NOT_READY = 600
    ILLEGAL_ADDRESS = 700
    LAUNCH_OUT_OF_RESOURCES = 701
    LAUNCH_TIMEOUT = 702
    PEER_ACCESS_ALREADY_ENABLED = 704
    PEER_ACCESS_NOT_ENABLED = 705
    CONTEXT_IS_DESTROYED = 709
    ASSERT = 710
    HARDWARE_STACK_ERROR = 714
    ILLEGAL_INSTRUCTION = 715
    MISALIGNED_ADDRESS = 716
    LAUNCH_FAILED = 719
    NOT_PERMITTED = 800
    NOT_SUPPORTED = 801
    STREAM_CAPTURE_UNSUPPORTED = 900
    STREAM_CAPTURE_INVALIDATED = 901


_EXPLANATIONS: dict[Code, str] = {
    Code.INVALID_VALUE: "an argument passed to the driver was out of range",
    Code.OUT_OF_MEMORY: "the device could not allocate the memory requested",
    Code.NOT_INITIALIZED: "the driver has not been initialized",
    Code.DEINITIALIZED: "the driver is shutting down",
    Code.NO_DEVICE: "no CUDA-capable device is present",
    Code.INVALID_DEVICE: "the device ordinal is not valid",
    Code.INVALID_IMAGE: "the kernel image is not valid for this device",
    Code.INVALID_CONTEXT: "no valid context is current on this thread",
    Code.NO_BINARY_FOR_GPU: "the module has no code for this architecture",
    Code.PEER_ACCESS_UNSUPPORTED: "the two devices cannot access each other",
    Code.INVALID_PTX: "the PTX could not be compiled for this device",
    Code.INVALID_HANDLE: "a stream, event or module handle is not valid",
    Code.NOT_FOUND: "the named symbol was not found",
    Code.NOT_READY: "work is still pending",
    Code.ILLEGAL_ADDRESS: "a kernel or copy touched memory that is not allocated",
    Code.LAUNCH_OUT_OF_RESOURCES: "too many registers or threads for this launch",
    Code.LAUNCH_TIMEOUT: "a kernel ran past the watchdog limit",
    Code.PEER_ACCESS_ALREADY_ENABLED: "peer access was already enabled",
    Code.PEER_ACCESS_NOT_ENABLED: "peer access has not been enabled",
    Code.CONTEXT_IS_DESTROYED: "the context was destroyed (by another library?)",
    Code.ASSERT: "a device-side assert fired",
    Code.HARDWARE_STACK_ERROR: "the device call stack overflowed",
    Code.ILLEGAL_INSTRUCTION: "a kernel executed an illegal instruction (trap)",
    Code.MISALIGNED_ADDRESS: "a kernel accessed a misaligned address",
    Code.LAUNCH_FAILED: "a kernel failed while executing (trap or exception)",
    Code.NOT_PERMITTED: "the operation is not permitted here (a driver call in a host function?)",
    Code.NOT_SUPPORTED: "the operation is not supported on this device",
    Code.STREAM_CAPTURE_UNSUPPORTED: "not allowed while the stream is capturing",
    Code.STREAM_CAPTURE_INVALIDATED: "the capture was invalidated by an error",
}

#: ``code -> (enum name, what it means)``, keyed by plain ints as well (members hash as ints).
RESULTS: dict[int, tuple[str, str]] = {
    int(code): (f"CUDA_ERROR_{code.name}", _EXPLANATIONS[code]) for code in Code
}

#: Codes after which the context is unusable ("sticky" errors).
STICKY: frozenset[int] = frozenset(
    {
        Code.ILLEGAL_ADDRESS,
        Code.LAUNCH_TIMEOUT,
        Code.ASSERT,
        Code.HARDWARE_STACK_ERROR,
        Code.ILLEGAL_INSTRUCTION,
        Code.MISALIGNED_ADDRESS,
        Code.LAUNCH_FAILED,
    }
)
