"""The array API's data-type functions: ``finfo``, ``iinfo``, ``isdtype``, ``can_cast``,
``result_type`` and ``astype``, and the dtype objects themselves (issue 34).

cuasync's dtypes are numpy dtypes (``x.dtype`` is one), so the dtype objects are too:
``cuasync.float32`` is ``numpy.dtype("float32")``, taken wherever a dtype name is
(``zeros((2,), cuasync.float32)``), and ``x.dtype == cuasync.float32`` holds.
``cuasync.bfloat16`` is ml_dtypes' bfloat16 dtype, imported at its first use.

``result_type`` answers with the rules the elementwise ops apply (numpy's promotion, NEP
50: Python scalars are weak, and float32, cuasync's default float dtype, where numpy
would make float64 for lack of a float operand), so ``result_type(a, b)`` is the dtype
of ``a + b``; ``can_cast(from_, to)`` is whether ``result_type(from_, to)`` is ``to``.

>>> cuasync.result_type(cuasync.int8, cuasync.uint8)
dtype('int16')
>>> cuasync.finfo(cuasync.float32).eps
1.1920928955078125e-07
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from .._core.device import Device
from .._dtypes import DTYPES, SUPPORTED, DTypeLike, as_dtype, dtype_name, load_ml_dtypes
from .._tensor import Tensor
from ..errors import ArgumentError, DTypeError, InvalidDeviceError
from .expr import Node, _resolve
from .tensorop import TensorOp

#: A dtype, or what has one (a tensor, a TensorOp): ``finfo``, ``iinfo``, ``can_cast``.
DTypeOrArray = DTypeLike | Tensor | TensorOp
#: ``isdtype``'s ``kind``: a dtype, a kind name ("integral", ...), or a tuple of those.
DTypeKind = DTypeLike | tuple[DTypeLike, ...]
#: ``result_type``'s operands: dtypes, tensors and TensorOps, Python scalars (weak).
PromotionOperand = DTypeOrArray | bool | int | float | complex

__all__ = [
    "astype",
    "can_cast",
    "finfo",
    "finfo_object",
    "iinfo",
    "iinfo_object",
    "isdtype",
    "result_type",
]

#: The array API's dtype kinds: which of the table's kinds (``DType.kind``) each takes.
KINDS = {
    "bool": "b",
    "signed integer": "i",
    "unsigned integer": "u",
    "integral": "iu",
    "real floating": "f",
    "complex floating": "c",
    "numeric": "iufc",
}


@dataclass(frozen=True)
class finfo_object:
    """The limits of a floating-point dtype (of a complex dtype: of its parts).

    ``bits`` (of one part), ``eps`` (1 ulp at 1.0), ``max``, ``min`` (the most negative
    finite value), ``smallest_normal`` as Python floats, and ``dtype`` (the real dtype).

    >>> cuasync.finfo(cuasync.float16).max
    65504.0
    """

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype[Any]


@dataclass(frozen=True)
class iinfo_object:
    """The range of an integer dtype: ``bits``, ``max``, ``min`` (Python ints), ``dtype``.

    >>> cuasync.iinfo(cuasync.uint8).max
    255
    """

    bits: int
    max: int
    min: int
    dtype: np.dtype[Any]


def _dtype_of(value: DTypeOrArray, argument: str) -> np.dtype[Any]:
    """The dtype of a dtype, a dtype name, a Tensor or a TensorOp."""
    if isinstance(value, (Tensor, TensorOp)):
        return value.dtype
    return as_dtype(value, argument)


def finfo(type: DTypeOrArray, /) -> finfo_object:
    """The limits of a floating-point dtype (``type``: a dtype, its name, or a tensor).

    >>> f = cuasync.finfo(x)                    # x: float32
    >>> f.eps, f.smallest_normal
    (1.1920928955078125e-07, 1.1754943508222875e-38)
    """
    dt = _dtype_of(type, "type")
    kind = DTYPES[dtype_name(dt)].kind
    if kind not in "fc":
        raise DTypeError(
            f"finfo: type has dtype {dtype_name(dt)}, not a floating-point dtype; "
            "use cuasync.iinfo for integers"
        )
    if kind == "c":
        dt = SUPPORTED["float32" if dt.itemsize == 8 else "float64"]
    if dtype_name(dt) in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        load_ml_dtypes()
        import ml_dtypes

        info: Any = ml_dtypes.finfo(dt)
    else:
        info = np.finfo(dt)
    return finfo_object(
        bits=int(info.bits),
        eps=float(info.eps),
        max=float(info.max),
        min=float(info.min),
        smallest_normal=float(info.smallest_normal),
        dtype=dt,
    )


def iinfo(type: DTypeOrArray, /) -> iinfo_object:
    """The range of an integer dtype (``type``: a dtype, its name, or a tensor).

    >>> cuasync.iinfo(cuasync.int8).min
    -128
    """
    dt = _dtype_of(type, "type")
    if dt.kind not in "iu":
        raise DTypeError(
            f"iinfo: type has dtype {dtype_name(dt)}, not an integer dtype; "
            "use cuasync.finfo for floating-point dtypes"
        )
    info = np.iinfo(dt)
    return iinfo_object(bits=int(info.bits), max=int(info.max), min=int(info.min), dtype=dt)


def isdtype(dtype: DTypeLike, kind: DTypeKind) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, one of the array API's kind names
    ("bool", "signed integer", "unsigned integer", "integral", "real floating",
    "complex floating", "numeric"), or a tuple of those (any of them). float16 and
    bfloat16 are "real floating".

    >>> cuasync.isdtype(x.dtype, ("integral", "real floating"))
    True
    """
    dt = as_dtype(dtype, "dtype")
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str) and kind in KINDS:
        return DTYPES[dtype_name(dt)].kind in KINDS[kind]
    if isinstance(kind, str) and kind not in SUPPORTED:
        raise ArgumentError(
            f"isdtype: kind={kind!r} is neither a dtype nor a kind; expected a dtype, "
            f"one of {', '.join(map(repr, KINDS))}, or a tuple of those"
        )
    return dt == as_dtype(kind, "kind")


