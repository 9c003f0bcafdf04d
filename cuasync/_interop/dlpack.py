"""DLPack both ways: ``Tensor.__dlpack__`` / ``__dlpack_device__`` and :func:`from_dlpack`.

Capsules (``dlpack.h`` v1.0, and the legacy unversioned layout) are made and read by
:mod:`.capsules`, one C call each where the native module is built; this module decides
what goes into one and checks what comes out. An exported capsule holds a reference to
the tensor, which keeps its device allocation alive until the consumer calls the
deleter; the deleter is a C function that any thread may call at any time (it takes the
GIL, drops the reference, and makes the allocation's eventual free wait for the
consumer's default stream where that stream is known). A capsule nobody consumed calls
the deleter when it is collected, from a C destructor (``reactor/python/dlpack.c``) that keeps
an exception the consumer has set meanwhile (a refused capsule is dropped while its
consumer raises); a consumed one (renamed ``used_dltensor...``) is its consumer's
business.

>>> y = torch.from_dlpack(x)                    # x a cuasync.Tensor: zero-copy
>>> x = cuasync.from_dlpack(torch_tensor)       # and back
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any, NoReturn, Protocol

import numpy as np

from .._backends import get_backend
from .._backends.base import LEGACY_STREAM, PER_THREAD_STREAM
from .._core.context import LOCAL, LOCK
from .._core.device import Device, Stream, _check_ordinal
from .._core.memory import Allocation
from .._dtypes import _BY_DTYPE, SUPPORTED, dtype_name
from .._native import PROCESS
from .._tensor import Tensor, contiguous_strides
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from . import capsules
from .foreign import (
    ForeignAllocation,
    foreign_extent,
    legacy_stream,
    only_legacy_uses,
    order_foreign_after,
    order_free_after_foreign,
)

__all__ = ["KDL_CPU", "KDL_CUDA", "SupportsDLPack", "dlpack_device", "export", "from_dlpack"]

KDL_CPU = 1
KDL_CUDA = 2
_DEVICE_NAMES = {
    1: "CPU",
    2: "CUDA",
    3: "CUDA host (pinned)",
    4: "OpenCL",
    7: "Vulkan",
    8: "Metal",
    10: "ROCm",
    11: "ROCm host",
    13: "CUDA managed",
    14: "oneAPI",
}
_READ_ONLY = 1 << 0
#: The DLPack version exported in versioned capsules.
VERSION = (1, 0)

# DLDataTypeCode: kDLInt, kDLUInt, kDLFloat, kDLBfloat, kDLComplex, kDLBool.
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_BFLOAT = 4
#: DLPack 1.1's codes of the FP8 formats (kDLFloat8_e4m3fn, kDLFloat8_e5m2), as torch uses.
_FP8 = {"float8_e4m3fn": 10, "float8_e5m2": 12}


def _release_to_legacy(alloc: Allocation) -> None:
    """The release of a capsule exported to the legacy default stream (the common case:
    torch's and CuPy's default stream), called with the exported allocation, which the
    capsule kept alive: the stream is recorded as its reader, so its eventual free, and
    later writes, wait for that stream's work up to now (as
    :func:`.foreign.order_free_after_foreign` does, inline: this runs once per export).

    Only the read is recorded (``Allocation.use`` would also order the stream after a
    pending write: the export did that for every write before it, and a write since
    concerns work the consumer enqueues after this, which its next import orders)."""
    device = alloc.device
    if get_backend().fault_seen and device.fault is not None:
        return
    legacy = legacy_stream(device)
    if LOCAL.active:  # (inside a ``then``: this thread holds the lock)
        alloc._reads[legacy] = legacy._next_seq()
    else:
        with LOCK:
            alloc._reads[legacy] = legacy._next_seq()


class _Export:
    """What a capsule exported to another stream keeps alive (the allocation), and the
    ordering its release owes: the capsule calls ``_Export.release(export)`` once, when
    the consumer is done with it."""

    __slots__ = ("alloc", "handle", "thread")

    def __init__(self, alloc: Allocation, handle: int) -> None:
        self.alloc = alloc
        self.handle = handle  # the consumer's stream, -1 if it asked for no synchronization
        self.thread = threading.get_ident() if handle == PER_THREAD_STREAM else 0

    def release(self) -> None:
        # Only the default streams are known to outlive the export; a per-thread default
        # stream is only known on the thread that exported.
        handle = self.handle
        if handle != LEGACY_STREAM and (
            handle != PER_THREAD_STREAM or threading.get_ident() != self.thread
        ):
            return
        alloc = self.alloc
        if alloc.device.fault is None:
            order_free_after_foreign(alloc, handle)


# -- export ------------------------------------------------------------------------------
def dlpack_device(tensor: Tensor) -> tuple[int, int]:
    """``(kDLCUDA, ordinal)``: the emulator models a CUDA device, so it says CUDA too."""
    return (KDL_CUDA, tensor._alloc.device.ordinal)


def _dtype_code(tensor: Tensor) -> tuple[int, int]:
    """DLPack's ``(code, bits)`` of the tensor's dtype (cached by dtype)."""
    dt = tensor.dtype
    code = _CODE_OF.get(dt)
    if code is None:
        name = dtype_name(dt)
        if name == "bfloat16":
            code = _BFLOAT, 16
        elif name in _FP8:
            code = _FP8[name], 8
        else:
            code = _CODES[dt.kind], dt.itemsize * 8
        _CODE_OF[dt] = code
    return code


#: DLPack's (code, bits) by dtype: the cache :func:`_dtype_code` fills, begun with the
#: built-in numeric dtypes (``Tensor.__dlpack__``'s native export reads it:
#: ``PROCESS.dlpack_codes``).
_CODE_OF: dict[Any, tuple[int, int]] = {
    dt: (_CODES[dt.kind], dt.itemsize * 8) for dt in _BY_DTYPE if dt.kind in _CODES
}


def _check_stream(stream: Any) -> int:
    if stream is None:
        return LEGACY_STREAM
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise ArgumentError(
            f"stream must be None or an int CUDA stream handle, got {type(stream).__name__}"
        )
    if stream == 0:
        raise ArgumentError(
            "stream=0 is ambiguous and disallowed by the DLPack protocol for CUDA; pass 1 for "
            "the legacy default stream, 2 for the per-thread default stream, -1 for none"
        )
    if stream < -1:
        raise ArgumentError(f"stream must be -1, 1, 2 or a stream handle, got {stream}")
    return stream


def _versioned(max_version: Any) -> bool:
    """Whether the consumer reads versioned capsules (``max_version`` 1.0 or later)."""
    if max_version is None:
        return False
    if max_version == VERSION:  # (what torch and CuPy pass)
        return True
    if not (
        isinstance(max_version, tuple)
        and len(max_version) == 2
        and all(isinstance(v, int) for v in max_version)
    ):
        raise ArgumentError(f"max_version must be a (major, minor) tuple, got {max_version!r}")
    return max_version[0] >= 1


def export(
    tensor: Tensor,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: tuple[int, int] | None = None,
    copy: bool | None = None,
) -> Any:
    """``tensor.__dlpack__(...)``: a capsule viewing the tensor's memory (never a copy).

    ``Tensor.__dlpack__`` (TensorCore's, in C) answers the call torch and CuPy make (the
    legacy default stream or -1, no device but the tensor's, no copy) with nothing
    pending on another stream, and calls this for the rest: an export to order, the
    first on a device (its legacy stream made here), dtypes it has no code for.
    """
    if (
        (stream is None or (type(stream) is int and (stream == LEGACY_STREAM or stream == -1)))
        and dl_device is None
        and not copy
        and (max_version is None or max_version == VERSION)
    ):
        alloc = tensor._alloc
        device = alloc.device
        if stream == -1:
            release: Any = id  # (release(alloc): the capsule only kept the memory alive)
        else:
            release = _release_to_legacy
            if not only_legacy_uses(alloc, legacy_stream(device)):
                order_foreign_after(alloc, LEGACY_STREAM)
        versioned = max_version is not None
        code, bits = _CODE_OF.get(tensor.dtype) or _dtype_code(tensor)
        return capsules.pack(
            release, alloc, tensor.ptr, device.ordinal, tensor.shape, tensor.strides, code,
            bits, _READ_ONLY if versioned and alloc.readonly else 0, versioned,
        )  # fmt: skip
    handle = _check_stream(stream)
    if dl_device is not None and tuple(dl_device) != dlpack_device(tensor):
        kind, ordinal = dl_device
        where = _DEVICE_NAMES.get(kind, f"device type {kind}")
        raise BufferError(
            f"cannot export a tensor of CUDA device {tensor.device.ordinal} to {where} device "
            f"{ordinal}; copy it first (`await tensor.to_host()` or `await tensor.to({ordinal})`)"
        )
    if copy:
        raise BufferError(
            "cuasync exports views only (copy=True); make the copy with `await tensor.dup()` "
            "and export that"
        )
    if handle != -1:
        order_foreign_after(tensor.allocation, handle)

    versioned = _versioned(max_version)
    code, bits = _dtype_code(tensor)
    alloc = tensor.allocation
    flags = _READ_ONLY if versioned and alloc.readonly else 0
    # The first element's address, byte_offset 0: what the array API asks of __dlpack__,
    # since torch (and others) long ignored byte_offset on import.
    return capsules.pack(
        _Export.release, _Export(alloc, handle), tensor.ptr, tensor.device.ordinal,
        tensor.shape, tensor.strides, code, bits, flags, versioned,
    )  # fmt: skip


# -- import ------------------------------------------------------------------------------
#: DLPack's ``(code, bits)`` to the dtype names cuasync may support.
_NAMES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
          (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
          (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
          (_BFLOAT, 16): "bfloat16", (5, 64): "complex64", (5, 128): "complex128",
          (6, 8): "bool", (10, 8): "float8_e4m3fn", (12, 8): "float8_e5m2"}  # fmt: skip


def _numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype[Any]:
    name = _NAMES.get((code, bits))
    if lanes != 1 or name is None or name not in SUPPORTED:
        raise DTypeError(
            f"the DLPack tensor's dtype (code {code}, {bits} bits, {lanes} lanes) has no "
            f"cuasync counterpart; supported: {', '.join(SUPPORTED)}"
        )
    return SUPPORTED[name]


def _device_of(obj: Any, device: int | Device | None) -> Device:
    try:
        kind, ordinal = obj.__dlpack_device__()
    except AttributeError:
        raise ArgumentError(
            f"{type(obj).__name__} does not speak DLPack (it has no __dlpack_device__); "
            "pass a tensor of a library that does (torch, CuPy, JAX, ...), or use "
            "cuasync.asarray for objects with __cuda_array_interface__"
        ) from None
    if kind == KDL_CPU:
        raise InvalidDeviceError(
            f"{type(obj).__name__} lives in host memory (DLPack device CPU); copy it to the "
            "device with `await cuasync.from_host(np.from_dlpack(x))`"
        )
    if kind != KDL_CUDA:
        where = _DEVICE_NAMES.get(kind, f"DLPack device type {kind}")
        raise InvalidDeviceError(
            f"{type(obj).__name__} lives on a {where} device; cuasync adopts CUDA device "
            "memory only"
        )
    own = Device._instances.get(ordinal) if type(ordinal) is int else None
    if own is None:  # (not a device seen yet, or not an ordinal: checked and worded)
        own = Device(_check_ordinal(ordinal, "the producer's device"))
    if device is not None and Device(_check_ordinal(device, "device")) is not own:
        raise InvalidDeviceError(
            f"device={Device(device).ordinal}, but {type(obj).__name__} lives on device "
            f"{own.ordinal}; adopt it there and copy: `await cuasync.from_dlpack(x).to(...)`"
        )
    return own


def _capsule(obj: Any, handle: int, copy: bool | None) -> Any:
    """The producer's capsule; ``copy`` None asks as the legacy protocol allows too."""
    if copy is not None:  # (DLPack 1.0 producers only: the legacy protocol has no copy)
        return obj.__dlpack__(stream=handle, max_version=VERSION, copy=copy)
    try:
        return obj.__dlpack__(stream=handle, max_version=VERSION)
    except TypeError:  # a producer of the legacy protocol: no max_version
        return obj.__dlpack__(stream=handle)


def _refuse(capsule: Any, fields: capsules.Fields | None) -> NoReturn:
    """Raise: the producer's capsule is no unconsumed DLPack 1.x or legacy one."""
    if fields is None:
        name = capsules.name_of(capsule)
        if name in (b"used_dltensor", b"used_dltensor_versioned"):
            raise BufferError("this DLPack capsule was already consumed")
        raise ArgumentError(f"__dlpack__() returned {capsule!r}, not a DLPack capsule")
    raise BufferError(  # (a versioned capsule of another major version)
        f"the producer exported DLPack {fields[2]}.{fields[3]}; cuasync reads major "
        f"version {VERSION[0]}"
    )


class SupportsDLPack(Protocol):
    """A DLPack producer, what :func:`from_dlpack` takes: an object with ``__dlpack__``
    (called with ``stream=`` and the other keywords of the protocol) and
    ``__dlpack_device__`` (torch, CuPy and JAX arrays, a :class:`~cuasync.Tensor`).
    The array API standard's ``SupportsDLPack``, with the device query it relies on."""

    def __dlpack__(self, /, *, stream: None = None) -> object: ...
    def __dlpack_device__(self, /) -> tuple[int, int]: ...


def from_dlpack(
    obj: SupportsDLPack,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> Tensor:
    """Adopt a DLPack producer's device memory as a :class:`Tensor`, zero-copy, now.

    The producer is asked to order its pending work before ``stream`` (default: the
    legacy default stream of its device, as CuPy asks: torch and CuPy working there have
    nothing to do); every cuasync op that uses the tensor is ordered after that stream's
    work up to now. The producer object is kept alive until the last view and the
    last op using the memory are gone; cuasync never frees the memory, it hands it
    back through the DLPack deleter. ``copy`` is passed to the producer.

    >>> x = cuasync.from_dlpack(torch.arange(4, device="cuda"))
    >>> await x.to_host()
    array([0, 1, 2, 3])
    """
    if isinstance(obj, Tensor):
        if copy:
            raise ArgumentError("copy=True: copy a cuasync tensor with `await tensor.dup()`")
        if device is not None and Device(_check_ordinal(device, "device")) is not obj.device:
            raise InvalidDeviceError(
                f"the tensor lives on device {obj.device.ordinal}, not on device {device!r}; "
                "copy it with `await tensor.to(device)`"
            )
        return obj
    own = _device_of(obj, device)
    if stream is None:  # what CuPy asks for too: torch's and CuPy's own default stream
        stream = own._legacy or legacy_stream(own)
    elif not isinstance(stream, Stream):
        raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
    elif stream.device is not own:
        raise InvalidDeviceError(
            f"stream is on device {stream.device.ordinal} but {type(obj).__name__} lives on "
            f"device {own.ordinal}; pass a stream of device {own.ordinal}"
        )
    # The 2023 protocol's keywords: a producer refusing them (TypeError) speaks the
    # legacy one; SupportsDLPack names only what every producer takes.
    producer: Any = obj
    try:  # (_capsule, inline: one frame less on every import)
        if copy is None:
            capsule = producer.__dlpack__(stream=stream.handle, max_version=VERSION)
        else:
            capsule = producer.__dlpack__(stream=stream.handle, max_version=VERSION, copy=copy)
    except TypeError:
        capsule = _capsule(obj, stream.handle, copy)  # (the legacy protocol's producers)
    fields = capsules.unpack(capsule)  # (see capsules.Fields)
    if fields is None or (fields[1] and fields[2] != VERSION[0]):
        _refuse(capsule, fields)
    tensor = _adopt(obj, fields, own, stream)
    # Ours now: the consumer calls the deleter, and the capsule must not.
    address, versioned = fields[0], fields[1]
    capsules.take(capsule, versioned)
    if fields[14]:  # (has a deleter)
        tensor._alloc._release = partial(capsules.delete, address, versioned)  # type: ignore[attr-defined]
    return tensor


#: The dtype of each ``(code, bits, lanes)`` cuasync supports (filled as they are met).
_DTYPES: dict[tuple[int, int, int], np.dtype[Any]] = {}


def _adopt(obj: Any, fields: capsules.Fields, device: Device, stream: Stream) -> Tensor:
    _, versioned, _, _, flags, ptr, device_type, device_id, ndim, shape, strides = fields[:11]
    if device_type != KDL_CUDA or device_id != device.ordinal:
        raise BufferError(
            f"the capsule describes device ({device_type}, {device_id}), "
            f"but __dlpack_device__() said (2, {device.ordinal})"
        )
    kind = fields[11:14]
    dtype = _DTYPES.get(kind)
    if dtype is None:
        dtype = _DTYPES[kind] = _numpy_dtype(*kind)
    if shape is None:
        raise ShapeError(
            f"the DLPack tensor of {type(obj).__name__} has ndim {ndim} and no shape array "
            "cuasync can read; the producer's capsule is broken"
        )
    if strides is None:  # NULL: compact row-major (DLPack < 1.2)
        strides = contiguous_strides(shape)
    nbytes = fields[15]  # (-1: the checks one at a time, worded)
    if nbytes < 0:
        what = f"the DLPack tensor of {type(obj).__name__}"
        nbytes = foreign_extent(ptr, shape, strides, dtype.itemsize, what)
    readonly = versioned and bool(flags & _READ_ONLY)
    alloc = ForeignAllocation(device, ptr, nbytes, owner=obj, readonly=readonly, producer=stream)
    return Tensor(alloc, shape, dtype, strides, 0)


# (the Python side of Tensor.__dlpack__ and __dlpack_device__, which their native
# methods call for what they do not answer themselves)
PROCESS.dlpack_export, PROCESS.dlpack_release = export, _release_to_legacy
PROCESS.dlpack_device, PROCESS.dlpack_codes = dlpack_device, _CODE_OF
