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

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from .._core.device import Device
from .._dtypes import dtype_name
from .._native import NATIVE
from .._tensor import Shape, Tensor, check_writable, partly_overlap
from ..errors import (
    AliasingError,
    ArgumentError,
    DTypeError,
    InvalidDeviceError,
    ScalarOverflowError,
    ShapeError,
)
from . import operators
from .expr import NODES, Node, check_dtype, is_ml_scalar, op_node
from .standin import is_standin
from .tensorop import Operand, TensorOp, leaf

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


def _check_out_of(out: Any, operands: dict[str, Any], name: str, node: Node) -> None:
    """Raise where ``out`` may not take ``node``'s result (:func:`check_out`) or partly
    overlaps an operand (:func:`_check_overlap`): what :data:`APPLY` asks where it cannot
    accept ``out`` at once."""
    check_out(out, name, node.shape, node.dtype, node.device)
    _check_overlap(out, operands, name)


#: The builder of elementwise ops, which the elementwise functions (:func:`elementwise_function`)
#: and the operators apply their op with (``reactor/python/apply.c``): each operand's node (a
#: tensor's, a Python number's, a TensorOp's own tree; anything else :func:`~.tensorop.leaf`'s),
#: the op node (:func:`~.expr.op_node`), ``out=`` accepted where nothing can be wrong (else
#: :func:`_check_out_of` decides), then the TensorOp operands absorbed: an error leaves the
#: caller's ops unconsumed.
APPLY = NATIVE.ElementwiseApply(NODES, Tensor, TensorOp, leaf, check_dtype, _check_out_of)

_Function = TypeVar("_Function", bound=Callable[..., TensorOp])


def elementwise_function(declaration: _Function, op: str | None = None) -> _Function:
    """The function applying the elementwise op ``op`` (the def's name where None) that
    ``declaration`` declares: its positional parameters are the operands and ``out=`` its
    one keyword; its signature and docstring are the function's, its body (none) never
    runs. The function is native (``ElementwiseFunction``: :data:`APPLY` without a Python
    frame or a dict per call) and wraps the def (``__wrapped__``: ``inspect.signature``,
    ``help()``); a call that does not fit the signature raises Python's own TypeError.

    >>> @elementwise_function
    ... def exp(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    ...     "``e**x``."
    """
    kinds = inspect.Parameter
    params = inspect.signature(declaration).parameters.values()
    operands = tuple(
        p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    )
    keywords = [p for p in params if p.kind is kinds.KEYWORD_ONLY]
    if (
        [p.name for p in keywords] != ["out"]
        or keywords[0].default is not None
        or len(operands) != len(params) - 1
        or any(p.default is not p.empty for p in params if p.name != "out")
    ):  # (what the native function binds: anything else would bind otherwise than the def)
        raise TypeError(
            f"{declaration.__name__}: operands without defaults, then out=None keyword-only"
        )
    positional_only = sum(p.kind is kinds.POSITIONAL_ONLY for p in params)
    function = NATIVE.ElementwiseFunction(
        op or declaration.__name__, operands, positional_only, APPLY, declaration
    )
    return function


def applying(op: str) -> Callable[[_Function], _Function]:
    """:func:`elementwise_function` of the op ``op``, named otherwise (``pow``: ``power``).

    >>> @applying("power")
    ... def pow(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp: ...
    """
    return lambda declaration: elementwise_function(declaration, op)


def _check_overlap(out: Tensor, operands: dict[str, Any], name: str) -> None:
    """``out`` may be an operand itself (in place), not partly overlap one: the kernel
    would read elements it has already overwritten."""
    for arg, v in operands.items():
        if v.__class__ is Tensor and v._alloc is not out._alloc:
            continue  # (the common operand: another allocation, no overlap)
        for t in tensors_read(v):
            if partly_overlap(out, t):
                where = arg if t is v else f"a tensor {arg} reads"
                raise AliasingError(
                    f"{name}: out overlaps {where} without being the very same view "
                    f"({_described(out)} and {_described(t)}: views of one allocation); "
                    "write to a new tensor (or into the operand itself)"
                )


def _described(t: Tensor) -> str:
    """A view's place in its allocation, for an aliasing error: where it starts (in
    elements), its shape and strides."""
    return f"shape {t.shape}, strides {t.strides} from element {t.offset}"