def _node(value: PromotionOperand, argument: str) -> Node:
    """What promotion sees of an operand: a dtype, or a Python scalar (weak)."""
    if type(value) in (int, float, complex):
        return Node("scalar", argument, (), None, value)
    if isinstance(value, bool):
        return Node("scalar", argument, (), np.dtype(bool), np.bool_(value))
    # (a numpy scalar, a float subclass, is not weak: its dtype, through as_dtype)
    return Node("tensor", argument, (), _dtype_of(cast(DTypeOrArray, value), argument))


def result_type(*arrays_and_dtypes: PromotionOperand) -> np.dtype[Any]:
    """The dtype elementwise arithmetic on these operands gives: tensors, TensorOps,
    dtypes, and Python scalars (weak: ``result_type(int8, 1)`` is int8). At least one
    must not be a Python scalar.

    >>> cuasync.result_type(x, 1.0)             # x: int32 -> float32 (the default float)
    dtype('float32')
    """
    nodes = [_node(v, f"arrays_and_dtypes[{i}]") for i, v in enumerate(arrays_and_dtypes)]
    typed = [n for n in nodes if n.dtype is not None]
    if not typed:
        raise ArgumentError(
            "result_type needs at least one tensor or dtype (Python scalars alone have "
            f"no dtype), got {arrays_and_dtypes!r}"[:200]
        )
    acc = typed[0]
    for n in [*typed[1:], *(n for n in nodes if n.dtype is None)]:
        _, out = _resolve("add", [acc, n])
        acc = Node("tensor", acc.name, (), out)
    assert acc.dtype is not None
    return acc.dtype


def can_cast(from_: DTypeOrArray, to: DTypeLike, /) -> bool:
    """Whether promotion keeps ``to`` for ``from_`` (a dtype or tensor) and ``to``: a
    cast that loses nothing (``int8`` to ``int16``, ``float32`` to ``complex64``).

    >>> cuasync.can_cast(cuasync.int64, cuasync.int32)
    False
    """
    to_dt = as_dtype(to, "to")
    try:
        return result_type(from_, to_dt) == to_dt
    except DTypeError:
        return False


def astype(
    x: Tensor | TensorOp,
    dtype: DTypeLike,
    /,
    *,
    copy: bool = True,
    device: Device | None = None,
) -> TensorOp:
    """An op producing ``x`` cast to ``dtype``, a new tensor (the array API's function
    form of :meth:`Tensor.astype`; ``copy=False`` copies too: results are always new
    tensors). ``device`` must be None or ``x``'s device.

    >>> y = await cuasync.astype(x, cuasync.float16)
    """
    if not isinstance(x, (Tensor, TensorOp)):
        raise ArgumentError(
            f"astype: x must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
        )
    if device is not None and device is not x.device:
        raise InvalidDeviceError(
            f"astype: device is {device!r} but x is on device {getattr(x.device, 'ordinal', '?')}; "
            "move it with `await x.to(device)` first"
        )
    return x.astype(dtype)
