"""Tensor creation: ``ones``, ``full``, ``fill``, ``arange``, ``linspace``, ``eye``,
``eye_rect``, ``convert``, ``rand`` and ``randn`` as lazy ops.

Each launches a built-in kernel (:mod:`cuasync._launch.builtin`: CUDA C++ compiled with NVRTC,
and its numpy twin on the emulator backend). Arguments are checked when the op is built,
so a bad one raises a typed error and enqueues nothing.

>>> x = await cuasync.arange(8, dtype="float32")      # 0, 1, ..., 7
>>> h = await cuasync.convert(x, "float16")
>>> noise = await cuasync.randn((4, 4), seed=7)      # the same numbers on every backend
"""

from __future__ import annotations

import functools
import math
import secrets
import struct
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np

from .._backends import get_backend
from .._core.context import ExecutionContext
from .._core.device import Device, Stream
from .._core.op import DeviceOp, device_op
from .._core.output import Output
from .._dtypes import (
    DEFAULT_COMPLEX,
    DEFAULT_FLOAT,
    SUPPORTED,
    DTypeLike,
    as_dtype,
    default_dtype,
    dtype_info,
    dtype_name,
)
from .._first_use import launching, unprepared
from .._launch import builtin
from .._launch.builtin import FILL_DTYPES, RANDOM_DTYPES
from .._launch.guard import guarded
from .._launch.kernel import Kernel
from .._launch.twins import host_cast
from .._tensor import Shape, Tensor, check_shape, check_writable
from .._tensor import methods as tensor_methods
from .._transfers.copies import _device_arg
from .._transfers.device_copy import ADDRESSABLE, copy_kernel, copy_strided, kernel_copy, new_tensor
from .._transfers.staging import staging_pool
from ..errors import ArgumentError, CastOverflowError, DTypeError, ShapeError
from .elementwise import where
from .launch_plan import LAUNCHES, new_tensor_on
from .one_launch import one_launch
from .seen import remember
from .tensorop import ShapeLike, TensorOp, tensor_op

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
            stored = host_cast(np.asarray(as_float), part_dtype).astype(np.float64)
            finite = not math.isfinite(as_float) or bool(np.isfinite(stored))
            if math.isinf(as_float) and np.isnan(stored):  # float8_e4m3fn
                raise ArgumentError(
                    f"{argument}={value!r}: {name} has no infinity (its largest value is "
                    f"{float(_finfo_max(dt))}; an infinity or an overflow becomes NaN)"
                )
        if not finite:
            raise ArgumentError(f"{argument}={value!r} overflows {name}")
    return host_cast(np.asarray(value), dt)


def _finfo_max(dt: np.dtype[Any]) -> Any:
    import ml_dtypes  # only ml_dtypes' dtypes get here

    return ml_dtypes.finfo(dt).max


def _bits(value: np.ndarray) -> tuple[int, int]:
    """The little-endian bits of a 0-d array as two 64-bit words (zero padded)."""
    raw = value.tobytes().ljust(16, b"\0")
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


_DOUBLE = struct.Struct("<d").pack
#: The bits of Python numbers seen as fill values, by :func:`_fill_key`.
_FILL_BITS: dict[tuple[Any, ...], tuple[int, int]] = {}


def _fill_key(value: Any, dt: np.dtype[Any]) -> tuple[Any, ...] | None:
    """What decides a fill value's bits in ``dt``: its type and exact value (a float's own
    bits: -0.0 is not 0.0, nor one NaN another); None for other types (not kept)."""
    kind = type(value)
    if kind is float:
        return (dt, kind, _DOUBLE(value))
    if kind is int or kind is bool:
        return (dt, kind, value)
    if kind is complex:
        return (dt, kind, _DOUBLE(value.real), _DOUBLE(value.imag))
    return None


def _fill_bits(value: Any, dt: np.dtype[Any], argument: str) -> tuple[int, int]:
    """``_bits(_representable(value, dt, argument))``, found again for a Python number
    seen before (a service fills with the same few values); errors are never kept."""
    key = _fill_key(value, dt)
    found = None if key is None else _FILL_BITS.get(key)
    if found is None:
        found = _bits(_representable(value, dt, argument))
        if key is not None:
            remember(_FILL_BITS, key, found)
    return found


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
def _fill_kernel(itemsize: int) -> Kernel:
    """The kernel :func:`_enqueue_fill` launches for elements of ``itemsize`` bytes."""
    return builtin.kernel("fill", str(itemsize))


