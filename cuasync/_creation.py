"""Tensor creation: ``ones``, ``full``, ``fill``, ``arange``, ``linspace``, ``eye``,
``eye_rect``, ``convert``, ``rand`` and ``randn`` as lazy ops.

Each launches a built-in kernel (:mod:`cuasync._builtin`: CUDA C++ compiled with NVRTC,
and its numpy twin on the emulator backend). Arguments are checked when the op is built,
so a bad one raises a typed error and enqueues nothing.

>>> x = await cuasync.arange(8)                       # 0, 1, ..., 7 as float32
>>> h = await cuasync.convert(x, "float16")
>>> noise = await cuasync.randn((4, 4), seed=7)      # the same numbers on every backend
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import numpy as np

from . import _builtin as builtin
from ._backends import get_backend
from ._builtin import FILL_DTYPES, RANDOM_DTYPES
from ._copies import _device_arg, new_tensor
from ._core.context import ExecutionContext
from ._core.device import Device
from ._core.op import DeviceOp, device_op
from ._core.output import Output
from ._dtypes import SUPPORTED, as_dtype, dtype_info, dtype_name
from ._ops.tensorop import TensorOp, tensor_op
from ._tensor import Shape, Tensor, check_shape
from .errors import ArgumentError, DTypeError, ShapeError

__all__ = [
    "arange",
    "convert",
    "eye",
    "eye_rect",
    "fill",
    "full",
    "linspace",
    "ones",
    "rand",
    "randn",
]


# -- validation ------------------------------------------------------------------------
def _count(n: Any, argument: str) -> int:
    if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
        raise ShapeError(f"{argument} must be an int >= 0, got {type(n).__name__} {n!r}")
    if n < 0:
        raise ShapeError(f"{argument} must be an int >= 0, got {n}")
    return int(n)


def _is_real_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating, bool, np.bool_))


def _real(value: Any, argument: str, *, finite: bool = True) -> float:
    if not _is_real_number(value) or isinstance(value, (bool, np.bool_)):
        raise ArgumentError(
            f"{argument} must be a real number, got {type(value).__name__} {value!r}"[:200]
        )
    try:
        out = float(value)
    except OverflowError:
        raise ArgumentError(f"{argument}={value!r} is too large for a float64") from None
    if finite and not math.isfinite(out):
        raise ArgumentError(f"{argument} must be finite, got {value!r}")
    return out


def _representable(value: Any, dt: np.dtype[Any], argument: str) -> np.ndarray:
    """``value`` as a 0-d array of ``dt``, or :class:`ArgumentError` if ``dt`` cannot hold it."""
    name = dtype_name(dt)
    kind = dtype_info(dt).kind
    if isinstance(value, (complex, np.complexfloating)):
        if kind != "c":
            if value.imag != 0:
                raise ArgumentError(
                    f"{argument}={value!r} is complex but the dtype is {name}; pass a real "
                    "value or use a complex dtype"
                )
            value = value.real
    elif not _is_real_number(value):
        raise ArgumentError(
            f"{argument} must be a number (bool, int, float or complex), got "
            f"{type(value).__name__} {value!r}"[:200]
        )
    if kind == "b":
        if value not in (0, 1):
            raise ArgumentError(
                f"{argument}={value!r} does not fit in bool; use 0, 1, True or False"
            )
        return np.asarray(bool(value))
    if kind in "iu":
        if isinstance(value, (float, np.floating)) and not (
            math.isfinite(value) and value == math.floor(value)
        ):
            raise ArgumentError(f"{argument}={value!r} is not an integer; {name} cannot hold it")
        info = np.iinfo(dt)
        if not info.min <= int(value) <= info.max:
            raise ArgumentError(
                f"{argument}={value!r} does not fit in {name} ({info.min}..{info.max})"
            )
        return np.asarray(int(value), dtype=dt)
    part_dtype = {"complex64": SUPPORTED["float32"], "complex128": SUPPORTED["float64"]}.get(
        name, dt
    )
    parts = (
        [value.real, value.imag] if isinstance(value, (complex, np.complexfloating)) else [value]
    )
    for part in parts:
        try:
            as_float = float(part)
        except OverflowError:
            as_float = math.inf
            finite = False
        else:
            with np.errstate(all="ignore"):
                stored = np.asarray(as_float).astype(part_dtype).astype(np.float64)
            finite = not math.isfinite(as_float) or bool(np.isfinite(stored))
            if math.isinf(as_float) and np.isnan(stored):  # float8_e4m3fn
                raise ArgumentError(
                    f"{argument}={value!r}: {name} has no infinity (its largest value is "
                    f"{float(_finfo_max(dt))}; an infinity or an overflow becomes NaN)"
                )
        if not finite:
            raise ArgumentError(f"{argument}={value!r} overflows {name}")
    with np.errstate(all="ignore"):
        return np.asarray(value).astype(dt)


def _finfo_max(dt: np.dtype[Any]) -> Any:
    import ml_dtypes  # only ml_dtypes' dtypes get here

    return ml_dtypes.finfo(dt).max


def _bits(value: np.ndarray) -> tuple[int, int]:
    """The little-endian bits of a 0-d array as two 64-bit words (zero padded)."""
    raw = value.tobytes().ljust(16, b"\0")
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


def _seed(seed: Any) -> tuple[int, int]:
    if seed is None:
        seed = secrets.randbits(64)
    elif not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_)):
        raise ArgumentError(f"seed must be None or an int in 0..2**64-1, got {type(seed).__name__}")
    elif not 0 <= int(seed) < 2**64:
        raise ArgumentError(f"seed must be None or an int in 0..2**64-1, got {seed}")
    seed = int(seed)
    return seed & 0xFFFFFFFF, seed >> 32


def _random_dtype(dtype: Any, what: str) -> np.dtype[Any]:
    dt = as_dtype(dtype)
    if dtype_name(dt) not in RANDOM_DTYPES:
        hint = (
            f"; draw float32 (or bfloat16) numbers and convert them: .astype('{dtype_name(dt)}')"
            if not dtype_info(dt).arithmetic
            else ""
        )
        raise DTypeError(
            f"{what} makes floating-point numbers: dtype must be one of "
            f"{', '.join(n for n in RANDOM_DTYPES if n in SUPPORTED)}, got {dtype_name(dt)}" + hint
        )
    return dt


# -- the public ops --------------------------------------------------------------------
def _enqueue_fill(ctx: ExecutionContext, t: Tensor, bits: tuple[int, int]) -> None:
    if t.size == 0:
        return
    view_dtype = FILL_DTYPES[t.itemsize]
    kernel = builtin.kernel("fill", str(t.itemsize))
    for sub, dims, strides, _ in builtin.chunks(t):
        bits_view = builtin.bit_view(sub, view_dtype)
        builtin.launch(ctx, kernel, sub.size, bits_view, sub.size, *dims, *strides, *bits)


def _fill_op(
    shape: Shape, dt: np.dtype[Any], bits: tuple[int, int], device: Device, name: str
) -> TensorOp:
    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, shape, dt, name)
        _enqueue_fill(ctx, t, bits)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, device, name), shape, dt)


def full(
    shape: Any, value: Any, dtype: Any = "float32", *, device: int | Device | None = None
) -> TensorOp:
    """An op allocating a tensor of ``shape`` with every element ``value``.

    ``value`` must be representable in ``dtype`` (an int in range for integer dtypes, a
    finite float that does not overflow, ...), else :class:`~cuasync.errors.ArgumentError`.

    >>> t = await cuasync.full((2, 3), 7, "int32")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    bits = _bits(_representable(value, dt, "value"))
    return _fill_op(dims, dt, bits, _device_arg(device), "full")


