"""Copying tensor ops (concatenate, stack, take, tril, triu) and flip vs numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._launch import builtin as _builtin
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops.joins import take_kernel, tri_kernel
from cuasync.errors import ArgumentError, DTypeError, ShapeError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_emu_compile")]

DTYPES = ["bool", "int8", "int16", "float32", "float64", "complex128", "bfloat16", "float8_e4m3fn"]


def host(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return (np.arange(int(np.prod(shape))).reshape(shape) % 7 + 1).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
async def test_every_op_and_element_size(dtype: str, anyio_backend: str) -> None:
    a = host((3, 4, 5), dtype)
    x = await cuasync.from_host(a)
    rev = x[:, ::-1]  # a reversed view is gathered first
    got = await cuasync.concatenate([x, rev, x[:, :1]], axis=1).to_host()
    np.testing.assert_array_equal(got, np.concatenate([a, a[:, ::-1], a[:, :1]], axis=1))
    got = await cuasync.stack([x[0], x[1].T.T, rev[2]], axis=-1).to_host()
    np.testing.assert_array_equal(got, np.stack([a[0], a[1], a[:, ::-1][2]], axis=-1))
    idx = np.array([[4, -1], [0, 2]])
    for itype in ("int32", "int64"):
        i = await cuasync.from_host(idx.astype(itype))
        np.testing.assert_array_equal(
            await cuasync.take(x, i, axis=2).to_host(), np.take(a, idx, 2)
        )
        np.testing.assert_array_equal(
            await cuasync.take(rev, i).to_host(), np.take(a[:, ::-1], idx)
        )
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(await cuasync.tril(x, k).to_host(), np.tril(a, k))
        np.testing.assert_array_equal(await cuasync.triu(rev, k).to_host(), np.triu(a[:, ::-1], k))
    np.testing.assert_array_equal(await cuasync.flip(x, (0, 2)).to_host(), np.flip(a, (0, 2)))


async def test_take_modes_and_errors(anyio_backend: str) -> None:
    a = host((6,), "float32")
    x = await cuasync.from_host(a)
    idx = np.array([-7, 9, 2])
    i = await cuasync.from_host(idx)
    np.testing.assert_array_equal(await cuasync.take(x, i).to_host(), np.take(a, idx, mode="wrap"))
    got = await cuasync.take(x, i, mode="clip").to_host()
    np.testing.assert_array_equal(got, np.take(a, idx, mode="clip"))
    with pytest.raises(DTypeError, match="int32 or int64"):
        cuasync.take(x, await cuasync.from_host(np.array([1.0])))
    with pytest.raises(ArgumentError, match="mode"):
        cuasync.take(x, i, mode="raise")
    with pytest.raises(ArgumentError, match="indices must be a cuasync.Tensor"):
        cuasync.take(x, np.array([1]))  # type: ignore[arg-type]
    with pytest.raises(ArgumentError, match="empty axis"):
        cuasync.take(await cuasync.zeros((0,)), i)


async def test_join_errors(anyio_backend: str) -> None:
    x = await cuasync.zeros((2, 3))
    with pytest.raises(ShapeError, match="must match"):
        cuasync.concatenate([x, await cuasync.zeros((3, 3))], axis=1)
    with pytest.raises(ArgumentError, match="at least one"):
        cuasync.stack([])
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        cuasync.tril(x[0])
    with pytest.raises(ArgumentError, match="out of range"):
        cuasync.concatenate([x], axis=2)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_concatenate_and_take(data: Any) -> None:
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    axis = data.draw(st.integers(-ndim, ndim - 1))
    dtype = data.draw(st.sampled_from(DTYPES))
    parts = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        parts.append(host(tuple(s), dtype))
    xs = [cuasync.from_host(p).sync() for p in parts]
    got = cuasync.concatenate(xs, axis=axis).sync().to_host().sync()
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=axis))
    dim = parts[0].shape[axis]
    if dim:
        idx = np.array(data.draw(st.lists(st.integers(-dim, dim - 1), max_size=5)), np.int64)
        i = cuasync.from_host(idx).sync()
        got = cuasync.take(xs[0], i, axis=axis).sync().to_host().sync()
        np.testing.assert_array_equal(got, np.take(parts[0], idx, axis=axis))


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_every_join_kernel_compiles() -> None:
    kernels = [take_kernel(size, i) for size in _builtin.FILL_DTYPES for i in ("int32", "int64")]
    kernels += [tri_kernel(size) for size in _builtin.FILL_DTYPES]
    for k in kernels:
        image, _ = k.compile_image("sm_90")
        assert image[:4] == b"\x7fELF"


# -- issue 34: the array API's concatenate and stack -----------------------------------------
async def test_concatenate_and_stack_promote_mixed_dtypes(anyio_backend: str) -> None:
    # The standard's type promotion (numpy's result_type): they raised DTypeError.
    a, b = host((2, 3), "float64"), host((2, 3), "float32")
    x, y = await cuasync.from_host(a), await cuasync.from_host(b)
    got = await cuasync.stack([x, y]).to_host()
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, np.stack([a, b]))
    i = await cuasync.from_host(host((2, 3), "int8"))
    got = await cuasync.concatenate([y[:, ::-1], i], axis=1).to_host()  # gathered + converted
    want = np.concatenate([b[:, ::-1], host((2, 3), "int8")], axis=1)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    got = await cuasync.concatenate([i, await cuasync.from_host(host((1, 3), "int16"))]).to_host()
    assert got.dtype == np.int16


async def test_concatenate_axis_none_flattens_first(anyio_backend: str) -> None:
    # The standard: axis=None concatenates the flattened arrays (C order); it was refused.
    a, b = host((2, 3, 2), "int16"), host((3,), "float32")
    x, y = await cuasync.from_host(a), await cuasync.from_host(b)
    z = await cuasync.from_host(np.float32(9))  # 0-d: one element
    got = await cuasync.concatenate([x[:, ::-1].T, y, z], axis=None).to_host()
    want = np.concatenate([a[:, ::-1].T, b, np.float32(9)], axis=None)
    assert got.shape == (16,) and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    empty = await cuasync.concatenate([x[:0], y[:0]], axis=None)
    assert empty.shape == (0,)