def _fill_args(t: Tensor, bits: tuple[int, int]) -> list[tuple[int, tuple[Any, ...]]]:
    """The fill kernel's launches filling ``t`` with ``bits``: (work, arguments) each."""
    view_dtype = FILL_DTYPES[t.itemsize]
    return [
        (sub.size, (builtin.bit_view(sub, view_dtype), sub.size, *dims, *strides, *bits))
        for sub, dims, strides, _ in builtin.chunks(t)
    ]


def _enqueue_fill(
    ctx: ExecutionContext, t: Tensor, bits: tuple[int, int], *, scoped: bool = False
) -> None:
    """Fill ``t`` with ``bits``; ``scoped``: ``t`` is the op's own (a new tensor), so a
    cancelled scope may skip it."""
    if t.size == 0:
        return
    kernel = _fill_kernel(t.itemsize)
    for work, args in _fill_args(t, bits):
        builtin.launch(ctx, kernel, work, *args, scoped=scoped)


class _Fill(DeviceOp[Tensor]):
    """A new tensor of ``shape`` and dtype ``dt``, every element ``bits`` (``full``,
    ``ones``): the fill kernel's launch. A seen one (its kernel prepared for the device,
    one launch) is submitted by the native core as a raw launch (:func:`_fill_launch`)."""

    __slots__ = ("_bits", "_dt", "_name", "_shape")

    def __init__(
        self, shape: Shape, dt: np.dtype[Any], bits: tuple[int, int], device: Device, name: str
    ) -> None:
        super().__init__(device)
        self._shape, self._dt, self._bits, self._name = shape, dt, bits, name

    def _trace_name(self) -> str:
        return self._name

    def _first_use(self, device: Device) -> Any:
        return unprepared([_fill_kernel(self._dt.itemsize)], device)

    def _enqueue(self, ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, self._shape, self._dt, self._name)
        _enqueue_fill(ctx, t, self._bits, scoped=True)
        return Output.ready(t)

    def __repr__(self) -> str:
        return f"<cuasync.DeviceOp {self._name}{' (consumed)' if self._consumed else ''}>"


def _fill_launch(op: _Fill, stream: Stream) -> Any:
    """The launch op of a fill on ``stream`` (``ExpressLaunches.pending_launches``): a new
    tensor and the fill kernel's one launch into it (its cancel word the scope's, as the
    long way's), or None: no elements, more than one launch, more bytes than a size_t
    holds (the long way words it), or the kernel not prepared for the device (its first
    use, off the loop in an await, is the long way's)."""
    dt = op._dt
    kernel = _fill_kernel(dt.itemsize)
    device = stream.device
    nbytes = math.prod(op._shape) * dt.itemsize
    if not 0 < nbytes < ADDRESSABLE or device.ordinal not in kernel._prepared:
        return None
    t = new_tensor_on(stream, nbytes, op._shape, dt)
    launches = _fill_args(t, op._bits)
    if len(launches) != 1:
        return None
    work, args = launches[0]
    launch = builtin.launch_op(kernel, work, *args)
    launch._output = t
    return launch


LAUNCHES.pending_launches[_Fill] = _fill_launch


def _fill_op(
    shape: Shape, dt: np.dtype[Any], bits: tuple[int, int], device: Device, name: str
) -> TensorOp:
    return tensor_op(_Fill(shape, dt, bits, device, name), shape, dt)


F = TypeVar("F", bound=Callable[..., Any])