def ones(shape: Any, dtype: Any = "float32", *, device: int | Device | None = None) -> TensorOp:
    """An op allocating a tensor of ones.

    >>> t = await cuasync.ones((4, 4), "float16")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    return _fill_op(dims, dt, _bits(_representable(1, dt, "value")), _device_arg(device), "ones")


def fill(tensor: Tensor, value: Any) -> DeviceOp[Tensor]:
    """An op setting every element of ``tensor`` (any view, strided too) to ``value``.

    Writes in place and outputs ``tensor``; it allocates nothing, so it can be recorded
    in a graph.

    >>> t = await cuasync.zeros((4, 4))
    >>> await cuasync.fill(t[:, 1], 2.5)      # one column
    """
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    t = tensor
    bits = _bits(_representable(value, t.dtype, "value"))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        ctx.write(t.allocation, "tensor")
        _enqueue_fill(ctx, t, bits)
        return Output.ready(t)

    return device_op(enqueue, t.device, "fill", graph_node=True)


def eye_rect(
    rows: Any, cols: Any, dtype: Any = "float32", *, device: int | Device | None = None
) -> TensorOp:
    """An op allocating a ``rows`` x ``cols`` matrix with ones on the main diagonal.

    >>> m = await cuasync.eye_rect(2, 3)        # [[1, 0, 0], [0, 1, 0]]
    """
    r = _count(rows, "rows")
    c = _count(cols, "cols")
    dt = as_dtype(dtype)
    bits = _bits(_representable(1, dt, "value"))
    target = _device_arg(device)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (r, c), dt, "eye")
        if t.nbytes:
            get_backend().memset_d8_async(t.ptr, 0, t.nbytes, ctx.handle)
            diagonal = Tensor(t.allocation, (min(r, c),), dt, (c + 1,), 0)
            _enqueue_fill(ctx, diagonal, bits)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, target, "eye"), (r, c), dt)


def eye(n: Any, dtype: Any = "float32", *, device: int | Device | None = None) -> TensorOp:
    """An op allocating the ``n`` x ``n`` identity matrix.

    >>> i = await cuasync.eye(3, "float64")
    """
    k = _count(n, "n")
    return eye_rect(k, k, dtype, device=device)


def _ramp_op(
    n: int,
    dt: np.dtype[Any],
    start: float,
    stop: float,
    device: Device,
    name: str,
) -> TensorOp:
    div = n - 1
    delta = stop - start
    step = delta / div if div > 0 else math.nan
    floor_ints = int(dtype_info(dt).kind in "iu")
    kernel = builtin.kernel("linspace", dtype_name(dt))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (n,), dt, name)
        if n:
            args = (n, start, stop, delta, step, div, floor_ints)
            builtin.launch(ctx, kernel, n, builtin.flat(t), *args)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, device, name), (n,), dt)


def arange(n: Any, dtype: Any = "float32", *, device: int | Device | None = None) -> TensorOp:
    """An op allocating ``[0, 1, ..., n - 1]`` (like ``numpy.arange(n, dtype=dtype)``).

    The last value, ``n - 1``, must be representable in ``dtype``.

    >>> x = await cuasync.arange(5, "int64")
    """
    k = _count(n, "n")
    dt = as_dtype(dtype)
    if k:
        try:
            _representable(k - 1, dt, "n - 1")
        except ArgumentError as exc:
            raise ArgumentError(
                f"n={k}: the last value of arange, {k - 1}, does not fit in {dtype_name(dt)} "
                f"({exc})"
            ) from None
    return _ramp_op(k, dt, 0.0, float(max(k - 1, 0)), _device_arg(device), "arange")


def linspace(
    start: Any,
    stop: Any,
    n: Any,
    dtype: Any = "float32",
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating ``n`` evenly spaced values from ``start`` to ``stop`` inclusive.

    Same values as ``numpy.linspace(start, stop, n, dtype=dtype)`` (computed in float64,
    floored for integer dtypes). ``start`` and ``stop`` are finite real numbers that fit
    in ``dtype``.

    >>> t = await cuasync.linspace(0.0, 1.0, 5)      # 0, .25, .5, .75, 1
    """
    a = _real(start, "start")
    b = _real(stop, "stop")
    k = _count(n, "n")
    dt = as_dtype(dtype)
    for value, argument in ((a, "start"), (b, "stop")):
        _representable(math.floor(value) if dtype_info(dt).kind in "iu" else value, dt, argument)
    return _ramp_op(k, dt, a, b, _device_arg(device), "linspace")


