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
    #: ``@``, and whether a value can be its operand.
    matmul: Callable[[Any, Any], TensorOp]
    is_matmul_operand: Callable[[Any], bool]
    #: The names ``cuasync`` exports (``np.sum(t)`` then suggests ``cuasync.sum``).
    public_names: frozenset[str] = frozenset()
    #: The ``cuasync`` module (the array API namespace) and its version check.
    namespace: ModuleType
    check_api_version: Callable[[str | None], None]


implementation = Implementation()


class TensorOperators(ArrayMethods):
    """``+ - * / // % ** @ & | ^ << >>`` (and reflected), unary ``- + ~``, ``abs()`` and
    comparisons. No in-place forms: ``x += y`` rebinds ``x`` to the op ``x + y`` (a lazy
    result, not a write into ``x``; write in place with ``cuasync.add(x, y, out=x)``)."""

    __slots__ = ()
    __hash__ = object.__hash__  # identity, although ``__eq__`` builds an op

    def _binary(self, name: str, other: Any, reflected: bool = False) -> Any:
        impl = implementation
        if not impl.is_operand(other):
            if isinstance(other, np.ndarray):
                if other.ndim:
                    raise _host_array(name, other, self)
                return self._binary(name, other[()], reflected)  # a 0-d array: its scalar
            return NotImplemented
        fn = impl.elementwise[name]
        return fn(other, self) if reflected else fn(self, other)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """``np.float32(2) * t`` builds ``2 * t``; a host array or a numpy function raises
        :class:`~cuasync.errors.HostArrayError` with what to do instead."""
        name = _UFUNC_OPS.get(ufunc.__name__)
        if method == "__call__" and name is not None and not kwargs and len(inputs) == 2:
            a, b = inputs  # (numpy hands a scalar over as a 0-d array: _binary takes those)
            if a is self:
                return self._binary(name, b)
            if b is self:
                return self._binary(name, a, reflected=True)
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

    def __add__(self, other: Any) -> TensorOp:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> TensorOp:
        return self._binary("add", other, True)

    def __sub__(self, other: Any) -> TensorOp:
        return self._binary("subtract", other)

    def __rsub__(self, other: Any) -> TensorOp:
        return self._binary("subtract", other, True)

    def __mul__(self, other: Any) -> TensorOp:
        return self._binary("multiply", other)

    def __rmul__(self, other: Any) -> TensorOp:
        return self._binary("multiply", other, True)

    def __truediv__(self, other: Any) -> TensorOp:
        return self._binary("divide", other)

    def __rtruediv__(self, other: Any) -> TensorOp:
        return self._binary("divide", other, True)

    def __mod__(self, other: Any) -> TensorOp:
        return self._binary("remainder", other)

    def __rmod__(self, other: Any) -> TensorOp:
        return self._binary("remainder", other, True)

    def __floordiv__(self, other: Any) -> TensorOp:
        return self._binary("floor_divide", other)

    def __rfloordiv__(self, other: Any) -> TensorOp:
        return self._binary("floor_divide", other, True)

    def __and__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_and", other)

    def __rand__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_and", other, True)

    def __or__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_or", other)

    def __ror__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_or", other, True)

    def __xor__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_xor", other)

    def __rxor__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_xor", other, True)

    def __lshift__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_left_shift", other)

    def __rlshift__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_left_shift", other, True)

    def __rshift__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_right_shift", other)

    def __rrshift__(self, other: Any) -> TensorOp:
        return self._binary("bitwise_right_shift", other, True)

    def __pow__(self, other: Any) -> TensorOp:
        return self._binary("power", other)

    def __rpow__(self, other: Any) -> TensorOp:
        return self._binary("power", other, True)

    def __eq__(self, other: object) -> TensorOp:  # type: ignore[override]
        return self._binary("equal", other)

    def __ne__(self, other: object) -> TensorOp:  # type: ignore[override]
        return self._binary("not_equal", other)

    def __lt__(self, other: Any) -> TensorOp:
        return self._binary("less", other)

    def __le__(self, other: Any) -> TensorOp:
        return self._binary("less_equal", other)

    def __gt__(self, other: Any) -> TensorOp:
        return self._binary("greater", other)

    def __ge__(self, other: Any) -> TensorOp:
        return self._binary("greater_equal", other)

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
