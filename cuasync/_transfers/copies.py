"""Copies as lazy ops: ``from_host``, ``to_host``, ``dup``, ``memcpy``, and ``empty``/``zeros``.

Host data always moves through pinned staging blocks: a copy between device memory
and pageable memory would block the calling thread until the stream drains.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import numpy.typing as npt

from .._backends import get_backend
from .._cancel_var import SCOPE
from .._core.context import ExecutionContext
from .._core.device import Device, Stream, _check_ordinal, get_default_device
from .._core.op import DeviceOp, FirstUse, device_op
from .._core.output import Output
from .._dtypes import _BY_DTYPE, DEFAULT_COMPLEX, DEFAULT_FLOAT, DTypeLike, as_dtype, dtype_name
from .._first_use import launching
from .._launch.guard import guarded
from .._launch.library_call import Calls, LibraryCall, library_call
from .._native import NATIVE, UploadWorkCore
from .._ops.expr import Node
from .._ops.launch_plan import LAUNCHES, new_tensor_on
from .._ops.tensorop import ShapeLike, TensorOp, tensor_op
from .._ops.views import flip
from .._small_upload import HostUploadOp
from .._tensor import Shape, Tensor, check_shape, check_writable, partly_overlap
from .._tensor import methods as tensor_methods
from ..errors import AliasingError, ArgumentError, DTypeError, ShapeError
from .device_copy import (
    ADDRESSABLE,
    byte_strides,
    contiguous_byte_strides,
    copy_kernel,
    copy_strided,
    engine_copies,
    kernel_copy,
    memcpy_able,
    new_tensor,
)
from .pageable import upload
from .peer import copy_between_devices
from .staging import staging_pool

__all__ = ["dup", "empty", "from_host", "memcpy", "to_device", "to_host", "zeros"]


def _tensor_op(op: DeviceOp[Tensor], shape: Shape, dtype: Any) -> TensorOp:
    return tensor_op(op, shape, dtype)


def _device_arg(device: Any) -> Device:
    return get_default_device() if device is None else Device(device)


def _check_tensor(t: Any, argument: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise ArgumentError(f"{argument} must be a cuasync.Tensor, got {type(t).__name__}")
    return t


def from_host(array: npt.ArrayLike, *, device: int | Device | None = None) -> TensorOp:
    """An op copying a numpy array (or anything ``np.asarray`` accepts) to a new tensor.

    The array is read while the op runs: arrays below 16 MiB during submission (on the
    calling thread), larger ones by cuasync's copy threads until the op completes, so
    that the event loop does not wait for their copy. Do not modify the array before the
    op completes (see the Transfers guide, "from_host and pageable memory").

    >>> t = await cuasync.from_host(np.arange(6, dtype=np.float32).reshape(2, 3))
    """
    if device is None and _build is not None:  # (the common case, built in C)
        op = _build(array)
        if op is not None:
            return op
    if type(array) is np.ndarray and array.dtype in _BY_DTYPE:
        source, dtype = array, array.dtype  # (the common case: what the rest checks)
    else:
        if isinstance(array, Tensor):
            raise ArgumentError(
                "from_host got a cuasync.Tensor, which is already on a device; use .dup()"
            )
        try:
            source = np.asarray(array)
        except Exception as exc:
            raise ArgumentError(f"array must be convertible to a numpy array: {exc}") from None
        if source.dtype.kind in "fc" and _python_floats(array):
            source = _default_floats(source)
        dtype = as_dtype(source.dtype, "array.dtype")
    target = _device_arg(device)
    work = _HostUpload(source, dtype)
    return HostUploadOp(Node("pending", "from_host", source.shape, dtype, work, (), (), target))


def _python_floats(data: Any) -> bool:
    """Whether ``data`` (a scalar, or lists and tuples of them, nested) takes the default
    float dtype: it holds a Python float or complex, or nothing at all (``[]``), and
    nothing with a dtype of its own: a numpy scalar or array (whose dtype it keeps,
    ``np.float64`` being a float too), or any other object.

    >>> _python_floats([1, 2.5]), _python_floats([np.float64(0.1)]), _python_floats([1, 2])
    (True, False, False)
    """
    floats = scalars = False
    pending = [data]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is list or kind is tuple:
            pending.extend(item)
            continue
        scalars = True
        if kind is float or kind is complex:
            floats = True
        elif kind is not int and kind is not bool:  # (np.generic, ndarray, the rest)
            return False
    return floats or not scalars


def _default_floats(source: np.ndarray) -> np.ndarray:
    """Python floats (a scalar, lists) in the default float dtype, float32, as creation
    ops make (complex: complex64); data with a dtype of its own (an ndarray, a numpy
    scalar) keeps it. A finite value past float32's range is refused, not made inf."""
    to = {"float64": DEFAULT_FLOAT, "complex128": DEFAULT_COMPLEX}.get(source.dtype.name)
    if to is None:
        return source
    with np.errstate(over="ignore"):
        narrow = source.astype(to)
    if np.any(np.isinf(narrow) & np.isfinite(source)):
        raise ArgumentError(
            f"array holds Python floats past {to}'s range, the default float dtype of a "
            "Python float; pass a float64 numpy array: np.asarray(values, np.float64)"
        )
    return narrow


