"""Copies as lazy ops: ``from_host``, ``to_host``, ``dup``, ``memcpy``, and ``empty``/``zeros``.

Host data always moves through pinned staging blocks: a copy between device memory
and pageable memory would block the calling thread until the stream drains.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from .._backends import get_backend
from .._core.context import ExecutionContext
from .._core.device import Device, get_default_device
from .._core.memory import Allocation
from .._core.op import DeviceOp, device_op
from .._core.output import Output
from .._dtypes import _BY_DTYPE, DEFAULT_COMPLEX, DEFAULT_FLOAT, as_dtype, dtype_name
from .._tensor import Shape, Tensor, check_shape, check_writable, partly_overlap
from ..errors import AliasingError, ArgumentError, DTypeError, OutOfMemoryError, ShapeError
from .pageable import upload
from .staging import staging_pool

if TYPE_CHECKING:
    from .._ops.tensorop import TensorOp

__all__ = ["dup", "empty", "from_host", "memcpy", "to_host", "zeros"]

#: More bytes than any device can address.
_ADDRESSABLE = 2**64


def _tensor_op(op: DeviceOp[Tensor], shape: Shape, dtype: Any) -> TensorOp:
    from .._ops.tensorop import tensor_op  # it imports this module

    return tensor_op(op, shape, dtype)


def _device_arg(device: Any) -> Device:
    return get_default_device() if device is None else Device(device)


def copy_strided(
    ctx: ExecutionContext,
    kind: str,
    dst: int,
    dst_strides: Shape,
    src: int,
    src_strides: Shape,
    shape: Shape,
    itemsize: int,
) -> None:
    """Enqueue a copy of a strided block (strides in bytes) with as few driver calls as possible."""
    if any(d == 0 for d in shape):
        return
    backend = get_backend()
    # Drop unit dimensions, then merge dimensions that are contiguous in both layouts.
    dims = [(d, s, t) for d, s, t in zip(shape, src_strides, dst_strides, strict=True) if d != 1]
    merged: list[tuple[int, int, int]] = []
    for d, s, t in reversed(dims):
        if merged and s == merged[-1][0] * merged[-1][1] and t == merged[-1][0] * merged[-1][2]:
            n, s0, t0 = merged[-1]
            merged[-1] = (n * d, s0, t0)
        else:
            merged.append((d, s, t))
    merged.reverse()  # outermost first
    if not merged or (len(merged) == 1 and merged[0][1] == merged[0][2] == itemsize):
        nbytes = (merged[0][0] if merged else 1) * itemsize
        getattr(backend, f"memcpy_{kind}_async")(dst, src, nbytes, ctx.handle)
        return
    n0, s0, t0 = merged[-1]
    if s0 == t0 == itemsize:  # rows of contiguous bytes
        width = n0 * itemsize
        if len(merged) >= 2:
            height, src_pitch, dst_pitch = merged[-2]
            outer = merged[:-2]
        else:
            height, src_pitch, dst_pitch, outer = 1, width, width, []
    else:  # one element per row
        width, height, src_pitch, dst_pitch = itemsize, n0, s0, t0
        outer = merged[:-1]
    if height > 1 and min(src_pitch, dst_pitch) < width:
        # cuMemcpy2D needs both pitches >= the row width: a broadcast (pitch 0) or
        # overlapping rows are copied one row per call (the driver reads a pitch-0
        # source as if it were dense).
        outer = [*outer, (height, src_pitch, dst_pitch)]
        height, src_pitch, dst_pitch = 1, width, width
    for index in itertools.product(*(range(d) for d, _, _ in outer)):
        s_off = sum(i * s for i, (_, s, _) in zip(index, outer, strict=True))
        d_off = sum(i * t for i, (_, _, t) in zip(index, outer, strict=True))
        backend.memcpy_2d_async(
            dst + d_off, dst_pitch, src + s_off, src_pitch, width, height, ctx.handle, kind
        )


def memcpy_able(t: Tensor) -> bool:
    """Whether the copy engines can read (or write) ``t``: no reversed or broadcast
    (stride <= 0) axis, or no element at all (an empty copy is no driver call)."""
    return t.size == 0 or all(s > 0 for s, d in zip(t.strides, t.shape, strict=True) if d > 1)


def kernel_copy(ctx: ExecutionContext, dst: Tensor, src: Tensor) -> None:
    """Enqueue a kernel copying any view ``src`` into the contiguous ``dst``, converting
    it to ``dst``'s dtype (``ndarray.astype``'s rules) where that differs."""
    from .._dtypes import dtype_info
    from .._launch import builtin  # it imports the tensor machinery this module feeds

    kernel = builtin.kernel("convert", dtype_name(dst.dtype))
    code = dtype_info(src.dtype).code
    flat = builtin.flat(dst)
    for sub, dims, strides, first in builtin.chunks(src):
        out = Tensor(flat.allocation, sub.shape, flat.dtype, None, flat.offset + first)
        builtin.launch(ctx, kernel, sub.size, out, sub, code, sub.size, *dims, *strides)


def new_tensor(ctx: ExecutionContext, shape: Shape, dtype: np.dtype[Any], what: str) -> Tensor:
    """Allocate a contiguous tensor on ``ctx``'s stream, declared as written by ``what``.

    Refused while capturing a graph (the allocation would be baked into every replay).
    """
    ctx.reject_in_capture(what)
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes >= _ADDRESSABLE:  # the driver's size_t could not even express it
        raise OutOfMemoryError(nbytes, f"device memory for a tensor of shape {shape}")
    alloc = Allocation(ctx.device, nbytes, ctx.stream)
    ctx.write(alloc)
    return Tensor(alloc, shape, dtype)


def _byte_strides(t: Tensor) -> Shape:
    return tuple(s * t.itemsize for s in t.strides)


def _contiguous_byte_strides(shape: Shape, itemsize: int) -> Shape:
    from .._tensor import contiguous_strides

    return tuple(s * itemsize for s in contiguous_strides(shape))


def _check_tensor(t: Any, argument: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise ArgumentError(f"{argument} must be a cuasync.Tensor, got {type(t).__name__}")
    return t


def from_host(array: Any, *, device: int | Device | None = None) -> TensorOp:
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
        if isinstance(array, (float, complex, list, tuple)) and not isinstance(array, np.generic):
            source = _default_floats(source)  # (np.float64 is a float: it keeps its dtype)
        dtype = as_dtype(source.dtype, "array.dtype")
    target = _device_arg(device)
    cls, node = _upload_classes()
    work = _HostUpload(source, dtype)
    return cls(node("pending", "from_host", source.shape, dtype, work, (), (), target))


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


#: The native core's ``Express.build_upload`` (set by ``_small_upload`` once the hub has
#: one): ``from_host``'s op for an ndarray of a known dtype on the default device, or None.
_build: Callable[[Any], TensorOp | None] | None = None


class _HostUpload:
    """What a ``from_host`` op enqueues: the pending value of its ``TensorOp``'s node
    (one object, not an op wrapped in an op: building it is on every upload's path)."""

    __slots__ = ("dtype", "source")

    def __init__(self, source: np.ndarray, dtype: np.dtype[Any]) -> None:
        self.source = source
        self.dtype = dtype

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        source = self.source
        tensor = new_tensor(ctx, source.shape, self.dtype, "from_host")
        upload(ctx, tensor.ptr, source)
        return Output.ready(tensor)


_classes: tuple[Any, Any] | None = None
_upload: tuple[Any, Any] | None = None


def _upload_classes() -> tuple[Any, Any]:
    """``(HostUploadOp, Node)``, imported once (their modules import this one)."""
    global _upload
    if _upload is None:
        from .._ops.expr import Node
        from .._small_upload import HostUploadOp

        _upload = (HostUploadOp, Node)
    return _upload


def _tensor_classes() -> tuple[Any, Any]:
    """``(TensorOp, Node)``, imported once (their module imports this one)."""
    global _classes
    if _classes is None:
        from .._ops.expr import Node
        from .._ops.tensorop import TensorOp

        _classes = (TensorOp, Node)
    return _classes


def to_host(tensor: Tensor) -> DeviceOp[np.ndarray]:
    """An op copying ``tensor`` into a new numpy array (backed by pinned memory).

    >>> a = await t.to_host()
    """
    t = _check_tensor(tensor, "tensor")

    def enqueue(ctx: ExecutionContext) -> Output[np.ndarray]:
        block = staging_pool().acquire(t.nbytes)
        view = t
        if not memcpy_able(t):  # a reversed or broadcast view: gather it first
            view = new_tensor(ctx, t.shape, t.dtype, "to_host")
            kernel_copy(ctx, view, t)
        src = ctx.read(view.allocation) + view.offset * view.itemsize
        copy_strided(
            ctx,
            "dtoh",
            block.address,
            _contiguous_byte_strides(t.shape, t.itemsize),
            src,
            _byte_strides(view),
            t.shape,
            t.itemsize,
        )
        ctx.retain(block)
        return Output.ready(block.array(t.dtype, t.shape))

    return device_op(enqueue, t.device, "to_host")


def dup(tensor: Tensor) -> TensorOp:
    """An op producing a contiguous copy of ``tensor`` on its device."""
    t = _check_tensor(tensor, "tensor")

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        out = new_tensor(ctx, t.shape, t.dtype, "dup")
        if not memcpy_able(t):  # a reversed or broadcast view: a kernel gathers it
            kernel_copy(ctx, out, t)
            return Output.ready(out)
        src = ctx.read(t.allocation) + t.offset * t.itemsize
        copy_strided(
            ctx,
            "dtod",
            out.ptr,
            _contiguous_byte_strides(t.shape, t.itemsize),
            src,
            _byte_strides(t),
            t.shape,
            t.itemsize,
        )
        return Output.ready(out)

    return _tensor_op(device_op(enqueue, t.device, "dup"), t.shape, t.dtype)


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
    if partly_overlap(d, s):
        raise AliasingError(
            f"memcpy: dst ({d.shape}/{d.strides}) and src ({s.shape}/{s.strides}) partly "
            "overlap in one allocation, so the result would be undefined; copy src first "
            "(`src.dup()`); the very same view is allowed"
        )
    result = d
    d, s = _forward(d, s)
    gather = not memcpy_able(s)
    if d.device is not s.device:
        from .peer import copy_between_devices

        return device_op(
            lambda ctx: copy_between_devices(ctx, d, s).then(lambda _: result),
            d.device,
            "memcpy",
            graph_node=True,
        )

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
                _byte_strides(d),
                sp,
                _byte_strides(source),
                source.shape,
                source.itemsize,
            )
        elif source.nbytes:
            get_backend().memcpy_dtod_async(dp, sp, source.nbytes, ctx.handle)
        return Output.ready(result)

    return device_op(enqueue, d.device, "memcpy", graph_node=True)


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
    from .._ops.views import flip

    return flip(dst, back), flip(src, back)


def empty(shape: Any, dtype: Any = "float32", *, device: int | Device | None = None) -> TensorOp:
    """An op allocating an uninitialized tensor.

    >>> buf = await cuasync.empty((1024,), "uint8")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    target = _device_arg(device)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        return Output.ready(new_tensor(ctx, dims, dt, "empty"))

    return _tensor_op(device_op(enqueue, target, "empty"), dims, dt)


def zeros(shape: Any, dtype: Any = "float32", *, device: int | Device | None = None) -> TensorOp:
    """An op allocating a tensor filled with zeros.

    >>> z = await cuasync.zeros((16, 16), "float16")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    target = _device_arg(device)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        tensor = new_tensor(ctx, dims, dt, "zeros")
        if tensor.nbytes:
            get_backend().memset_d8_async(tensor.ptr, 0, tensor.nbytes, ctx.handle)
        return Output.ready(tensor)

    return _tensor_op(device_op(enqueue, target, "zeros"), dims, dt)
