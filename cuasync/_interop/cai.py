"""The CUDA Array Interface (version 3), both ways.

Export: ``Tensor.__cuda_array_interface__`` describes the tensor's memory; its
``stream`` is the cuasync stream a consumer must order its work after (the stream of
the tensor's pending uses), or None when nothing is pending. Import
(:func:`from_cuda_array_interface`, behind :func:`cuasync.asarray`) adopts the memory
zero-copy; every op using it is ordered after the producer's ``stream``: the legacy
default stream (CuPy's) is recorded as the memory's writer, any other stream is waited
for with an event on a cuasync stream at the import.

>>> d = t.__cuda_array_interface__
>>> d["shape"], d["typestr"], d["version"]
((3, 4), '<f4', 3)
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from .._backends import get_backend
from .._backends.base import LEGACY_STREAM
from .._core.device import Device, Stream, _check_ordinal, get_default_device
from .._dtypes import as_dtype, dtype_name
from .._tensor import Tensor, contiguous_strides
from .._tensor import methods as tensor_methods
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from .foreign import (
    ForeignAllocation,
    foreign_extent,
    legacy_stream,
    submission_lock,
    wait_for_foreign,
)

__all__ = ["SupportsCudaArrayInterface", "export", "from_cuda_array_interface"]


def _stream(tensor: Tensor) -> int | None:
    """The one cuasync stream a consumer must wait for, or None if nothing is pending."""
    alloc = tensor._alloc
    write = alloc._write
    if not alloc._reads and (write is None or not write[0]._pending(write[1])):
        return None  # (read without the lock: nothing was ever read, the write is done)
    with submission_lock():
        uses = alloc._last_uses()
        if not uses:
            return None
        last, _ = uses[-1]  # the write comes last, when one is pending
        for stream, seq in uses:
            last._order_after(stream, seq)  # one stream that covers them all
        return last.handle


#: The typestr of each dtype the interface can name (filled as they are met).
_TYPESTRS: dict[np.dtype[Any], str] = {}


def _typestr(dtype: np.dtype[Any]) -> str:
    name = dtype_name(dtype)
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        bits = "uint16" if name == "bfloat16" else "uint8"
        raise DTypeError(
            f"the CUDA Array Interface has no typestr for {name}; export it with DLPack "
            f"(torch.from_dlpack(t)) or reinterpret it: t.reinterpret('{bits}')"
        )
    typestr = _TYPESTRS[dtype] = dtype.str
    return typestr


def export(tensor: Tensor) -> dict[str, Any]:
    """``tensor.__cuda_array_interface__``."""
    dtype = tensor.dtype
    typestr = _TYPESTRS.get(dtype) or _typestr(dtype)
    shape, strides = tensor.shape, tensor.strides
    if strides == contiguous_strides(shape) or tensor.is_contiguous:
        byte_strides = None
    else:
        itemsize = dtype.itemsize
        byte_strides = tuple(s * itemsize for s in strides)
    return {
        "shape": shape,
        "typestr": typestr,
        "data": (tensor.ptr, tensor._alloc.readonly),
        "version": 3,
        "strides": byte_strides,
        "descr": [("", typestr)],
        "stream": _stream(tensor),
    }


def _device(ptr: int, device: int | Device | None, owner: Any) -> Device:
    # (one device: the driver's answer could only be that one or none, and either way the
    # tensor lands there: no query)
    backend = get_backend()
    known = backend.pointer_device(ptr) if ptr and backend.device_count() > 1 else -1
    if device is not None:
        chosen = Device(_check_ordinal(device, "device"))
        if known >= 0 and known != chosen.ordinal:
            raise InvalidDeviceError(
                f"device={chosen.ordinal}, but {type(owner).__name__}'s memory is on device "
                f"{known}; adopt it there and copy: `await cuasync.asarray(x).to(...)`"
            )
        return chosen
    return Device(known) if known >= 0 else get_default_device()


class SupportsCudaArrayInterface(Protocol):
    """An object describing its device memory by ``__cuda_array_interface__`` (a
    mapping: ``shape``, ``typestr``, ``data``, ``version``, ...; CuPy, Numba and torch
    arrays): what :func:`from_cuda_array_interface` adopts."""

    @property
    def __cuda_array_interface__(self) -> Mapping[str, object]: ...


def from_cuda_array_interface(
    obj: SupportsCudaArrayInterface,
    *,
    device: int | Device | None = None,
    stream: Stream | None = None,
) -> Tensor:
    """Adopt the memory ``obj.__cuda_array_interface__`` describes, zero-copy, now.

    ``obj`` is kept alive as long as the memory is in use; cuasync never frees it. The
    interface is checked first (version, shape, strides, typestr, pointer alignment and
    extent): a broken one raises a :class:`~cuasync.errors.ArgumentError` subclass.

    >>> x = cuasync.asarray(numba_device_array)
    """
    what = f"{type(obj).__name__}.__cuda_array_interface__"
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise ArgumentError(f"{what} must be a dict, got {type(cai).__name__}")
    if cai.get("mask") is not None:
        raise ArgumentError("masked arrays (a CUDA Array Interface 'mask') are not supported")
    for key in ("version", "shape", "typestr", "data"):
        if key not in cai:
            raise ArgumentError(f"{what} has no {key!r} entry")
    _check_version(cai["version"], what)
    shape = _ints(cai["shape"], what, "shape")
    typestr = cai["typestr"]
    dtype = _DTYPES.get(typestr) if type(typestr) is str else None
    if dtype is None:
        dtype = _dtype(typestr, what)
    ptr, readonly = _data(cai["data"], what)
    strides = _strides(cai.get("strides"), shape, dtype, what)
    nbytes = foreign_extent(ptr, shape, strides, dtype.itemsize, what)
    own = _device(ptr, device, obj)
    producer = _producer(cai.get("stream"), own, stream)
    alloc = ForeignAllocation(own, ptr, nbytes, owner=obj, readonly=readonly, producer=producer)
    return Tensor(alloc, shape, dtype, strides, 0)


#: The interface versions cuasync reads (3, the current one, added ``stream``).
_VERSIONS = range(4)


def _check_version(version: Any, what: str) -> None:
    if type(version) is not int or version not in _VERSIONS:
        raise ArgumentError(
            f"{what}['version'] is {version!r}; cuasync reads versions 0 to {_VERSIONS[-1]} "
            "of the CUDA Array Interface"
        )


_is_bool = bool.__instancecheck__


def _ints(value: Any, what: str, key: str) -> tuple[int, ...]:
    """A tuple of Python ints from a tuple or list of integers (a str is not one), read
    by C calls only (no generator): ``what[key]`` names it in the error."""
    if isinstance(value, (tuple, list)) and not any(map(_is_bool, value)):
        try:
            return tuple(map(operator.index, value))
        except TypeError:
            pass
    raise ShapeError(f"{what}[{key!r}] must be a tuple of ints, got {value!r}")


#: The dtype of each typestr met (only those :func:`_dtype` accepted).
_DTYPES: dict[Any, np.dtype[Any]] = {}


def _dtype(typestr: Any, what: str) -> np.dtype[Any]:
    """The dtype of a typestr: byte order ('<', '>' or '|'), kind and size, as ``'<f4'``."""
    what = f"{what}['typestr']"
    if not (isinstance(typestr, str) and len(typestr) >= 3 and typestr[0] in "<>|"):
        raise DTypeError(
            f"{what} must be a typestr such as '<f4' (byte order, kind, size), got {typestr!r}"
        )
    try:
        swapped = not np.dtype(typestr).isnative
    except TypeError:
        swapped = False  # not numpy's either: as_dtype says so
    if swapped:
        raise DTypeError(
            f"{what} is {typestr!r}: data in the other byte order; cuasync reads "
            f"{np.dtype(typestr).newbyteorder('=').str!r}: convert it in the producer first"
        )
    dtype = _DTYPES[typestr] = as_dtype(typestr, what)
    return dtype


def _data(data: Any, what: str) -> tuple[int, bool]:
    """``(pointer, read-only)`` of the interface's ``data`` entry."""
    if isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[1], (bool, np.bool_)):
        ptr = data[0] if data[0] is not None else 0  # None: tolerated for empty arrays
        if type(ptr) is not bool:
            try:
                ptr = operator.index(ptr)
            except TypeError:
                pass
            else:
                if 0 <= ptr < 1 << 64:
                    return ptr, bool(data[1])
    raise ArgumentError(
        f"{what}['data'] must be (pointer, read_only): an int address and a bool, got {data!r}"
    )


