"""Elementwise expression trees, with numpy's broadcasting and dtype rules (NEP 50).

A :class:`Node` is a tensor, a scalar, a pending op (executed first, then read), or an
op applied to child nodes. Building a node resolves its shape and dtype the way numpy
would (``ufunc.resolve_dtypes``: Python scalars are "weak"), so errors come before
anything runs.

>>> n = op_node("add", [leaf(t, "x1"), leaf(1.5, "x2")])
>>> n.shape, n.dtype                  # t: float32 (3, 1)
((3, 1), dtype('float32'))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._core.device import Device
from .._dtypes import STORAGE_ONLY, dtype_name, storage_only_message
from .._tensor import Shape, Tensor
from ..errors import ArgumentError, DTypeError, InvalidDeviceError, ShapeError

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
}

#: The dtypes elementwise ops take (bfloat16 and complex are not supported yet).
DTYPES = frozenset(
    dtype_name(np.dtype(n))
    for n in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
)

_WEAK = (bool, int, float)


class Node:
    """One node of an expression: ``kind`` is "tensor", "scalar", "pending" or "op".

    ``dtype`` is None for a weak (Python) scalar; ``ins`` are an op's loop dtypes: what
    each child is cast to before the op computes.
    """

    __slots__ = ("children", "device", "dtype", "ins", "kind", "name", "shape", "value")

    def __init__(
        self,
        kind: str,
        name: str,
        shape: Shape,
        dtype: np.dtype[Any] | None,
        value: Any = None,
        children: tuple[Node, ...] = (),
        ins: tuple[np.dtype[Any], ...] = (),
        device: Device | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.children = children
        self.ins = ins
        self.device = device


def _check_dtype(dt: np.dtype[Any], argument: str) -> None:
    if dtype_name(dt) not in DTYPES:
        if dtype_name(dt) in STORAGE_ONLY:
            raise DTypeError(storage_only_message(argument, dt, "elementwise ops"))
        raise DTypeError(
            f"{argument} has dtype {dtype_name(dt)}, which elementwise ops do not support yet; "
            f"supported: {', '.join(sorted(DTYPES))}"
        )


def leaf(value: Any, argument: str) -> Node:
    """The node of an operand: a tensor, a TensorOp (absorbed), or a Python/numpy scalar."""
    from .tensorop import TensorOp

    if isinstance(value, Tensor):
        _check_dtype(value.dtype, argument)
        return Node("tensor", argument, value.shape, value.dtype, value, device=value.device)
    if isinstance(value, TensorOp):
        return value._absorb(argument)
    if isinstance(value, (bool, np.bool_)) or type(value) in (int, float):
        if isinstance(value, np.bool_):
            return Node("scalar", argument, (), np.dtype(bool), np.bool_(value))
        return Node("scalar", argument, (), None, value)
    if isinstance(value, (np.integer, np.floating)):
        _check_dtype(value.dtype, argument)
        return Node("scalar", argument, (), value.dtype, value)
    if isinstance(value, (int, float)):  # subclasses (IntEnum, ...): as the plain value
        return leaf(int(value) if isinstance(value, int) else float(value), argument)
    if isinstance(value, np.ndarray):
        raise ArgumentError(
            f"{argument} is a numpy array; upload it first: await cuasync.from_host(array)"
        )
    raise ArgumentError(
        f"{argument} must be a cuasync.Tensor, a TensorOp or a real number, got "
        f"{type(value).__name__} {value!r}"[:200]
    )


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


def _resolve(op: str, children: list[Node]) -> tuple[tuple[np.dtype[Any], ...], np.dtype[Any]]:
    if op == "where":
        a, b = children[1:]
        rep = [_key(c) if c.dtype is not None else c.value for c in (a, b)]
        out = np.result_type(*rep)
        return (np.dtype(bool), out, out), out
    keys = (op, *map(_key, children))
    known = _RESOLVED.get(keys)
    if known is not None:
        return known
    try:
        loop = UFUNCS[op].resolve_dtypes((*keys[1:], None))
    except TypeError as exc:
        listing = ", ".join(
            f"{c.name}: {dtype_name(c.dtype) if c.dtype is not None else type(c.value).__name__}"
            for c in children
        )
        raise DTypeError(f"{op} is not defined for these dtypes ({listing}): {exc}") from None
    ins, out = tuple(loop[:-1]), loop[-1]
    for dt, c in zip(ins, children, strict=True):
        if dtype_name(dt) not in DTYPES:
            raise DTypeError(f"{op}: {c.name} would be computed as {dt}, which is not supported")
    if len(_RESOLVED) < 4096:
        _RESOLVED[keys] = ins, out
    return ins, out


#: ``_resolve``'s answers by op and operand dtypes (weak scalars: their Python type);
#: numpy's ``resolve_dtypes`` costs microseconds and every elementwise op asks.
_RESOLVED: dict[tuple[Any, ...], tuple[tuple[np.dtype[Any], ...], np.dtype[Any]]] = {}


def _check_scalar(c: Node, dt: np.dtype[Any], op: str) -> None:
    """A weak int must fit the dtype it is cast to (numpy raises OverflowError there)."""
    if c.kind == "scalar" and c.dtype is None and type(c.value) is int and dt.kind in "iu":
        info = np.iinfo(dt)
        if not info.min <= c.value <= info.max:
            raise ArgumentError(
                f"{op}: {c.name}={c.value} does not fit in {dtype_name(dt)} "
                f"({info.min}..{info.max}), the dtype it is computed in"
            )


def op_node(op: str, children: list[Node]) -> Node:
    """The node applying ``op`` to ``children``: shape, dtype and device checked now."""
    device = _device(children, op)
    shape = _broadcast(children, op)
    ins, out = _resolve(op, children)
    _check_dtype(out, f"the result of {op}")
    for c, dt in zip(children, ins, strict=True):
        _check_scalar(c, dt, op)
    return Node("op", op, shape, out, None, tuple(children), ins, device)
