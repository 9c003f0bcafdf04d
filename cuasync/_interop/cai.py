"""The CUDA Array Interface (version 3), both ways.

Export: ``Tensor.__cuda_array_interface__`` describes the tensor's memory; its
``stream`` is the cuasync stream a consumer must order its work after (the stream of
the tensor's pending uses), or None when nothing is pending. Import
(:func:`from_cuda_array_interface`, behind :func:`cuasync.asarray`) adopts the memory
zero-copy; the producer's ``stream`` is waited for with an event on a cuasync stream.

>>> d = t.__cuda_array_interface__
>>> d["shape"], d["typestr"], d["version"]
((3, 4), '<f4', 3)
"""

from __future__ import annotations

import math
from typing import Any

from .._backends import get_backend
from .._core.device import Device, Stream, _check_ordinal, get_default_device
from .._dtypes import as_dtype, dtype_name
from .._tensor import Tensor, contiguous_strides
from ..errors import ArgumentError, DTypeError, InvalidDeviceError
from .foreign import ForeignAllocation, submission_lock, wait_for_foreign

__all__ = ["export", "from_cuda_array_interface"]


def _stream(tensor: Tensor) -> int | None:
    """The one cuasync stream a consumer must wait for, or None if nothing is pending."""
    with submission_lock():
        uses = tensor.allocation._last_uses()
        if not uses:
            return None
        last, _ = uses[-1]  # the write comes last, when one is pending
        for stream, seq in uses:
            last._order_after(stream, seq)  # one stream that covers them all
        return last.handle


def export(tensor: Tensor) -> dict[str, Any]:
    """``tensor.__cuda_array_interface__``."""
    name = dtype_name(tensor.dtype)
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        bits = "uint16" if name == "bfloat16" else "uint8"
        raise DTypeError(
            f"the CUDA Array Interface has no typestr for {name}; export it with DLPack "
            f"(torch.from_dlpack(t)) or reinterpret it: t.reinterpret('{bits}')"
        )
    itemsize = tensor.itemsize
    typestr = tensor.dtype.str
    return {
        "shape": tensor.shape,
        "typestr": typestr,
        "data": (tensor.ptr, tensor.allocation.readonly),
        "version": 3,
        "strides": None if tensor.is_contiguous else tuple(s * itemsize for s in tensor.strides),
        "descr": [("", typestr)],
        "stream": _stream(tensor),
    }


def _device(ptr: int, device: int | Device | None, owner: Any) -> Device:
    known = get_backend().pointer_device(ptr) if ptr else -1
    if device is not None:
        chosen = Device(_check_ordinal(device, "device"))
        if known >= 0 and known != chosen.ordinal:
            raise InvalidDeviceError(
                f"device={chosen.ordinal}, but {type(owner).__name__}'s memory is on device "
                f"{known}; adopt it there and copy: `await cuasync.asarray(x).to(...)`"
            )
        return chosen
    return Device(known) if known >= 0 else get_default_device()


def from_cuda_array_interface(
    obj: Any, *, device: int | Device | None = None, stream: Stream | None = None
) -> Tensor:
    """Adopt the memory ``obj.__cuda_array_interface__`` describes, zero-copy, now.

    ``obj`` is kept alive as long as the memory is in use; cuasync never frees it.

    >>> x = cuasync.asarray(numba_device_array)
    """
    cai = obj.__cuda_array_interface__
    if not isinstance(cai, dict):
        raise ArgumentError(
            f"{type(obj).__name__}.__cuda_array_interface__ must be a dict, got "
            f"{type(cai).__name__}"
        )
    if cai.get("mask") is not None:
        raise ArgumentError("masked arrays (a CUDA Array Interface 'mask') are not supported")
    try:
        shape = tuple(int(d) for d in cai["shape"])
        dtype = as_dtype(cai["typestr"], "typestr")
        ptr, readonly = cai["data"]
    except KeyError as exc:
        raise ArgumentError(f"__cuda_array_interface__ has no {exc.args[0]!r} entry") from None
    ptr = int(ptr or 0)
    raw = cai.get("strides")
    if raw is None:
        strides = contiguous_strides(shape)
    else:
        if any(s % dtype.itemsize for s in raw):
            raise ArgumentError(
                f"strides {tuple(raw)} (bytes) are not multiples of {dtype_name(dtype)}'s "
                f"{dtype.itemsize} bytes; cuasync strides are in elements"
            )
        strides = tuple(int(s) // dtype.itemsize for s in raw)
    if any(s < 0 for s, d in zip(strides, shape, strict=True) if d > 1):
        raise ArgumentError(
            f"negative strides {strides} are not supported; make a contiguous copy first"
        )
    own = _device(ptr, device, obj)
    size = math.prod(shape)
    extent = 0 if size == 0 else 1 + sum(s * (d - 1) for s, d in zip(strides, shape, strict=True))
    producer = _producer(cai.get("stream"), own, stream)
    alloc = ForeignAllocation(
        own, ptr, extent * dtype.itemsize, owner=obj, readonly=bool(readonly), producer=producer
    )
    return Tensor(alloc, shape, dtype, strides, 0)


def _producer(handle: Any, device: Device, stream: Stream | None) -> Stream | None:
    """The cuasync stream made to wait for the producer's ``stream`` (None: no sync)."""
    if handle is None:
        return None
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