#: The native module's ``build_upload``: ``from_host``'s op for an ndarray of a known
#: dtype on the default device, built in C where the hub has a native core (not with
#: ``CUASYNC_NATIVE=off``), else None (then built here). (None: every op built here.)
_build: Callable[[Any], TensorOp | None] | None = NATIVE.build_upload


class _HostUpload(UploadWorkCore):
    """What a ``from_host`` op enqueues: the pending value of its ``TensorOp``'s node
    (one object, not an op wrapped in an op: building it is on every upload's path)."""

    __slots__ = ()  # source, dtype: the native base's (``UploadWorkCore``)

    def __init__(self, source: np.ndarray, dtype: np.dtype[Any]) -> None:
        self.source = source
        self.dtype = dtype

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        source = self.source
        tensor = new_tensor(ctx, source.shape, self.dtype, "from_host")
        upload(ctx, tensor.ptr, source)
        return Output.ready(tensor)


def to_host(tensor: Tensor) -> DeviceOp[np.ndarray]:
    """An op copying ``tensor`` into a new numpy array (backed by pinned memory).

    >>> a = await t.to_host()
    """
    t = _check_tensor(tensor, "tensor")
    _check_numpy_can_hold(t)
    engines = engine_copies(t)

    def enqueue(ctx: ExecutionContext) -> Output[np.ndarray]:
        block = staging_pool().acquire(t.nbytes)
        view = t
        if not engines:  # a transposed, reversed or broadcast view: gathered first
            view = new_tensor(ctx, t.shape, t.dtype, "to_host")
            kernel_copy(ctx, view, t)
        src = ctx.read(view.allocation) + view.offset * view.itemsize
        copy_strided(
            ctx,
            "dtoh",
            block.address,
            contiguous_byte_strides(t.shape, t.itemsize),
            src,
            byte_strides(view),
            t.shape,
            t.itemsize,
        )
        ctx.retain(block)
        return Output.ready(block.array(t.dtype, t.shape))

    return device_op(enqueue, t.device, "to_host", first_use=_gathering(t, engines))


def _check_numpy_can_hold(t: Tensor) -> None:
    """Refuse, with :class:`ShapeError`, a shape numpy cannot make: more dimensions than
    it takes (64 in numpy 2), or an empty tensor's whose dimensions other than 0 and
    item size multiply past its largest size (``(0, 2**40, 2**40)``, which a tensor
    holds)."""
    if t.ndim > 32:  # (numpy 1 takes 32)
        try:
            np.empty((0,) * t.ndim, np.uint8)
        except ValueError:
            raise ShapeError(
                f"to_host: numpy cannot make an array of {t.ndim} dimensions (numpy 2 "
                "makes 64 at most, numpy 1 32): reshape the tensor first"
            ) from None
    if t.size:
        return  # (a tensor that holds elements fits a numpy array of its bytes)
    extent = t.itemsize
    for dim in t.shape:
        extent *= dim or 1
    if extent > sys.maxsize:
        raise ShapeError(
            f"to_host: numpy cannot make an array of shape {t.shape} and dtype "
            f"{dtype_name(t.dtype)} (it refuses a shape whose dimensions other than 0, "
            "times the item size, pass its largest size, even where the array is empty)"
        )