def _renamed(old: str, new: str, position: int = 0) -> Callable[[F], F]:
    """Let the wrapped creation op still take the keyword ``old`` (0.1's name of its
    parameter number ``position``, now ``new``), with a DeprecationWarning; the signature
    shows ``new`` only."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if old in kwargs:
                if len(args) > position or new in kwargs:
                    raise ArgumentError(
                        f"{fn.__name__}: {old}= is the old name of {new}; pass {new} once"
                    )
                warnings.warn(
                    f"cuasync.{fn.__name__}({old}=...) is deprecated: the parameter is named "
                    f"{new} now (numpy's name); pass it positionally or as {new}=",
                    DeprecationWarning,
                    stacklevel=2,
                )
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return cast(F, call)

    return wrap


@_renamed("value", "fill_value", position=1)
def full(
    shape: ShapeLike,
    fill_value: complex | np.number[Any] | np.bool_,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating a tensor of ``shape`` with every element ``fill_value``.

    ``dtype`` None is ``fill_value``'s: bool for a bool, int64 for an int, float32 (the
    default float dtype) for a float, complex64 for a complex, a numpy scalar's own.
    ``fill_value`` must be representable in ``dtype`` (an int in range for integer
    dtypes, a finite float that does not overflow, ...), else
    :class:`~cuasync.errors.ArgumentError`.

    >>> t = await cuasync.full((2, 3), 7, "int32")
    >>> m = await cuasync.full((2, 3), False)          # bool
    """
    dims = check_shape(shape)
    if dtype is None and isinstance(fill_value, (bool, int, float, complex, np.generic)):
        dt = default_dtype(fill_value)
    else:
        dt = as_dtype(DEFAULT_FLOAT if dtype is None else dtype)
    bits = _fill_bits(fill_value, dt, "fill_value")
    return _fill_op(dims, dt, bits, _device_arg(device), "full")


def ones(
    shape: ShapeLike, dtype: DTypeLike = None, *, device: int | Device | None = None
) -> TensorOp:
    """An op allocating a tensor of ones (``dtype`` None: float32, the default float dtype).

    >>> t = await cuasync.ones((4, 4), "float16")
    """
    dims = check_shape(shape)
    dt = as_dtype(dtype)
    return _fill_op(dims, dt, _fill_bits(1, dt, "value"), _device_arg(device), "ones")


def fill(tensor: Tensor, value: complex | np.number[Any] | np.bool_) -> DeviceOp[Tensor]:
    """An op setting every element of ``tensor`` (any view, strided too) to ``value``.

    Writes in place and outputs ``tensor``; it allocates nothing, so it can be recorded
    in a graph.

    >>> t = await cuasync.zeros((4, 4))
    >>> await cuasync.fill(t[:, 1], 2.5)      # one column
    """
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    t = check_writable(tensor, "tensor", "fill")
    bits = _bits(_representable(value, t.dtype, "value"))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        ctx.write(t.allocation, "tensor")
        _enqueue_fill(ctx, t, bits)
        return Output.ready(t)

    first_use = launching(_fill_kernel(t.itemsize))
    return device_op(enqueue, t.device, "fill", graph_node=True, first_use=first_use)


def _is_dtype_like(value: Any) -> bool:
    """Whether ``value`` reads as a dtype (0.1 took one as the second positional argument)."""
    return isinstance(value, (str, np.dtype)) or (
        isinstance(value, type) and issubclass(value, np.generic)
    )


def _eye_op(n: int, m: int, k: int, dt: np.dtype[Any], device: Device) -> TensorOp:
    bits = _bits(_representable(1, dt, "value"))
    offset = k if k >= 0 else -k * m  # the diagonal's first element
    length = max(0, min(n - max(0, -k), m - max(0, k)))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (n, m), dt, "eye")
        if t.nbytes:
            with guarded(ctx, "memset", nbytes=t.nbytes):  # (a cancelled scope skips it)
                get_backend().memset_d8_async(t.ptr, 0, t.nbytes, ctx.handle)
            if length:
                diagonal = Tensor(t.allocation, (length,), dt, (m + 1,), offset)
                _enqueue_fill(ctx, diagonal, bits, scoped=True)
        return Output.ready(t)

    first_use = launching(*([_fill_kernel(dt.itemsize)] if length and m else []))
    return tensor_op(device_op(enqueue, device, "eye", first_use=first_use), (n, m), dt)


