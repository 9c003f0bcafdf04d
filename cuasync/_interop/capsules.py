"""DLPack capsules made and read: the four primitives :mod:`.dlpack` builds on.

:func:`pack` makes a capsule viewing CUDA memory, :func:`unpack` reads a producer's,
:func:`take` marks one consumed and :func:`delete` calls a consumed tensor's deleter.
The native module does each in one C call (``reactor/dlpack.c``); where it is not
built, ctypes does the same with the same results, more slowly. Nothing here checks what
a capsule says: :mod:`.dlpack` does, and words the errors.

>>> capsule = pack(release, alloc, ptr, 0, (4,), (1,), 2, 32, 0, True)
>>> unpack(capsule)[5] == ptr
True
"""

from __future__ import annotations

import ctypes
import itertools
import sys
from collections.abc import Callable
from typing import Any

from .._exceptions import report_once
from .._native import NATIVE

__all__ = ["Fields", "delete", "name_of", "pack", "take", "unpack"]

#: What :func:`unpack` returns: ``(address, versioned, major, minor, flags, data,
#: device_type, device_id, ndim, shape, strides, code, bits, lanes, has_deleter,
#: nbytes)``; ``data`` includes the byte offset, ``shape`` is None where the capsule has
#: none to read (ndim out of 0..64, a NULL array), ``strides`` None where NULL
#: (compact), ``nbytes`` the bytes the layout spans from ``data`` where the common checks
#: of :func:`.foreign.foreign_extent` pass, else -1: the caller checks it then (the
#: ctypes reader always leaves it to the caller).
Fields = tuple[
    int, bool, int, int, int, int, int, int, int,
    "tuple[int, ...] | None", "tuple[int, ...] | None", int, int, int, bool, int,
]  # fmt: skip

_MAX_NDIM = 64

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]


def name_of(capsule: Any) -> bytes | None:
    """The capsule's name (None for another object): for wording what it is."""
    if type(capsule).__name__ != "PyCapsule":
        return None
    name: bytes | None = _api.PyCapsule_GetName(capsule)
    return name


# -- ctypes: the layouts of dlpack.h, where the native module is not built --------------
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


_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Capsules keep a pointer to their name: these buffers live as long as the process.
_LEGACY = ctypes.create_string_buffer(b"dltensor")
_VERSIONED = ctypes.create_string_buffer(b"dltensor_versioned")
_USED_LEGACY = ctypes.create_string_buffer(b"used_dltensor")
_USED_VERSIONED = ctypes.create_string_buffer(b"used_dltensor_versioned")

_DELETER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

#: Capsules made by the ctypes :func:`_pack`: their struct, arrays, release and its
#: argument, by address.
_packed: dict[int, tuple[Any, Any, Callable[[Any], object], Any]] = {}


def _release(address: int | None) -> None:
    """The deleter of the ctypes capsules: calls ``release(arg)`` once."""
    try:
        entry = _packed.pop(address or 0, None)
        if entry is None or sys.is_finalizing():
            return  # at exit the memory goes away with the process
    except Exception:  # interpreter shutdown tore the module down: leaking is safe
        return
    try:
        entry[2](entry[3])
    except Exception as exc:
        report_once("cuasync.interop", "release an exported DLPack tensor", exc)


def _capsule_destructor(capsule: int | None) -> None:
    """The capsule destructor where the native module is missing: an unconsumed capsule
    still owns its tensor. An exception the consumer set meanwhile cannot be kept by
    Python code (ctypes turns it into a ``SystemError``): it is cleared first, and the
    tensor is still given back. The native destructor keeps it."""
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