def dup(tensor: Tensor) -> TensorOp:
    """An op producing a contiguous copy of ``tensor`` on its device."""
    t = _check_tensor(tensor, "tensor")

    engines = engine_copies(t)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        out = new_tensor(ctx, t.shape, t.dtype, "dup")
        if not engines:  # a transposed, reversed or broadcast view: a kernel gathers it
            kernel_copy(ctx, out, t)
            return Output.ready(out)
        src = ctx.read(t.allocation) + t.offset * t.itemsize
        if not out.nbytes:
            return Output.ready(out)
        # (a cancelled scope skips it; memory another library allocated, managed memory
        # perhaps, is copied unguarded: tools/probes/guard_managed.py)
        foreign = t.allocation.foreign
        with nullcontext() if foreign else guarded(ctx, "copy", nbytes=2 * out.nbytes):
            copy_strided(
                ctx,
                "dtod",
                out.ptr,
                contiguous_byte_strides(t.shape, t.itemsize),
                src,
                byte_strides(t),
                t.shape,
                t.itemsize,
            )
        return Output.ready(out)

    op = device_op(enqueue, t.device, "dup", first_use=_gathering(t, engines))
    return _tensor_op(op, t.shape, t.dtype)


def _gathering(t: Tensor, engines: bool | None = None) -> FirstUse | None:
    """The first use of an op that copies ``t``: the kernel that gathers a view the copy
    engines do not copy (``engines``; None: those they cannot read), prepared off the
    event loop by the op's ``await``."""
    engines = memcpy_able(t) if engines is None else engines
    return launching(copy_kernel(t.dtype)) if not engines else None


def to_device(tensor: Tensor, device: int | Device) -> DeviceOp[Tensor]:
    """An op producing a contiguous copy of ``tensor`` on ``device`` (:meth:`Tensor.to`; between
    devices :mod:`.peer` copies)."""
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    target = Device(_check_ordinal(device, "device"))
    if target is tensor.device:
        return dup(tensor)
    src = tensor

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        out = new_tensor(ctx, src.shape, src.dtype, "Tensor.to")
        return copy_between_devices(ctx, out, src)

    return device_op(enqueue, target, "Tensor.to")


def memcpy(dst: Tensor, src: Tensor) -> DeviceOp[Tensor]:
    """An op copying ``src`` into ``dst`` (same dtype and element count); outputs ``dst``.

    Either may be any view, reversed ones too (a kernel gathers a source the copy engines
    cannot read). Shapes may differ when both tensors are contiguous. The tensors may
    live on different devices: the copy then runs on a stream of ``dst``'s device, device
    to device where the two can access each other's memory, else staged through pinned
    host memory (see docs/multi-gpu.md).

    >>> await cuasync.memcpy(out[0:2], staging)
    """
    d = check_writable(_check_tensor(dst, "dst"), "dst", "memcpy")
    s = _check_tensor(src, "src")
    if d.dtype != s.dtype:
        raise DTypeError(
            f"memcpy needs equal dtypes: dst is {dtype_name(d.dtype)}, src is "
            f"{dtype_name(s.dtype)}; convert one of them first"
        )
    if d.size != s.size:
        raise ShapeError(
            f"memcpy needs equal element counts: dst has {d.size} {d.shape}, src has "
            f"{s.size} {s.shape}"
        )
    if d.shape != s.shape and not (d.is_contiguous and s.is_contiguous):
        raise ShapeError(
            f"memcpy between shapes {s.shape} and {d.shape} needs both tensors contiguous"
        )
    same_bytes = d.is_contiguous and s.is_contiguous and d.ptr == s.ptr  # (reshaped)
    if partly_overlap(d, s) and not same_bytes:
        raise AliasingError(
            f"memcpy: dst ({d.shape}/{d.strides}) and src ({s.shape}/{s.strides}) partly "
            "overlap in one allocation, so the result would be undefined; copy src first "
            "(`src.dup()`); the very same view is allowed"
        )
    result = d
    d, s = _forward(d, s)
    gather = not memcpy_able(s)
    if d.device is not s.device:
        return device_op(
            lambda ctx: copy_between_devices(ctx, d, s).then(lambda _: result),
            d.device,
            "memcpy",
            graph_node=True,
        )
    first_use = _gathering(s)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        if gather:  # a reversed or broadcast source: a kernel gathers it
            if d.is_contiguous:
                kernel_copy(ctx, d.reshape(s.shape), s)
                return Output.ready(result)
            tight = new_tensor(ctx, s.shape, s.dtype, "memcpy")
            kernel_copy(ctx, tight, s)
            source = tight
        else:
            source = s
        sp = ctx.read(source.allocation, "src") + source.offset * source.itemsize
        dp = ctx.write(d.allocation, "dst") + d.offset * d.itemsize
        if d.shape == source.shape:
            copy_strided(
                ctx,
                "dtod",
                dp,
                byte_strides(d),
                sp,
                byte_strides(source),
                source.shape,
                source.itemsize,
            )
        elif source.nbytes:
            get_backend().memcpy_dtod_async(dp, sp, source.nbytes, ctx.handle)
        return Output.ready(result)

    return device_op(enqueue, d.device, "memcpy", graph_node=True, first_use=first_use)


