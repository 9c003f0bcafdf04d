"""The indexing family (gather, take_along_axis, scatter, dynamic_slice,
dynamic_update_slice, pad) against numpy: dtypes, shapes (0-d, empty, broadcast), views,
``out=``, out-of-range indices, typed errors, and device-tensor starts and indices that
never make the host wait."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FuturesTimeout
from typing import Any

import numpy as np
import pytest
from helpers import on_device, on_host
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._dtypes import SUPPORTED
from cuasync._ops.indexing import (
    COMBINE_DTYPES,
)
from cuasync.errors import ArgumentError, DTypeError, ShapeError

pytestmark = pytest.mark.usefixtures("no_emu_compile")

DTYPES = [
    "bool",
    "int8",
    "int16",
    "uint32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
FNS = {"add": np.add, "min": np.minimum, "max": np.maximum}


def host(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).integers(1, 9, size=shape)
    return values.astype(SUPPORTED[dtype])


def along_index(idx: np.ndarray, shape: tuple[int, ...], axis: int) -> tuple[np.ndarray, ...]:
    """numpy's fancy index of ``put_along_axis`` for indices broadcast to ``shape``."""
    idx = np.broadcast_to(idx, shape)
    grids = list(np.indices(shape, sparse=True))
    grids[axis] = idx
    return tuple(np.broadcast_to(g, shape) for g in grids)


# -- gather and take_along_axis ----------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_and_take_along_axis_match_numpy_for_every_dtype(dtype: str) -> None:
    a = host((3, 4, 5), dtype)
    x = on_device(a)
    idx = np.array([[0, 2, -1], [1, 1, 3], [4, 0, -5]])
    for itype in ("int32", "int64"):
        i = on_device(idx.astype(itype))
        got = on_host(cuasync.gather(x, i, axis=2, batch_dims=1))
        want = np.stack([np.take(a[b], idx[b], axis=1) for b in range(3)])
        assert got.dtype == a.dtype and got.shape == want.shape == (3, 4, 3)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(
            on_host(cuasync.gather(x, i, axis=1)), np.take(a, idx, axis=1, mode="wrap")
        )
        ti = np.array([[[1, -1]], [[0, 3]], [[4, 4]]]).astype(itype)  # (3, 1, 2): broadcast
        got = on_host(cuasync.take_along_axis(x, on_device(ti), axis=2))
        want = np.take_along_axis(a, np.broadcast_to(ti, (3, 4, 2)), axis=2)
        np.testing.assert_array_equal(got, want)


def test_take_along_axis_reads_views_and_writes_out() -> None:
    a = host((4, 6), "float32")
    x = on_device(a)
    idx = np.array([[5, 0, 2], [1, 1, 1], [0, 3, 4], [2, 2, 5]])
    i = on_device(np.ascontiguousarray(idx.T))
    # a reversed x and transposed indices: both are gathered first
    got = on_host(cuasync.take_along_axis(x[::-1], i.T, axis=1))
    np.testing.assert_array_equal(got, np.take_along_axis(a[::-1], idx, axis=1))
    out = cuasync.zeros((3, 4), dtype="float32").sync()
    result = cuasync.take_along_axis(x, i.T, axis=1, out=out.T).sync()  # a transposed out
    np.testing.assert_array_equal(back_tensor(out).T, np.take_along_axis(a, idx, axis=1))
    assert result.shape == (4, 3)
    flat = on_host(cuasync.take_along_axis(x, on_device(np.array([0, 23, -1])), axis=None))
    np.testing.assert_array_equal(flat, np.take_along_axis(a.ravel(), np.array([0, 23, -1]), None))


def back_tensor(t: cuasync.Tensor) -> np.ndarray:
    return t.to_host().sync()


def test_out_of_range_indices_wrap_or_clip() -> None:
    # numpy raises for these; a kernel cannot, so wrap (the default) and clip are defined.
    a = host((2, 5), "int32")
    x = on_device(a)
    idx = np.array([[-7, 12, 4], [5, -1, 0]])
    i = on_device(idx)
    for mode in ("wrap", "clip"):
        want = np.take_along_axis(a, np.take(np.arange(5), idx, mode=mode), axis=1)
        np.testing.assert_array_equal(on_host(cuasync.take_along_axis(x, i, 1, mode=mode)), want)
        want = np.take(a, idx, axis=1, mode=mode)
        np.testing.assert_array_equal(on_host(cuasync.gather(x, i, 1, mode=mode)), want)


