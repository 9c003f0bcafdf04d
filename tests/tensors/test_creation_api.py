"""The creation functions' array API signatures (issue 34): ``full``'s dtype from its
fill value, ``linspace(start, stop, num, endpoint=)``, ``dtype=None`` as the default
float dtype, ``*_like(x, dtype=, device=)`` and ``asarray(obj, dtype=, device=, copy=)``,
compared with array-api-strict where the standard defines the answer."""

from __future__ import annotations

import collections
import ctypes
from typing import Any

import array_api_strict as xps
import numpy as np
import pytest

import cuasync
from cuasync.errors import ArgumentError, DTypeError

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("fill_value", "expected"),
    [(False, "bool"), (7, "int64"), (2.5, "float32"), (1 + 2j, "complex64"),
     (np.int8(3), "int8"), (np.float64(0.5), "float64")],
)  # fmt: skip
async def test_full_takes_its_dtype_from_the_fill_value(
    anyio_backend: str, fill_value: Any, expected: str
) -> None:
    # the defect: full((), False) and full((2,), 7) gave float32
    t = await cuasync.full((2,), fill_value)
    assert t.dtype == np.dtype(expected)
    assert (await t.to_host()).tolist() == [fill_value] * 2
    if type(fill_value) in (bool, int, float):
        # the standard's default dtypes where float32 is the default float dtype
        info = xps.__array_namespace_info__().default_dtypes()
        assert xps.full((2,), fill_value).dtype in (
            getattr(xps, expected),
            info["integral"],
            info["real floating"],
        )
    assert (await cuasync.full((), False)).dtype == np.dtype(bool)
    assert (await cuasync.full((2,), 7, dtype="int8")).dtype == np.dtype("int8")


async def test_dtype_none_is_the_default_float_dtype(anyio_backend: str) -> None:
    info = cuasync.__array_namespace_info__().default_dtypes()
    for op in (
        cuasync.zeros((2,), None),
        cuasync.ones((2,), dtype=None),
        cuasync.empty((2,), None),
        cuasync.linspace(0, 1, 3),
        cuasync.linspace(0, 1, num=3, dtype=None),
        cuasync.eye(2, dtype=None),
    ):
        assert op.dtype == info["real floating"] == cuasync.float32
        assert (await op).dtype == cuasync.float32


@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("num", [0, 1, 5])
async def test_linspace_takes_num_and_endpoint(
    anyio_backend: str, num: int, endpoint: bool
) -> None:
    t = await cuasync.linspace(-1.0, 2.0, num=num, endpoint=endpoint)
    expected = np.linspace(-1.0, 2.0, num, endpoint=endpoint, dtype=np.float32)
    np.testing.assert_allclose(await t.to_host(), expected, rtol=1e-6)
    strict = xps.linspace(-1.0, 2.0, num=num, endpoint=endpoint, dtype=xps.float32)
    np.testing.assert_allclose(await t.to_host(), np.asarray(strict), rtol=1e-6)


@pytest.mark.parametrize(
    ("start", "stop"),
    [(0, 1 + 2j), (1 - 1j, -3 + 0.3j), (2j, 2j), (np.complex64(1 + 1j), 2.5),
     (np.float32(1), -2j), (1e-320 + 1j, 3e-320 + 1j)],
)  # fmt: skip
@pytest.mark.parametrize("num", [0, 1, 2, 7])
@pytest.mark.parametrize("endpoint", [True, False])
@pytest.mark.parametrize("dtype", [None, "complex64", "complex128"])
async def test_linspace_takes_complex_endpoints(
    anyio_backend: str, start: Any, stop: Any, num: int, endpoint: bool, dtype: Any
) -> None:
    """The standard's complex linspace: numpy's bits (its complex128 steps, or complex64
    for a numpy complex64 endpoint, rounded once); dtype None is complex64, the default
    complex dtype; a real dtype raises."""
    t = await cuasync.linspace(start, stop, num, dtype=dtype, endpoint=endpoint)
    with np.errstate(all="ignore"):
        expected = np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype or "complex64")
    got = await t.to_host()
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
    part = f"u{got.itemsize // 2}"
    np.testing.assert_array_equal(got.view(part), expected.view(part))  # the same bits
    if isinstance(start, complex) and isinstance(stop, complex):
        strict = xps.linspace(start, stop, num=num, endpoint=endpoint, dtype=xps.complex128)
        np.testing.assert_allclose(got, np.asarray(strict), rtol=1e-6)


async def test_complex_linspace_refuses_a_real_dtype(anyio_backend: str) -> None:
    from cuasync.errors import DTypeError

    with pytest.raises(DTypeError, match="is complex but dtype is float32"):
        cuasync.linspace(0, 1j, 3, dtype="float32")
    with pytest.raises(ArgumentError, match="must be finite"):
        cuasync.linspace(complex(float("inf"), 0), 1j, 3)