def _forward(dst: Tensor, src: Tensor) -> tuple[Tensor, Tensor]:
    """``dst`` and ``src`` both flipped along each axis ``dst`` runs backwards on: the same
    element pairs, with a destination the copy engines write (a source reversed that way
    is then gathered by a kernel). ``dst`` writable (no stride 0); equal shapes where a
    stride is negative (a view of another shape is contiguous)."""
    back = tuple(
        j for j, (n, st) in enumerate(zip(dst.shape, dst.strides, strict=True)) if st < 0 and n > 1
    )
    if not back or dst.size == 0:
        return dst, src
    return flip(dst, back), flip(src, back)


class _NewTensor(DeviceOp[Tensor]):
    """A new tensor of ``shape`` and dtype ``dt``: as allocated (``empty``) or zeroed
    (``zeros``: a memset, which a cancelled scope may skip). The native core submits it
    as a library call (:func:`_new_tensor_launch`) where it can."""

    __slots__ = ("_dt", "_name", "_shape", "_zeroed")

    def __init__(self, shape: Shape, dt: np.dtype[Any], device: Device, zeroed: bool) -> None:
        super().__init__(device)
        self._shape, self._dt, self._zeroed = shape, dt, zeroed
        self._name = "zeros" if zeroed else "empty"

    def _trace_name(self) -> str:
        return self._name

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        tensor = new_tensor(ctx, self._shape, self._dt, self._name)
        if self._zeroed and tensor.nbytes:
            with guarded(ctx, "memset", nbytes=tensor.nbytes):  # (a cancelled scope skips it)
                _zero(ctx.handle, (tensor, True), ctx.error_box)
        return Output.ready(tensor)

    def __repr__(self) -> str:
        return f"<cuasync.DeviceOp {self._name}{' (consumed)' if self._consumed else ''}>"


def _zero(stream: int, args: tuple[Any, ...], errors: Callable[[], list[BaseException]]) -> None:
    """A new tensor's work (``args``: the tensor, whether zeroed): its memset where it is
    zeroed (an empty tensor's call is its flag alone)."""
    tensor, zeroed = args
    if zeroed:
        get_backend().memset_d8_async(tensor.ptr, 0, tensor.nbytes, stream)


_NEW_TENSOR_CALLS = Calls("new tensor", _zero)
_WRITTEN = (True,)


def _new_tensor_launch(op: _NewTensor, stream: Stream) -> LibraryCall | None:
    """The launch op of a new tensor on ``stream`` (``ExpressLaunches.pending_launches``):
    the tensor, and its call (a memset where zeroed, then the flag) made by the native
    core; None (the long way) for no elements, more bytes than a size_t holds, and
    zeros inside a cancel scope (the long way guards its memset)."""
    if op._zeroed and SCOPE.get() is not None:
        return None
    dt = op._dt
    nbytes = math.prod(op._shape) * dt.itemsize
    if not 0 < nbytes < ADDRESSABLE:
        return None
    device = stream.device
    t = new_tensor_on(stream, nbytes, op._shape, dt)
    prepared = _NEW_TENSOR_CALLS.on(device.ordinal)
    return library_call(prepared, device, (t, op._zeroed), (t,), _WRITTEN, t, (op._zeroed, nbytes))


LAUNCHES.pending_launches[_NewTensor] = _new_tensor_launch


def empty(
    shape: ShapeLike, dtype: DTypeLike = "float32", *, device: int | Device | None = None
) -> TensorOp:
    """An op allocating an uninitialized tensor.

    >>> buf = await cuasync.empty((1024,), "uint8")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    return _tensor_op(_NewTensor(dims, dt, _device_arg(device), False), dims, dt)


def zeros(
    shape: ShapeLike, dtype: DTypeLike = "float32", *, device: int | Device | None = None
) -> TensorOp:
    """An op allocating a tensor filled with zeros.

    >>> z = await cuasync.zeros((16, 16), "float16")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    return _tensor_op(_NewTensor(dims, dt, _device_arg(device), True), dims, dt)


# Tensor.to_host, Tensor.dup and Tensor.to (the tensor module sits below the copies).
tensor_methods.to_host = to_host
tensor_methods.dup = dup
tensor_methods.to_device = to_device
