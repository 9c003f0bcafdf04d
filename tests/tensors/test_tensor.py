"""Tensor metadata, zero-copy views and their bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync.errors import (
    ArgumentError,
    DTypeError,
    IndexOutOfRangeError,
    ShapeError,
    UnsupportedIndexError,
)

HOST = np.arange(48, dtype=np.float32).reshape(6, 8)


@pytest.fixture(scope="module")
def grid() -> cuasync.Tensor:
    return cuasync.from_host(np.arange(48, dtype=np.float32).reshape(6, 8)).sync()


def test_metadata(grid: cuasync.Tensor) -> None:
    assert grid.shape == (6, 8)
    assert grid.strides == (8, 1)
    assert grid.dtype == np.float32
    assert grid.size == 48 and grid.nbytes == 192
    assert grid.device is cuasync.Device(0)
    assert grid.is_contiguous


@pytest.mark.parametrize("dtype", sorted(SUPPORTED))
def test_every_dtype_roundtrips(dtype: str) -> None:
    rng = np.random.default_rng(1)
    data = (rng.standard_normal(10) * 10).astype(SUPPORTED[dtype])
    back = cuasync.from_host(data).sync().to_host().sync()
    assert back.dtype == SUPPORTED[dtype]
    np.testing.assert_array_equal(back, data)


def test_unknown_dtype_names_the_choices() -> None:
    with pytest.raises(DTypeError, match=r"dtype='float128x' is not a supported dtype.*float32"):
        cuasync.zeros((2,), "float128x")
    with pytest.raises(DTypeError):
        cuasync.from_host(np.array(["a", "b"]))


@pytest.mark.parametrize(
    "shape", [(-1,), (2.5,), ("3",), object(), (True, 2), {}, {2: 3}, {2, 3}, "3", 2.0]
)
def test_bad_shapes(shape: object) -> None:
    with pytest.raises(ShapeError, match="shape"):
        cuasync.zeros(shape)  # type: ignore[arg-type]


def test_numpy_integers_are_sizes_everywhere(grid: cuasync.Tensor) -> None:
    i = np.int64
    for make in (cuasync.empty, cuasync.zeros, cuasync.ones, cuasync.rand):
        assert make((i(2), np.uint8(3))).sync().shape == (2, 3), make
    assert cuasync.full(np.int32(4), 1.0).sync().shape == (4,)
    assert cuasync.zeros(np.array([2, 3])).sync().shape == (2, 3)
    assert grid.reshape((i(-1), np.int16(12))).shape == (4, 12)
    assert grid.view(i(48)).shape == (48,)
    assert grid.partition((i(2), np.uint32(4))).grid == (3, 2)
    view = grid[i(1) : np.int8(5), :: np.uint16(2)]
    assert view.shape == (4, 4) and view.strides == (8, 2)
    np.testing.assert_array_equal(view.to_host().sync(), HOST[1:5, ::2])
    np.testing.assert_array_equal(grid[np.int32(-1)].to_host().sync(), HOST[-1])


def test_slicing_views_share_memory_and_chain(grid: cuasync.Tensor) -> None:
    host = np.arange(48, dtype=np.float32).reshape(6, 8)
    view = grid[1:5, 2:7]
    assert view.shape == (4, 5) and view.strides == (8, 1) and not view.is_contiguous
    assert view.allocation is grid.allocation
    inner = view[1:3, ::2]
    assert inner.shape == (2, 3) and inner.strides == (8, 2)
    np.testing.assert_array_equal(inner.to_host().sync(), host[1:5, 2:7][1:3, ::2])
    np.testing.assert_array_equal(grid[3].to_host().sync(), host[3])
    np.testing.assert_array_equal(grid[..., -1].to_host().sync(), host[..., -1])
    np.testing.assert_array_equal(grid[-2:, :].to_host().sync(), host[-2:, :])


def test_new_axes_are_zero_copy_views(grid: cuasync.Tensor) -> None:
    for index in ((None,), (slice(None), None), (1, None, ..., None), (..., None)):
        view = grid[index]
        assert view.shape == HOST[index].shape and view.allocation is grid.allocation
        np.testing.assert_array_equal(view.to_host().sync(), HOST[index])


@pytest.mark.parametrize(
    "index, message",
    [
        ((slice(None, None, 0),), "step on axis 0 must be a non-zero int"),
        ((slice(None, None, True),), "step on axis 0 must be a non-zero int"),
        ((slice(None, None, 1.0),), "step on axis 0 must be a non-zero int"),
        ((slice(0.0, 2),), "slice start on axis 0 must be an int or None, got float"),
        ((slice(0, "2"),), "slice stop on axis 0 must be an int or None, got str"),
    ],
)
def test_bad_slices(grid: cuasync.Tensor, index: tuple[object, ...], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        grid[index]  # type: ignore[index]


@pytest.mark.parametrize(
    "index",
    [
        (slice(0, 9),),
        (slice(None), slice(-9, None)),  # the last 9 at most: all 8
        (slice(-100, None),),
        (slice(7, None),),  # empty
        (slice(100, -100, -1), slice(None, None, -3)),
        (slice(None, -100, -1),),
    ],
)
def test_slice_bounds_past_the_axis_are_clipped_as_numpy_does(
    grid: cuasync.Tensor, index: tuple[slice, ...]
) -> None:
    view = grid[index]
    assert view.shape == HOST[index].shape and view.allocation is grid.allocation
    np.testing.assert_array_equal(view.to_host().sync(), HOST[index])


@pytest.mark.parametrize(
    "index, message",
    [
        ((6,), r"index 6 is out of range for axis 0 with size 6 \(expected -6..5\)"),
        ((0, -9), "index -9 is out of range for axis 1 with size 8"),
        ((0, 0, 0), r"too many indices: 3 for a 2-d tensor of shape \(6, 8\)"),
        ((..., 0, 0, 0), "too many indices"),
    ],
)
def test_out_of_range_indices_are_index_errors(
    grid: cuasync.Tensor, index: tuple[object, ...], message: str
) -> None:
    # an IndexError as in numpy (iteration relies on it), still a ShapeError
    for error in (IndexOutOfRangeError, IndexError, ShapeError):
        with pytest.raises(error, match=message):
            grid[index]  # type: ignore[index]


@pytest.mark.parametrize(
    "index",
    [
        np.array([0, 1]),
        np.array([True, False, True, False, True, False]),
        [0, 1],
        [True, False],
        (slice(None), np.array([1])),
        ((0, 1),),
    ],
    ids=["int array", "bool array", "list", "bool list", "array in a tuple", "nested tuple"],
)
def test_array_indices_point_to_take_and_where(grid: cuasync.Tensor, index: object) -> None:
    with pytest.raises(UnsupportedIndexError, match=r"cuasync\.take\(.*cuasync\.where\("):
        grid[index]  # type: ignore[index]


@pytest.mark.parametrize(
    "index", ["a", 1.0, np.float32(1), {}, True, np.bool_(True), object(), (..., ...)]
)
def test_other_junk_indices_are_typed(grid: cuasync.Tensor, index: object) -> None:
    with pytest.raises(UnsupportedIndexError) as info:
        grid[index]  # type: ignore[index]
    assert isinstance(info.value, IndexError) and isinstance(info.value, ShapeError)


def test_iteration_gives_views_along_the_first_axis(grid: cuasync.Tensor) -> None:
    rows = list(grid)
    assert len(rows) == len(grid) == 6
    assert all(r.shape == (8,) and r.allocation is grid.allocation for r in rows)
    np.testing.assert_array_equal(np.stack([r.to_host().sync() for r in rows]), HOST)
    assert [t.shape for t in grid[:, 1:3]] == [(2,)] * 6
    assert list(grid[:0]) == []
    scalar = grid[0, 0]
    with pytest.raises(TypeError, match="0-d"):
        len(scalar)
    with pytest.raises(TypeError, match="0-d"):
        iter(scalar)


def test_truth_value_and_membership_are_refused(grid: cuasync.Tensor) -> None:
    # both would otherwise answer without looking at the data
    with pytest.raises(TypeError, match="truth value"):
        bool(grid)
    with pytest.raises(TypeError, match="to_host"):
        0.0 in grid  # noqa: B015


def test_reshape_and_view(grid: cuasync.Tensor) -> None:
    r = grid.reshape((4, -1))
    assert r.shape == (4, 12) and r.allocation is grid.allocation
    assert grid.view((48,)).shape == (48,)
    np.testing.assert_array_equal(
        r.to_host().sync(), np.arange(48, dtype=np.float32).reshape(4, 12)
    )
    with pytest.raises(ShapeError, match="holds 50 elements but the tensor has 48"):
        grid.reshape((5, 10))
    with pytest.raises(
        ShapeError, match=r"reshape of a view .* to \(12,\) cannot be zero-copy.*\.dup\(\)"
    ):
        grid[:, 1:3].reshape((12,))  # (rows with gaps between them)
    assert grid[:, 1:3].reshape((grid.shape[0], 1, 2)).allocation is grid.allocation


@pytest.mark.parametrize(
    "shape, message",
    [
        (("a", -1), r"shape=\('a', -1\): every dimension must be an int, got str 'a'"),
        ((-1.0, 12), "every dimension must be an int, got float -1.0"),
        ((4, 12.0), "every dimension must be an int, got float 12.0"),
        ((True, 48), "got bool True"),
        ((-1, -1), "one of them may be -1"),
        ((-2, -24), "dimensions must be >= 0"),
        ((-1, 0), "cannot hold the tensor's 48 elements"),
        ((-1, 5), "cannot hold the tensor's 48 elements"),
        ({}, "must be an int or a tuple of ints, got dict"),
        ("48", "must be an int or a tuple of ints, got str"),
        (None, "must be an int or a tuple of ints, got NoneType"),
    ],
)
def test_bad_reshape_targets(grid: cuasync.Tensor, shape: object, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        grid.reshape(shape)  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match=message):
        grid.view(shape)  # type: ignore[arg-type]


def test_reinterpret_checks_size_and_alignment(grid: cuasync.Tensor) -> None:
    bits = grid.reinterpret("uint32")
    assert bits.shape == (6, 8)
    expected = np.arange(48, dtype=np.float32).view(np.uint32).reshape(6, 8)
    np.testing.assert_array_equal(bits.to_host().sync(), expected)
    halves = grid.reinterpret("float16", (96,))
    assert halves.nbytes == grid.nbytes
    with pytest.raises(ShapeError, match="needs 400 bytes, the tensor has 192"):
        grid.reinterpret("float64", (50,))
    with pytest.raises(ShapeError, match="not aligned"):
        grid.reshape((48,))[1:5].reinterpret("float64")
    with pytest.raises(DTypeError):
        grid.reinterpret("nope")


def test_partition(grid: cuasync.Tensor) -> None:
    p = grid.partition((2, 4))
    assert isinstance(p, cuasync.Partition)
    assert p.grid == (3, 2) and p.tile_shape == (2, 4)
    assert p.unpartition() is grid
    with pytest.raises(ShapeError, match="does not divide"):
        grid.partition((4, 4))
    with pytest.raises(ShapeError, match="dimensions"):
        grid.partition((2,))
    with pytest.raises(ArgumentError):
        cuasync.Partition("x", (1,))  # type: ignore[arg-type]