def _pack(
    release: Callable[[Any], object],
    arg: Any,
    data: int,
    device_id: int,
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    code: int,
    bits: int,
    flags: int,
    versioned: bool,
) -> Any:
    ndim = len(shape)
    dims = (ctypes.c_int64 * ndim)(*shape)
    steps = (ctypes.c_int64 * ndim)(*strides)
    managed: Any = _DLManagedTensorVersioned() if versioned else _DLManagedTensor()
    dl = managed.dl_tensor
    dl.data = data
    dl.byte_offset = 0
    dl.device = _DLDevice(2, device_id)
    dl.ndim = ndim
    dl.dtype = _DLDataType(code, bits, 1)
    dl.shape = ctypes.cast(dims, ctypes.POINTER(ctypes.c_int64))
    dl.strides = ctypes.cast(steps, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _DELETER_ADDRESS
    if versioned:
        managed.version = _DLPackVersion(1, 0)
        managed.flags = flags
    managed.manager_ctx = next(_ids)
    address = ctypes.addressof(managed)
    _packed[address] = (managed, (dims, steps), release, arg)
    try:
        name = _VERSIONED if versioned else _LEGACY
        return _api.PyCapsule_New(address, name, _DESTRUCTOR_ADDRESS)
    except BaseException:
        _packed.pop(address, None)
        raise


def _unpack(capsule: Any) -> Fields | None:
    name = name_of(capsule)
    if name == _VERSIONED.value:
        address = _api.PyCapsule_GetPointer(id(capsule), _VERSIONED)
        versioned: Any = _DLManagedTensorVersioned.from_address(address)
        major, minor = versioned.version.major, versioned.version.minor
        if major != 1:
            return (address, True, major, minor, 0, 0, 0, 0, 0, None, None, 0, 0, 0, False, -1)
        managed: Any = versioned
        flags = versioned.flags
    elif name == _LEGACY.value:
        address = _api.PyCapsule_GetPointer(id(capsule), _LEGACY)
        managed = _DLManagedTensor.from_address(address)
        major = minor = flags = 0
    else:
        return None
    dl = managed.dl_tensor
    ndim = dl.ndim
    readable = 0 <= ndim <= _MAX_NDIM and (ndim == 0 or bool(dl.shape))
    shape = tuple(int(dl.shape[i]) for i in range(ndim)) if readable else None
    strides = tuple(int(dl.strides[i]) for i in range(ndim)) if readable and dl.strides else None
    return (
        address, name == _VERSIONED.value, major, minor, flags,
        (dl.data or 0) + dl.byte_offset, dl.device.device_type, dl.device.device_id, ndim,
        shape, strides, dl.dtype.code, dl.dtype.bits, dl.dtype.lanes, bool(managed.deleter), -1,
    )  # fmt: skip


def _take(capsule: Any, versioned: bool) -> None:
    _api.PyCapsule_SetName(capsule, _USED_VERSIONED if versioned else _USED_LEGACY)


def _delete(address: int, versioned: bool) -> None:
    layout: Any = _DLManagedTensorVersioned if versioned else _DLManagedTensor
    deleter = layout.from_address(address).deleter
    if deleter:
        _DELETER_TYPE(deleter)(address)


#: ``pack(release, arg, data, device_id, shape, strides, code, bits, flags, versioned)``:
#: a capsule of CUDA memory at ``data``; ``release(arg)`` is called once when it is
#: released (a function and its argument: no bound method or closure made per capsule).
pack: Callable[..., Any] = NATIVE.dlpack_pack if NATIVE is not None else _pack
#: ``unpack(capsule)``: the capsule's :data:`Fields`, or None if it is no unconsumed one.
unpack: Callable[[Any], Fields | None] = NATIVE.dlpack_unpack if NATIVE is not None else _unpack
#: ``take(capsule, versioned)``: the capsule is consumed (renamed ``used_...``).
take: Callable[[Any, bool], None] = NATIVE.dlpack_take if NATIVE is not None else _take
#: ``delete(address, versioned)``: the deleter of a consumed managed tensor, called.
delete: Callable[[int, bool], None] = NATIVE.dlpack_delete if NATIVE is not None else _delete
