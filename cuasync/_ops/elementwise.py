"""Elementwise functions: numpy's broadcasting and dtype rules, fused into one kernel.

Operands are tensors (strided views too), :class:`~cuasync.TensorOp` s (absorbed into
the expression) and Python or numpy scalars (Python ints and floats are weak, NEP 50;
a Python bool is a bool). Where numpy makes float64 for lack of a float operand
(``int32 / int32``), the result is float32, cuasync's default float dtype. Each
function returns a :class:`~cuasync.TensorOp`; ``out=`` writes into an existing tensor
or view of exactly the result's shape and dtype, allocating nothing.

>>> y = await cuasync.add(a, 1.0)                  # a: float32 -> float32
>>> m = await cuasync.where(a > 0, a, 0.0)         # one kernel
>>> await cuasync.exp(a * b + c, out=y)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._core.device import Device
from .._dtypes import dtype_name
from .._tensor import Shape, Tensor, check_writable, partly_overlap
from ..errors import AliasingError, ArgumentError, DTypeError, InvalidDeviceError, ShapeError
from . import operators
from .expr import Node, is_ml_scalar, op_node
from .tensorop import TensorOp, leaf

__all__ = [
    "abs",
    "add",
    "angle",
    "clip",
    "conj",
    "cos",
    "divide",
    "equal",
    "exp",
    "expm1",
    "greater",
    "greater_equal",
    "imag",
    "less",
    "less_equal",
    "log",
    "log1p",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "not_equal",
    "power",
    "real",
    "remainder",
    "rsqrt",
    "sign",
    "sin",
    "sqrt",
    "subtract",
    "tanh",
    "where",
]


def is_operand(value: Any) -> bool:
    """Whether an operator may take ``value`` (else it returns NotImplemented)."""
    return isinstance(
        value,
        (Tensor, TensorOp, bool, int, float, complex, np.number, np.bool_),
    ) or is_ml_scalar(value)


def check_out(out: Any, name: str, shape: Shape, dtype: Any, device: Device | None) -> Tensor:
    """``out`` if an op may write its result of ``shape``, ``dtype`` and ``device`` there
    (elementwise ops, reductions and contractions all check ``out=`` here): a tensor of
    exactly those, and no broadcast view (:func:`~cuasync._tensor.check_writable`)."""
    if not isinstance(out, Tensor):
        raise ArgumentError(f"{name}: out must be a cuasync.Tensor, got {type(out).__name__}")
    if out.shape != shape:
        raise ShapeError(f"{name}: out has shape {out.shape}, the result has shape {shape}")
    if out.dtype != dtype:
        raise DTypeError(
            f"{name}: out has dtype {dtype_name(out.dtype)}, the result is {dtype_name(dtype)}"
        )
    if out.device is not device:
        raise InvalidDeviceError(
            f"{name}: out is on device {out.device.ordinal}, the operands on device "
            f"{device.ordinal if device is not None else '?'}"
        )
    return check_writable(out, "out", name)


def _apply(name: str, operands: dict[str, Any], out: Any) -> TensorOp:
    pending = False
    for v in operands.values():
        if isinstance(v, TensorOp):
            if v._consumed:
                v._take()  # raises OpConsumedError
            pending = True
    if pending:
        # Validate every operand (and out=) before absorbing any TensorOp: an error
        # must leave the caller's ops unconsumed.
        probe = _preview(name, operands)
        if out is not None:
            check_out(out, name, probe.shape, probe.dtype, probe.device)
            _check_overlap(out, operands, name)
        nodes = [leaf(v, arg) for arg, v in operands.items()]
        return TensorOp(op_node(name, nodes), out)
    node = op_node(name, [leaf(v, arg) for arg, v in operands.items()])
    if out is not None:
        check_out(out, name, node.shape, node.dtype, node.device)
        _check_overlap(out, operands, name)
    return TensorOp(node, out)


def _check_overlap(out: Tensor, operands: dict[str, Any], name: str) -> None:
    """``out`` may be an operand itself (in place), not partly overlap one: the kernel
    would read elements it has already overwritten."""
    for arg, v in operands.items():
        for t in _tensors_read(v):
            if partly_overlap(out, t):
                where = arg if t is v else f"a tensor {arg} reads"
                raise AliasingError(
                    f"{name}: out overlaps {where} without being the very same view "
                    f"({out.shape}/{out.strides} and {t.shape}/{t.strides} views of one "
                    "allocation); write to a new tensor (or into the operand itself)"
                )


def _tensors_read(operand: Any) -> list[Tensor]:
    """The tensors the kernel reads for ``operand``: a fused TensorOp's leaves too (and
    the out= of one that runs first), not only a tensor passed directly."""
    if isinstance(operand, Tensor):
        return [operand]
    if not isinstance(operand, TensorOp):
        return []
    if operand._out is not None:
        return [operand._out]
    found: list[Tensor] = []
    stack = [operand._node]
    while stack:
        node = stack.pop()
        if node.kind == "tensor":
            found.append(node.value)
        elif node.kind == "pending" and isinstance(node.value, TensorOp):
            found.extend(_tensors_read(node.value))
        stack.extend(node.children)
    return found


class _Preview:
    """The shape, dtype and device a result will have (what ``check_out`` looks at)."""

    def __init__(self, node: Node) -> None:
        self.shape = node.shape
        self.dtype: Any = node.dtype
        self.device = node.device


def _preview(name: str, operands: dict[str, Any]) -> _Preview:
    """Shape, dtype and device of the result, without consuming TensorOp operands."""
    nodes = []
    for arg, v in operands.items():
        if isinstance(v, (TensorOp, _Preview)):
            nodes.append(Node("tensor", arg, v.shape, v.dtype, None, device=v.device))
        else:
            nodes.append(leaf(v, arg))
    return _Preview(op_node(name, nodes))


def _unary(name: str, doc: str) -> Any:
    def fn(x: Any, *, out: Tensor | None = None) -> TensorOp:
        return _apply(name, {"x": x}, out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{doc}\n\n>>> y = await cuasync.{name}(x)\n"
    return fn


def _binary(name: str, doc: str) -> Any:
    def fn(x1: Any, x2: Any, *, out: Tensor | None = None) -> TensorOp:
        return _apply(name, {"x1": x1, "x2": x2}, out)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{doc}\n\n>>> y = await cuasync.{name}(a, b)\n"
    return fn


negative = _unary("negative", "``-x`` elementwise (integers wrap; not defined for bool).")
abs = _unary("abs", "``|x|`` elementwise (``abs(INT_MIN)`` is ``INT_MIN``, as in numpy).")
sign = _unary(
    "sign", "-1, 0 or 1 by the sign of each element (``sign(-0.0)`` is +0; NaN stays NaN)."
)
exp = _unary(
    "exp",
    "``e**x`` (integers: in the float numpy picks, float32 where that is float64).",
)
log = _unary("log", "The natural logarithm.")
sin = _unary("sin", "The sine (radians).")
cos = _unary("cos", "The cosine (radians).")
tanh = _unary("tanh", "The hyperbolic tangent.")
sqrt = _unary("sqrt", "The square root.")
rsqrt = _unary("rsqrt", "``1 / sqrt(x)`` (dtype as ``sqrt``).")
expm1 = _unary("expm1", "``exp(x) - 1``, accurate near 0.")
log1p = _unary("log1p", "``log(1 + x)``, accurate near 0.")

#: What the generated unary functions are (typed for the ones added in 0.2).
Unary = Callable[..., TensorOp]

conj: Unary = _unary("conj", "The complex conjugate (a real operand is returned as it is).")
real: Unary = _unary(
    "real", "The real part: float32 for complex64, float64 for complex128; a real x itself."
)
imag: Unary = _unary("imag", "The imaginary part (zeros of x's dtype for a real x).")
angle: Unary = _unary(
    "angle",
    "The argument ``atan2(imag, real)`` in radians, in (-pi, pi] (the imaginary part's "
    "sign of zero picks -pi or pi on the negative reals); float of the part's dtype.",
)

add = _binary("add", "``x1 + x2`` (bool: logical or; integers wrap).")
subtract = _binary("subtract", "``x1 - x2`` (not defined for two bools).")
multiply = _binary("multiply", "``x1 * x2`` (bool: logical and; integers wrap).")
divide = _binary(
    "divide", "``x1 / x2``, true division (integers give float32, the default float dtype)."
)
remainder = _binary(
    "remainder",
    "``x1 % x2`` with the sign of ``x2`` (numpy's ``remainder``); ``x % 0`` is 0 for "
    "integers (numpy also warns) and NaN for floats.",
)
power = _binary(
    "power",
    "``x1 ** x2``; integers wrap, and a negative integer exponent gives 0, for base 0 "
    "too (1 or -1 for bases 1 and -1) where numpy raises.",
)
maximum = _binary("maximum", "The larger element (NaN propagates).")
minimum = _binary("minimum", "The smaller element (NaN propagates).")
equal = _binary("equal", "``x1 == x2`` as a bool tensor.")
not_equal = _binary("not_equal", "``x1 != x2`` as a bool tensor.")
less = _binary("less", "``x1 < x2`` as a bool tensor.")
less_equal = _binary("less_equal", "``x1 <= x2`` as a bool tensor.")
greater = _binary("greater", "``x1 > x2`` as a bool tensor.")
greater_equal = _binary("greater_equal", "``x1 >= x2`` as a bool tensor.")


def where(condition: Any, x1: Any, x2: Any, *, out: Tensor | None = None) -> TensorOp:
    """``x1`` where ``condition`` is true (non-zero), else ``x2``; dtype ``result_type(x1, x2)``.

    >>> relu = await cuasync.where(x > 0, x, 0.0)
    """
    return _apply("where", {"condition": condition, "x1": x1, "x2": x2}, out)


def clip(x: Any, lo: Any = None, hi: Any = None, *, out: Tensor | None = None) -> TensorOp:
    """``minimum(maximum(x, lo), hi)``, as ``numpy.clip``; one kernel. A bound that is
    None is not applied (the array API's ``clip(x, min=None, max=None)``).

    >>> y = await cuasync.clip(x, 0.0, 6.0)
    >>> r = await cuasync.clip(x, None, 6.0)           # only an upper bound
    """
    for arg, v in (("x", x), ("lo", lo), ("hi", hi)):
        if not is_operand(v) and not (v is None and arg != "x"):
            leaf(v, arg)  # raises the typed error naming the argument
    bounds = {arg: v for arg, v in (("lo", lo), ("hi", hi)) if v is not None}
    if not bounds:  # nothing to clip: x's values, still a new tensor (or out=)
        return where(True, x, x, out=out)
    probe: Any = x
    if lo is not None:
        probe = _preview("maximum", {"x": probe, "lo": lo})
    if hi is not None:
        probe = _preview("minimum", {"x": probe, "hi": hi})
    if out is not None:
        check_out(out, "clip", probe.shape, probe.dtype, probe.device)
    if lo is None:
        return minimum(x, hi, out=out)
    if hi is None:
        return maximum(x, lo, out=out)
    return minimum(maximum(x, lo), hi, out=out)


# The operators of Tensor and TensorOp (``a + b``, ``-a``, ``abs(a)``) call these; their
# module sits below this one (see operators.Implementation).
operators.implementation.is_operand = is_operand
operators.implementation.elementwise = {
    "add": add,
    "subtract": subtract,
    "multiply": multiply,
    "divide": divide,
    "remainder": remainder,
    "power": power,
    "equal": equal,
    "not_equal": not_equal,
    "less": less,
    "less_equal": less_equal,
    "greater": greater,
    "greater_equal": greater_equal,
    "negative": negative,
    "abs": abs,
}
