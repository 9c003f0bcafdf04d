"""Tensor metadata, zero-copy views and their bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync.errors import ArgumentError, DTypeError, ShapeError


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


@pytest.mark.parametrize("shape", [(-1,), (2.5,), ("3",), object()])
def test_bad_shapes(shape: object) -> None:
    with pytest.raises(ShapeError, match="shape"):
        cuasync.zeros(shape)


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


@pytest.mark.parametrize(
    "index, message",
    [
        ((6,), "index 6 is out of range for axis 0 with size 6"),
        ((slice(0, 9),), "slice stop=9 is out of range for axis 0"),
        ((slice(None), slice(-9, None)), "slice start=-9 is out of range for axis 1"),
        ((0, 0, 0), "too many indices"),
        ((slice(None, None, -1),), "step on axis 0 must be a positive int"),
        (([0, 1],), "unsupported index"),
    ],
)
def test_bad_indices(grid: cuasync.Tensor, index: tuple[object, ...], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        grid[index]


def test_reshape_and_view(grid: cuasync.Tensor) -> None:
    r = grid.reshape((4, -1))
    assert r.shape == (4, 12) and r.allocation is grid.allocation
    assert grid.view((48,)).shape == (48,)
    np.testing.assert_array_equal(
        r.to_host().sync(), np.arange(48, dtype=np.float32).reshape(4, 12)
    )
    with pytest.raises(ShapeError, match="holds 50 elements but the tensor has 48"):
        grid.reshape((5, 10))
    with pytest.raises(ShapeError, match=r"non-contiguous view.*\.dup\(\)"):
        grid[:, 1:3].reshape((12,))


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