def _strides(raw: Any, shape: tuple[int, ...], dtype: np.dtype[Any], what: str) -> tuple[int, ...]:
    """The strides in elements (``None``: row-major); the interface gives bytes."""
    if raw is None:
        return contiguous_strides(shape)
    strides = _ints(raw, what, "strides")
    what = f"{what}['strides']"
    if len(strides) != len(shape):
        raise ShapeError(
            f"{what} {strides} has {len(strides)} entries for the {len(shape)} dimensions of "
            f"shape {shape}; the producer must give one stride per dimension"
        )
    if any(s % dtype.itemsize for s in strides):
        raise ArgumentError(
            f"{what} {strides} (bytes) are not multiples of {dtype_name(dtype)}'s "
            f"{dtype.itemsize} bytes; cuasync strides are in elements"
        )
    return tuple(s // dtype.itemsize for s in strides)


def _producer(handle: Any, device: Device, stream: Stream | None) -> Stream | None:
    """The cuasync stream made to wait for the producer's ``stream`` (None: no sync).

    The legacy default stream (what CuPy names) is that stream itself, recorded as the
    memory's last writer: each op using it waits for that stream's work up to then, and
    nothing is enqueued now (as :func:`.dlpack.from_dlpack` does).
    """
    if handle is None:
        return None
    if handle == LEGACY_STREAM and stream is None and type(handle) is int:
        return legacy_stream(device)
    if not isinstance(handle, int) or isinstance(handle, bool) or handle == 0:
        raise ArgumentError(
            f"__cuda_array_interface__['stream'] must be None or a nonzero int, got {handle!r}"
            " (0 is disallowed by the CUDA Array Interface)"
        )
    if stream is None:
        stream = device._utility_stream()
    elif not isinstance(stream, Stream):
        raise ArgumentError(f"stream must be a cuasync.Stream, got {type(stream).__name__}")
    with submission_lock():
        wait_for_foreign(stream, handle)
    return stream


# Tensor.__cuda_array_interface__ (the tensor module sits below this one).
tensor_methods.cai_export = export
