"""DLPack both ways: ``Tensor.__dlpack__`` / ``__dlpack_device__`` and :func:`from_dlpack`.

The structs of ``dlpack.h`` (v1.0, and the legacy unversioned layout) are built with
ctypes. An exported capsule holds a reference to the tensor, which keeps its device
allocation alive until the consumer calls the deleter; the deleter is a C function
that any thread may call at any time (it takes the GIL, drops the reference, and
makes the allocation's eventual free wait for the consumer's default stream where
that stream is known). A capsule nobody consumed calls the deleter when it is
collected, from a C destructor (``reactor/dlpack.c``) that keeps an exception the
consumer has set meanwhile (a refused capsule is dropped while its consumer raises);
a consumed one (renamed ``used_dltensor...``) is its consumer's business.

>>> y = torch.from_dlpack(x)                    # x a cuasync.Tensor: zero-copy
>>> x = cuasync.from_dlpack(torch_tensor)       # and back
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import threading
from typing import Any

import numpy as np

from .._core.device import Device, Stream, _check_ordinal
from .._dtypes import SUPPORTED, dtype_name
from .._exceptions import report_once
from .._native import NATIVE
from .._tensor import Tensor, contiguous_strides
from .._tensor import methods as tensor_methods
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from .foreign import (
    LEGACY_STREAM,
    PER_THREAD_STREAM,
    ForeignAllocation,
    foreign_extent,
    order_foreign_after,
    order_free_after_foreign,
)

__all__ = ["KDL_CPU", "KDL_CUDA", "dlpack_device", "export", "from_dlpack"]

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


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", _DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


# -- capsules ----------------------------------------------------------------------------
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Capsules keep a pointer to their name: these buffers live as long as the process.
_LEGACY = ctypes.create_string_buffer(b"dltensor")
_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_USED_LEGACY = ctypes.create_string_buffer(b"used_dltensor")
_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")

_DELETER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Export:
    """What one exported capsule keeps alive: the struct, its arrays, the tensor."""

    __slots__ = ("arrays", "handle", "managed", "tensor", "thread")

    def __init__(self, tensor: Tensor, managed: ctypes.Structure, arrays: Any, handle: int):
        self.tensor = tensor
        self.managed = managed
        self.arrays = arrays
        self.handle = handle  # the consumer's stream, -1 if it asked for no synchronization
        self.thread = threading.get_ident()

    def release(self) -> None:
        handle = self.handle
        # Only the default streams are known to outlive the export; a per-thread default
        # stream is only known on the thread that exported.
        known = handle == LEGACY_STREAM or (
            handle == PER_THREAD_STREAM and threading.get_ident() == self.thread
        )
        alloc = self.tensor.allocation
        if known and alloc.device.fault is None:
            order_free_after_foreign(alloc, handle)


#: Live exports by the address of their managed struct.
_exports: dict[int, _Export] = {}


def _release(address: int | None) -> None:
    try:
        export = _exports.pop(address or 0, None)
        # At exit the memory goes away with the process, and ordering its free could
        # start a stream's thread, which never starts then (the exit would hang).
        if sys.is_finalizing():
            return
    except Exception:  # interpreter shutdown tore the module down: leaking is safe
        return
    if export is not None:
        try:
            export.release()
        except Exception as exc:
            report_once("cuasync.interop", "order a free after a DLPack consumer", exc)


def _capsule_destructor(capsule: int | None) -> None:
    """The capsule destructor where the native module is missing.

    A capsule nobody consumed still owns its tensor; a consumed one was renamed. A
    consumer may drop a capsule while its own exception is set (numpy refusing a CUDA
    capsule does): Python code cannot keep that exception (ctypes turns it into a
    ``SystemError``), so it is cleared first and the tensor is still given back. The
    native destructor (``reactor/dlpack.c``) keeps it.
    """
    _clear_error()
    try:
        for name in (_VERSIONED, _LEGACY):
            if _api.PyCapsule_IsValid(capsule, name):
                _release(_api.PyCapsule_GetPointer(capsule, name))
                return
    except Exception:  # interpreter shutdown tore the module down: leaking is safe
        return


_clear_error = _api.PyErr_Clear
_clear_error.restype = None
_clear_error.argtypes = []

#: The C callbacks live as long as the process: a consumer may call them at any time,
#: also after interpreter shutdown cleared this module (one reference is never dropped).
_DELETER = _DELETER_TYPE(_release)
_DELETER_ADDRESS = ctypes.cast(_DELETER, ctypes.c_void_p).value
_api.Py_IncRef(ctypes.py_object(_DELETER))
if NATIVE is not None:
    _DESTRUCTOR_ADDRESS = NATIVE.DLPACK_CAPSULE_DESTRUCTOR
else:
    _DESTRUCTOR = _DELETER_TYPE(_capsule_destructor)
    _DESTRUCTOR_ADDRESS = ctypes.cast(_DESTRUCTOR, ctypes.c_void_p).value
    _api.Py_IncRef(ctypes.py_object(_DESTRUCTOR))
_ids = itertools.count(1)


# -- export ------------------------------------------------------------------------------
def dlpack_device(tensor: Tensor) -> tuple[int, int]:
    """``(kDLCUDA, ordinal)``: the emulator models a CUDA device, so it says CUDA too."""
    return (KDL_CUDA, tensor.device.ordinal)


def _dtype_code(tensor: Tensor) -> tuple[int, int]:
    dt = tensor.dtype
    name = dtype_name(dt)
    if name == "bfloat16":
        return _BFLOAT, 16
    if name in _FP8:
        return _FP8[name], 8
    return _CODES[dt.kind], dt.itemsize * 8


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
    """``tensor.__dlpack__(...)``: a capsule viewing the tensor's memory (never a copy)."""
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
    shape = (ctypes.c_int64 * tensor.ndim)(*tensor.shape)
    strides = (ctypes.c_int64 * tensor.ndim)(*tensor.strides)
    managed: Any = _DLManagedTensorVersioned() if versioned else _DLManagedTensor()
    dl = managed.dl_tensor
    # The first element's address, byte_offset 0: what the array API asks of __dlpack__,
    # since torch (and others) long ignored byte_offset on import.
    dl.data = tensor.ptr
    dl.byte_offset = 0
    dl.device = _DLDevice(KDL_CUDA, tensor.device.ordinal)
    dl.ndim = tensor.ndim
    code, bits = _dtype_code(tensor)
    dl.dtype = _DLDataType(code, bits, 1)
    dl.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
    dl.strides = ctypes.cast(strides, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _DELETER_ADDRESS
    if versioned:
        managed.version = _DLPackVersion(*VERSION)
        managed.flags = _READ_ONLY if tensor.allocation.readonly else 0
    address = ctypes.addressof(managed)
    managed.manager_ctx = next(_ids)
    _exports[address] = _Export(tensor, managed, (shape, strides), handle)
    name = _VERSIONED if versioned else _LEGACY
    try:
        return _api.PyCapsule_New(address, name, _DESTRUCTOR_ADDRESS)
    except BaseException:
        _exports.pop(address, None)
        raise


# -- import ------------------------------------------------------------------------------
def _numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype[Any]:
    names = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
             (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
             (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
             (_BFLOAT, 16): "bfloat16", (5, 64): "complex64", (5, 128): "complex128",
             (6, 8): "bool", (10, 8): "float8_e4m3fn", (12, 8): "float8_e5m2"}  # fmt: skip
    name = names.get((code, bits))
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
    own = Device(_check_ordinal(ordinal, "the producer's device"))
    if device is not None and Device(_check_ordinal(device, "device")) is not own:
        raise InvalidDeviceError(
            f"device={Device(device).ordinal}, but {type(obj).__name__} lives on device "
            f"{own.ordinal}; adopt it there and copy: `await cuasync.from_dlpack(x).to(...)`"
        )
    return own


def _capsule(obj: Any, handle: int, copy: bool | None) -> Any:
    extra = {} if copy is None else {"copy": copy}
    try:
        return obj.__dlpack__(stream=handle, max_version=VERSION, **extra)
    except TypeError:  # a producer of the legacy protocol: no max_version
        if extra:
            raise
        return obj.__dlpack__(stream=handle)


def _parse(capsule: Any) -> tuple[int, Any, bool]:
    """The managed struct's address, the struct, and whether it is versioned."""
    name = _api.PyCapsule_GetName(capsule)
    if name == _VERSIONED.value:
        address = _api.PyCapsule_GetPointer(id(capsule), _VERSIONED)
        managed = _DLManagedTensorVersioned.from_address(address)
        if managed.version.major != VERSION[0]:
            raise BufferError(
                f"the producer exported DLPack {managed.version.major}."
                f"{managed.version.minor}; cuasync reads major version {VERSION[0]}"
            )
        return address, managed, True
    if name == _LEGACY.value:
        address = _api.PyCapsule_GetPointer(id(capsule), _LEGACY)
        return address, _DLManagedTensor.from_address(address), False
    if name in (_USED_LEGACY.value, _USED_VERSIONED.value):
        raise BufferError("this DLPack capsule was already consumed")
    raise ArgumentError(f"__dlpack__() returned {capsule!r}, not a DLPack capsule")


def from_dlpack(
    obj: Any,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
    copy: bool | None = None,
) -> Tensor:
    """Adopt a DLPack producer's device memory as a :class:`Tensor`, zero-copy, now.

    The producer is asked to order its pending work before ``stream`` (default: a
    cuasync-private stream of its device); every cuasync op that uses the tensor is
    ordered after that. The producer object is kept alive until the last view and the
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
    if stream is None:
        stream = own._utility_stream()
    elif not isinstance(stream, Stream):
        raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
    elif stream.device is not own:
        raise InvalidDeviceError(
            f"stream is on device {stream.device.ordinal} but {type(obj).__name__} lives on "
            f"device {own.ordinal}; pass a stream of device {own.ordinal}"
        )
    capsule = _capsule(obj, stream.handle, copy)
    address, managed, versioned = _parse(capsule)
    tensor = _adopt(obj, managed, own, stream, versioned)
    # Ours now: the consumer calls the deleter, and the capsule must not.
    _api.PyCapsule_SetName(capsule, _USED_VERSIONED if versioned else _USED_LEGACY)
    deleter = managed.deleter
    if deleter:
        call = _DELETER_TYPE(deleter)
        tensor.allocation._release = lambda: call(address)  # type: ignore[attr-defined]
    return tensor


def _adopt(obj: Any, managed: Any, device: Device, stream: Stream, versioned: bool) -> Tensor:
    dl = managed.dl_tensor
    if dl.device.device_type != KDL_CUDA or dl.device.device_id != device.ordinal:
        raise BufferError(
            f"the capsule describes device ({dl.device.device_type}, {dl.device.device_id}), "
            f"but __dlpack_device__() said (2, {device.ordinal})"
        )
    dtype = _numpy_dtype(dl.dtype.code, dl.dtype.bits, dl.dtype.lanes)
    what = f"the DLPack tensor of {type(obj).__name__}"
    if dl.ndim < 0 or (dl.ndim > 0 and not dl.shape):
        raise ShapeError(
            f"{what} has ndim {dl.ndim} and {'a' if dl.shape else 'no'} shape array; the "
            "producer's capsule is broken"
        )
    shape = tuple(int(dl.shape[i]) for i in range(dl.ndim))
    if dl.strides:
        strides = tuple(int(dl.strides[i]) for i in range(dl.ndim))
    else:  # NULL: compact row-major (DLPack < 1.2)
        strides = contiguous_strides(shape)
    ptr = (dl.data or 0) + dl.byte_offset
    nbytes = foreign_extent(ptr, shape, strides, dtype.itemsize, what)
    readonly = versioned and bool(managed.flags & _READ_ONLY)
    alloc = ForeignAllocation(device, ptr, nbytes, owner=obj, readonly=readonly, producer=stream)
    return Tensor(alloc, shape, dtype, strides, 0)


# Tensor.__dlpack__ and Tensor.__dlpack_device__ (the tensor module sits below this one).
tensor_methods.dlpack_export = export
tensor_methods.dlpack_device = dlpack_device