def eye_rect(
    rows: int | np.integer[Any],
    cols: int | np.integer[Any],
    dtype: DTypeLike = "float32",
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating a ``rows`` x ``cols`` matrix with ones on the main diagonal.

    The same as ``cuasync.eye(rows, cols, dtype=dtype)``.

    >>> m = await cuasync.eye_rect(2, 3)        # [[1, 0, 0], [0, 1, 0]]
    """
    r = _count(rows, "rows")
    c = _count(cols, "cols")
    return _eye_op(r, c, 0, as_dtype(dtype), _device_arg(device))


@_renamed("n", "N")
def eye(
    N: int | np.integer[Any],
    M: int | np.integer[Any] | None = None,
    k: int | np.integer[Any] = 0,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating an ``N`` x ``M`` matrix (``M`` None: ``N``) with ones on the
    ``k``-th diagonal and zeros elsewhere, as ``numpy.eye``.

    ``k`` > 0 is a diagonal above the main one, ``k`` < 0 one below; a ``k`` past the
    matrix gives all zeros. ``dtype`` None is float32 (cuasync's default; numpy's is
    float64). A dtype as the second positional argument (``eye(3, "float64")``, the form
    of cuasync 0.1) still works but is deprecated: write ``dtype=``.

    >>> i = await cuasync.eye(3, dtype="float64")
    >>> band = await cuasync.eye(4, 6, k=-1)        # ones at [1, 0], [2, 1], [3, 2]
    """
    if _is_dtype_like(M):
        if dtype is not None or k != 0:
            raise ArgumentError(
                f"eye: M={M!r} is not a number of columns; pass the dtype as dtype="
            )
        warnings.warn(
            f"cuasync.eye(N, dtype) with the dtype as the second positional argument is "
            f"deprecated (numpy's second argument is M, the number of columns): write "
            f"cuasync.eye(N, dtype={M!r})",
            DeprecationWarning,
            stacklevel=3,
        )
        M, dtype = None, M
    n = _count(N, "N")
    m = n if M is None else _count(M, "M")
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise ArgumentError(f"eye: k must be an int (a diagonal offset), got {k!r}"[:200])
    dt = as_dtype("float32" if dtype is None else dtype)
    return _eye_op(n, m, int(k), dt, _device_arg(device))


def _ramp_op(
    n: int,
    dt: np.dtype[Any],
    start: float,
    stop: float,
    device: Device,
    name: str,
    endpoint: bool = True,
) -> TensorOp:
    div = n - 1 if endpoint else n
    delta = stop - start
    step = delta / div if div > 0 else math.nan
    floor_ints = int(dtype_info(dt).kind in "iu")
    kernel = builtin.kernel("linspace", dtype_name(dt))

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (n,), dt, name)
        if n:
            args = (n, start, stop, delta, step, div, floor_ints)
            builtin.launch(ctx, kernel, n, builtin.flat(t), *args, scoped=True)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, device, name, first_use=launching(kernel)), (n,), dt)


