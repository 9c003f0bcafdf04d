"""Arithmetic, comparison and ``@`` operators of :class:`~cuasync.Tensor` and ``TensorOp``.

A mixin, so that type checkers see them: each operator builds a (fused) ``TensorOp``;
an operand it cannot take gives ``NotImplemented``. ``__eq__`` builds an op too, so the
mixin keeps identity hashing (``asyncio.gather(a * b, c * d)`` keys a dict by them).

>>> op = (a * 2.0 + b) < c     # a TensorOp of bools; nothing runs yet
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .tensorop import TensorOp


def _ew() -> Any:
    from . import elementwise  # the operators' implementation imports Tensor: import late

    return elementwise


class TensorOperators:
    """``+ - * / % ** @`` (and reflected), unary ``-``, ``abs()`` and comparisons."""

    __slots__ = ()
    __array_ufunc__ = None  # numpy defers to these operators: ``np.float32(2) * t`` works
    __hash__ = object.__hash__  # identity, although ``__eq__`` builds an op

    def _binary(self, name: str, other: Any, reflected: bool = False) -> Any:
        ew = _ew()
        if not ew.is_operand(other):
            return NotImplemented
        fn = getattr(ew, name)
        return fn(other, self) if reflected else fn(self, other)

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
        from . import contract

        if not contract.is_operand(other):
            return NotImplemented
        return contract.matmul(self, other)  # type: ignore[arg-type]

    def __rmatmul__(self, other: Any) -> TensorOp:
        from . import contract

        if not contract.is_operand(other):
            return NotImplemented
        return contract.matmul(other, self)  # type: ignore[arg-type]

    def __neg__(self) -> TensorOp:
        return _ew().negative(self)

    def __abs__(self) -> TensorOp:
        return _ew().abs(self)
