"""Arithmetic, comparison and ``@`` operators of :class:`~cuasync.Tensor` and ``TensorOp``.

A mixin, so that type checkers see them: each operator builds a (fused) ``TensorOp``;
an operand it cannot take gives ``NotImplemented``, and a numpy array raises
:class:`~cuasync.errors.HostArrayError` (upload it first). ``__eq__`` builds an op too,
so the mixin keeps identity hashing (``asyncio.gather(a * b, c * d)`` keys a dict by them).

numpy meets these objects through ``__array_ufunc__`` and ``__array_function__``: a
numpy scalar operand builds the op as a Python number would (``np.float32(2) * t``);
everything else (``ndarray + t``, ``np.exp(t)``, ``np.sum(t)``) raises ``HostArrayError``
saying what to call instead.

>>> op = (a * 2.0 + b) < c     # a TensorOp of bools; nothing runs yet
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .._native import NATIVE
from ..errors import HostArrayError
from .methods import ArrayMethods

if TYPE_CHECKING:
    from .tensorop import TensorOp

#: numpy ufunc name -> the operator's op, for a numpy scalar on either side.
_UFUNC_OPS = {
    name: name
    for name in (
        "add", "subtract", "multiply", "divide", "remainder", "power", "equal", "not_equal",
        "less", "less_equal", "greater", "greater_equal",
    )
} | {
    "true_divide": "divide", "floor_divide": "floor_divide", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
    "left_shift": "bitwise_left_shift", "right_shift": "bitwise_right_shift",
}  # fmt: skip


class Implementation:
    """The functions behind the operators, owned by modules above this one.

    ``Tensor`` and ``TensorOp`` inherit the operators, and the functions that implement
    them build on both, so this module cannot import them: :mod:`.elementwise`,
    :mod:`.elementwise_api` and :mod:`.contract` fill these entries when they are
    imported (``cuasync/__init__.py`` imports them before any tensor exists), and
    ``cuasync/__init__.py`` fills the namespace entries (``__array_namespace__``, the
    hints of :class:`~cuasync.errors.HostArrayError`).
    """

    #: ``add``, ``negative``, ``floor_divide``, ... by name (numpy's everyday functions
    #: and the array API's), and whether a value can be their operand.
    elementwise: dict[str, Callable[..., TensorOp]]
    is_operand: Callable[[Any], bool]
    #: The builder the binary operators apply their ops with (``elementwise.APPLY``, an
    #: ``ElementwiseApply``).
    elementwise_apply: Any
    #: ``@``, and whether a value can be its operand.
    matmul: Callable[[Any, Any], TensorOp]
    is_matmul_operand: Callable[[Any], bool]
    #: The names ``cuasync`` exports (``np.sum(t)`` then suggests ``cuasync.sum``).
    public_names: frozenset[str] = frozenset()
    #: The ``cuasync`` module (the array API namespace) and its version check.
    namespace: ModuleType
    check_api_version: Callable[[str | None], None]


implementation = Implementation()


def binary(self: Any, name: str, other: Any, reflected: bool) -> Any:
    """The elementwise op ``name`` of ``self`` and ``other`` (``other`` first where
    ``reflected``), as its function builds it; ``NotImplemented`` for what it cannot take,
    :class:`~cuasync.errors.HostArrayError` for a host array (a 0-d one: its scalar).
    The native operators call it for operands they do not take as they are."""
    impl = implementation
    if not impl.is_operand(other):
        if isinstance(other, np.ndarray):
            if other.ndim:
                raise _host_array(name, other, self)
            return binary(self, name, other[()], reflected)  # a 0-d array: its scalar
        return NotImplemented
    fn = impl.elementwise[name]
    return fn(other, self) if reflected else fn(self, other)


def _operator(name: str, reflected: bool) -> Any:
    """The native binary operator applying ``name`` (see :class:`TensorOperators`)."""
    return NATIVE.Operator(name, reflected, implementation, binary)


class TensorOperators(ArrayMethods):
    """``+ - * / // % ** @ & | ^ << >>`` (and reflected), unary ``- + ~``, ``abs()`` and
    comparisons. No in-place forms: ``x += y`` rebinds ``x`` to the op ``x + y`` (a lazy
    result, not a write into ``x``; write in place with ``cuasync.add(x, y, out=x)``)."""

    __slots__ = ()
    __hash__ = object.__hash__  # identity, although ``__eq__`` builds an op

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """``np.float32(2) * t`` builds ``2 * t``; a host array or a numpy function raises
        :class:`~cuasync.errors.HostArrayError` with what to do instead."""
        name = _UFUNC_OPS.get(ufunc.__name__)
        if method == "__call__" and name is not None and not kwargs and len(inputs) == 2:
            a, b = inputs  # (numpy hands a scalar over as a 0-d array: binary takes those)
            if a is self:
                return binary(self, name, b, False)
            if b is self:
                return binary(self, name, a, True)
        host = next((x for x in inputs if isinstance(x, np.ndarray) and x.ndim), None)
        if host is not None:
            raise _host_array(ufunc.__name__, host, self)
        raise _numpy_function(ufunc.__name__, self)

    def __array_namespace__(self, /, *, api_version: str | None = None) -> ModuleType:
        """The array API namespace of the tensor: the ``cuasync`` module (``api_version``
        None, "2023.12" or "2024.12"; another raises :class:`~cuasync.errors.ArgumentError`,
        a ValueError).

        >>> xp = x.__array_namespace__()
        >>> y = await xp.sqrt(xp.abs(x))
        """
        implementation.check_api_version(api_version)
        return implementation.namespace

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        """``np.sum(t)``, ``np.concatenate([t, u])``: refused, naming cuasync's function."""
        raise _numpy_function(func.__name__, self)

    # The binary operators: native (``reactor/python/apply.c``'s ``Operator``), each
    # building its op through ``implementation.elementwise_apply`` for a tensor, a
    # TensorOp or a Python number, and through :func:`binary` for anything else.
    if TYPE_CHECKING:

        def __add__(self, other: Any) -> TensorOp: ...
        def __radd__(self, other: Any) -> TensorOp: ...
        def __sub__(self, other: Any) -> TensorOp: ...
        def __rsub__(self, other: Any) -> TensorOp: ...
        def __mul__(self, other: Any) -> TensorOp: ...
        def __rmul__(self, other: Any) -> TensorOp: ...
        def __truediv__(self, other: Any) -> TensorOp: ...
        def __rtruediv__(self, other: Any) -> TensorOp: ...
        def __mod__(self, other: Any) -> TensorOp: ...
        def __rmod__(self, other: Any) -> TensorOp: ...
        def __floordiv__(self, other: Any) -> TensorOp: ...
        def __rfloordiv__(self, other: Any) -> TensorOp: ...
        def __and__(self, other: Any) -> TensorOp: ...
        def __rand__(self, other: Any) -> TensorOp: ...
        def __or__(self, other: Any) -> TensorOp: ...
        def __ror__(self, other: Any) -> TensorOp: ...
        def __xor__(self, other: Any) -> TensorOp: ...
        def __rxor__(self, other: Any) -> TensorOp: ...
        def __lshift__(self, other: Any) -> TensorOp: ...
        def __rlshift__(self, other: Any) -> TensorOp: ...
        def __rshift__(self, other: Any) -> TensorOp: ...
        def __rrshift__(self, other: Any) -> TensorOp: ...
        def __pow__(self, other: Any) -> TensorOp: ...
        def __rpow__(self, other: Any) -> TensorOp: ...
        def __eq__(self, other: object) -> TensorOp: ...  # type: ignore[override]
        def __ne__(self, other: object) -> TensorOp: ...  # type: ignore[override]
        def __lt__(self, other: Any) -> TensorOp: ...
        def __le__(self, other: Any) -> TensorOp: ...
        def __gt__(self, other: Any) -> TensorOp: ...
        def __ge__(self, other: Any) -> TensorOp: ...
    else:
        __add__ = _operator("add", False)
        __radd__ = _operator("add", True)
        __sub__ = _operator("subtract", False)
        __rsub__ = _operator("subtract", True)
        __mul__ = _operator("multiply", False)
        __rmul__ = _operator("multiply", True)
        __truediv__ = _operator("divide", False)
        __rtruediv__ = _operator("divide", True)
        __mod__ = _operator("remainder", False)
        __rmod__ = _operator("remainder", True)
        __floordiv__ = _operator("floor_divide", False)
        __rfloordiv__ = _operator("floor_divide", True)
        __and__ = _operator("bitwise_and", False)
        __rand__ = _operator("bitwise_and", True)
        __or__ = _operator("bitwise_or", False)
        __ror__ = _operator("bitwise_or", True)
        __xor__ = _operator("bitwise_xor", False)
        __rxor__ = _operator("bitwise_xor", True)
        __lshift__ = _operator("bitwise_left_shift", False)
        __rlshift__ = _operator("bitwise_left_shift", True)
        __rshift__ = _operator("bitwise_right_shift", False)
        __rrshift__ = _operator("bitwise_right_shift", True)
        __pow__ = _operator("power", False)
        __rpow__ = _operator("power", True)
        __eq__ = _operator("equal", False)
        __ne__ = _operator("not_equal", False)
        __lt__ = _operator("less", False)
        __le__ = _operator("less_equal", False)
        __gt__ = _operator("greater", False)
        __ge__ = _operator("greater_equal", False)

    def __matmul__(self, other: Any) -> TensorOp:
        if not implementation.is_matmul_operand(other):
            return NotImplemented
        return implementation.matmul(self, other)

    def __rmatmul__(self, other: Any) -> TensorOp:
        if not implementation.is_matmul_operand(other):
            return NotImplemented
        return implementation.matmul(other, self)

    def __neg__(self) -> TensorOp:
        return implementation.elementwise["negative"](self)

    def __abs__(self) -> TensorOp:
        return implementation.elementwise["abs"](self)

    def __pos__(self) -> TensorOp:
        return implementation.elementwise["positive"](self)

    def __invert__(self) -> TensorOp:
        return implementation.elementwise["bitwise_invert"](self)


def _host_array(name: str, array: np.ndarray, device: Any) -> HostArrayError:
    return HostArrayError(
        f"{name}: a numpy array (shape {array.shape}, dtype {array.dtype}) and a device "
        f"{type(device).__name__} cannot be mixed: upload the array first, "
        "`x = await cuasync.from_host(array)` (or copy the device data to the host, "
        "`await t.to_host()`)"
    )


def _numpy_function(name: str, device: Any) -> HostArrayError:
    ours = name in implementation.public_names
    instead = f"use cuasync.{name}(...) on the device, or " if ours else ""
    return HostArrayError(
        f"numpy.{name}() cannot take a device {type(device).__name__}: {instead}copy it to "
        "the host first (`await t.to_host()`)"
    )
