"""Functions whose output shape depends on the data: ``nonzero`` (and numpy's one-argument
``where(condition)``, the same) and the array API standard's ``unique_values``,
``unique_counts``, ``unique_inverse``, ``unique_all``.

The contract: the output's shape is unknown until the data is known, so these are
coroutine functions, not lazy ops: ``await cuasync.nonzero(x)``. Each enqueues its
kernels (a scan of the nonzero flags, or a sort and a scan), awaits the count they
produce (a 0-d readback, awaited like any op: the event loop is never blocked, and
nothing waits on the host while the kernels run), then enqueues the kernels that write
outputs of that length, and awaits them. They cannot be fused into other expressions,
chained with ``then()``, or captured in a graph; every other op stays lazy.

NaNs are distinct in ``unique_*`` (NaN != NaN, as the standard says); -0.0 and 0.0 are
one value. Indices are int64. Complex values are in numpy's order: those without a NaN
part lexicographically (real part, then imaginary), then those whose imaginary part is
NaN (by real part), whose real part is NaN (by imaginary part), and both; a complex value
with a NaN part is distinct from every other, as a real NaN is.

>>> rows, cols = await cuasync.nonzero(m)
>>> rows, cols = await cuasync.where(m > 0.5)     # numpy's one-argument where
>>> values, counts = await cuasync.unique_counts(x)
"""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from typing import Any, NamedTuple, overload

import numpy as np

from .._launch.kernel import Kernel
from .._tensor import Tensor
from .._transfers.copies import empty
from ..errors import ArgumentError
from . import elementwise, elementwise_api
from .creation import full
from .joins import concatenate, take
from .scan import cumsum
from .sorting import _check_sortable, argsort, sort
from .tensorop import Operand, TensorOp, flattened
from .views import _tensor

__all__ = [
    "UniqueAll",
    "UniqueCounts",
    "UniqueInverse",
    "nonzero",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "where",
]


class UniqueAll(NamedTuple):
    """:func:`unique_all`'s result: the sorted unique ``values``, the flat index of the
    first occurrence of each (``indices``), the index of each element's value in
    ``values`` (``inverse_indices``, of ``x``'s shape) and the ``counts``."""

    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCounts(NamedTuple):
    """:func:`unique_counts`'s result: the sorted unique ``values`` and their ``counts``."""

    values: Tensor
    counts: Tensor


class UniqueInverse(NamedTuple):
    """:func:`unique_inverse`'s result: the sorted unique ``values`` and, of ``x``'s
    shape, the index of each element's value in them (``inverse_indices``)."""

    values: Tensor
    inverse_indices: Tensor


# -- the compaction kernel ----------------------------------------------------------------------
def compact_body(nd: int) -> str:
    """The CUDA C++ of ``ca_compact``: for each ``i`` whose inclusive count ``pos[i]``
    steps up, its coordinates over ``nd`` dims (C order) at row ``pos[i] - 1`` of
    ``coords`` (``nd`` rows of ``n``)."""
    dims = ", ".join(f"long long d{j}" for j in range(nd))
    unravel = []
    for j in reversed(range(nd)):
        unravel.append(f"        coords[{j} * n + w] = r % d{j}; r /= d{j};")
    return "\n".join(
        [
            "__global__ void ca_compact(long long* coords, const long long* pos, long long N, "
            f"long long n, {dims}) {{",
            "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < N;",
            "         i += (long long)gridDim.x * blockDim.x) {",
            "        long long p = pos[i], prev = i ? pos[i - 1] : 0;",
            "        if (p == prev) continue;",
            "        long long w = p - 1, r = i;",
            *unravel,
            "    }",
            "}",
        ]
    )


def _compact_twin(coords: np.ndarray, pos: np.ndarray, n_all: Any, n: Any, *dims: Any) -> None:
    steps = np.diff(pos, prepend=0) != 0
    where = np.nonzero(steps)[0]
    shape = tuple(int(d) for d in dims)
    coords.reshape(len(shape), int(n))[...] = np.stack(np.unravel_index(where, shape))


_kernels: dict[int, Any] = {}
_lock = threading.Lock()


