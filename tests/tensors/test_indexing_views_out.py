"""The indexing family (issue 33) on views, writing ``out=`` views, against numpy: one
property test drawing the function, the dtype, the shape (0-d and empty where the
function takes them), a view of ``x`` (strided, reversed or transposed) and an ``out=``
(none, a strided view or a reversed view of a bigger tensor, whose other elements must
stay untouched)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync._ops.indexing import COMBINE_DTYPES

pytestmark = pytest.mark.usefixtures("no_emu_compile")

DTYPES = ["bool", "int8", "uint16", "int64", "float16", "bfloat16", "float32", "complex64"]
FUNCTIONS = ["take_along_axis", "gather", "scatter", "dynamic_slice", "dynamic_update_slice", "pad"]
#: The functions that take a 0-d ``x`` (the others index along an axis).
ZERO_D = ("dynamic_slice", "dynamic_update_slice", "pad")
COMBINE = {"add": np.add, "min": np.minimum, "max": np.maximum}


def host(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(1, 9, size=shape).astype(SUPPORTED[dtype])


def dev(a: np.ndarray) -> cuasync.Tensor:
    return cuasync.from_host(np.array(a, order="C")).sync()


def view_of(data: Any, shape: tuple[int, ...], dtype: str) -> tuple[np.ndarray, cuasync.Tensor]:
    """Values of ``shape`` on the host and, on the device, the same values as a view:
    contiguous, every other element along an axis, reversed along an axis, or transposed."""
    kind = data.draw(st.sampled_from(["contiguous", "strided", "reversed", "transposed"]))
    if not shape or kind == "contiguous":
        a = host(shape, dtype, 1)
        return a, dev(a)
    axis = data.draw(st.integers(0, len(shape) - 1))
    pick = [slice(None)] * len(shape)
    if kind == "strided":
        big = host(tuple(2 * d if i == axis else d for i, d in enumerate(shape)), dtype, 1)
        pick[axis] = slice(None, None, 2)
        return big[tuple(pick)], dev(big)[tuple(pick)]
    if kind == "reversed":
        a = host(shape, dtype, 1)
        pick[axis] = slice(None, None, -1)
        return a[tuple(pick)], dev(a)[tuple(pick)]
    b = host(shape[::-1], dtype, 1)
    return b.T, dev(b).T


def out_view(
    data: Any, shape: tuple[int, ...], dtype: np.dtype[Any]
) -> tuple[cuasync.Tensor | None, cuasync.Tensor | None, tuple[slice, ...]]:
    """``(out, base, where)``: no ``out``, or a zeroed tensor ``base`` and ``out`` its
    view at ``where`` (every other element along an axis, or reversed along one)."""
    kind = data.draw(st.sampled_from(["none", "strided", "reversed"]))
    if kind == "none":
        return None, None, ()
    if not shape:
        base = cuasync.zeros((), dtype).sync()
        return base, base, ()
    axis = data.draw(st.integers(0, len(shape) - 1))
    where = [slice(None)] * len(shape)
    if kind == "strided":
        bshape = tuple(2 * d + 1 if i == axis else d for i, d in enumerate(shape))
        where[axis] = slice(1, None, 2)
    else:
        bshape = shape
        where[axis] = slice(None, None, -1)
    base = cuasync.zeros(bshape, dtype).sync()
    return base[tuple(where)], base, tuple(where)


def along_index(idx: np.ndarray, shape: tuple[int, ...], axis: int) -> tuple[np.ndarray, ...]:
    """numpy's fancy index of ``put_along_axis`` for indices broadcast to ``shape``."""
    grids = list(np.indices(shape, sparse=True))
    grids[axis] = np.broadcast_to(idx, shape)
    return tuple(np.broadcast_to(g, shape) for g in grids)