def test_gather_and_take_along_axis_errors() -> None:
    x = on_device(host((3, 4), "float32"))
    i = on_device(np.array([[0, 1]]))
    with pytest.raises(DTypeError, match="int32 or int64"):
        cuasync.take_along_axis(x, on_device(np.array([[1.0]])), 1)
    with pytest.raises(ShapeError, match="as many dimensions"):
        cuasync.take_along_axis(x, on_device(np.array([0])), 1)
    with pytest.raises(ShapeError, match="do not broadcast"):
        cuasync.take_along_axis(x, on_device(np.zeros((2, 1), np.int64)), 1)
    with pytest.raises(ArgumentError, match="mode"):
        cuasync.take_along_axis(x, i, 1, mode="raise")
    with pytest.raises(ArgumentError, match="indices must be a cuasync.Tensor"):
        cuasync.gather(x, np.array([1]), 0)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="batch axes differ"):
        cuasync.gather(x, on_device(np.zeros((2, 1), np.int64)), 1, batch_dims=1)
    with pytest.raises(ShapeError, match="batch axis"):
        cuasync.gather(x, on_device(np.zeros((3, 1), np.int64)), 0, batch_dims=1)
    with pytest.raises(ArgumentError, match="empty axis"):
        cuasync.gather(on_device(np.zeros((0, 2), np.float32)), on_device(np.array([0])), 0)
    with pytest.raises(ShapeError, match="out has shape"):
        cuasync.take_along_axis(x, i, 1, out=x)


@PROPERTY
@given(data=st.data())
def test_property_take_along_axis_and_gather(data: Any) -> None:
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    axis = data.draw(st.integers(-ndim, ndim - 1))
    dtype = data.draw(st.sampled_from(DTYPES))
    a = host(shape, dtype)
    dim = shape[axis]
    ishape = [data.draw(st.sampled_from([1, d])) for d in shape]  # axes of 1 broadcast
    ishape[axis] = data.draw(st.integers(0, 4)) if dim else 0
    n = int(np.prod(ishape))
    values = data.draw(st.lists(st.integers(-dim, max(dim - 1, 0)), min_size=n, max_size=n))
    idx = np.array(values, np.int64).reshape(ishape)
    x = on_device(a)
    if data.draw(st.booleans()):  # a reversed view is gathered first
        x, a = x[::-1], a[::-1]
    full = list(shape)
    full[axis] = ishape[axis]
    got = on_host(cuasync.take_along_axis(x, on_device(idx), axis=axis))
    want = np.take_along_axis(a, np.broadcast_to(idx, full), axis=axis)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    flat = idx.ravel()
    got = on_host(cuasync.gather(x, on_device(flat.astype(np.int32)), axis=axis))
    np.testing.assert_array_equal(got, np.take(a, flat, axis=axis))


# -- scatter ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["add", "min", "max"])
@pytest.mark.parametrize("dtype", COMBINE_DTYPES["min"])
def test_scatter_combines_every_duplicate(dtype: str, mode: str) -> None:
    rng = np.random.default_rng(1)
    a = host((3, 8), dtype)
    idx = rng.integers(-8, 8, size=(3, 40))  # many duplicates per row
    u = rng.integers(0, 50, size=(3, 40)).astype(dtype)
    got = on_host(cuasync.scatter(on_device(a), on_device(idx), on_device(u), axis=1, mode=mode))
    want = a.copy()
    FNS[mode].at(want, along_index(idx % 8, idx.shape, 1), u)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got, want)


def test_scatter_add_of_complex_and_float_nan_for_min_max() -> None:
    a = np.array([1 + 2j, 0, 3j], np.complex64)
    idx = np.array([0, 0, 2, 0])
    u = np.array([1j, 2, 1 - 1j, 0.5], np.complex64)
    got = on_host(cuasync.scatter(on_device(a), on_device(idx), on_device(u), axis=0, mode="add"))
    want = a.copy()
    np.add.at(want, idx, u)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    f = np.array([1.0, 5.0, 2.0], np.float32)
    v = np.array([np.nan, 0.0, 3.0], np.float32)
    for mode in ("min", "max"):
        got = on_host(
            cuasync.scatter(
                on_device(f), on_device(np.array([0, 1, 2])), on_device(v), 0, mode=mode
            )
        )
        want = FNS[mode](f, v)  # a NaN wins, as numpy's minimum/maximum
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_set_stores_one_of_the_updates(dtype: str) -> None:
    a = host((4, 5), dtype)
    idx = np.array([[0], [4], [2], [-1]])  # (4, 1): one column per row, unique
    u = host((4, 1), dtype, seed=3)
    got = on_host(cuasync.scatter(on_device(a), on_device(idx), on_device(u), axis=1))
    want = a.copy()
    np.put_along_axis(want, idx, u, axis=1)
    np.testing.assert_array_equal(got, want)
    # duplicates under "set": one of the updates lands (which is unspecified)
    dup = on_device(np.array([[1, 1, 1]]))
    cand = host((1, 3), dtype, seed=4)
    got = on_host(cuasync.scatter(on_device(a[:1]), dup, on_device(cand), axis=1))
    assert got[0, 1] in cand[0]
    np.testing.assert_array_equal(np.delete(got, 1, axis=1), np.delete(a[:1], 1, axis=1))


