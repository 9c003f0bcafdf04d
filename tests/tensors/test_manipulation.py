"""The array API standard's manipulation functions (issue 34): ``broadcast_arrays``,
``broadcast_shapes``, ``moveaxis``, ``matrix_transpose``, ``unstack``, ``meshgrid``
(views), ``repeat``, ``tile``, ``roll``, ``reshape``, ``concat`` (ops), against
array-api-strict and numpy: dtypes, shapes and values identical (these only move data).
"""

from __future__ import annotations

from typing import Any

import array_api_strict as xp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync.errors import ArgumentError, IndexOutOfRangeError, ShapeError

pytestmark = pytest.mark.anyio

DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float16", "float32", "float64"]


def host(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 50).astype(dtype)


def strided(data: Any, dtype: str, min_dims: int = 0) -> tuple[np.ndarray, cuasync.Tensor]:
    """A host array and the same values as a device view (strided, maybe transposed)."""
    ndim = data.draw(st.integers(min_dims, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    steps = tuple(data.draw(st.sampled_from([1, 2])) for _ in shape)
    base = host(tuple(d * s for d, s in zip(shape, steps, strict=True)), dtype, 1)
    view = tuple(slice(None, None, s) for s in steps)
    a, x = base[view], cuasync.from_host(base).sync()[view]
    if ndim > 1 and data.draw(st.booleans()):
        perm = tuple(data.draw(st.permutations(range(ndim))))
        a, x = a.transpose(perm), x.transpose(perm)
    return a, x


def got(v: Any) -> np.ndarray:
    if isinstance(v, cuasync.Tensor):
        v = v.dup()  # (a view: copied to read it)
    return np.asarray(v.to_host().sync())


def same(value: np.ndarray, want: Any) -> None:
    want = np.asarray(want._array) if hasattr(want, "_array") else np.asarray(want)
    assert (value.dtype, value.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(value, want)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_property_repeat_tile_roll_vs_numpy(data: Any, dtype: str) -> None:
    a, x = strided(data, dtype)
    r = data.draw(st.integers(0, 3))
    if a.ndim:
        axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
        same(got(cuasync.repeat(x, r, axis=axis)), np.repeat(a, r, axis=axis))
        shift = data.draw(st.integers(-6, 6))
        same(got(cuasync.roll(x, shift, axis=axis)), np.roll(a, shift, axis=axis))
        if a.ndim > 1:
            shifts = (shift, -1)
            same(got(cuasync.roll(x, shifts, axis=(0, -1))), np.roll(a, shifts, axis=(0, -1)))
    same(got(cuasync.repeat(x, r)), np.repeat(a, r))  # (a view flattened by a copy)
    same(got(cuasync.roll(x, 3)), np.roll(a, 3))
    reps = tuple(data.draw(st.lists(st.integers(0, 3), max_size=4)))
    same(got(cuasync.tile(x, reps)), np.tile(a, reps))
    same(got(cuasync.tile(x, r)), np.tile(a, r))  # an int: numpy's one count


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES[:3] + DTYPES[4:]))
def test_property_views_vs_array_api_strict(data: Any, dtype: str) -> None:
    a, x = strided(data, dtype, min_dims=1)
    ref = xp.asarray(a) if dtype != "float16" else None
    src = data.draw(st.integers(-a.ndim, a.ndim - 1))
    dst = data.draw(st.integers(-a.ndim, a.ndim - 1))
    same(got(cuasync.moveaxis(x, src, dst)), np.moveaxis(a, src, dst))
    parts = cuasync.unstack(x, axis=src)
    assert len(parts) == a.shape[src]
    for p, w in zip(parts, xp.unstack(ref, axis=src) if ref is not None else [], strict=False):
        same(got(p), w)
    if a.ndim >= 2:
        same(got(cuasync.matrix_transpose(x)), np.swapaxes(a, -1, -2))
    lead = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    one = x[(slice(None),) * (a.ndim - 1) + (slice(0, 1),)] if a.shape[-1] else x
    b = cuasync.broadcast_arrays(one, x) if a.shape[-1] else [x, x]
    assert [t.shape for t in b] == [a.shape, a.shape]
    wide = cuasync.broadcast_arrays(x, cuasync.zeros((*lead, *a.shape), dtype=dtype).sync())
    assert wide[0].shape == (*lead, *a.shape)
    same(got(wide[0]), np.broadcast_to(a, (*lead, *a.shape)))
    ones = (*lead, *(1,) * a.ndim)
    assert cuasync.broadcast_shapes(a.shape, ones, ()) == np.broadcast_shapes(a.shape, ones)
    new = data.draw(st.sampled_from([(-1,), (a.size,), (1, -1), (*a.shape, 1)]))
    same(got(cuasync.reshape(x, new)), np.reshape(a, new))
    same(got(cuasync.reshape(x, new, copy=True)), np.reshape(a, new))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid_as_array_api_strict(indexing: Any) -> None:
    vs = [host((n,), "float32", n) for n in (2, 3, 4)]
    ts = [cuasync.from_host(v).sync() for v in vs]
    for k in (1, 2, 3):
        want = xp.meshgrid(*(xp.asarray(v) for v in vs[:k]), indexing=indexing)
        grids = cuasync.meshgrid(*ts[:k], indexing=indexing)
        assert len(grids) == k
        for g, w in zip(grids, want, strict=True):
            same(got(g), w)
    strided_view = cuasync.from_host(host((8,), "float32")).sync()[::2]
    g, _ = cuasync.meshgrid(strided_view, ts[0])
    same(got(g), np.meshgrid(host((8,), "float32")[::2], vs[0])[0])


def test_reshape_views_or_copies() -> None:
    a = host((3, 4), "float32")
    x = cuasync.from_host(a).sync()
    view = cuasync.reshape(x, (4, 3)).sync()
    assert view.ptr == x.ptr  # zero-copy: the output is a view of x
    copy = cuasync.reshape(x, (4, 3), copy=True).sync()
    assert copy.ptr != x.ptr
    same(got(cuasync.reshape(x.T, (-1,))), a.T.reshape(-1))  # a copy: x.T is not contiguous
    with pytest.raises(ShapeError, match="copy=False"):
        cuasync.reshape(x.T, (-1,), copy=False)
    # a strided view whose axes join without gaps is viewed, as numpy's (copy=False too)
    b = host((2, 3, 4), "float32")
    y = cuasync.from_host(b).sync()
    for v, h, shape in ((y[..., ::2], b[..., ::2], (12,)), (y[..., :1], b[..., :1], (6,)),
                        (y[:, :1], b[:, :1], (2, 4)), (y[:, ::-1], b[:, ::-1], (2, 3, 2, 2))):  # fmt: skip
        seen = cuasync.reshape(v, shape, copy=False).sync()
        assert seen.ptr == v.ptr and seen.strides == tuple(s // 4 for s in h.reshape(shape).strides)
        same(seen.to_host().sync(), h.reshape(shape))
    assert y[..., ::2].reshape((2, -1)).strides == (12, 2)  # (Tensor.reshape: the same views)
    same(got(cuasync.reshape(x * 2, (2, 6))), (a * 2).reshape(2, 6))
    same(got(cuasync.concat([x, x], axis=None)), np.concatenate([a, a], axis=None))
    same(got(cuasync.concat([x, x], axis=1)), xp.concat([xp.asarray(a)] * 2, axis=1))


def test_an_ops_output_reshapes_as_a_view_or_a_copy() -> None:
    # An op's output may be a strided view (a reshape of a view, einsum's permutation, an
    # out= view): reshaping or flattening it views it where the strides allow, else
    # copies it in the same submission; it never fails when it runs. (Whole values: a GPU's
    # parallel scan adds in another order than numpy's loop, and these sums stay exact.)
    a = host((4, 6), "float32").round()
    x = cuasync.from_host(a).sync()
    same(got(cuasync.cumsum(cuasync.reshape(x[:, :3], (4, 3, 1)))), np.cumsum(a[:, :3]))
    same(got(cuasync.reshape(cuasync.reshape(x[:, :3], (4, 3, 1)), (-1,))), a[:, :3].ravel())
    same(
        got(cuasync.sort(cuasync.reshape(x[:, :3], (4, 3, 1)), axis=None)), np.sort(a[:, :3], None)
    )
    same(got(cuasync.einsum("ij->ji", x).reshape((-1,))), a.T.ravel())
    for out in (cuasync.zeros((4, 12)).sync()[:, ::2], cuasync.zeros((6, 4)).sync().T):
        same(got(cuasync.cumsum(cuasync.add(x, 1.0, out=out))), np.cumsum(a + 1))
    transposed = cuasync.add(x, 1.0, out=cuasync.zeros((6, 4)).sync().T)
    with pytest.raises(ShapeError, match="copy=False"):
        cuasync.reshape(transposed, (-1,), copy=False)
    same(transposed.sync().to_host().sync(), a + 1)  # (the refusal left it usable)
    strided = cuasync.add(x, 1.0, out=cuasync.zeros((4, 12)).sync()[:, ::2])
    same(got(cuasync.reshape(strided, (-1,), copy=False)), (a + 1).ravel())


def test_copying_functions_take_ops(baseline: Any) -> None:
    # concat, stack, repeat, tile and roll of TensorOps: each op runs first, in the same
    # submission; bad arguments raise when built and leave the ops unused.
    a = host((4, 6), "float32").round()
    x = cuasync.from_host(a).sync()
    same(
        got(cuasync.concat([x + 1.0, x[::-1], x.astype("float64")])),
        np.concatenate([a + 1, a[::-1], a.astype(np.float64)]),
    )
    same(got(cuasync.stack([x * 2.0, x], axis=1)), np.stack([a * 2, a], axis=1))
    same(got(cuasync.repeat(x + 1.0, 2, axis=0)), np.repeat(a + 1, 2, axis=0))
    same(got(cuasync.repeat(x + 1.0, 2)), np.repeat(a + 1, 2))
    same(got(cuasync.tile(x - 1.0, (2, 1, 3))), np.tile(a - 1, (2, 1, 3)))
    same(got(cuasync.roll(x * 3.0, (1, -2), axis=(0, 1))), np.roll(a * 3, (1, -2), axis=(0, 1)))
    same(got(cuasync.roll(x * 3.0, 5)), np.roll(a * 3, 5))
    op = x + 1.0
    with pytest.raises(ArgumentError, match="an op runs once"):
        cuasync.concat([op, op])
    with pytest.raises(ShapeError, match="must match"):
        cuasync.concat([op, x[:, :2]], axis=0)
    with pytest.raises(ArgumentError, match="differ in length"):
        cuasync.roll(op, (1, 2), axis=0)
    with pytest.raises(ArgumentError, match="repetitions"):
        cuasync.tile(op, (-1,))
    same(got(op), a + 1)  # (still unused)


def test_bad_arguments_raise_typed_errors() -> None:
    x = cuasync.zeros((2, 3)).sync()
    with pytest.raises(IndexOutOfRangeError):
        cuasync.moveaxis(x, 2, 0)
    with pytest.raises(IndexOutOfRangeError):
        cuasync.unstack(x, axis=-3)
    with pytest.raises(IndexOutOfRangeError):
        cuasync.roll(x, 1, axis=2)
    with pytest.raises(IndexOutOfRangeError):
        cuasync.repeat(x, 2, axis=5)
    with pytest.raises(ArgumentError, match="repeats must be an int"):
        cuasync.repeat(x, [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="repetitions must be an int >= 0"):
        cuasync.tile(x, (-1,))
    with pytest.raises(ArgumentError, match="an int or a sequence of ints, got float"):
        cuasync.tile(x, 2.0)  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="differ in length"):
        cuasync.roll(x, (1, 2, 3), axis=(0, 1))
    with pytest.raises(ShapeError, match="do not broadcast"):
        cuasync.broadcast_arrays(x, cuasync.zeros((4,)).sync())
    with pytest.raises(ShapeError, match="2 or more axes"):
        cuasync.matrix_transpose(cuasync.zeros((3,)).sync())
    with pytest.raises(ShapeError, match="1-d"):
        cuasync.meshgrid(x)
    with pytest.raises(ArgumentError, match="indexing"):
        cuasync.meshgrid(x[0], indexing="yx")
    with pytest.raises(ArgumentError, match="must be a cuasync.Tensor"):
        cuasync.tile(np.zeros(3), (2,))  # type: ignore[arg-type]