def compact_kernel(nd: int) -> Any:
    """The compiled-once ``ca_compact`` over ``nd`` dims."""

    with _lock:
        found = _kernels.get(nd)
        if found is None:
            found = _kernels[nd] = Kernel(compact_body(nd), "ca_compact", emulate=_compact_twin)
    return found


async def _positions(flags: Any) -> tuple[Tensor, int]:
    """The inclusive running count of ``flags`` flattened (C order), and its total,
    read back (awaited)."""
    pos = await cumsum(flags, dtype="int64")
    total = int(await pos[pos.shape[0] - 1].item()) if pos.shape[0] else 0
    return pos, total


async def _compact(pos: Tensor, total: int, shape: tuple[int, ...]) -> Tensor:
    """``(len(shape), total)`` int64: the coordinates where ``pos`` steps up."""

    coords = await empty((len(shape), total), dtype="int64")
    if total:
        n = pos.shape[0]
        grid = max(1, min(-(-n // 256), 1 << 16))
        await compact_kernel(len(shape)).launch(coords, pos, n, total, *shape, grid=grid, block=256)
    return coords


# -- the public functions ------------------------------------------------------------------------
async def nonzero(x: Tensor) -> tuple[Tensor, ...]:
    """The indices of the nonzero elements of ``x``: one int64 tensor per axis, in C
    order (numpy's and the standard's). A coroutine function: the number of nonzero
    elements is read back (awaited, never blocking) before the outputs are written.

    >>> rows, cols = await cuasync.nonzero(m > 0.5)
    """
    x = _tensor(x, "nonzero")
    if x.ndim == 0:
        raise ArgumentError("nonzero: x is 0-d; the array API standard refuses it (reshape first)")
    truth = x if x.dtype == np.bool_ else elementwise.not_equal(x, 0)
    pos, total = await _positions(truth)
    coords = await _compact(pos, total, x.shape)
    return tuple(coords[j] for j in range(x.ndim))


@overload
def where(
    condition: Tensor | TensorOp, x1: None = None, x2: None = None, *, out: None = None
) -> Coroutine[Any, Any, tuple[Tensor, ...]]: ...
@overload
def where(
    condition: Operand, x1: Operand, x2: Operand, *, out: Tensor | None = None
) -> TensorOp: ...
def where(
    condition: Operand,
    x1: Operand | None = None,
    x2: Operand | None = None,
    *,
    out: Tensor | None = None,
) -> TensorOp | Coroutine[Any, Any, tuple[Tensor, ...]]:
    """``x1`` where ``condition`` is true (non-zero), else ``x2``: an elementwise op (one
    kernel, fused; dtype ``result_type(x1, x2)``). With ``condition`` alone, numpy's
    one-argument ``where``: :func:`nonzero` of it, under nonzero's contract (the shape
    depends on the data: a coroutine, the count read back awaited, never blocking).

    >>> relu = await cuasync.where(x > 0, x, 0.0)
    >>> rows, cols = await cuasync.where(m > 0.5)      # as await cuasync.nonzero(m > 0.5)
    """
    if x1 is None and x2 is None:
        if out is not None:
            raise ArgumentError("where: out= is for where(condition, x1, x2), not where(condition)")
        if isinstance(condition, Tensor):
            return nonzero(condition)
        if isinstance(condition, TensorOp):
            return _nonzero_of(condition)
        raise ArgumentError(
            "where(condition): condition must be a cuasync.Tensor or TensorOp, got "
            f"{type(condition).__name__}"
        )
    if x1 is None or x2 is None:
        raise ArgumentError(
            "where: pass both x1 and x2 (an elementwise choice) or neither (the indices of "
            f"the true elements), got {'x2' if x1 is None else 'x1'} alone"
        )
    return elementwise.where(condition, x1, x2, out=out)


async def _nonzero_of(condition: TensorOp) -> tuple[Tensor, ...]:
    return await nonzero(await condition)


class _Groups(NamedTuple):
    """``x`` flattened and sorted (stable), the sorting permutation, the group number
    + 1 of each sorted element (a running count of group starts), the start of each
    group of equal values, and the number of groups."""

    sorted: Tensor
    perm: Tensor
    pos: Tensor
    starts: Tensor
    total: int


async def _complex_order(flat: Tensor) -> Tensor:
    """The stable permutation sorting complex ``flat`` in numpy's order (the module's
    docstring): a stable sort by each key, least significant first (a radix sort's
    passes): the imaginary part, the real part, then which parts are NaN (0: neither,
    1: the imaginary part, 2: the real part, 3: both). Sorting puts NaN keys last."""
    re, im = await elementwise.real(flat), await elementwise.imag(flat)
    nan_parts = await elementwise.add(
        elementwise_api.isnan(re).astype("int8") * 2, elementwise_api.isnan(im).astype("int8")
    )
    perm = await argsort(im)
    for key in (re, nan_parts):
        perm = await take(perm, await argsort(await take(key, perm)))
    return perm


async def _sorted_groups(x: Tensor, name: str) -> _Groups:

    x = _tensor(x, name)
    if x.dtype.kind != "c":
        _check_sortable(x, name)
    flat = flattened(x)
    flat_t = flat if isinstance(flat, Tensor) else await flat
    if x.dtype.kind == "c":
        perm = await _complex_order(flat_t)
        s = await take(flat_t, perm)
    else:
        perm = await argsort(flat_t)
        s = await sort(flat_t)
    n = s.shape[0]
    if n == 0:
        none = await empty((0,), dtype="int64")
        return _Groups(s, perm, none, none, 0)
    head = await full((1,), True, dtype="bool")  # the first element starts a group
    if n > 1:  # so does each one unequal to the one before (NaN: always)
        steps = await elementwise.not_equal(s[1:], s[: n - 1])
        head = await concatenate([head, steps])
    pos, total = await _positions(head)
    starts = await _compact(pos, total, (n,))
    return _Groups(s, perm, pos, starts[0], total)


async def unique_values(x: Tensor) -> Tensor:
    """The unique values of ``x``, sorted (1-d). A coroutine function (the count of
    unique values is read back, awaited, first).

    >>> v = await cuasync.unique_values(x)
    """

    g = await _sorted_groups(x, "unique_values")
    return await take(g.sorted, g.starts)


async def _counts(starts: Tensor, n: int) -> Tensor:

    end = await full((1,), n, dtype="int64")
    bounds = await concatenate([starts, end])
    return await (bounds[1:] - bounds[: bounds.shape[0] - 1])


async def unique_counts(x: Tensor) -> UniqueCounts:
    """The sorted unique values of ``x`` and how often each occurs.

    >>> values, counts = await cuasync.unique_counts(x)
    """

    g = await _sorted_groups(x, "unique_counts")
    return UniqueCounts(await take(g.sorted, g.starts), await _counts(g.starts, g.sorted.shape[0]))


async def _inverse(x: Tensor, g: _Groups) -> Tensor:
    """For each element of ``x``, the index of its value in the unique values: its
    sorted position's group, permuted back (by the inverse permutation)."""

    if not g.total:
        return g.pos.reshape(x.shape)  # (empty)
    group = await (g.pos - 1)
    back = await argsort(g.perm)  # the inverse permutation
    inverse = await take(group, back)
    return inverse.reshape(x.shape)


async def unique_inverse(x: Tensor) -> UniqueInverse:
    """The sorted unique values of ``x`` and, of ``x``'s shape, the index of each
    element's value in them: ``values[inverse_indices]`` is ``x``.

    >>> values, inverse = await cuasync.unique_inverse(x)
    """

    g = await _sorted_groups(x, "unique_inverse")
    return UniqueInverse(await take(g.sorted, g.starts), await _inverse(x, g))


async def unique_all(x: Tensor) -> UniqueAll:
    """:func:`unique_inverse` and :func:`unique_counts` at once, and the flat (C order)
    index of each value's first occurrence (``indices``).

    >>> values, indices, inverse, counts = await cuasync.unique_all(x)
    """

    g = await _sorted_groups(x, "unique_all")
    values = await take(g.sorted, g.starts)
    first = await take(g.perm, g.starts)  # stable: the first occurrence leads its group
    counts = await _counts(g.starts, g.sorted.shape[0])
    return UniqueAll(values, first, await _inverse(x, g), counts)