def convert(tensor: Tensor, dtype: Any) -> TensorOp:
    """An op producing a new contiguous tensor: ``tensor`` cast to ``dtype``.

    numpy's casting rules (``ndarray.astype``): floats to integers truncate toward zero,
    complex to real keeps the real part, anything to bool is ``!= 0``. Out-of-range and
    NaN float-to-integer conversions are undefined, as in numpy.

    >>> h = await cuasync.convert(x, "float16")
    """
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    src = tensor
    dt = as_dtype(dtype)
    kernel = builtin.kernel("convert", dtype_name(dt))
    code = dtype_info(src.dtype).code

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, src.shape, dt, "convert")
        if t.size:
            flat = builtin.flat(t)
            for sub, dims, strides, first in builtin.chunks(src):
                out = Tensor(flat.allocation, sub.shape, flat.dtype, None, flat.offset + first)
                builtin.launch(ctx, kernel, sub.size, out, sub, code, sub.size, *dims, *strides)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, src.device, "convert"), src.shape, dt)


def rand(
    shape: Any,
    seed: Any = None,
    dtype: Any = "float32",
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating uniform random numbers in ``[0, 1)`` (counter-based Philox4x32-10).

    A seed gives the same numbers on every backend and device; ``seed=None`` draws one.

    >>> u = await cuasync.rand((1024,), seed=42)
    """
    dims = check_shape(shape)
    key = _seed(seed)
    dt = _random_dtype(dtype, "rand")
    return _random_op(dims, dt, "rand", (*key,), _device_arg(device))


def randn(
    shape: Any,
    mean: Any = 0.0,
    std: Any = 1.0,
    seed: Any = None,
    dtype: Any = "float32",
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating normal random numbers (Philox4x32-10 and Box-Muller in float64).

    With a seed the numbers match across backends (float64 results to the last bits of
    ``log``/``cos``/``sin``, which differ between libraries).

    >>> z = await cuasync.randn((256, 256), mean=0.0, std=0.02, seed=1)
    """
    dims = check_shape(shape)
    m = _real(mean, "mean")
    s = _real(std, "std")
    if s < 0:
        raise ArgumentError(f"std must be >= 0, got {std!r}")
    key = _seed(seed)
    dt = _random_dtype(dtype, "randn")
    return _random_op(dims, dt, "randn", (*key, m, s), _device_arg(device))


def _random_op(
    dims: Shape, dt: np.dtype[Any], family: str, args: tuple[Any, ...], device: Device
) -> TensorOp:
    kernel = builtin.kernel(family, dtype_name(dt))
    n = math.prod(dims)
    per = 2 if family == "randn" or dtype_name(dt) == "float64" else 4

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, dims, dt, family)
        if n:
            builtin.launch(ctx, kernel, (n + per - 1) // per, builtin.flat(t), n, *args)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, device, family), dims, dt)
