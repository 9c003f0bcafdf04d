"""The array API's elementwise functions that numpy's everyday names lacked here (issue 34).

Each is an op of the one elementwise machinery (:mod:`cuasync._ops.expr` resolves its
dtypes as numpy does, :mod:`cuasync._ops.codegen` emits its CUDA C++ and numpy twin), so
it fuses with the others and takes tensors, views, ``TensorOp`` s and Python scalars
(weak) like them, and ``out=``. Named as the standard names them; numpy's names
(``arccos``, ``arctan2``, ``invert``, ``left_shift``, ...) are aliases of the same
functions.

Beyond the standard, as numpy: the float functions take integers (computed in the
default float dtype, float32, as ``exp`` does), the bitwise and logical ones take bools,
``square`` takes bool. Complex operands: ``square``, ``reciprocal``, ``round``,
``isfinite``, ``isinf``, ``isnan``, ``positive``, ``log2``, ``log10``, and the inverse
trigonometric and hyperbolic functions with numpy's branch cuts (``asin(2+0j)`` and
``asin(2-0j)`` on either side of the cut), and ``tan``.

>>> y = await cuasync.hypot(cuasync.floor(a), b)       # one kernel
>>> m = await cuasync.logical_and(cuasync.isfinite(a), a > 0)
"""

from __future__ import annotations

from .._tensor import Tensor
from . import operators
from .elementwise import applying, elementwise_function
from .tensorop import Operand, TensorOp

__all__ = [
    "acos",
    "acosh",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "asin",
    "asinh",
    "atan",
    "atan2",
    "atanh",
    "bitwise_and",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "ceil",
    "copysign",
    "cosh",
    "floor",
    "floor_divide",
    "hypot",
    "invert",
    "isfinite",
    "isinf",
    "isnan",
    "left_shift",
    "log10",
    "log2",
    "logaddexp",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "nextafter",
    "positive",
    "pow",
    "reciprocal",
    "right_shift",
    "round",
    "signbit",
    "sinh",
    "square",
    "tan",
    "trunc",
]