def tensors_read(operand: Any) -> list[Tensor]:
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
        elif node.kind == "pending":
            if isinstance(node.value, TensorOp):
                found.extend(tensors_read(node.value))
            else:  # (a view op of an out= op's output: that view)
                made = getattr(node.value, "_output", None)
                if made is not None and not is_standin(made):
                    found.append(made)
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


@elementwise_function
def negative(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``-x`` elementwise (integers wrap; not defined for bool).

    >>> y = await cuasync.negative(x)
    """


@elementwise_function
def abs(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``|x|`` elementwise (``abs(INT_MIN)`` is ``INT_MIN``, as in numpy).

    >>> y = await cuasync.abs(x)
    """


@elementwise_function
def sign(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """-1, 0 or 1 by the sign of each element (``sign(-0.0)`` is +0; NaN stays NaN).

    >>> y = await cuasync.sign(x)
    """


@elementwise_function
def exp(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``e**x`` (integers: in the float numpy picks, float32 where that is float64).

    >>> y = await cuasync.exp(x)
    """


@elementwise_function
def log(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The natural logarithm.

    >>> y = await cuasync.log(x)
    """


@elementwise_function
def sin(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The sine (radians).

    >>> y = await cuasync.sin(x)
    """


@elementwise_function
def cos(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The cosine (radians).

    >>> y = await cuasync.cos(x)
    """


@elementwise_function
def tanh(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The hyperbolic tangent.

    >>> y = await cuasync.tanh(x)
    """


@elementwise_function
def sqrt(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The square root.

    >>> y = await cuasync.sqrt(x)
    """


@elementwise_function
def rsqrt(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``1 / sqrt(x)`` (dtype as ``sqrt``).

    >>> y = await cuasync.rsqrt(x)
    """


@elementwise_function
def expm1(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``exp(x) - 1``, accurate near 0.

    >>> y = await cuasync.expm1(x)
    """


@elementwise_function
def log1p(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``log(1 + x)``, accurate near 0.

    >>> y = await cuasync.log1p(x)
    """


@elementwise_function
def conj(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The complex conjugate (a real operand is returned as it is).

    >>> y = await cuasync.conj(x)
    """


@elementwise_function
def real(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The real part: float32 for complex64, float64 for complex128; a real x itself.

    >>> y = await cuasync.real(x)
    """


@elementwise_function
def imag(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The imaginary part (zeros of x's dtype for a real x).

    >>> y = await cuasync.imag(x)
    """


@elementwise_function
def angle(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The argument ``atan2(imag, real)`` in radians, in (-pi, pi] (the imaginary part's
    sign of zero picks -pi or pi on the negative reals); float of the part's dtype.

    >>> y = await cuasync.angle(x)
    """


@elementwise_function
def add(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 + x2`` (bool: logical or; integers wrap).

    >>> y = await cuasync.add(a, b)
    """


@elementwise_function
def subtract(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 - x2`` (not defined for two bools).

    >>> y = await cuasync.subtract(a, b)
    """


@elementwise_function
def multiply(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 * x2`` (bool: logical and; integers wrap).

    >>> y = await cuasync.multiply(a, b)
    """


@elementwise_function
def divide(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 / x2``, true division (integers give float32, the default float dtype).

    >>> y = await cuasync.divide(a, b)
    """


@elementwise_function
def remainder(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 % x2`` with the sign of ``x2`` (numpy's ``remainder``); ``x % 0`` is 0 for
    integers (numpy also warns) and NaN for floats.

    >>> y = await cuasync.remainder(a, b)
    """


@elementwise_function
def power(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 ** x2``; integers wrap, and a negative integer exponent gives 0, for base 0 too
    (1 or -1 for bases 1 and -1) where numpy raises.

    >>> y = await cuasync.power(a, b)
    """


@elementwise_function
def maximum(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The larger element (NaN propagates).

    >>> y = await cuasync.maximum(a, b)
    """


@elementwise_function
def minimum(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The smaller element (NaN propagates).

    >>> y = await cuasync.minimum(a, b)
    """


@elementwise_function
def equal(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 == x2`` as a bool tensor.

    >>> y = await cuasync.equal(a, b)
    """


@elementwise_function
def not_equal(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 != x2`` as a bool tensor.

    >>> y = await cuasync.not_equal(a, b)
    """


@elementwise_function
def less(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 < x2`` as a bool tensor.

    >>> y = await cuasync.less(a, b)
    """


@elementwise_function
def less_equal(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 <= x2`` as a bool tensor.

    >>> y = await cuasync.less_equal(a, b)
    """


@elementwise_function
def greater(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 > x2`` as a bool tensor.

    >>> y = await cuasync.greater(a, b)
    """


@elementwise_function
def greater_equal(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 >= x2`` as a bool tensor.

    >>> y = await cuasync.greater_equal(a, b)
    """


@elementwise_function
def where(condition: Operand, x1: Operand, x2: Operand, *, out: Tensor | None = None) -> TensorOp:
    """``x1`` where ``condition`` is true (non-zero), else ``x2``; dtype ``result_type(x1, x2)``.

    >>> relu = await cuasync.where(x > 0, x, 0.0)
    """


def clip(
    x: Operand, lo: Operand | None = None, hi: Operand | None = None, *, out: Tensor | None = None
) -> TensorOp:
    """``minimum(maximum(x, lo), hi)``, as ``numpy.clip``; one kernel. A bound that is
    None is not applied (the array API's ``clip(x, min=None, max=None)``).

    >>> y = await cuasync.clip(x, 0.0, 6.0)
    >>> r = await cuasync.clip(x, None, 6.0)           # only an upper bound
    """
    for arg, v in (("x", x), ("lo", lo), ("hi", hi)):
        if not is_operand(v) and not (v is None and arg != "x"):
            leaf(v, arg)  # raises the typed error naming the argument
    lo, hi = _reachable(x, lo, hi)
    bounds = {arg: v for arg, v in (("lo", lo), ("hi", hi)) if v is not None}
    if not bounds:  # nothing to clip: x's values, still a new tensor (or out=)
        if isinstance(x, TensorOp):  # (an op is read once: the other branch a zero)
            return where(True, x, False if x.dtype.kind == "b" else 0, out=out)
        return where(True, x, x, out=out)
    probe: Any = x
    try:
        if lo is not None:
            probe = _preview("maximum", {"x": probe, "lo": lo})
        if hi is not None:
            probe = _preview("minimum", {"x": probe, "hi": hi})
    except DTypeError as exc:  # (complex operands: no order, so no clip either)
        raise DTypeError(f"clip(x, lo, hi) is minimum(maximum(x, lo), hi): {exc}") from None
    except ScalarOverflowError as exc:  # (lo past x's largest value, hi below its least)
        raise ScalarOverflowError(
            f"clip(x, lo, hi) is minimum(maximum(x, lo), hi): {exc}"
        ) from None
    if out is not None:  # (checked before x is absorbed: an error leaves it usable)
        check_out(out, "clip", probe.shape, probe.dtype, probe.device)
        _check_overlap(out, {"x": x, "lo": lo, "hi": hi}, "clip")
    if lo is None or hi is None:  # one bound
        (bound,) = bounds.values()
        return (maximum if hi is None else minimum)(x, bound, out=out)
    return minimum(maximum(x, lo), hi, out=out)


def _reachable(x: Operand, lo: Operand | None, hi: Operand | None) -> tuple[Any, Any]:
    """``lo`` and ``hi``, less a Python int bound an integer ``x`` never passes (below
    its dtype's least value for ``lo``, above its largest for ``hi``): it clips nothing,
    and numpy 2 takes it (``clip(uint8_x, -1, 1000)``)."""
    dt = getattr(x, "dtype", None)
    if not isinstance(dt, np.dtype) or dt.kind not in "iu":
        return lo, hi
    info = np.iinfo(dt)
    if type(lo) is int and lo < info.min:
        lo = None
    if type(hi) is int and hi > info.max:
        hi = None
    return lo, hi


# The operators of Tensor and TensorOp (``a + b``, ``-a``, ``abs(a)``) call these; their
# module sits below this one (see operators.Implementation).
operators.implementation.is_operand = is_operand
operators.implementation.elementwise_apply = APPLY
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