def test_scatter_index_modes_broadcast_scalars_views_and_out() -> None:
    a = np.zeros((2, 6), np.float32)
    idx = np.array([[-7, 9, 2, 8]])  # (1, 4): broadcast over the rows
    for index_mode in ("wrap", "clip", "drop"):
        got = on_host(
            cuasync.scatter(on_device(a), on_device(idx), 1.0, 1, mode="add", index_mode=index_mode)
        )
        want = a.copy()
        if index_mode == "drop":  # as XLA: an update out of range is skipped
            keep = (idx >= -6) & (idx < 6)
            np.add.at(want, along_index(idx[keep][None] % 6, (2, int(keep.sum())), 1), 1.0)
        else:
            fixed = np.take(np.arange(6), idx, mode=index_mode)  # type: ignore[call-overload]
            np.add.at(want, along_index(fixed, (2, 4), 1), 1.0)
        np.testing.assert_array_equal(got, want)
    # a histogram into a transposed view, in place (out=x)
    bins = cuasync.zeros((5, 2), dtype="int64").sync()
    ids = np.array([[0, 4, 4, 1, 0, 4]]).T  # (6, 1) along axis 0
    cuasync.scatter(
        bins, on_device(ids), on_device(np.ones((6, 2), np.int64)), 0, mode="add", out=bins
    ).sync()
    want = np.zeros((5, 2), np.int64)
    np.add.at(want, ids[:, 0], 1)
    np.testing.assert_array_equal(back_tensor(bins), want)
    t = cuasync.zeros((2, 5), dtype="int64").sync()
    res = cuasync.scatter(t.T, on_device(ids), 1, 0, mode="add", out=t.T).sync()
    assert res.shape == (5, 2)
    np.testing.assert_array_equal(back_tensor(t).T, want)
    # updates converted to x's dtype; x itself left unchanged without out=
    x = on_device(np.zeros(3, np.float64))
    got = on_host(
        cuasync.scatter(x, on_device(np.array([2])), on_device(np.array([7], np.int16)), 0)
    )
    np.testing.assert_array_equal(got, [0, 0, 7.0])
    np.testing.assert_array_equal(back_tensor(x), [0, 0, 0])


def test_scatter_errors() -> None:
    x = on_device(np.zeros((3, 4), np.float16))
    i = on_device(np.array([[0, 1]]))
    with pytest.raises(DTypeError, match="mode='add' takes x of dtype"):
        cuasync.scatter(on_device(np.zeros((3, 4), np.int8)), i, 1, 1, mode="add")
    with pytest.raises(DTypeError, match="mode='max' takes x of dtype"):
        cuasync.scatter(on_device(np.zeros((3, 4), np.complex64)), i, 1, 1, mode="max")
    with pytest.raises(ArgumentError, match="mode must be one of"):
        cuasync.scatter(x, i, 1.0, 1, mode="mul")
    with pytest.raises(ArgumentError, match="index_mode"):
        cuasync.scatter(x, i, 1.0, 1, index_mode="raise")
    with pytest.raises(ShapeError, match="do not broadcast to"):
        cuasync.scatter(x, i, on_device(np.zeros((3,), np.float16)), 1)
    with pytest.raises(ShapeError, match="reach past x"):
        cuasync.scatter(x[:1], on_device(np.zeros((3, 1), np.int64)), 1.0, 1)
    with pytest.raises(ArgumentError, match="does not fit"):
        cuasync.scatter(on_device(np.zeros(2, np.int8)), on_device(np.array([0])), 300, 0)
    assert set(COMBINE_DTYPES["min"]) < set(COMBINE_DTYPES["add"])


