"""Products in the main namespace: the array API standard's ``vecdot``; numpy's ``dot``,
``inner`` and ``outer`` (on :func:`cuasync.tensordot` and the elementwise kernels).

>>> d = await cuasync.vecdot(a, b)              # sum(conj(a) * b, axis=-1), fused
>>> m = await cuasync.dot(x, y)                 # numpy's dot
>>> o = await cuasync.outer(u, v)               # u[:, None] * v[None, :]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._tensor import Tensor
from ..errors import ArgumentError, IndexOutOfRangeError, ShapeError
from . import elementwise
from .contract import dot_general, tensordot
from .on_output import viewing
from .reductions import reduce_op
from .tensorop import TensorOp, flattened
from .views import permute

__all__ = ["dot", "einsum", "inner", "outer", "vecdot"]


def _shape(x: Any, argument: str, name: str) -> tuple[int, ...]:
    if isinstance(x, (Tensor, TensorOp)):
        return x.shape
    if isinstance(x, np.ndarray):
        raise ArgumentError(
            f"{name}: {argument} is a numpy array; upload it first: await cuasync.from_host(array)"
        )
    raise ArgumentError(
        f"{name}: {argument} must be a cuasync.Tensor or TensorOp, got {type(x).__name__}"
    )


def vecdot(x1: Tensor | TensorOp, x2: Tensor | TensorOp, /, *, axis: int = -1) -> TensorOp:
    """The dot product of vectors along ``axis`` (the other axes broadcast):
    ``sum(conj(x1) * x2, axis)``, in the promoted dtype of ``x1`` and ``x2``, one fused
    kernel, as the array API standard's.

    >>> d = await cuasync.vecdot(a, b)             # (.., n) . (.., n) -> (..)
    """
    s1, s2 = _shape(x1, "x1", "vecdot"), _shape(x2, "x2", "vecdot")
    if not s1 or not s2:
        raise ShapeError(f"vecdot: x1 (shape {s1}) and x2 (shape {s2}) must have an axis each")
    ndim = max(len(s1), len(s2))
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ArgumentError(f"vecdot: axis must be an int, got {axis!r}"[:200])
    if not -min(len(s1), len(s2)) <= axis < 0 and not 0 <= axis < ndim:
        raise IndexOutOfRangeError(f"vecdot: axis {axis} is out of range for shapes {s1} and {s2}")
    a = int(axis) - ndim if axis >= 0 else int(axis)
    if s1[a] != s2[a]:
        raise ShapeError(f"vecdot: x1 (shape {s1}) and x2 (shape {s2}) differ along axis {axis}")
    left = elementwise.conj(x1) if x1.dtype.kind == "c" else x1
    product = elementwise.multiply(left, x2)
    return reduce_op("vecdot", "sum", product, a % ndim, dtype=product.dtype)


def _scalar_product(a: Any, b: Any) -> TensorOp | None:
    """``a * b`` where either is 0-d (numpy's dot and inner), else None."""
    if a.ndim == 0 or b.ndim == 0:
        return elementwise.multiply(a, b)
    return None


def dot(a: Tensor | TensorOp, b: Tensor | TensorOp) -> TensorOp:
    """numpy's ``dot``: 0-d operands multiply; otherwise the last axis of ``a`` is
    contracted with the second-to-last of ``b`` (its only one for a 1-d ``b``).

    >>> m = await cuasync.dot(x, y)                # (m, k) . (k, n) -> (m, n)
    >>> s = await cuasync.dot(u, v)                # 1-d . 1-d -> 0-d
    """
    _shape(a, "a", "dot"), _shape(b, "b", "dot")
    scalar = _scalar_product(a, b)
    if scalar is not None:
        return scalar
    return tensordot(a, b, axes=([a.ndim - 1], [max(b.ndim - 2, 0)]))


def inner(a: Tensor | TensorOp, b: Tensor | TensorOp) -> TensorOp:
    """numpy's ``inner``: the last axes of ``a`` and ``b`` contracted (0-d: multiply).

    >>> g = await cuasync.inner(x, y)              # (m, k), (n, k) -> (m, n)
    """
    _shape(a, "a", "inner"), _shape(b, "b", "inner")
    scalar = _scalar_product(a, b)
    if scalar is not None:
        return scalar
    return tensordot(a, b, axes=([a.ndim - 1], [b.ndim - 1]))


def outer(a: Tensor, b: Tensor) -> TensorOp:
    """numpy's ``outer``: ``a`` and ``b`` flattened, ``a[:, None] * b[None, :]`` (each
    product rounded once, as numpy's).

    >>> o = await cuasync.outer(u, v)              # (m,), (n,) -> (m, n)
    """
    columns = []
    for v, arg, shape in ((a, "a", (-1, 1)), (b, "b", (1, -1))):
        _shape(v, arg, "outer")
        if not isinstance(v, Tensor):
            raise ArgumentError(f"outer: {arg} must be a cuasync.Tensor (await the op first)")
        columns.append(flattened(v).reshape(shape))  # (a view, or a copy where none is)
    return elementwise.multiply(columns[0], columns[1])


def _parse(subscripts: Any, count: int) -> tuple[list[str], str]:
    """The input terms and the output term of ``subscripts`` (numpy's implicit output:
    the letters used once, sorted), or an ArgumentError naming what is not supported."""
    if not isinstance(subscripts, str):
        raise ArgumentError(f"einsum: subscripts must be a str, got {type(subscripts).__name__}")
    spec = subscripts.replace(" ", "")
    if "." in spec:
        raise ArgumentError("einsum: ellipses ('...') are not supported; name every axis")
    lhs, arrow, out = spec.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise ArgumentError(f"einsum: {subscripts!r} names {len(terms)} operands, {count} given")
    letters = "".join(terms)
    if not all(c.isalpha() for c in letters + out):
        raise ArgumentError(f"einsum: {subscripts!r} has characters other than letters")
    if not arrow:
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for term in [*terms, out]:
        if len(set(term)) != len(term):
            raise ArgumentError(
                f"einsum: {term!r} repeats a letter (a diagonal or trace), which cuasync's "
                "einsum does not take; use cuasync.diagonal first"
            )
    missing = set(out) - set(letters)
    if missing:
        raise ArgumentError(f"einsum: the output names {sorted(missing)}, no input has them")
    return terms, out


def _summed(x: Any, term: str, keep: set[str]) -> tuple[Any, str]:
    """``x`` with the axes of ``term`` not in ``keep`` summed away (its dtype kept)."""
    drop = tuple(j for j, c in enumerate(term) if c not in keep)
    if not drop:
        return x, term
    rest = "".join(c for c in term if c in keep)
    return reduce_op("einsum", "sum", x, drop, dtype=x.dtype), rest


def _permuted(op: TensorOp, have: str, want: str) -> TensorOp:
    """``op``'s output with its axes (named by ``have``) in the order of ``want``: a view."""
    if have == want:
        return op

    perm = tuple(have.index(c) for c in want)
    return viewing(op, "einsum", lambda t: permute(t, perm, "einsum"))


def einsum(subscripts: str, *operands: Tensor | TensorOp) -> TensorOp:
    """numpy's ``einsum`` for one or two operands, through :func:`cuasync.dot_general`
    and the reductions: ``"ij,jk->ik"``, batches (``"bij,bjk->bik"``), outer products,
    sums over an axis (``"ij->i"``), transposes (``"ij->ji"``; the output is then a
    view). Not taken (ArgumentError): ellipses, a letter repeated in one term (diagonals,
    traces), three or more operands (chain two-operand calls).

    >>> c = await cuasync.einsum("bij,bjk->bik", a, b)
    >>> r = await cuasync.einsum("ij->i", x)           # row sums
    """
    if not 1 <= len(operands) <= 2:
        raise ArgumentError(
            f"einsum: takes one or two operands, got {len(operands)}; chain two-operand calls"
        )
    terms, out = _parse(subscripts, len(operands))
    for v, term in zip(operands, terms, strict=True):
        shape = _shape(v, "operands", "einsum")
        if len(shape) != len(term):
            raise ShapeError(
                f"einsum: {term!r} names {len(term)} axes, the operand has shape {shape}"
            )
    if len(operands) == 1:
        (x,), (term,) = operands, terms
        reduced, have = _summed(x, term, set(out))
        if reduced is x:  # a transpose or a copy
            if not isinstance(x, Tensor):
                return _permuted(x, have, out)
            return _permuted(x.dup(), have, out)
        return _permuted(reduced, have, out)
    a, b = operands
    ta, tb = terms
    a, ta = _summed(a, ta, set(tb) | set(out))
    b, tb = _summed(b, tb, set(ta) | set(out))
    for c in set(ta) & set(tb):
        da, db = a.shape[ta.index(c)], b.shape[tb.index(c)]
        if da != db:
            raise ShapeError(
                f"einsum: axis {c!r} has length {da} in one operand, {db} in the other"
            )
    batch = [c for c in ta if c in tb and c in out]
    contract = [c for c in ta if c in tb and c not in out]
    free_a = [c for c in ta if c not in tb]
    free_b = [c for c in tb if c not in ta]
    if not batch and not contract and (a.ndim == 0 or b.ndim == 0):
        product = elementwise.multiply(a, b)
        return _permuted(product, ta + tb, out)

    result = dot_general(
        a,
        b,
        contracting=([ta.index(c) for c in contract], [tb.index(c) for c in contract]),
        batch=([ta.index(c) for c in batch], [tb.index(c) for c in batch]),
    )
    return _permuted(result, "".join(batch + free_a + free_b), out)