async def test_like_functions_take_dtype_and_device(anyio_backend: str) -> None:
    x = await cuasync.from_host(np.arange(6, dtype=np.int16).reshape(2, 3))
    dev = x.device
    for like in (cuasync.zeros_like, cuasync.ones_like, cuasync.empty_like):
        y = await like(x, dtype=cuasync.float64, device=dev)
        assert (y.shape, y.dtype, y.device) == ((2, 3), np.dtype("float64"), dev)
        z = await like(x, device=dev.ordinal)
        assert (z.shape, z.dtype, z.device) == ((2, 3), np.dtype("int16"), dev)
    f = await cuasync.full_like(x, 7, dtype="int8", device=dev)
    assert (f.dtype, (await f.to_host()).tolist()) == (np.dtype("int8"), [[7] * 3] * 2)
    assert (await (await cuasync.ones_like(x, dtype=None)).to_host()).dtype == np.int16


async def test_asarray_uploads_host_data(anyio_backend: str) -> None:
    op = cuasync.asarray([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(op, cuasync.TensorOp)
    t = await op
    assert t.dtype == cuasync.float32  # a Python float: the default float dtype
    assert (await t.to_host()).tolist() == [[1.0, 2.0], [3.0, 4.0]]
    h = await cuasync.asarray(np.arange(3), dtype="float16", device=t.device)
    assert h.dtype == cuasync.float16 and (await h.to_host()).tolist() == [0.0, 1.0, 2.0]
    b = await cuasync.asarray(True)
    assert (b.shape, b.dtype) == ((), np.dtype(bool))
    assert (await cuasync.asarray((1, 2), dtype=cuasync.int8)).dtype == cuasync.int8
    assert (await cuasync.asarray(np.float64(0.5))).dtype == cuasync.float64
    with pytest.raises(ArgumentError, match="copy=False"):
        cuasync.asarray([1, 2], copy=False)


async def test_asarray_uploads_any_nested_sequence(anyio_backend: str) -> None:
    """The standard's ``NestedSequence``: any sequence, not lists and tuples alone."""
    t = await cuasync.asarray(range(3))
    assert (t.dtype, (await t.to_host()).tolist()) == (cuasync.int64, [0, 1, 2])
    rows = collections.deque([(1.5, 2.5)])
    assert (await (await cuasync.asarray(rows)).to_host()).tolist() == [[1.5, 2.5]]
    with pytest.raises(DTypeError, match="U2"):  # (a str is a sequence of str)
        cuasync.asarray("ab")


async def test_asarray_uploads_an_object_with_the_buffer_protocol(anyio_backend: str) -> None:
    """The standard's ``SupportsBufferProtocol``: the dtype of the buffer's format, as
    array-api-strict's (``ctypes`` arrays are no sequences; ``bytearray`` is both)."""
    floats = (ctypes.c_float * 3)(1.5, 2.5, 3.5)
    t = await cuasync.asarray(floats)
    assert (t.dtype, (await t.to_host()).tolist()) == (cuasync.float32, [1.5, 2.5, 3.5])
    h = await cuasync.asarray((ctypes.c_int16 * 2)(7, -8), dtype="float64")
    assert (h.dtype, (await h.to_host()).tolist()) == (cuasync.float64, [7.0, -8.0])
    b = await cuasync.asarray(bytearray(b"ab"))
    assert (b.dtype, (await b.to_host()).tolist()) == (cuasync.uint8, [97, 98])
    with pytest.raises(ArgumentError, match="copy=False"):
        cuasync.asarray(floats, copy=False)


async def test_asarray_converts_a_device_array_to_dtype(anyio_backend: str) -> None:
    x = await cuasync.from_host(np.arange(4, dtype=np.float32))
    assert cuasync.asarray(x) is x
    op = cuasync.asarray(x, dtype=cuasync.float16)
    assert isinstance(op, cuasync.TensorOp)
    y = await op
    assert y is not x and y.dtype == cuasync.float16
    assert (await y.to_host()).tolist() == [0.0, 1.0, 2.0, 3.0]
    same = await cuasync.asarray(x, dtype="float32", copy=True)
    assert same is not x and (await same.to_host()).tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ArgumentError, match="copy=False"):
        cuasync.asarray(x, dtype="int32", copy=False)


def test_the_old_keyword_names_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"linspace\(n=\.\.\.\) is deprecated"):
        op = cuasync.linspace(0.0, 1.0, n=3)  # type: ignore[call-arg]
    assert op.sync().to_host().sync().tolist() == [0.0, 0.5, 1.0]
    with pytest.warns(DeprecationWarning, match=r"full\(value=\.\.\.\) is deprecated"):
        op = cuasync.full((2,), value=7)  # type: ignore[call-arg]
    assert op.sync().to_host().sync().tolist() == [7, 7]
    with pytest.raises(ArgumentError, match="pass num once"):
        cuasync.linspace(0.0, 1.0, 3, n=3)  # type: ignore[call-arg]
