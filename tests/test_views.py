"""Zero-copy structural views (transpose, permute_dims, broadcast_to, expand_dims, squeeze,
diagonal, reversed slices) vs numpy, and the errors of indexing that would copy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync.errors import ArgumentError, ShapeError, UnsupportedIndexError

HOST = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


@pytest.fixture(scope="module")
def cube() -> cuasync.Tensor:
    return cuasync.from_host(HOST).sync()


def same(view: cuasync.Tensor, want: np.ndarray, base: cuasync.Tensor) -> None:
    assert view.shape == want.shape
    assert view.allocation is base.allocation  # zero-copy
    np.testing.assert_array_equal(view.to_host().sync(), want)
    np.testing.assert_array_equal(view.dup().sync().to_host().sync(), want)


def test_transpose_and_permute_dims(cube: cuasync.Tensor) -> None:
    same(cube.T, HOST.T, cube)
    same(cube.transpose(), HOST.transpose(), cube)
    same(cube.transpose(1, 0, 2), HOST.transpose(1, 0, 2), cube)
    same(cube.transpose((2, 0, 1)), HOST.transpose((2, 0, 1)), cube)
    same(cuasync.permute_dims(cube, (0, 2, 1)), np.permute_dims(HOST, (0, 2, 1)), cube)
    same(cube.transpose(-1, 0, 1), HOST.transpose(-1, 0, 1), cube)
    with pytest.raises(ArgumentError, match="not a permutation"):
        cube.transpose(0, 0, 1)
    with pytest.raises(ArgumentError, match="out of range"):
        cuasync.permute_dims(cube, (0, 1, 3))


def test_broadcast_expand_squeeze_diagonal(cube: cuasync.Tensor) -> None:
    row = cube[0, 0]
    same(cuasync.broadcast_to(row, (2, 3, 5)), np.broadcast_to(HOST[0, 0], (2, 3, 5)), cube)
    same(cuasync.expand_dims(cube, (0, -1)), np.expand_dims(HOST, (0, -1)), cube)
    one = cube[:1, :, None]
    same(cuasync.squeeze(one), np.squeeze(HOST[:1, :, None]), cube)
    same(cuasync.squeeze(one, axis=2), np.squeeze(HOST[:1, :, None], axis=2), cube)
    for offset in (-2, -1, 0, 1, 3, 7):
        same(cuasync.diagonal(cube[0], offset), np.diagonal(HOST[0], offset), cube)
    same(cuasync.diagonal(cube, 1, 2, 0), np.diagonal(HOST, 1, 2, 0), cube)
    with pytest.raises(ShapeError, match="cannot be broadcast"):
        cuasync.broadcast_to(row, (3, 4))
    with pytest.raises(ShapeError, match="not 1"):
        cuasync.squeeze(cube, axis=0)
    with pytest.raises(ArgumentError, match="same axis"):
        cuasync.diagonal(cube, 0, 1, -2)
    with pytest.raises(ArgumentError, match="x must be a cuasync.Tensor"):
        cuasync.expand_dims(np.ones(3), 0)  # type: ignore[arg-type]


def test_reversed_slices_and_newaxis(cube: cuasync.Tensor) -> None:
    for index in (
        (slice(None, None, -1),),
        (slice(None), slice(3, 0, -2)),
        (None, slice(None, None, -1), ..., slice(None, None, -3)),
        (1, slice(-1, None, -1), None),
        (slice(2, 2, -1),),
    ):
        same(cube[index], HOST[index], cube)
    x = cube[::-1, :, ::-2]
    got = cuasync.sum(x * 2.0, axis=1).sync().to_host().sync()
    np.testing.assert_allclose(got, (HOST[::-1, :, ::-2] * 2).sum(axis=1))
    dst = cuasync.zeros(x.shape).sync()
    cuasync.memcpy(dst, x).sync()
    np.testing.assert_array_equal(dst.to_host().sync(), HOST[::-1, :, ::-2])
    strided = cuasync.zeros((3, 4, 6)).sync()[:, :, ::2]  # a forward view: gathered, then copied
    cuasync.memcpy(strided, x[..., ::-1]).sync()
    np.testing.assert_array_equal(strided.to_host().sync(), HOST[::-1, :, ::-2][..., ::-1])
    with pytest.raises(ShapeError, match="cannot be written by a copy"):
        cuasync.memcpy(x, dst)


def test_copying_indices_assignment_and_numpy_conversion_raise(cube: cuasync.Tensor) -> None:
    with pytest.raises(TypeError, match=r"cuasync\.take"):
        cube[np.array([0, 1])]
    with pytest.raises(UnsupportedIndexError, match=r"cuasync\.where"):
        cube[np.ones((3, 4, 5), bool)]
    with pytest.raises(TypeError, match=r"cuasync\.fill.*cuasync\.memcpy"):
        cube[0] = 1.0
    with pytest.raises(TypeError, match=r"await t\.to_host\(\)"):
        np.asarray(cube)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_chains_of_views_match_numpy(data: Any) -> None:
    ndim = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    dtype = SUPPORTED[data.draw(st.sampled_from(sorted(SUPPORTED)))]  # FP8 and complex too
    a = (np.arange(int(np.prod(shape))) % 61).astype(dtype).reshape(shape)
    x = cuasync.from_host(a).sync()
    base = x
    for _ in range(3):
        kind = data.draw(st.sampled_from(["slice", "T", "perm", "expand", "squeeze", "bcast"]))
        if kind == "slice" and a.ndim:
            index = tuple(
                slice(
                    None,
                    None,
                    data.draw(st.sampled_from([1, 2, -1, -2])),
                )
                for _ in range(a.ndim)
            )
            a, x = a[index], x[index]
        elif kind == "T":
            a, x = a.T, x.T
        elif kind == "perm" and a.ndim:
            perm = tuple(data.draw(st.permutations(range(a.ndim))))
            a, x = a.transpose(perm), cuasync.permute_dims(x, perm)
        elif kind == "expand" and a.ndim < 5:
            axis = data.draw(st.integers(-a.ndim - 1, a.ndim))
            a, x = np.expand_dims(a, axis), cuasync.expand_dims(x, axis)
        elif kind == "squeeze":
            a, x = np.squeeze(a), cuasync.squeeze(x)
        elif kind == "bcast":
            new = (2, *a.shape)
            a, x = np.broadcast_to(a, new), cuasync.broadcast_to(x, new)
    assert x.shape == a.shape and x.allocation is base.allocation
    got = np.ascontiguousarray(x.to_host().sync())
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(a).view(np.uint8))


@pytest.mark.anyio
@pytest.mark.usefixtures("no_emu_compile")  # the reductions' sources: test_reductions.py
async def test_astype_item_like_and_repr(anyio_backend: str) -> None:
    x = await cuasync.from_host(np.arange(6.0).reshape(2, 3))
    assert repr(x.T) == "<cuasync.Tensor shape=(3, 2) dtype=float64 device=0 strides=(1, 3)>"
    h = x.astype("float16")
    assert isinstance(h, cuasync.TensorOp) and h.dtype == np.float16
    np.testing.assert_array_equal(await h.to_host(), np.arange(6.0).reshape(2, 3).astype("f2"))
    got = await (x[:, ::-1] * 2.0).astype("int32").to_host()
    np.testing.assert_array_equal(got, (np.arange(6.0).reshape(2, 3)[:, ::-1] * 2).astype("i4"))
    assert await x[1, 2].item() == 5.0
    total = await cuasync.sum(x).item()
    assert total == 15.0 and type(total) is float
    assert await cuasync.argmax(x).item() == 5
    with pytest.raises(ShapeError, match="exactly one element"):
        x.item()
    for fn, args, want in (
        (cuasync.zeros_like, (), np.zeros((2, 3))),
        (cuasync.ones_like, (), np.ones((2, 3))),
        (cuasync.full_like, (7,), np.full((2, 3), 7.0)),
    ):
        np.testing.assert_array_equal(await fn(x, *args).to_host(), want)
    op = x * 1.0
    f = await cuasync.full_like(op, 3, dtype="int8", shape=(4,))  # op's shape is known
    assert (f.shape, f.dtype) == ((4,), np.int8)
    await op
    e = cuasync.empty_like(x)
    assert (e.shape, e.dtype, e.device) == (x.shape, x.dtype, x.device)
    await e
    with pytest.raises(ArgumentError, match="x must be"):
        cuasync.zeros_like(np.zeros(3))


@pytest.mark.skipif(cuasync.device_count() < 2, reason="needs two devices")
def test_reversed_views_copy_between_devices(cube: cuasync.Tensor) -> None:
    view = cube[::-1, :, ::-2]
    np.testing.assert_array_equal(view.to(1).sync().to_host().sync(), HOST[::-1, :, ::-2])
    dst = cuasync.zeros(view.shape, device=1).sync()
    cuasync.memcpy(dst, view).sync()
    np.testing.assert_array_equal(dst.to_host().sync(), HOST[::-1, :, ::-2])