@PROPERTY
@given(data=st.data())
def test_property_scatter(data: Any) -> None:
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    axis = data.draw(st.integers(0, ndim - 1))
    mode = data.draw(st.sampled_from(["add", "min", "max"]))
    dtype = data.draw(st.sampled_from(COMBINE_DTYPES[mode]))
    a = host(shape, dtype)
    ishape = list(shape)
    ishape[axis] = data.draw(st.integers(0, 6))
    n = int(np.prod(ishape))
    dim = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(-dim, dim - 1), min_size=n, max_size=n)))
    idx = idx.reshape(ishape).astype(data.draw(st.sampled_from(["int32", "int64"])))
    u = host(tuple(ishape), dtype, seed=5)
    got = on_host(cuasync.scatter(on_device(a), on_device(idx), on_device(u), axis=axis, mode=mode))
    want = a.copy()
    FNS[mode].at(want, along_index(idx % dim, tuple(ishape), axis), u)
    np.testing.assert_allclose(got, want, rtol=1e-6)


# -- dynamic_slice, dynamic_update_slice --------------------------------------------------
def clamped(starts: Any, shape: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(
        slice(min(max(s, 0), d - z), min(max(s, 0), d - z) + z)
        for s, d, z in zip(starts, shape, sizes, strict=True)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_dynamic_slices_with_host_and_device_starts_clamp_as_xla(dtype: str) -> None:
    a = host((3, 4, 5), dtype)
    x = on_device(a)
    for starts in [(1, 2, 3), (-1, 9, 1), (2, 0, 0)]:
        window = clamped(starts, a.shape, (2, 2, 3))
        for itype in (None, "int32", "int64"):
            s = starts if itype is None else on_device(np.array(starts, itype))
            got = on_host(cuasync.dynamic_slice(x, s, (2, 2, 3)))
            assert got.dtype == a.dtype
            np.testing.assert_array_equal(got, a[window])
            u = host((2, 2, 3), dtype, seed=9)
            got = on_host(cuasync.dynamic_update_slice(x, on_device(u), s))
            want = a.copy()
            want[window] = u
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(back_tensor(x), a)  # without out=, x is left as it was


def test_dynamic_slices_views_0d_empty_and_out() -> None:
    a = host((6, 5), "float32")
    x = on_device(a)
    s = on_device(np.array([4, -2], np.int64))
    got = on_host(cuasync.dynamic_slice(x.T[::-1], s, (2, 3)))  # a transposed, reversed view
    np.testing.assert_array_equal(got, a.T[::-1][clamped((4, -2), (5, 6), (2, 3))])
    z = on_device(np.asarray(3, np.float32))
    assert on_host(cuasync.dynamic_slice(z, (), ())).shape == ()
    assert on_host(cuasync.dynamic_slice(z, on_device(np.zeros(0, np.int64)), ())) == 3
    assert on_host(cuasync.dynamic_slice(x, s, (0, 3))).shape == (0, 3)
    empty = on_device(np.zeros((0, 5), np.float32))
    np.testing.assert_array_equal(on_host(cuasync.dynamic_update_slice(x, empty, s)), a)
    # in place: a KV-cache row written at a device position
    cache = on_device(np.zeros((4, 3), np.float32))
    row = on_device(np.array([[1, 2, 3]], np.float32))
    for pos in (2, 0):
        p = on_device(np.array([pos, 0]))
        cuasync.dynamic_update_slice(cache, row, p, out=cache).sync()
    np.testing.assert_array_equal(back_tensor(cache), [[1, 2, 3], [0] * 3, [1, 2, 3], [0] * 3])
    out = cuasync.zeros((3, 2), dtype="float32").sync()
    cuasync.dynamic_slice(x, s, (2, 3), out=out.T).sync()
    np.testing.assert_array_equal(back_tensor(out).T, a[clamped((4, -2), (6, 5), (2, 3))])


def test_dynamic_slice_errors() -> None:
    x = on_device(host((3, 4), "float32"))
    with pytest.raises(ShapeError, match=r"shape \(2,\)"):
        cuasync.dynamic_slice(x, on_device(np.zeros(3, np.int64)), (1, 1))
    with pytest.raises(DTypeError, match="int32 or int64"):
        cuasync.dynamic_slice(x, on_device(np.zeros(2, np.float32)), (1, 1))
    with pytest.raises(ShapeError, match="sizes"):
        cuasync.dynamic_slice(x, (0, 0), (4, 1))
    with pytest.raises(ShapeError, match="has 1 starts, x has 2 axes"):
        cuasync.dynamic_slice(x, (0,), (1, 1))
    with pytest.raises(ArgumentError, match="start_indices must be"):
        cuasync.dynamic_slice(x, 1.5, (1, 1))  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="update of shape"):
        cuasync.dynamic_update_slice(x, on_device(host((1, 5), "float32")), (0, 0))
    big = on_device(np.zeros((1,) * 7, np.float32))
    with pytest.raises(ShapeError, match="at most 6"):
        cuasync.dynamic_slice(big, on_device(np.zeros(7, np.int64)), (1,) * 7)


@PROPERTY
@given(data=st.data())
def test_property_dynamic_slices(data: Any) -> None:
    ndim = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    sizes = tuple(data.draw(st.integers(0, d)) for d in shape)
    starts = tuple(data.draw(st.integers(-3, 6)) for _ in shape)
    dtype = data.draw(st.sampled_from(DTYPES))
    a = host(shape, dtype)
    x = on_device(a)
    s: Any = starts if data.draw(st.booleans()) else on_device(np.array(starts, np.int64))
    window = clamped(starts, shape, sizes)
    np.testing.assert_array_equal(on_host(cuasync.dynamic_slice(x, s, sizes)), a[window])
    u = host(sizes, dtype, seed=2)
    want = a.copy()
    want[window] = u
    np.testing.assert_array_equal(on_host(cuasync.dynamic_update_slice(x, on_device(u), s)), want)


# -- no host synchronization ----------------------------------------------------------------
def test_device_starts_and_indices_never_make_the_host_wait() -> None:
    # The starts and indices are read by the kernels: with the stream held behind a gate,
    # building and submitting the ops returns at once, and nothing is done until it opens.
    cache = on_device(np.zeros((4, 3), np.float32))
    row = on_device(np.array([[1, 2, 3]], np.float32))
    pos = on_device(np.array([2, 0], np.int64))
    ids = on_device(np.array([0, 3, 3, 1], np.int32))
    ones = on_device(np.ones(4, np.float32))
    bins = on_device(np.zeros(5, np.float32))
    # load every kernel first (on a GPU, loading a module waits for pending work)
    cuasync.dynamic_update_slice(cache, row, pos).sync()
    cuasync.scatter(bins, ids, ones, 0, mode="add").sync()

    def build_and_submit() -> tuple[Any, Any]:
        update = cuasync.dynamic_update_slice(cache, row, pos, out=cache).submit()
        return update, cuasync.scatter(bins, ids, ones, 0, mode="add").submit()

    with ct.gate() as gate, ThreadPoolExecutor(1) as pool:
        job = pool.submit(build_and_submit)  # (a host read of pos would wait for the gate)
        try:
            update, hist = job.result(timeout=30)
            assert update.stream in gate.streams and hist.stream in gate.streams
            assert not update.done() and not hist.done()
        except FuturesTimeout:
            pytest.fail("building or submitting the ops waited for the device")
        finally:
            gate.open()
    update.wait()
    np.testing.assert_array_equal(back_tensor(cache)[2], [1, 2, 3])
    np.testing.assert_array_equal(back_tensor(hist.wait()), [1, 1, 0, 2, 0])


# -- pad ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_matches_numpy_for_every_dtype_and_mode(dtype: str) -> None:
    a = host((3, 4), dtype)
    x = on_device(a)
    for mode in ("constant", "edge", "reflect"):
        for width in (1, (2, 3), ((0, 1), (7, 2))):
            got = on_host(cuasync.pad(x, width, mode))
            want = np.pad(a, width, mode)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
    got = on_host(cuasync.pad(x[:, ::-2], ((1, 0), (0, 2)), constant_values=1))
    np.testing.assert_array_equal(got, np.pad(a[:, ::-2], ((1, 0), (0, 2)), constant_values=1))


def test_pad_0d_empty_out_and_errors() -> None:
    z = on_device(np.asarray(2, np.float32))
    assert on_host(cuasync.pad(z, 3)) == 2  # numpy: a 0-d array has nothing to pad
    empty = on_device(np.zeros((0, 2), np.int16))
    got = on_host(cuasync.pad(empty, 1, constant_values=-4))
    np.testing.assert_array_equal(got, np.pad(np.zeros((0, 2), np.int16), 1, constant_values=-4))
    one = np.array([[5.0, 6.0]], np.float32)
    np.testing.assert_array_equal(
        on_host(cuasync.pad(on_device(one), 3, "reflect")), np.pad(one, 3, "reflect")
    )
    out = cuasync.zeros((3, 3), dtype="float32").sync()
    cuasync.pad(on_device(one), ((1, 1), (0, 1)), "edge", out=out.T).sync()
    np.testing.assert_array_equal(back_tensor(out).T, np.pad(one, ((1, 1), (0, 1)), "edge"))
    with pytest.raises(ShapeError, match="cannot extend"):
        cuasync.pad(empty, 1, "edge")
    with pytest.raises(ArgumentError, match="mode must be one of"):
        cuasync.pad(z, 1, "wrap")
    with pytest.raises(ArgumentError, match="negative"):
        cuasync.pad(empty, -1)
    with pytest.raises(ArgumentError, match="pad_width"):
        cuasync.pad(empty, ((1, 2, 3),))
    with pytest.raises(ArgumentError, match="does not fit"):
        cuasync.pad(empty, 1, constant_values=1e6)


@PROPERTY
@given(data=st.data())
def test_property_pad(data: Any) -> None:
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect"]))
    dtype = data.draw(st.sampled_from(DTYPES))
    width = tuple((data.draw(st.integers(0, 6)), data.draw(st.integers(0, 6))) for _ in shape)
    a = host(shape, dtype)
    got = on_host(cuasync.pad(on_device(a), width, mode))
    np.testing.assert_array_equal(got, np.pad(a, width, mode))


def test_aliasing_out_is_computed_apart() -> None:
    # out overlapping what the op reads is written through a copy, never read half-written
    a = np.arange(8, dtype=np.float32)
    x = on_device(a)
    cuasync.take_along_axis(x, on_device(np.arange(8)[::-1].copy()), 0, out=x).sync()
    np.testing.assert_array_equal(back_tensor(x), a[::-1])
    y = on_device(a)
    cuasync.dynamic_slice(y, (1,), (7,), out=y[:7]).sync()
    np.testing.assert_array_equal(back_tensor(y), np.r_[a[1:], a[7]])


def test_lazy_operands_run_first_and_a_refused_call_leaves_them() -> None:
    # An operand that is not fused (tests/tensors/test_indexing_fused.py) may be any
    # TensorOp: it runs first, on the op's stream, as part of the same submission. That is
    # the indices and starts, a creation op, an expression writing out=, updates of
    # another dtype than x.
    a = host((3, 4), "float32")
    x, i = on_device(a), on_device(np.array([[3, 0], [1, 1], [2, -1]]))
    got = on_host(
        cuasync.take_along_axis(cuasync.add(x, 0.0, out=on_device(a * 0)) * 2, i + 0, axis=1)
    )
    np.testing.assert_array_equal(
        got, np.take_along_axis(a * 2, np.array([[3, 0], [1, 1], [2, -1]]), 1)
    )
    np.testing.assert_array_equal(
        on_host(cuasync.gather(cuasync.full((3, 4), 1.0), i[:, 0] + 0, 1)), np.ones((3, 3))
    )
    hist = on_host(
        cuasync.scatter(
            cuasync.zeros(5, "float64"),
            on_device(np.array([0, 3, 3])),
            cuasync.ones(3) * 2,
            0,
            mode="add",
        )
    )
    np.testing.assert_array_equal(hist, [2, 0, 0, 4, 0])
    pos = on_device(np.array([1, 2]))
    np.testing.assert_array_equal(
        on_host(cuasync.dynamic_slice(cuasync.add(x, -1.0, out=on_device(a)), (1, 2), (2, 2))),
        a[1:3, 2:4] - 1,
    )
    np.testing.assert_array_equal(
        on_host(cuasync.dynamic_slice(cuasync.ones((3, 4)), pos + 0, (2, 2))), np.ones((2, 2))
    )
    got = on_host(
        cuasync.dynamic_update_slice(cuasync.zeros((3, 4)), cuasync.ones((1, 2)), pos * 1)
    )
    want = np.zeros((3, 4), np.float32)
    want[1, 2:4] = 1
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        on_host(cuasync.pad(cuasync.ones((3, 4)), 1)), np.pad(a * 0 + 1, 1)
    )
    lazy = x * 3
    with pytest.raises(ShapeError):
        cuasync.dynamic_slice(lazy, (0, 0), (9, 9))
    np.testing.assert_array_equal(on_host(lazy), a * 3)  # not consumed by the refused call
    lazy = x * 3  # (nor by a refused call that would fuse it)
    with pytest.raises(ShapeError):
        cuasync.take_along_axis(lazy, on_device(np.zeros((3, 4, 1), np.int64)), axis=1)
    np.testing.assert_array_equal(on_host(lazy), a * 3)
