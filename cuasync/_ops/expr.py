"""Elementwise expression trees, with numpy's broadcasting and dtype rules (NEP 50).

A :class:`Node` is a tensor, a scalar, a pending op (executed first, then read), or an
op applied to child nodes. Building a node resolves its shape and dtype the way numpy
would (``ufunc.resolve_dtypes``: Python ints and floats are "weak", a bool is a bool),
but with float32 for numpy's float64 of operands that have no float (the default float
dtype, :data:`~cuasync._dtypes.DEFAULT_FLOAT`), so errors come before anything runs.

>>> n = op_node("add", [leaf(t, "x1"), leaf(1.5, "x2")])   # tensorop.leaf: an operand's node
>>> n.shape, n.dtype                  # t: float32 (3, 1)
((3, 1), dtype('float32'))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.device import Device
from .._dtypes import (
    DEFAULT_COMPLEX,
    DEFAULT_FLOAT,
    STORAGE_ONLY,
    dtype_name,
    storage_only_message,
)
from .._dtypes import DTYPES as ALL_DTYPES
from .._native import NATIVE, NodeCore
from .._tensor import Shape
from ..errors import (
    ArgumentError,
    DTypeError,
    InvalidDeviceError,
    ScalarOverflowError,
    ShapeError,
)
from .seen import remember

#: The numpy function of each op (the twin evaluates it; its dtype rules are the op's).
UFUNCS: dict[str, Any] = {
    "negative": np.negative,
    "abs": np.absolute,
    "sign": np.sign,
    "exp": np.exp,
    "log": np.log,
    "sin": np.sin,
    "cos": np.cos,
    "tanh": np.tanh,
    "sqrt": np.sqrt,
    "rsqrt": np.sqrt,  # dtype rules of sqrt; the value is 1 / sqrt(x)
    "expm1": np.expm1,
    "log1p": np.log1p,
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": np.divide,
    "remainder": np.remainder,
    "power": np.power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "conj": np.conjugate,
    "real": np.real,
    "imag": np.imag,
    "angle": np.angle,
    # the array API's (issue 34): named as the standard names them
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "cosh": np.cosh,
    "sinh": np.sinh,
    "tan": np.tan,
    "log2": np.log2,
    "log10": np.log10,
    "ceil": np.ceil,
    "floor": np.floor,
    "trunc": np.trunc,
    "round": np.rint,  # (an integer or bool x: returned as it is, see _resolve)
    "isfinite": np.isfinite,
    "isinf": np.isinf,
    "isnan": np.isnan,
    "signbit": np.signbit,
    "positive": np.positive,
    "square": np.square,
    "reciprocal": np.sqrt,  # dtype rules of sqrt (integers: a float); the value is 1 / x
    "bitwise_invert": np.invert,
    "logical_not": np.logical_not,
    "atan2": np.arctan2,
    "copysign": np.copysign,
    "hypot": np.hypot,
    "logaddexp": np.logaddexp,
    "nextafter": np.nextafter,
    "floor_divide": np.floor_divide,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "bitwise_left_shift": np.left_shift,
    "bitwise_right_shift": np.right_shift,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}

#: The ops complex operands take: every one the array API defines for complex, and
#: numpy's ``angle``, ``rsqrt`` and truth values (``logical_*``).
COMPLEX_OPS = frozenset(
    (
        "add",
        "subtract",
        "multiply",
        "divide",
        "power",
        "equal",
        "not_equal",
        "negative",
        "abs",
        "exp",
        "log",
        "sqrt",
        "conj",
        "real",
        "imag",
        "angle",
        "where",
        "positive",
        "square",
        "reciprocal",
        "round",
        "isfinite",
        "isinf",
        "isnan",
        "log2",
        "log10",
        # numpy's branch cuts (kernels/elementwise.cuh: Kahan's formulas, in double)
        *("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tanh"),
        *("sin", "cos", "tan"),
        *("expm1", "log1p", "sign", "rsqrt"),
        *("logical_and", "logical_or", "logical_xor", "logical_not"),
    )
)
_ORDERING = frozenset(("less", "less_equal", "greater", "greater_equal", "maximum", "minimum"))
#: The ops the array API defines for real operands only (besides the ordering ones), as
#: numpy: complex operands raise saying so, where numpy's loop resolution fails.
_REAL_ONLY = frozenset(
    (
        *("ceil", "floor", "trunc", "signbit", "remainder", "floor_divide"),
        *("atan2", "copysign", "hypot", "logaddexp", "nextafter"),
    )
)
#: The ops that are not numpy ufuncs: their dtypes are resolved here (:func:`_parts`).
_PART_OPS = frozenset(("real", "imag", "angle"))

#: The dtypes elementwise ops take (bfloat16: ml_dtypes' numpy dtype).
DTYPES = frozenset(name for name, d in ALL_DTYPES.items() if d.arithmetic)


class Node(NodeCore):
    """One node of an expression: ``kind`` is "tensor", "scalar", "pending" or "op".

    ``dtype`` is None for a weak (Python) scalar; ``ins`` are an op's loop dtypes: what
    each child is cast to before the op computes. Constructed by the native base
    (``Node(kind, name, shape, dtype, value=None, children=(), ins=(), device=None)``).
    """

    __slots__ = ()  # its fields are the native base's (``NodeCore``)


def check_dtype(dt: np.dtype[Any], argument: str) -> None:
    if dtype_name(dt) not in DTYPES:
        if dtype_name(dt) in STORAGE_ONLY:
            raise DTypeError(storage_only_message(argument, dt, "elementwise ops"))
        raise DTypeError(
            f"{argument} has dtype {dtype_name(dt)}, which elementwise ops do not support yet; "
            f"supported: {', '.join(sorted(DTYPES))}"
        )


def is_ml_scalar(value: Any) -> bool:
    """Whether ``value`` is a scalar of an ml_dtypes type (``ml_dtypes.bfloat16(1.5)``):
    numpy generics that are not ``np.floating``."""
    return isinstance(value, np.generic) and dtype_name(value.dtype) in DTYPES


def _has_float(dt: np.dtype[Any]) -> bool:
    """Whether ``dt`` is a float or complex dtype (bfloat16 too, whose numpy kind is "V")."""
    return dt.kind in "fc" or dtype_name(dt) == "bfloat16"


def _device(children: list[Node], op: str) -> Device:
    devices = {id(c.device): c.device for c in children if c.device is not None}
    if not devices:
        raise ArgumentError(f"{op}: at least one operand must be a tensor (or a TensorOp)")
    if len(devices) > 1:
        listing = ", ".join(
            f"{c.name} on device {c.device.ordinal}" for c in children if c.device is not None
        )
        raise InvalidDeviceError(f"{op}: operands live on different devices ({listing})")
    return next(iter(devices.values()))


def _broadcast(children: list[Node], op: str) -> Shape:
    shapes = {c.shape for c in children if c.shape}
    if len(shapes) <= 1:  # one shape, and scalars: the common case, without numpy's call
        return shapes.pop() if shapes else ()
    try:
        return tuple(np.broadcast_shapes(*(c.shape for c in children)))
    except ValueError:
        listing = ", ".join(f"{c.name} has shape {c.shape}" for c in children)
        raise ShapeError(f"{op}: operands cannot be broadcast together ({listing})") from None


def _key(c: Node) -> Any:
    """What numpy's dtype resolution sees of a child: its dtype, or a weak scalar's type."""
    return c.dtype if c.dtype is not None else type(c.value)


#: The ops that compute in a float whatever their operands (numpy's float64 for most
#: integers): without a float operand they compute in the default float dtype.
FLOAT_OPS = frozenset(
    (
        *("divide", "exp", "log", "sin", "cos", "tanh", "sqrt", "rsqrt", "expm1", "log1p"),
        *("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan"),
        *("log2", "log10", "reciprocal", "atan2", "copysign", "hypot", "logaddexp"),
        "nextafter",
    )
)
_FLOAT64 = np.dtype(np.float64)
_COMPLEX128 = np.dtype(np.complex128)


def _default_float(
    op: str, children: list[Node], ins: tuple[np.dtype[Any], ...], out: np.dtype[Any]
) -> tuple[tuple[np.dtype[Any], ...], np.dtype[Any]]:
    """numpy's loop, with the float64 it picks for no float operand of a float64 dtype
    (``int32 / int32``, ``int8 + 0.5``, ``exp(int64)``) made the default float dtype,
    float32 (as ``from_host(0.5)`` and the creation ops); ``uint64 + int64`` and
    ``uint64 / int64`` stay float64 (the operands' own promotion)."""
    if any(c.dtype is not None and _has_float(c.dtype) for c in children):
        return ins, out
    if out == _COMPLEX128 and any(c.dtype is None and type(c.value) is complex for c in children):
        z = np.dtype(DEFAULT_COMPLEX)  # int32 + 1j: complex64, as a Python complex alone
        return tuple(z if dt == _COMPLEX128 else dt for dt in ins), z
    if out != _FLOAT64:
        return ins, out
    typed = [c.dtype for c in children if c.dtype is not None]
    if len(typed) > 1 and np.result_type(*typed) == _FLOAT64:
        return ins, out  # (uint64 with a signed integer: numpy's float64, for any op)
    weak_float = any(c.dtype is None and type(c.value) is float for c in children)
    if not weak_float and op not in FLOAT_OPS:
        return ins, out
    f = np.dtype(DEFAULT_FLOAT)
    return tuple(f if dt == _FLOAT64 else dt for dt in ins), f


def _parts(op: str, child: Node) -> tuple[tuple[np.dtype[Any], ...], np.dtype[Any]]:
    """``real``, ``imag`` and ``angle``: a complex operand gives its part's float dtype;
    a real one keeps its dtype for ``real``/``imag`` (numpy's), and ``angle`` computes
    in its float dtype (the default float for integers and bool)."""
    dt = child.dtype if child.dtype is not None else np.result_type(type(child.value))
    if dt.kind == "c":
        return (dt,), np.dtype(np.float32 if dt.itemsize == 8 else np.float64)
    if op == "angle" and not _has_float(dt):
        f = np.dtype(DEFAULT_FLOAT)
        return (f,), f
    return (dt,), dt


def _resolve(op: str, children: list[Node]) -> tuple[tuple[np.dtype[Any], ...], np.dtype[Any]]:
    if op in _PART_OPS:
        return _parts(op, children[0])
    if op == "where":
        a, b = children[1:]
        rep = [_key(c) if c.dtype is not None else c.value for c in (a, b)]
        out = np.result_type(*rep)
        return _default_float(op, [a, b], (np.dtype(bool), out, out), out)
    if op == "round" and children[0].dtype is not None and children[0].dtype.kind in "biu":
        dt = children[0].dtype  # already integral: the array API returns it as it is
        return (dt,), dt
    keys = (op, *map(_key, children))
    known = _RESOLVED.get(keys)
    if known is not None:
        return known
    try:
        loop = UFUNCS[op].resolve_dtypes((*keys[1:], None))
    except TypeError as exc:
        if op in _REAL_ONLY and any(_is_complex(c) for c in children):
            _refuse_complex(op, children)  # (saying why, not numpy's loop message)
        listing = ", ".join(
            f"{c.name}: {dtype_name(c.dtype) if c.dtype is not None else type(c.value).__name__}"
            for c in children
        )
        raise DTypeError(f"{op} is not defined for these dtypes ({listing}): {exc}") from None
    ins, out = _default_float(op, children, tuple(loop[:-1]), loop[-1])
    for dt, c in zip(ins, children, strict=True):
        if dtype_name(dt) not in DTYPES:
            raise DTypeError(f"{op}: {c.name} would be computed as {dt}, which is not supported")
    if len(_RESOLVED) < 4096:
        _RESOLVED[keys] = ins, out
    return ins, out


#: ``_resolve``'s answers by op and operand dtypes (weak scalars: their Python type);
#: numpy's ``resolve_dtypes`` costs microseconds and every elementwise op asks.
_RESOLVED: dict[tuple[Any, ...], tuple[tuple[np.dtype[Any], ...], np.dtype[Any]]] = {}


#: The range of a weak int's kernel parameter (a C ``long long``).
_INT64 = np.iinfo(np.int64)


def _fit_scalar(c: Node, dt: np.dtype[Any], op: str) -> Node:
    """A weak int cast to ``dt``, checked now as numpy 2 does: it must fit an integer
    ``dt`` and convert to a float one (float32 takes ``2**70``, inf past its range), else
    :class:`~cuasync.errors.ScalarOverflowError`. One past a C ``long long`` (uint64's
    ``2**63``, a float's ``2**70``) becomes a scalar of ``dt`` itself."""
    if c.kind != "scalar" or c.dtype is not None or type(c.value) is not int:
        return c
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= c.value <= info.max:
            raise ScalarOverflowError(
                f"{op}: {c.name}={c.value} does not fit in {dtype_name(dt)} "
                f"({info.min}..{info.max}), the dtype it is computed in; pass a tensor "
                "of a wider dtype (or .astype one)"
            )
    if _INT64.min <= c.value <= _INT64.max:
        return c
    if dt.kind in "iu":
        value = dt.type(c.value)
    else:
        try:
            wide = float(c.value)
        except OverflowError:
            raise ScalarOverflowError(
                f"{op}: {c.name} is an int too large for any float ({len(str(c.value))} "
                f"digits), and it is computed in {dtype_name(dt)}"
            ) from None
        with np.errstate(over="ignore"):  # past float16/float32's range: inf, as numpy
            value = dt.type(wide)
    return Node("scalar", c.name, (), dt, value)


def _resolve_node(
    op: str, children: list[Node], key: tuple[Any, ...]
) -> tuple[Shape, tuple[np.dtype[Any], ...], np.dtype[Any], bool]:
    """:func:`op_node`'s rules for operands not seen before (``key``: their op and each
    one's dtype or weak type, and shape): the broadcast shape, the loop dtypes, the
    result's dtype and whether a weak int is among them, checked (errors in this order:
    devices, shapes, dtypes) and recorded in :data:`_NODES`."""
    _device(children, op)
    shape = _broadcast(children, op)
    ins, out = _resolve(op, children)
    ins = _compared_wide(op, children, ins)
    if op not in COMPLEX_OPS and any(dt.kind == "c" for dt in ins):
        _refuse_complex(op, children)
    check_dtype(out, f"the result of {op}")
    weak_int = any(k[0] is int for k in key[1:])
    if op != "where" or not weak_int:  # (where's loop depends on a weak int's value)
        remember(_NODES, key, (shape, ins, out, weak_int), NODES.memo)
    return shape, ins, out, weak_int


#: The comparisons, which compare an integer operand with a Python int in int64.
_COMPARISONS = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
_I64 = np.dtype(np.int64)


def _compared_wide(
    op: str, children: list[Node], ins: tuple[np.dtype[Any], ...]
) -> tuple[np.dtype[Any], ...]:
    """A comparison of an integer operand (int8 to int32, uint8 to uint32: each of their
    values is an int64) with a Python int computes in int64, so that an int64 the
    operand's dtype cannot hold compares as numpy 2 does (``int8_tensor == 300`` is all
    False, ``< 300`` all True) rather than being refused. An int past int64, and any
    int past an int64 or uint64 operand's dtype (``uint64_tensor == -1``), is still
    :class:`~cuasync.errors.ScalarOverflowError` (numpy 2 compares those too)."""
    if op not in _COMPARISONS or not any(
        c.dtype is None and type(c.value) is int for c in children
    ):
        return ins
    if all(dt.kind in "iu" and dt.itemsize < 8 for dt in ins):
        return (_I64,) * len(ins)
    return ins


def _is_complex(c: Node) -> bool:
    """Whether ``c`` is a complex operand: a complex dtype, or a Python complex."""
    return c.dtype.kind == "c" if c.dtype is not None else isinstance(c.value, complex)


#: ``op_node``'s broadcast shape and loop by op and its operands' (dtype or weak type,
#: shape), numpy's broadcasting and dtype resolution costing microseconds, and whether a
#: weak int is among them (fitted to its loop dtype by value).
_NODES: dict[tuple[Any, ...], tuple[Shape, tuple[np.dtype[Any], ...], np.dtype[Any], bool]] = {}

#: The builder of op nodes (``reactor/python/apply.c``): the lookup in :data:`_NODES`, the
#: devices compared and weak ints fitted there; the rules above on a miss.
NODES = NATIVE.OpNodes(Node, _NODES, _resolve_node, _fit_scalar, _device)

#: ``op_node(op, children)``: the node applying ``op`` to ``children``, its shape, dtype
#: and device checked now (what the operands' dtypes and shapes decide is looked up once
#: seen; a weak int is still fitted to its loop dtype by value, the devices compared).
op_node = NODES.op_node


def _refuse_complex(op: str, children: list[Node]) -> None:
    listing = ", ".join(
        f"{c.name}: {dtype_name(c.dtype) if c.dtype is not None else type(c.value).__name__}"
        for c in children
    )
    if op in _ORDERING:
        raise DTypeError(
            f"{op} is not defined for complex operands ({listing}): complex numbers have no "
            "order (the array API's rule; numpy orders them lexicographically). Compare "
            "cuasync.real(x) and cuasync.imag(x), or cuasync.abs(x), instead"
        )
    if op in _REAL_ONLY:
        raise DTypeError(
            f"{op} is not defined for complex operands ({listing}): the array API defines "
            f"it for real numbers only (as numpy). Apply it to cuasync.real(x) and "
            "cuasync.imag(x) separately where that is what you mean"
        )
    raise DTypeError(
        f"{op} does not take complex operands yet ({listing}); complex elementwise ops: "
        f"{', '.join(sorted(COMPLEX_OPS))}"
    )