@elementwise_function
def acos(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The inverse cosine, in [0, pi] (NaN outside [-1, 1]).

    >>> y = await cuasync.acos(x)
    """


@elementwise_function
def acosh(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The inverse hyperbolic cosine (NaN below 1).

    >>> y = await cuasync.acosh(x)
    """


@elementwise_function
def asin(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The inverse sine, in [-pi/2, pi/2] (NaN outside [-1, 1]).

    >>> y = await cuasync.asin(x)
    """


@elementwise_function
def asinh(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The inverse hyperbolic sine.

    >>> y = await cuasync.asinh(x)
    """


@elementwise_function
def atan(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The inverse tangent, in [-pi/2, pi/2].

    >>> y = await cuasync.atan(x)
    """


@elementwise_function
def atanh(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The inverse hyperbolic tangent (±inf at ±1, NaN outside [-1, 1]).

    >>> y = await cuasync.atanh(x)
    """


@elementwise_function
def cosh(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The hyperbolic cosine.

    >>> y = await cuasync.cosh(x)
    """


@elementwise_function
def sinh(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The hyperbolic sine.

    >>> y = await cuasync.sinh(x)
    """


@elementwise_function
def tan(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The tangent (radians).

    >>> y = await cuasync.tan(x)
    """


@elementwise_function
def log2(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The base-2 logarithm (complex: ``log(x) * log2(e)``, as numpy).

    >>> y = await cuasync.log2(x)
    """


@elementwise_function
def log10(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The base-10 logarithm (complex: ``log(x) * log10(e)``, as numpy).

    >>> y = await cuasync.log10(x)
    """


@elementwise_function
def ceil(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The smallest integer value not less than each element (integers and bools: ``x``
    itself, in its dtype).

    >>> y = await cuasync.ceil(x)
    """


@elementwise_function
def floor(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The largest integer value not greater than each element (integers and bools:
    ``x`` itself, in its dtype).

    >>> y = await cuasync.floor(x)
    """


@elementwise_function
def trunc(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Each element rounded toward zero (integers and bools: ``x`` itself).

    >>> y = await cuasync.trunc(x)
    """


@elementwise_function
def round(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Each element rounded to the nearest integer value, halves to even (``round(2.5)``
    is 2.0); complex: each part; integers and bools: ``x`` itself.

    >>> y = await cuasync.round(x)
    """


@elementwise_function
def isfinite(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Whether each element is finite (not NaN or ±inf; complex: both parts); a bool
    tensor, all true for integers.

    >>> y = await cuasync.isfinite(x)
    """


@elementwise_function
def isinf(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Whether each element is +inf or -inf (complex: either part); a bool tensor.

    >>> y = await cuasync.isinf(x)
    """


@elementwise_function
def isnan(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Whether each element is NaN (complex: either part); a bool tensor.

    >>> y = await cuasync.isnan(x)
    """


@elementwise_function
def signbit(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Whether each element's sign bit is set (true for -0.0 and a negative NaN); a bool
    tensor.

    >>> y = await cuasync.signbit(x)
    """


@elementwise_function
def positive(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``+x``: the values of ``x`` in a new tensor (not defined for bool).

    >>> y = await cuasync.positive(x)
    """


@elementwise_function
def square(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x * x`` (integers wrap; bool gives int8, as numpy).

    >>> y = await cuasync.square(x)
    """


@elementwise_function
def reciprocal(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``1 / x`` (integers: in the default float dtype, as ``divide(1, x)`` would; ``1 /
    ±0`` is ±inf).

    >>> y = await cuasync.reciprocal(x)
    """


@elementwise_function
def bitwise_invert(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``~x``: each bit flipped (integers); logical not for bool.

    >>> y = await cuasync.bitwise_invert(i)
    """


@elementwise_function
def logical_not(x: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``not x`` of each element's truth value (non-zero, NaN included, is true); a bool
    tensor.

    >>> y = await cuasync.logical_not(m)
    """


@elementwise_function
def atan2(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The angle of the point (``x2``, ``x1``), in [-pi, pi], with the signs of zeros
    and infinities as C's ``atan2`` (``atan2(+0.0, -0.0)`` is pi).

    >>> y = await cuasync.atan2(a, b)
    """


@elementwise_function
def copysign(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``|x1|`` with the sign bit of ``x2`` (``copysign(1.0, -0.0)`` is -1.0).

    >>> y = await cuasync.copysign(a, b)
    """


@elementwise_function
def hypot(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``sqrt(x1**2 + x2**2)`` without overflow or underflow on the way (±inf with a NaN
    is +inf).

    >>> y = await cuasync.hypot(a, b)
    """


@elementwise_function
def logaddexp(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``log(exp(x1) + exp(x2))`` without overflow (``logaddexp(inf, inf)`` is inf).

    >>> y = await cuasync.logaddexp(a, b)
    """


@elementwise_function
def nextafter(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """The next representable value after ``x1`` toward ``x2``, in the result's own
    precision (float16 and bfloat16 step their own bits); ``x2`` where they are equal.

    >>> y = await cuasync.nextafter(a, b)
    """


@elementwise_function
def floor_divide(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 // x2``, rounded toward -inf (numpy's: integer ``x // 0`` is 0 and ``MIN //
    -1`` wraps to MIN; float ``x // 0`` is ``x / 0``).

    >>> y = await cuasync.floor_divide(a, b)
    """


@elementwise_function
def bitwise_and(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 & x2`` (integers and bools).

    >>> y = await cuasync.bitwise_and(i, j)
    """


@elementwise_function
def bitwise_or(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 | x2`` (integers and bools).

    >>> y = await cuasync.bitwise_or(i, j)
    """


@elementwise_function
def bitwise_xor(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 ^ x2`` (integers and bools).

    >>> y = await cuasync.bitwise_xor(i, j)
    """


@elementwise_function
def bitwise_left_shift(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 << x2`` (integers; wraps; a shift by the width or more, or by a negative
    amount, gives 0, as numpy).

    >>> y = await cuasync.bitwise_left_shift(i, 3)
    """


@elementwise_function
def bitwise_right_shift(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 >> x2``, arithmetic for signed integers (a shift by the width or more gives
    0, or -1 for a negative ``x1``, as numpy).

    >>> y = await cuasync.bitwise_right_shift(i, 3)
    """


@elementwise_function
def logical_and(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 and x2`` of each pair's truth values; a bool tensor.

    >>> y = await cuasync.logical_and(m, n)
    """


@elementwise_function
def logical_or(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 or x2`` of each pair's truth values; a bool tensor.

    >>> y = await cuasync.logical_or(m, n)
    """


@elementwise_function
def logical_xor(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """Whether exactly one of each pair is true; a bool tensor.

    >>> y = await cuasync.logical_xor(m, n)
    """


# numpy's names for the same functions
arccos = acos
arccosh = acosh
arcsin = asin
arcsinh = asinh
arctan = atan
arctan2 = atan2
arctanh = atanh
invert = bitwise_invert
left_shift = bitwise_left_shift
right_shift = bitwise_right_shift


@applying("power")
def pow(x1: Operand, x2: Operand, /, *, out: Tensor | None = None) -> TensorOp:
    """``x1 ** x2``: the array API's name of :func:`cuasync.power` (the same op).

    >>> y = await cuasync.pow(a, 2.0)
    """


# The operators of Tensor and TensorOp beyond numpy's everyday ones (``//``, ``&``, ``|``,
# ``^``, ``<<``, ``>>``, unary ``+`` and ``~``) call these (see operators.Implementation).
operators.implementation.elementwise.update(
    floor_divide=floor_divide,
    bitwise_and=bitwise_and,
    bitwise_or=bitwise_or,
    bitwise_xor=bitwise_xor,
    bitwise_left_shift=bitwise_left_shift,
    bitwise_right_shift=bitwise_right_shift,
    positive=positive,
    bitwise_invert=bitwise_invert,
)