def _arange_number(value: Any, argument: str) -> Any:
    """A start, stop or step as numpy's arange computes with it (numpy ints as ints)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (int, float, np.integer, np.floating)
    ):
        raise ArgumentError(
            f"arange: {argument} must be a real number (an int or a float), got "
            f"{type(value).__name__} {value!r}"[:200]
        )
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        raise ArgumentError(f"arange: {argument} must be finite, got {value!r}")
    return int(value) if isinstance(value, np.integer) else value


def _arange_dtype(values: list[Any]) -> np.dtype[Any]:
    """numpy's dtype for arange's arguments: int64 at least, promoted with each one's,
    except that a Python float makes the default float dtype (float32), where no numpy
    float argument gives one."""
    dt = np.dtype(np.int64)
    for v in values:
        if isinstance(v, np.generic):
            other = v.dtype
        elif isinstance(v, float):
            continue
        else:  # a Python int: int64 where it fits, as numpy reads it
            other = np.dtype(np.int64) if -(2**63) <= v < 2**63 else np.min_scalar_type(v)
        dt = np.promote_types(dt, other)
    if dt.kind not in "fc" and any(isinstance(v, float) for v in values):
        dt = SUPPORTED[DEFAULT_FLOAT]
    return as_dtype(dt, "the dtype of start, stop and step")


def _arange_length(start: Any, stop: Any, step: Any) -> int:
    """``ceil((stop - start) / step)`` (at least 0), computed as numpy does."""
    try:
        with np.errstate(all="ignore"):
            span = stop - start
            val = span / step
        value = float(val)
        if val == 0 and span != 0:  # underflow: numpy's rule
            return 0 if math.copysign(1.0, value) < 0 else 1
        length = math.ceil(value)
    except (OverflowError, ValueError):
        length = 2**63
    if length >= 2**63:
        raise ArgumentError(f"arange: ({stop!r} - {start!r}) / {step!r} elements is too many"[:200])
    return max(0, length)


def _arange_ends(start: Any, step: Any, n: int, dt: np.dtype[Any]) -> tuple[int, int, float, float]:
    """(i0, i1, f0, f1) for ``ca_arange``: the first two values as the dtype holds them
    (numpy's setitem), checked with the last one; ArgumentError where they don't fit."""
    name, kind = dtype_name(dt), dtype_info(dt).kind
    if n == 0:  # no values: nothing to hold (numpy stores none either)
        return 0, 0, 0.0, 0.0
    if kind in "biu":
        # numpy's setitem: ints as they are, floats truncated toward zero
        first = math.trunc(start)
        second = math.trunc(start + step) if n > 1 else first
        last = first + (n - 1) * (second - first)
        low, high = (0, 1) if kind == "b" else (int(np.iinfo(dt).min), int(np.iinfo(dt).max))
        for value, what in ((first, "start"), (second, "start + step"), (last, "the last value")):
            if not low <= value <= high:
                raise ArgumentError(
                    f"arange: {what}, {value}, does not fit in {name} ({low}..{high})"
                )

        def word(v: int) -> int:  # a long long kernel parameter: uint64 as its bits
            return v - 2**64 if v >= 2**63 else v

        return word(first), word(second), 0.0, 0.0
    held = np.zeros(2, dt)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        held[0] = start
        held[1] = start + step if n > 1 else start
        f0, f1 = (float(v.real) for v in held.astype(np.complex128))
        t = np.float64 if name in ("float64", "complex128") else np.float32
        last = np.asarray(t(f0) + t(n - 1) * (t(f1) - t(f0))).astype(dt)
    for value, what in ((held[0], "start"), (held[1], "start + step"), (last, "the last value")):
        if not np.isfinite(np.asarray(value).astype(np.complex128)):
            raise ArgumentError(f"arange: {what} overflows {name}")
    return 0, 0, f0, f1


@_renamed("n", "start")
def arange(
    start: float | np.integer[Any] | np.floating[Any] | None = None,
    stop: float | np.integer[Any] | np.floating[Any] | None = None,
    step: float | np.integer[Any] | np.floating[Any] | None = None,
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
) -> TensorOp:
    """An op allocating ``numpy.arange([start,] stop[, step], dtype)``: evenly spaced
    values in ``[start, stop)``.

    numpy's rules: one, two or three numbers (ints or floats, finite); steps may be
    floats or negative; there are ``ceil((stop - start) / step)`` values (none when that
    is not positive); each is the dtype's ``start + i * step`` as numpy computes it (the
    first two values as the dtype holds them, then numpy's fill arithmetic: integers
    exactly, float64 in double, float32, float16, bfloat16 and FP8 in float), so results
    match numpy's to the bit. ``dtype`` None infers numpy's, int64 for ints, except that
    a Python float argument makes float32, the default float dtype (a numpy float64
    scalar makes float64).

    One exception, for one release: ``arange(n)`` with a single integer and no dtype
    still makes float32, as in cuasync 0.1, and warns (FutureWarning) that it will be
    int64 from 0.3 on; pass ``dtype=`` to choose. A dtype as the second positional
    argument (``arange(5, "int32")``, 0.1's form) still works, with a DeprecationWarning.

    Values that do not fit ``dtype`` (the first, second or last), a zero step and bools
    raise :class:`~cuasync.errors.ArgumentError`; a bool result has at most 2 elements.

    >>> x = await cuasync.arange(5, dtype="int64")          # 0, 1, 2, 3, 4
    >>> y = await cuasync.arange(1.0, 0.0, -0.25)           # 1, .75, .5, .25 (float32)
    >>> z = await cuasync.arange(0, 10, 3, dtype="float32")  # 0, 3, 6, 9
    """
    if _is_dtype_like(stop):  # 0.1's arange(n, dtype)
        if step is not None or dtype is not None:
            raise ArgumentError(f"arange: stop={stop!r} is not a number; pass the dtype as dtype=")
        warnings.warn(
            f"cuasync.arange(stop, dtype) with the dtype as the second positional argument "
            f"is deprecated (numpy's second argument is stop): write "
            f"cuasync.arange(stop, dtype={stop!r})",
            DeprecationWarning,
            stacklevel=3,
        )
        stop, dtype = None, stop
    if start is None and stop is None:
        raise ArgumentError("arange needs stop: arange(stop), arange(start, stop[, step])")
    given = [v for v in (start, stop, step) if v is not None]
    for v, argument in zip((start, stop, step), ("start", "stop", "step"), strict=True):
        if v is not None:
            _arange_number(v, argument)
    legacy = stop is None and step is None and dtype is None
    legacy = legacy and isinstance(start, (int, np.integer))
    if stop is None:  # arange(stop)
        start, stop = 0, start
    elif start is None:  # arange(stop=...)
        start = 0
    a = _arange_number(start, "start")
    b = _arange_number(stop, "stop")
    c = 1 if step is None else _arange_number(step, "step")
    if c == 0:
        raise ArgumentError("arange: step must not be zero")
    if legacy:
        warnings.warn(
            f"cuasync.arange({b!r}) without a dtype makes float32, as in cuasync 0.1, but "
            "will make int64 from cuasync 0.3 on, as numpy.arange does (arange(start, "
            "stop[, step]) and float arguments already infer numpy's dtype); pass dtype= "
            "to choose: dtype='float32' keeps this result",
            FutureWarning,
            stacklevel=3,
        )
        dt = SUPPORTED["float32"]
    elif dtype is None:
        dt = _arange_dtype(given)
    else:
        dt = as_dtype(dtype)
    n = _arange_length(a, b, c)
    if dtype_name(dt) == "bool" and n > 2:
        raise ArgumentError(
            f"arange: a bool result has at most 2 elements (False, True), this one has {n}"
        )
    i0, i1, f0, f1 = _arange_ends(a, c, n, dt)
    kernel = builtin.kernel("arange", dtype_name(dt))
    target = _device_arg(device)

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, (n,), dt, "arange")
        if n:
            builtin.launch(ctx, kernel, n, builtin.flat(t), n, i0, i1, f0, f1, scoped=True)
        return Output.ready(t)

    op = device_op(enqueue, target, "arange", first_use=launching(kernel))
    return tensor_op(op, (n,), dt)


@_renamed("n", "num", position=2)
def linspace(
    start: complex | np.number[Any],
    stop: complex | np.number[Any],
    num: int | np.integer[Any],
    dtype: DTypeLike = None,
    *,
    device: int | Device | None = None,
    endpoint: bool = True,
) -> TensorOp:
    """An op allocating ``num`` evenly spaced values from ``start`` to ``stop``, inclusive
    (``endpoint=False``: ``stop`` excluded, the step ``(stop - start) / num``), as the
    array API's ``linspace(start, stop, /, num, *, dtype=None, device=None,
    endpoint=True)``; ``dtype`` None is float32, the default float dtype.

    Same values as ``numpy.linspace(start, stop, num, endpoint, dtype=dtype)`` (computed
    in float64, floored for integer dtypes). ``start`` and ``stop`` are finite numbers
    that fit in ``dtype``; a complex one makes the result complex (``dtype`` None:
    complex64, the default complex dtype; a real ``dtype`` raises ``DTypeError``), with
    numpy's complex128 steps rounded once.

    >>> t = await cuasync.linspace(0.0, 1.0, 5)                   # 0, .25, .5, .75, 1
    >>> h = await cuasync.linspace(0.0, 1.0, 4, endpoint=False)   # 0, .25, .5, .75
    >>> z = await cuasync.linspace(0, 1 + 2j, 3)                  # 0, .5+1j, 1+2j
    """
    if not isinstance(endpoint, (bool, np.bool_)):
        raise ArgumentError(f"linspace: endpoint must be a bool, got {endpoint!r}"[:200])
    if isinstance(start, (complex, np.complexfloating)) or isinstance(
        stop, (complex, np.complexfloating)
    ):
        return _complex_linspace(start, stop, _count(num, "num"), dtype, device, bool(endpoint))
    a = _real(start, "start")
    b = _real(stop, "stop")
    k = _count(num, "num")
    dt = as_dtype(dtype)
    for value, argument in ((a, "start"), (b, "stop")):
        _representable(math.floor(value) if dtype_info(dt).kind in "iu" else value, dt, argument)
    return _ramp_op(k, dt, a, b, _device_arg(device), "linspace", bool(endpoint))


def _complex_linspace(
    start: Any, stop: Any, k: int, dtype: DTypeLike, device: Any, endpoint: bool
) -> TensorOp:
    """numpy's complex ``linspace``, its steps as numpy takes them: ``arange(num) * step +
    start`` in complex128, or complex64 for a numpy complex64 endpoint (``step = (stop -
    start) / div``, computed by numpy on the
    host; ``arange(num) / div * delta`` where the step underflows to 0), the last element
    ``stop`` with the endpoint, rounded once to ``dtype``."""
    parts = []
    for value, argument in ((start, "start"), (stop, "stop")):
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, complex, np.number)
        ):
            raise ArgumentError(f"{argument} must be a number, got {type(value).__name__}")
        z = complex(value)
        if not (math.isfinite(z.real) and math.isfinite(z.imag)):
            raise ArgumentError(f"{argument} must be finite, got {value!r}")
        parts.append(value)
    # numpy's: complex128 for Python numbers, a numpy complex64 endpoint keeps complex64
    ct = np.result_type(*parts, 1.0)
    parts = [ct.type(p) for p in parts]
    dt = as_dtype(DEFAULT_COMPLEX if dtype is None else dtype)
    if dtype_info(dt).kind != "c":
        raise DTypeError(
            f"linspace: start={start!r} or stop={stop!r} is complex but dtype is "
            f"{dtype_name(dt)}; pass a complex dtype (or real endpoints)"
        )
    a, b = parts
    delta, div = b - a, k - 1 if endpoint else k
    i = arange(k, dtype=ct, device=device)
    with np.errstate(all="ignore"):  # (numpy's own steps, its own warnings aside)
        step = delta / div if div > 0 else None
    if step is None:
        y = i * complex(delta) + complex(a)
    elif step == 0:
        y = i / div * complex(delta) + complex(a)
    else:
        y = i * complex(step) + complex(a)
    if endpoint and k > 1:  # (i is taken over by y: its own arange to compare)
        y = where(arange(k, dtype=ct, device=device) == div, complex(b), y)
    return y if dt == ct else y.astype(dt)


#: ``convert``'s ``casting`` values: numpy's names, and "checked".
CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe", "checked")


def convert_kernels(dt: np.dtype[Any], checked: bool) -> tuple[Kernel, ...]:
    """The kernels a conversion to ``dt`` launches (``checked``: ``casting="checked"``'s,
    the flag's fill and the checking copy); an op converting declares them."""
    if checked:
        return (_fill_kernel(4), builtin.kernel("convert_checked", dtype_name(dt)))
    return (copy_kernel(dt),)


def convert(tensor: Tensor, dtype: DTypeLike, *, casting: str = "unsafe") -> TensorOp:
    """An op producing a new contiguous tensor: ``tensor`` cast to ``dtype``.

    numpy's casting rules (``ndarray.astype``): floats to integers truncate toward zero,
    complex to real keeps the real part, anything to bool is ``!= 0``. ``casting`` is
    numpy's: ``"unsafe"`` (the default, as ``astype``'s) allows any cast; ``"no"``,
    ``"equiv"``, ``"safe"`` and ``"same_kind"`` refuse the others with
    :class:`~cuasync.errors.DTypeError` when the op is built (``numpy.can_cast``).
    Out-of-range and NaN float-to-integer conversions are undefined, as in numpy, unless
    ``casting="checked"``: any cast, and the op fails with
    :class:`~cuasync.errors.CastOverflowError` when it lands if a value was out of the
    integer range, NaN or infinite to an integer, or a finite float that became infinite
    (``1e5`` to float16); the kernel raises a flag on the device, read back with the
    op's completion (never blocking). A checked cast cannot be recorded in a graph.

    >>> h = await cuasync.convert(x, "float16")
    >>> i = await cuasync.convert(x, "int8", casting="checked")   # CastOverflowError for 1e10
    """
    if not isinstance(tensor, Tensor):
        raise ArgumentError(f"tensor must be a cuasync.Tensor, got {type(tensor).__name__}")
    src = tensor
    dt = as_dtype(dtype)
    check_casting(src.dtype, dt, casting)
    checked = casting == "checked"
    if not checked and src.size:
        chunks = builtin.chunks(src)
        if len(chunks) == 1:  # (one launch, kernel_copy's: the core's raw launch)
            sub, dims, strides, _ = chunks[0]
            view = builtin.storage_view(Tensor(src.allocation, (1,), dt)).dtype
            tail = (sub, dtype_info(src.dtype).code, sub.size, *dims, *strides)
            kernel = copy_kernel(dt)
            return one_launch(
                kernel, src.device, "convert", src.shape, dt, sub.shape, view, sub.size, tail
            )

    def enqueue(ctx: ExecutionContext) -> Output[Tensor]:
        t = new_tensor(ctx, src.shape, dt, "convert")
        if t.size:
            if checked:
                _checked_copy(ctx, t, src)
            else:
                kernel_copy(ctx, t, src)
        return Output.ready(t)

    op = device_op(
        enqueue, src.device, "convert", first_use=launching(*convert_kernels(dt, checked))
    )
    return tensor_op(op, src.shape, dt)


def check_casting(src: np.dtype[Any], dt: np.dtype[Any], casting: Any) -> None:
    """Raise unless ``casting`` is one of :data:`CASTINGS` that allows ``src`` to ``dt``."""
    if casting not in CASTINGS:
        raise ArgumentError(
            f"casting must be one of {', '.join(map(repr, CASTINGS))}, got {casting!r}"[:300]
        )
    if casting in ("unsafe", "checked") or np.can_cast(src, dt, casting):
        return
    raise DTypeError(
        f"cannot cast {dtype_name(src)} to {dtype_name(dt)} with casting={casting!r} "
        "(numpy.can_cast says no); pass casting='unsafe' to allow it, or "
        "casting='checked' to allow it and raise CastOverflowError where a value does not fit"
    )


def _checked_copy(ctx: ExecutionContext, dst: Tensor, src: Tensor) -> None:
    """``kernel_copy`` with ``ca_convert_checked``: a device flag, zeroed, set by the
    kernel where a value overflows, copied to pinned memory and read when the work has
    completed (``ctx.check_when_done``)."""

    flag = new_tensor(ctx, (1,), SUPPORTED["uint32"], "convert")
    _enqueue_fill(ctx, flag, (0, 0))
    kernel = builtin.kernel("convert_checked", dtype_name(dst.dtype))
    code = dtype_info(src.dtype).code
    flat = builtin.flat(dst)
    for sub, dims, strides, first in builtin.chunks(src):
        out = Tensor(flat.allocation, sub.shape, flat.dtype, None, flat.offset + first)
        builtin.launch(ctx, kernel, sub.size, out, sub, code, flag, sub.size, *dims, *strides)
    block = staging_pool().acquire(4)
    copy_strided(ctx, "dtoh", block.address, (4,), ctx.read(flag.allocation), (4,), (1,), 4)
    ctx.retain(block)
    seen = block.array(SUPPORTED["uint32"], (1,))
    names = dtype_name(src.dtype), dtype_name(dst.dtype)

    def check() -> None:
        if seen[0]:
            raise CastOverflowError(
                f"astype({names[1]!r}, casting='checked'): a value of the {names[0]} tensor "
                f"of shape {src.shape} does not fit in {names[1]} (out of range, NaN or "
                "infinite); clip it first (cuasync.clip) or cast to a wider dtype"
            )

    ctx.check_when_done(check)


def rand(
    shape: ShapeLike,
    seed: int | np.integer[Any] | None = None,
    dtype: DTypeLike = "float32",
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
    shape: ShapeLike,
    mean: float | np.integer[Any] | np.floating[Any] = 0.0,
    std: float | np.integer[Any] | np.floating[Any] = 1.0,
    seed: int | np.integer[Any] | None = None,
    dtype: DTypeLike = "float32",
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
            work = (n + per - 1) // per
            builtin.launch(ctx, kernel, work, builtin.flat(t), n, *args, scoped=True)
        return Output.ready(t)

    return tensor_op(device_op(enqueue, device, family, first_use=launching(kernel)), dims, dt)


# Tensor.astype and TensorOp.astype (both modules sit below this one).
tensor_methods.convert = convert
tensor_methods.convert_kernels = convert_kernels
tensor_methods.check_casting = check_casting