def build(fn: str, data: Any, a: np.ndarray, x: cuasync.Tensor, dtype: str) -> tuple[Any, Any]:
    """``(op builder taking out=, numpy's result)`` for ``fn`` of ``x`` (``a`` on the host)."""
    shape, ndim = a.shape, a.ndim
    if fn in ("take_along_axis", "gather", "scatter"):
        axis = data.draw(st.integers(-ndim, ndim - 1))
        dim = shape[axis]
    if fn == "take_along_axis":
        ishape = [data.draw(st.sampled_from([1, d])) for d in shape]  # axes of 1 broadcast
        ishape[axis] = data.draw(st.integers(0, 4)) if dim else 0
        n = int(np.prod(ishape))
        idx = np.array(
            data.draw(st.lists(st.integers(-dim, max(dim - 1, 0)), min_size=n, max_size=n)),
            np.int64,
        ).reshape(ishape)
        full = list(shape)
        full[axis] = ishape[axis]
        want = np.take_along_axis(a, np.broadcast_to(idx, full), axis=axis)
        return lambda out: cuasync.take_along_axis(x, dev(idx), axis, out=out), want
    if fn == "gather":
        n = data.draw(st.integers(0, 4)) if dim else 0
        values = data.draw(st.lists(st.integers(-dim, max(dim - 1, 0)), min_size=n, max_size=n))
        idx = np.array(values, data.draw(st.sampled_from(["int32", "int64"])))
        want = np.take(a, idx, axis=axis)
        return lambda out: cuasync.gather(x, dev(idx), axis, out=out), want
    if fn == "scatter":
        modes = ["set"] + [m for m in COMBINE if dtype in COMBINE_DTYPES[m]]
        mode = data.draw(st.sampled_from(modes))
        ishape = list(shape)
        ishape[axis] = k = data.draw(st.integers(0, dim))
        if mode == "set":  # distinct positions along the axis: which duplicate wins is open
            rows = np.random.default_rng(data.draw(st.integers(0, 99))).permutation(dim)[:k]
            idx = np.broadcast_to(
                rows.reshape([-1 if i == axis % ndim else 1 for i in range(ndim)]), ishape
            )
        else:
            n = int(np.prod(ishape))
            idx = np.array(
                data.draw(st.lists(st.integers(-dim, dim - 1), min_size=n, max_size=n)), np.int64
            ).reshape(ishape)
        u = host(tuple(ishape), dtype, 5)
        want = a.copy()
        at = along_index(idx % max(dim, 1), tuple(ishape), axis % ndim)
        if mode == "set":
            want[at] = u
        else:
            COMBINE[mode].at(want, at, u)
        return lambda out: cuasync.scatter(x, dev(idx), dev(u), axis, mode=mode, out=out), want
    if fn in ("dynamic_slice", "dynamic_update_slice"):
        sizes = tuple(data.draw(st.integers(0, d)) for d in shape)
        starts = tuple(data.draw(st.integers(-3, 6)) for _ in shape)
        window = tuple(
            slice(min(max(s, 0), d - z), min(max(s, 0), d - z) + z)
            for s, d, z in zip(starts, shape, sizes, strict=True)
        )
        on_device = data.draw(st.booleans())
        s: Any = dev(np.array(starts, np.int64)) if on_device else starts
        if fn == "dynamic_slice":
            return lambda out: cuasync.dynamic_slice(x, s, sizes, out=out), a[window]
        u = host(sizes, dtype, 2)
        want = a.copy()
        want[window] = u
        return lambda out: cuasync.dynamic_update_slice(x, dev(u), s, out=out), want
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect"] if a.size else ["constant"]))
    width: Any = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in shape)
    if not shape:  # one int (numpy: a 0-d array has nothing to pad)
        width = data.draw(st.integers(0, 3))
    return lambda out: cuasync.pad(x, width, mode, out=out), np.pad(a, width, mode)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), fn=st.sampled_from(FUNCTIONS), dtype=st.sampled_from(DTYPES))
def test_property_views_and_out_views_vs_numpy(data: Any, fn: str, dtype: str) -> None:
    ndim = data.draw(st.integers(0 if fn in ZERO_D else 1, 3))
    low = 1 if fn == "scatter" else 0
    shape = tuple(data.draw(st.lists(st.integers(low, 4), min_size=ndim, max_size=ndim)))
    a, x = view_of(data, shape, dtype)
    op, want = build(fn, data, a, x, dtype)
    out, base, where = out_view(data, want.shape, want.dtype)
    got = op(out).sync()
    if out is not None:
        assert got is out
    result = got.to_host().sync()
    assert (result.dtype, result.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(result, want)
    if base is not None:  # the rest of out's tensor is untouched
        rest = base.to_host().sync()
        rest[where] = 0
        assert not rest.astype(bool).any()
