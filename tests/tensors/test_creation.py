"""The creation API (ones, full, fill, arange, linspace, eye, convert, rand, randn) vs numpy.

Every op is a built-in CUDA kernel with a numpy twin; on the emulator the twin runs, on a
GPU the kernel does, and both must give numpy's values.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import ON_EMULATOR, run_script
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._dtypes import SUPPORTED
from cuasync._launch import builtin as _builtin
from cuasync._launch import twins as _twins
from cuasync.errors import (
    ArgumentError,
    CaptureError,
    DTypeError,
    InvalidDeviceError,
    OutOfMemoryError,
    ShapeError,
)

pytestmark = pytest.mark.anyio

ALL = [name for name in SUPPORTED]
REAL_FLOATS = ["float16", "bfloat16", "float32", "float64"]
NUMERIC = [n for n in ALL if n != "bool"]


def np_dtype(name: str) -> np.dtype[Any]:
    return SUPPORTED[name]


def host(t: cuasync.Tensor) -> np.ndarray:
    return t.to_host().sync()


def same(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal dtype, shape and bits (NaNs compare by their bits)."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    a = np.ascontiguousarray(actual)
    e = np.ascontiguousarray(expected)
    np.testing.assert_array_equal(a.view(np.uint8), e.view(np.uint8))


def representative(name: str) -> Any:
    """A value every dtype can hold that is not 0 or 1."""
    return {"bool": True, "complex64": 1.5 - 2j, "complex128": -0.25 + 3j}.get(
        name, 3 if np_dtype(name).kind in "iu" else -2.5 if name != "bool" else True
    )


# -- ones / full / fill ----------------------------------------------------------------------
async def test_ones_and_full_every_dtype(anyio_backend) -> None:
    for name in ALL:
        dt = np_dtype(name)
        same(await (await cuasync.ones((2, 3), name)).to_host(), np.ones((2, 3), dt))
        value = representative(name)
        got = await (await cuasync.full((3, 1, 2), value, name)).to_host()
        same(got, np.full((3, 1, 2), value, dt))


def test_defaults_and_scalar_and_empty_shapes() -> None:
    assert cuasync.ones(4).sync().dtype == np.float32
    same(host(cuasync.full((), 7.0).sync()), np.full((), 7.0, np.float32))
    empty = cuasync.ones((0, 3), "int16").sync()
    assert empty.shape == (0, 3) and host(empty).shape == (0, 3)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("int8", -128),
        ("uint64", 2**64 - 1),
        ("int64", -(2**63)),
        ("float16", 65504.0),
        ("float16", 65519.0),  # rounds to 65504, not to inf
        ("float32", 1e-45),
        ("float64", float("inf")),
        ("float32", float("-inf")),
        ("int32", 7.0),  # an integral float is fine for an integer dtype
        ("complex64", 2),
        ("float64", 3 + 0j),  # complex with no imaginary part is a real
        ("bool", 0),
        ("uint8", np.uint8(200)),
        ("float32", np.float64(0.1)),
    ],
)
def test_full_edge_values(name: str, value: Any) -> None:
    expected = np.full((5,), value.real if isinstance(value, complex) else value, np_dtype(name))
    same(host(cuasync.full((5,), value, name).sync()), expected)


def test_full_nan_keeps_a_nan() -> None:
    for name in REAL_FLOATS:
        out = host(cuasync.full((3,), float("nan"), name).sync()).astype(np.float64)
        assert np.isnan(out).all()


def test_fill_values_seen_before_keep_their_own_bits() -> None:
    # full keeps the bits of the Python numbers it has filled with (a service's few
    # values): each value is its own, to the bit, and a value a dtype cannot hold is
    # refused every time
    for _ in range(2):
        assert np.signbit(host(cuasync.full((3,), -0.0, "float32").sync())).all()
        assert not np.signbit(host(cuasync.full((3,), 0.0, "float32").sync())).any()
        assert (
            host(cuasync.full((2,), -0.0, "complex64").sync()).view(np.uint32)
            == [0x80000000, 0, 0x80000000, 0]
        ).all()
        same(host(cuasync.full((2,), True, "int8").sync()), np.ones(2, np.int8))
        same(host(cuasync.full((2,), 1.0, "float16").sync()), np.ones(2, np.float16))
        same(host(cuasync.full((2,), 1, "float64").sync()), np.ones(2, np.float64))
        with pytest.raises(ArgumentError, match="does not fit"):
            cuasync.full((2,), 300, "int8")


def test_a_fill_past_any_device_is_out_of_memory_every_time() -> None:
    # the fill's kernel seen (its one-launch path in use), a size no size_t holds is
    # still the long way's OutOfMemoryError, not a conversion error from the driver
    cuasync.full((4,), 1.0).sync()
    for _ in range(2):
        with pytest.raises(OutOfMemoryError):
            cuasync.full((2**40, 2**30), 1.0).sync()


async def test_fill_strided_views(anyio_backend) -> None:
    for name in ("float16", "float32", "int8", "complex128", "bool"):
        dt = np_dtype(name)
        base = np.arange(48).reshape(6, 8).astype(dt)
        t = await cuasync.from_host(base)
        value = representative(name)
        out = await cuasync.fill(t[1:5:2, ::3], value)
        assert out.shape == (2, 3) and out.allocation is t.allocation
        expected = base.copy()
        expected[1:5:2, ::3] = value
        same(await t.to_host(), expected)


def test_fill_views_with_more_than_four_dimensions() -> None:
    shape = (2, 3, 2, 3, 2, 4)
    base = np.zeros(shape, np.float32)
    t = cuasync.from_host(base).sync()
    index = (slice(None), slice(0, 3, 2), slice(None), slice(1, 3), slice(None), slice(0, 4, 3))
    cuasync.fill(t[index], -1.5).sync()
    base[index] = -1.5
    same(host(t), base)


def test_fill_outputs_the_tensor_and_chains() -> None:
    t = cuasync.zeros((4,), "int32").then(lambda z: cuasync.fill(z, 9)).sync()
    same(host(t), np.full(4, 9, np.int32))
    t2 = cuasync.zeros((0,)).sync()
    assert cuasync.fill(t2, 1.0).sync() is t2


# -- arange / linspace ------------------------------------------------------------------
async def test_arange_matches_numpy(anyio_backend) -> None:
    for name in NUMERIC:
        for n in (0, 1, 7, 100):
            got = await (await cuasync.arange(n, dtype=name)).to_host()
            same(got, np.arange(n).astype(np_dtype(name)))


def test_arange_large_float16_and_bool() -> None:
    same(host(cuasync.arange(3000, dtype="float16").sync()), np.arange(3000, dtype=np.float16))
    same(host(cuasync.arange(2, dtype="bool").sync()), np.array([False, True]))
    same(host(cuasync.arange(128, dtype="int8").sync()), np.arange(128, dtype=np.int8))


#: numpy.arange, untyped: its stubs take fewer forms than numpy itself does.
np_arange: Any = np.arange

ARANGE_CASES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((5,), {"dtype": "int64"}),
    ((2, 9), {}),  # ints: int64
    ((10, 0, -3), {}),  # a negative step
    ((0, 1, 0.1), {}),  # a float step: float32 (the default), ceil((1 - 0) / 0.1) = 10 values
    ((1.0, 0.0, -0.25), {}),
    ((-3.5,), {}),  # one float: float32, no values
    ((5, 1), {}),  # empty
    ((0, 0), {}),
    ((1e-300, 0, 1e300), {}),  # the quotient underflows: numpy's rule
    ((0.3, 1e5, 0.7), {"dtype": "float32"}),  # numpy's fill: float arithmetic
    ((0.3, 1e4, 0.7), {"dtype": "float16"}),
    ((0, 100, 0.7), {"dtype": "bfloat16"}),
    ((0, 100, 0.7), {"dtype": "float8_e4m3fn"}),
    ((0, 20, 3), {"dtype": "complex64"}),
    ((0, 10, 1.5), {"dtype": "int8"}),  # numpy's quirk: 0, 1, 2, ..., 6
    ((10, 0, -1), {"dtype": "uint8"}),
    ((2**64 - 3, 2**64 - 1), {"dtype": "uint64"}),
    ((2**62, 2**62 + 3), {}),
    ((np.float32(0.1), 2, np.float32(0.3)), {}),  # numpy scalars compute as numpy's
    ((np.int32(3), np.int8(9)), {}),  # int64, as numpy promotes
    ((np.uint64(4), 9), {}),  # numpy promotes uint64 and int64 to float64
]


def numpy_kw(args: Sequence[Any], kw: dict[str, Any]) -> dict[str, Any]:
    """numpy.arange's keywords for cuasync.arange's: a Python float without a dtype makes
    cuasync's default float dtype, float32 (numpy's: float64)."""
    if kw.get("dtype") is None and any(type(a) is float for a in args):
        return {**kw, "dtype": "float32"}
    return kw


@pytest.mark.parametrize(("args", "kw"), ARANGE_CASES, ids=[str(c) for c in ARANGE_CASES])
def test_arange_follows_numpy_signature_and_values(
    args: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    want = np_arange(*args, **{k: np_dtype(v) for k, v in numpy_kw(args, kw).items()})
    got = host(cuasync.arange(*args, **kw).sync())
    same(got, want)  # dtype, length and every bit


def test_arange_keywords_and_device() -> None:
    same(host(cuasync.arange(stop=4).sync()), np_arange(stop=4))
    same(host(cuasync.arange(start=2, stop=8, step=3).sync()), np.arange(2, 8, 3))
    same(host(cuasync.arange(5, step=2).sync()), np_arange(5, step=2))
    same(host(cuasync.arange(0, 5, 1, "int16").sync()), np_arange(0, 5, 1, np.int16))
    last = cuasync.device_count() - 1  # device 1 where there are two, else device 0
    t = cuasync.arange(1, 4, device=last).sync()
    assert t.device.ordinal == last and t.dtype == np.int64


def test_arange_of_one_int_keeps_float32_for_now_and_says_so() -> None:
    # 0.1's default: arange(n) made float32. It still does, and warns it will be int64.
    with pytest.warns(FutureWarning, match=r"arange\(5\) without a dtype makes float32.*int64"):
        t = cuasync.arange(5)
    same(host(t.sync()), np.arange(5, dtype=np.float32))
    with pytest.warns(FutureWarning):
        same(host(cuasync.arange(np.int16(3)).sync()), np.arange(3, dtype=np.float32))
    with pytest.warns(FutureWarning):
        cuasync.arange(0).sync()
    # every other form, and an explicit dtype, does not warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ops = [cuasync.arange(5, dtype="float32"), cuasync.arange(0, 5)]
        ops += [cuasync.arange(5.0), cuasync.arange(stop=5)]
        assert [op.dtype for op in ops] == [np.float32, np.int64, np.float32, np.int64]
        for op in ops:
            op.sync()


def test_positional_dtype_and_n_keyword_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match=r"write cuasync\.arange\(stop, dtype='int32'\)"):
        op = cuasync.arange(4, "int32")  # type: ignore[arg-type]
    same(host(op.sync()), np.arange(4, dtype=np.int32))
    with pytest.warns(DeprecationWarning, match="second positional"):
        same(host(cuasync.arange(3, np.float64).sync()), np.arange(3, dtype=np.float64))  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match=r"arange\(n=\.\.\.\) is deprecated"):
        op = cuasync.arange(n=3, dtype="int8")  # type: ignore[call-arg]
    same(host(op.sync()), np.arange(3, dtype=np.int8))
    with pytest.warns(DeprecationWarning, match=r"write cuasync\.eye\(N, dtype='float64'\)"):
        op = cuasync.eye(3, "float64")  # type: ignore[arg-type]
    same(host(op.sync()), np.eye(3))
    with pytest.warns(DeprecationWarning, match=r"eye\(n=\.\.\.\)"):
        op = cuasync.eye(n=2)  # type: ignore[call-arg]
    same(host(op.sync()), np.eye(2, dtype=np.float32))
    # the warning points at the caller's line, not at cuasync
    with pytest.warns(DeprecationWarning) as record:
        cuasync.arange(2, "int8").sync()  # type: ignore[arg-type]
    assert record[0].filename == __file__


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    start=st.one_of(st.integers(-50, 50), st.floats(-50, 50, allow_nan=False, width=32)),
    stop=st.one_of(st.none(), st.integers(-60, 60), st.floats(-60, 60, allow_nan=False)),
    step=st.one_of(
        st.none(),
        st.integers(-7, 7).filter(bool),
        st.floats(-7, 7, allow_nan=False).filter(lambda v: abs(v) > 0.05),
    ),
    dtype=st.sampled_from(
        [None, "int64", "int16", "uint8", "float32", "float64", "float16", "bfloat16"]
    ),
)
def test_property_arange_matches_numpy(start: Any, stop: Any, step: Any, dtype: Any) -> None:
    if stop is None and step is not None:
        stop, start = start, 0
    args = [start] if stop is None else [start, stop] if step is None else [start, stop, step]
    if stop is None and dtype is None and isinstance(start, int):
        dtype = "float32"  # arange(n)'s default for now, which warns: tested on its own
    kw = {} if dtype is None else {"dtype": dtype}
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np_arange(*args, **{k: np_dtype(v) for k, v in numpy_kw(args, kw).items()})
    except (ValueError, TypeError, OverflowError):  # a start that does not fit, ...
        with pytest.raises(ArgumentError):
            cuasync.arange(*args, **kw)
        return
    try:
        op = cuasync.arange(*args, **kw)
    except ArgumentError:
        # only where numpy's values wrapped around or overflowed the dtype
        if want.dtype.kind in "iu":
            a = 0 if len(args) == 1 else args[0]
            first = math.trunc(a)
            second = math.trunc(a + (args[2] if len(args) == 3 else 1))
            exact = [first + i * (second - first) for i in range(want.size)]
            assert want.tolist() != exact
        else:
            assert not np.isfinite(want.astype(np.float64)).all()
        return
    same(host(op.sync()), want)


LINSPACE_CASES = [
    (0.0, 1.0, 5),
    (-3.0, 7.0, 11),
    (10.0, -10.0, 7),
    (0.1, 0.7, 13),
    (2.5, 2.5, 4),
    (1.0, 2.0, 1),
    (1.0, 2.0, 0),
    (0.0, 5e-324, 5),  # the step underflows to 0: numpy divides first
    (-1e6, 1e6, 1001),
]


@pytest.mark.parametrize(("start", "stop", "n"), LINSPACE_CASES)
def test_linspace_matches_numpy_float64(start: float, stop: float, n: int) -> None:
    same(host(cuasync.linspace(start, stop, n, "float64").sync()), np.linspace(start, stop, n))


async def test_linspace_matches_numpy_every_dtype(anyio_backend) -> None:
    for name in NUMERIC:
        dt = np_dtype(name)
        lo = 0 if dt.kind == "u" else -7
        for start, stop, n in ((lo, 50, 9), (0, 3, 4), (lo, lo + 1, 3)):
            got = await (await cuasync.linspace(start, stop, n, name)).to_host()
            same(got, np.linspace(start, stop, n, dtype=dt))


def test_linspace_ints_are_floored() -> None:
    got = host(cuasync.linspace(-2, 3, 8, "int32").sync())
    same(got, np.linspace(-2, 3, 8, dtype=np.int32))
    assert got[1] == -2  # floor(-1.2857...), not truncation toward zero


@pytest.mark.parametrize(("start", "stop", "n"), LINSPACE_CASES)
def test_linspace_endpoint_false_matches_numpy(start: float, stop: float, n: int) -> None:
    # issue 34: the array API's linspace takes endpoint; cuasync's had none.
    got = host(cuasync.linspace(start, stop, n, "float64", endpoint=False).sync())
    same(got, np.linspace(start, stop, n, endpoint=False))
    got = host(cuasync.linspace(-2, 3, n, "int16", endpoint=False).sync())
    same(got, np.linspace(-2, 3, n, endpoint=False, dtype=np.int16))
    with pytest.raises(ArgumentError, match="endpoint must be a bool"):
        cuasync.linspace(start, stop, n, endpoint="no")  # type: ignore[arg-type]


# -- eye ----------------------------------------------------------------------------------
async def test_eye_and_eye_rect(anyio_backend) -> None:
    for name in ALL:
        dt = np_dtype(name)
        same(await (await cuasync.eye(4, dtype=name)).to_host(), np.eye(4, dtype=dt))
        for rows, cols in ((2, 5), (5, 2), (1, 1), (0, 3)):
            got = await (await cuasync.eye_rect(rows, cols, name)).to_host()
            same(got, np.eye(rows, cols, dtype=dt))
            same(await (await cuasync.eye(rows, cols, dtype=name)).to_host(), got)


@pytest.mark.parametrize("shape", [(4, 4), (3, 6), (6, 3), (1, 5), (0, 2), (2, 0)])
@pytest.mark.parametrize("k", [0, 1, 2, -1, -2, 5, -7])
def test_eye_offsets_the_diagonal_like_numpy(shape: tuple[int, int], k: int) -> None:
    n, m = shape
    same(host(cuasync.eye(n, m, k).sync()), np.eye(n, m, k, dtype=np.float32))
    same(host(cuasync.eye(n, m, k=np.int8(k), dtype="int16").sync()), np.eye(n, m, k, np.int16))
    same(host(cuasync.eye(N=n, M=m, k=k, dtype="bool").sync()), np.eye(n, m, k, bool))


def test_eye_defaults_to_float32() -> None:
    square, wide = cuasync.eye(2), cuasync.eye(2, 3)
    assert square.dtype == np.float32 and wide.shape == (2, 3)
    same(host(square.sync()), np.eye(2, dtype=np.float32))
    same(host(wide.sync()), np.eye(2, 3, dtype=np.float32))


# -- convert ------------------------------------------------------------------------------
def source_values(name: str) -> np.ndarray:
    """Values that every destination dtype can take without undefined behaviour."""
    dt = np_dtype(name)
    if name == "bool":
        return np.array([True, False, True, True, False, False])
    if dt.kind == "u":
        return np.array([0, 1, 2, 7, 100, 127], dtype=dt)
    if dt.kind == "i":
        return np.array([0, 1, -2, 7, -100, 127], dtype=dt)
    if dt.kind == "c":
        return np.array([0, 1.5 + 2j, -2.25j, 7.75, 100 - 1j, 0.5], dtype=dt)
    values = [0.0, 1.5, 2.75, 7.25, 100.5, 0.375]
    return np.array(values, dtype=dt)


def numpy_cast(a: np.ndarray, name: str) -> np.ndarray:
    dt = np_dtype(name)
    with np.errstate(all="ignore"):
        if a.dtype.kind == "c" and dt.kind != "c":
            return (a != 0) if dt.kind == "b" else a.real.astype(dt)
        return a.astype(dt)


async def test_convert_every_pair_matches_numpy(anyio_backend) -> None:
    for src_name in ALL:
        a = source_values(src_name)
        t = await cuasync.from_host(a)
        for dst_name in ALL:
            got = await (await cuasync.convert(t, dst_name)).to_host()
            same(got, numpy_cast(a, dst_name))


@pytest.mark.parametrize(
    ("src", "dst", "values"),
    [
        ("float64", "float16", [1 + 2**-11 + 2**-40, 65519.0, 65520.0, 1e-8, -3e-5, 2**-24]),
        ("float64", "float32", [0.1, 1e-40, 3.5e38, -1e300]),
        ("float32", "float16", [0.1, 6.1e-5, -65504.0, 1e-7]),
        ("int64", "float32", [2**24 + 1, 2**53 + 1, -(2**62) - 1]),
        ("int64", "float64", [2**53 + 1, 2**63 - 1]),
        ("uint64", "float64", [2**64 - 1, 2**63 + 2**11 + 1]),
        ("float64", "int32", [-2.9, 2.9, -0.5, 1e9]),
        ("float32", "uint8", [0.0, 255.9, 3.99]),
        ("float64", "bool", [0.0, -0.0, 1e-300, float("nan")]),
        ("int32", "int8", [127, 128, -129, 1000]),  # wraps, as in numpy
        ("uint16", "int16", [65535, 32768]),
        ("float64", "complex64", [0.1, -2.0]),
        ("complex128", "complex64", [0.1 + 0.2j]),
        ("complex128", "float32", [1.5 + 7j]),
    ],
)
def test_convert_rounding_and_wrapping(src: str, dst: str, values: list[Any]) -> None:
    a = np.array(values, dtype=np_dtype(src))
    same(host(cuasync.convert(cuasync.from_host(a).sync(), dst).sync()), numpy_cast(a, dst))


def test_convert_bfloat16_rounds_through_float32_like_ml_dtypes() -> None:
    sources = {
        # 1 + 2^-8 + 2^-40 rounds to a tie in float32, then to even: 1.0 (not 1 + 2^-7)
        "float64": [1 + 2**-8 + 2**-40, 1e-39, -3.0, 1e38, 3.4e38, float("nan")],
        "int64": [2**25 + 2**17 + 1, -(2**40) - 1, 7],
        "float16": [1.5, -0.1, 65504.0, 6e-8],
        "float32": [1.00390625, 1e-39, -3.0e38],
    }
    for src, values in sources.items():
        a = np.array(values, dtype=np_dtype(src))
        got = host(cuasync.convert(cuasync.from_host(a).sync(), "bfloat16").sync())
        same(got, numpy_cast(a, "bfloat16"))
    b = np.array([1.0, -2.5, 3e38, 1e-39, -7.75], np_dtype("bfloat16"))
    for dst in ("float16", "float32", "float64", "complex64", "bool"):
        got = host(cuasync.convert(cuasync.from_host(b).sync(), dst).sync())
        same(got, numpy_cast(b, dst))
    b = np.array([1.0, 2.5, 200.0, 7.75], np_dtype("bfloat16"))  # in range for every int
    for dst in ("int16", "uint8", "int64"):
        got = host(cuasync.convert(cuasync.from_host(b).sync(), dst).sync())
        same(got, numpy_cast(b, dst))


def test_bfloat16_without_ml_dtypes_says_to_install_it() -> None:
    # A broken install (ml_dtypes is a dependency), in a fresh interpreter that cannot import it.
    code = (
        "import sys; sys.modules['ml_dtypes'] = None\n"
        "import cuasync\n"
        "try:\n"
        "    cuasync.zeros(2, 'bfloat16')\n"
        "except cuasync.errors.DTypeError as e:\n"
        "    print(e)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    r = run_script(code, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    assert "dtype='bfloat16' needs ml_dtypes" in r.stdout and "pip install ml_dtypes" in r.stdout


def test_convert_strided_and_high_dimensional_sources() -> None:
    a = np.arange(2 * 3 * 4 * 5 * 6 * 2, dtype=np.float64).reshape(2, 3, 4, 5, 6, 2)
    t = cuasync.from_host(a).sync()
    view = t[:, ::2, 1:, :, ::5, 1]
    out = cuasync.convert(view, "int32").sync()
    assert out.is_contiguous and out.shape == view.shape
    same(host(out), a[:, ::2, 1:, :, ::5, 1].astype(np.int32))
    col = cuasync.convert(t.reshape((-1, 4))[:, 2], "float16").sync()
    same(host(col), a.reshape(-1, 4)[:, 2].astype(np.float16))
    empty = cuasync.convert(t[:, :0], "int8").sync()
    assert empty.shape == (2, 0, 4, 5, 6, 2)


def test_convert_runs_on_the_tensors_device() -> None:
    if cuasync.device_count() < 2:
        pytest.skip("needs 2 devices")
    t = cuasync.arange(6, dtype="float32", device=1).sync()
    out = cuasync.convert(t, "int64").sync()
    assert out.device.ordinal == 1
    same(host(out), np.arange(6, dtype=np.int64))
    assert cuasync.ones(3, device=1).sync().device.ordinal == 1


# -- Philox ----------------------------------------------------------------------------------
# Known-answer vectors of Philox4x32-10 from Random123 (D. E. Shaw Research), file
# tests/kat_vectors, lines "philox4x32 10 <counter x4> <key x2> <expected x4>".
PHILOX_KAT = [
    ((0x00000000, 0x00000000, 0x00000000, 0x00000000), (0x00000000, 0x00000000),
     (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF),
     (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]  # fmt: skip


@pytest.mark.parametrize(("counter", "key", "expected"), PHILOX_KAT)
def test_philox_numpy_twin_known_answers(counter: Any, key: Any, expected: Any) -> None:
    got = _twins.philox4x32_10(np.array(counter, np.uint32), key)
    assert [int(w) for w in got] == list(expected)


def test_philox_twin_is_vectorized() -> None:
    counters = np.array([c for c, _, _ in PHILOX_KAT[:2]], np.uint32)
    # both rows under key 0: the first row must still give the first known answer
    got = _twins.philox4x32_10(counters, (0, 0))
    assert got.shape == (2, 4) and [int(w) for w in got[0]] == list(PHILOX_KAT[0][2])


def test_rand_seed_zero_is_the_first_known_answer_on_every_backend() -> None:
    # seed 0 is key (0, 0); elements 0..3 come from counter 0, lanes 0..3
    words = PHILOX_KAT[0][2]
    got = host(cuasync.rand((4,), seed=0).sync())
    same(got, np.array([(w >> 8) * 2.0**-24 for w in words], np.float32))
    got64 = host(cuasync.rand((2,), seed=0, dtype="float64").sync())
    expected = [((words[1] << 32 | words[0]) >> 11) * 2.0**-53]
    expected.append(((words[3] << 32 | words[2]) >> 11) * 2.0**-53)
    same(got64, np.array(expected))
    z = host(cuasync.randn((2,), seed=0, dtype="float64").sync())
    u1 = (((words[1] << 32 | words[0]) >> 11) + 1) * 2.0**-53
    u2 = ((words[3] << 32 | words[2]) >> 11) * 2.0**-53
    r = math.sqrt(-2.0 * math.log(u1))
    np.testing.assert_allclose(
        z, [r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)], rtol=1e-13, atol=1e-13
    )


# -- rand / randn -----------------------------------------------------------------------
async def test_rand_is_deterministic_in_range_and_uniform(anyio_backend) -> None:
    for name in REAL_FLOATS:
        a = await (await cuasync.rand((200_001,), seed=1234, dtype=name)).to_host()
        b = await (await cuasync.rand((200_001,), seed=1234, dtype=name)).to_host()
        same(a, b)
        x = a.astype(np.float64)
        assert x.min() >= 0.0 and x.max() < 1.0
        assert abs(x.mean() - 0.5) < 0.005
        assert abs(x.std() - math.sqrt(1 / 12)) < 0.005
        expected = _twins.uniform_twin(a.size, 1234, 0, name).astype(np_dtype(name))
        same(a, expected)


def test_rand_seeds_and_shapes() -> None:
    a = host(cuasync.rand((3, 5), seed=1).sync())
    b = host(cuasync.rand((3, 5), seed=2).sync())
    assert a.shape == (3, 5) and not np.array_equal(a, b)
    # a prefix of a longer draw is the shorter draw: element i depends only on (seed, i)
    same(host(cuasync.rand((7,), seed=9).sync()), host(cuasync.rand((20,), seed=9).sync())[:7])
    big_seed = 2**64 - 1
    same(
        host(cuasync.rand((9,), seed=big_seed).sync()),
        _twins.uniform_twin(9, 0xFFFFFFFF, 0xFFFFFFFF, "float32").astype(np.float32),
    )
    # no seed: a fresh one each time
    assert not np.array_equal(host(cuasync.rand(64).sync()), host(cuasync.rand(64).sync()))
    assert cuasync.rand((0,), seed=1).sync().shape == (0,)


async def test_randn_statistics_and_determinism(anyio_backend) -> None:
    for name in REAL_FLOATS:
        a = await (await cuasync.randn((100_001,), seed=77, dtype=name)).to_host()
        b = await (await cuasync.randn((100_001,), seed=77, dtype=name)).to_host()
        same(a, b)
        x = a.astype(np.float64)
        assert abs(x.mean()) < 0.02 and abs(x.std() - 1.0) < 0.02
        assert np.isfinite(x).all()
    shifted = await (await cuasync.randn((50_000,), mean=3.0, std=0.5, seed=5)).to_host()
    assert abs(shifted.mean() - 3.0) < 0.02 and abs(shifted.std() - 0.5) < 0.02
    same(
        await (await cuasync.randn((4,), std=0.0, mean=2.0, seed=5)).to_host(),
        np.full(4, 2.0, np.float32),
    )


def test_randn_matches_the_twin_formula() -> None:
    got = host(cuasync.randn((1001,), mean=1.0, std=2.0, seed=3, dtype="float64").sync())
    # log/cos/sin differ in the last bits between libraries: compare with an absolute
    # tolerance too (mean + std z cancels near 0, so relative errors alone can look large)
    expected64 = _twins.normal_twin(1001, 3, 0, 1.0, 2.0)
    np.testing.assert_allclose(got, expected64, rtol=1e-13, atol=1e-13)
    got32 = host(cuasync.randn((1001,), mean=1.0, std=2.0, seed=3).sync())
    expected = _twins.normal_twin(1001, 3, 0, 1.0, 2.0).astype(np.float32)
    # float32 results are the correctly rounded float64 ones: equal but for (very rare)
    # last-bit differences of log/cos/sin between libraries
    assert np.count_nonzero(got32 != expected) <= 1


# -- bad inputs -----------------------------------------------------------------------------
def _bad_inputs() -> list[tuple[str, Callable[[], Any], type[Exception], str]]:
    t8 = cuasync.zeros((4,), "int8").sync()
    return [
        ("negative dim", lambda: cuasync.ones((2, -1)), ShapeError, "shape"),
        ("float dim", lambda: cuasync.full((2.5,), 1), ShapeError, "shape"),  # type: ignore[arg-type]
        ("bool dim", lambda: cuasync.ones((True, 2)), ShapeError, "shape"),
        ("dict shape", lambda: cuasync.full({}, 1), ShapeError, "shape must be an int or a tuple"),  # type: ignore[arg-type]
        ("set shape", lambda: cuasync.rand({2, 3}), ShapeError, "shape must be an int or a tuple"),  # type: ignore[arg-type]
        ("str shape", lambda: cuasync.randn("4"), ShapeError, "shape must be an int or a tuple"),  # type: ignore[arg-type]
        ("unknown dtype", lambda: cuasync.ones(3, "float8"), DTypeError, "dtype"),
        ("int overflow", lambda: cuasync.full(3, 300, "int8"), ArgumentError, "value=300"),
        ("not an integer", lambda: cuasync.full(3, 1.5, "int32"), ArgumentError, "value=1.5"),
        ("nan for int", lambda: cuasync.full(3, math.nan, "int64"), ArgumentError, "value"),
        ("string value", lambda: cuasync.full(3, "x"), ArgumentError, "value must be a number"),  # type: ignore[arg-type]
        ("half overflow", lambda: cuasync.full(3, 1e6, "float16"), ArgumentError, "overflows"),
        ("huge int", lambda: cuasync.full(3, 10**400, "float64"), ArgumentError, "overflows"),
        ("bool value", lambda: cuasync.full(3, 2, "bool"), ArgumentError, "bool"),
        ("complex to real", lambda: cuasync.full(3, 1j, "float32"), ArgumentError, "complex"),
        ("fill non-tensor", lambda: cuasync.fill(np.zeros(3), 1), ArgumentError, "tensor"),  # type: ignore[arg-type]
        ("fill overflow", lambda: cuasync.fill(t8, 1000), ArgumentError, "value=1000"),
        ("arange no stop", lambda: cuasync.arange(), ArgumentError, "needs stop"),
        ("arange bool n", lambda: cuasync.arange(True), ArgumentError, "start must be a real"),
        ("arange list", lambda: cuasync.arange(0, [5], 1), ArgumentError, "stop must be a real"),  # type: ignore[arg-type]
        ("arange str", lambda: cuasync.arange(0, "5", 1), ArgumentError, "not a number"),  # type: ignore[arg-type]
        ("arange complex", lambda: cuasync.arange(0, 5, 1j), ArgumentError, "step must be a real"),  # type: ignore[arg-type]
        ("arange nan", lambda: cuasync.arange(0, math.nan), ArgumentError, "stop must be finite"),
        ("arange inf", lambda: cuasync.arange(-math.inf, 0), ArgumentError, "start must be"),
        (
            "arange zero step",
            lambda: cuasync.arange(0, 5, 0),
            ArgumentError,
            "step must not be zero",
        ),
        ("arange huge", lambda: cuasync.arange(0, 1e30, 1e-30), ArgumentError, "too many"),
        ("arange too long", lambda: cuasync.arange(300, dtype="int8"), ArgumentError, "299"),
        ("arange start", lambda: cuasync.arange(200, 300, dtype="int8"), ArgumentError, "start"),
        ("arange bool", lambda: cuasync.arange(3, dtype="bool"), ArgumentError, "at most 2"),
        ("arange half", lambda: cuasync.arange(70000, dtype="float16"), ArgumentError, "overflows"),
        (
            "arange e4m3",
            lambda: cuasync.arange(0, 1000, 100, dtype="float8_e4m3fn"),
            ArgumentError,
            "overflows",
        ),
        ("arange dtype", lambda: cuasync.arange(3, dtype="float128"), DTypeError, "dtype"),
        ("arange both", lambda: cuasync.arange(3, "int8", dtype="int8"), ArgumentError, "stop="),  # type: ignore[arg-type]
        ("arange n twice", lambda: cuasync.arange(3, n=3), ArgumentError, "old name"),  # type: ignore[call-arg]
        ("linspace n", lambda: cuasync.linspace(0, 1, -2), ShapeError, "num must be"),
        ("linspace start", lambda: cuasync.linspace("a", 1, 3), ArgumentError, "start"),  # type: ignore[arg-type]
        ("linspace stop inf", lambda: cuasync.linspace(0, math.inf, 3), ArgumentError, "stop"),
        ("linspace complex", lambda: cuasync.linspace(1j, 2, 3, "int8"), DTypeError, "complex"),
        ("linspace range", lambda: cuasync.linspace(0, 1000, 3, "int8"), ArgumentError, "stop"),
        ("linspace dtype", lambda: cuasync.linspace(0, 1, 3, "nope"), DTypeError, "dtype"),
        ("eye n", lambda: cuasync.eye(-1), ShapeError, "N must be"),
        ("eye m", lambda: cuasync.eye(2, -1), ShapeError, "M must be"),
        ("eye m float", lambda: cuasync.eye(2, 3.0), ShapeError, "M must be"),  # type: ignore[arg-type]
        ("eye k", lambda: cuasync.eye(2, k=0.5), ArgumentError, "k must be an int"),  # type: ignore[arg-type]
        ("eye k bool", lambda: cuasync.eye(2, k=True), ArgumentError, "k must be an int"),
        ("eye both", lambda: cuasync.eye(2, "int8", dtype="int8"), ArgumentError, "M="),  # type: ignore[arg-type]
        ("eye cols", lambda: cuasync.eye_rect(2, -3), ShapeError, "cols"),
        ("eye rows", lambda: cuasync.eye_rect(1.0, 3), ShapeError, "rows"),  # type: ignore[arg-type]
        ("eye dtype", lambda: cuasync.eye(2, dtype="x"), DTypeError, "dtype"),
        ("convert non-tensor", lambda: cuasync.convert([1], "int8"), ArgumentError, "tensor"),  # type: ignore[arg-type]
        ("convert dtype", lambda: cuasync.convert(t8, "float128"), DTypeError, "dtype"),
        ("rand int dtype", lambda: cuasync.rand(2, dtype="int32"), DTypeError, "dtype must be"),
        ("rand seed <0", lambda: cuasync.rand(2, seed=-1), ArgumentError, "seed"),
        ("rand seed big", lambda: cuasync.rand(2, seed=2**64), ArgumentError, "seed"),
        ("rand seed float", lambda: cuasync.rand(2, seed=1.5), ArgumentError, "seed"),  # type: ignore[arg-type]
        ("randn std", lambda: cuasync.randn(2, std=-1.0), ArgumentError, "std"),
        ("randn mean", lambda: cuasync.randn(2, mean=math.nan), ArgumentError, "mean"),
        ("randn shape", lambda: cuasync.randn((-2,)), ShapeError, "shape"),
        ("randn complex", lambda: cuasync.randn(2, dtype="complex64"), DTypeError, "dtype"),
        ("bad device", lambda: cuasync.ones(2, device=99), InvalidDeviceError, "99"),
    ]


def test_bad_inputs_raise_typed_errors_and_enqueue_nothing(enqueued) -> None:
    cases = _bad_inputs()
    cuasync.Device(0).synchronize()
    before = len(enqueued)
    for label, build, error, match in cases:
        with pytest.raises(error, match=match):
            build()
        assert enqueued[before:] == [], label


def test_errors_are_the_documented_bases() -> None:
    assert issubclass(DTypeError, TypeError) and issubclass(ShapeError, ValueError)


# -- laziness and capture ----------------------------------------------------------------
def test_building_enqueues_nothing(enqueued) -> None:
    t = cuasync.zeros((3,)).sync()
    after_zeros = len(enqueued)
    ops = [
        cuasync.ones(3),
        cuasync.full(3, 2.0),
        cuasync.fill(t, 1.0),
        cuasync.arange(3, dtype="float32"),
        cuasync.linspace(0, 1, 3),
        cuasync.eye(3),
        cuasync.convert(t, "int8"),
        cuasync.rand(3, seed=1),
        cuasync.randn(3, seed=1),
    ]
    assert len(enqueued) == after_zeros > 0
    for op in ops:
        op.sync()
    assert len(enqueued) > after_zeros


ALLOCATING: list[tuple[str, Callable[[], cuasync.DeviceOp[Any]]]] = [
    ("ones", lambda: cuasync.ones(3)),
    ("full", lambda: cuasync.full(3, 1.0)),
    ("arange", lambda: cuasync.arange(3, dtype="float32")),
    ("linspace", lambda: cuasync.linspace(0, 1, 3)),
    ("eye", lambda: cuasync.eye(3)),
    ("rand", lambda: cuasync.rand(3, seed=0)),
    ("randn", lambda: cuasync.randn(3, seed=0)),
    ("convert", lambda: cuasync.convert(cuasync.zeros(3).sync(), "int8")),
]


@pytest.mark.parametrize(("name", "build"), ALLOCATING, ids=[n for n, _ in ALLOCATING])
def test_allocating_ops_are_rejected_in_graph_capture(name: str, build: Any) -> None:
    op = build()
    with pytest.raises(CaptureError, match=f"{name} allocates device memory"):
        op.graph()


async def test_fill_is_a_graph_node(anyio_backend) -> None:
    t = await cuasync.zeros((4, 6), "float16")
    graph = cuasync.fill(t[:, ::2], 3.0).graph()
    same(await t.to_host(), np.zeros((4, 6), np.float16))  # capture ran nothing
    await cuasync.fill(t, -1.0)
    await graph.launch()
    expected = np.full((4, 6), -1.0, np.float16)
    expected[:, ::2] = 3.0
    same(await t.to_host(), expected)


@pytest.mark.skipif(ON_EMULATOR, reason="the CUDA kernels themselves (on a GPU)")
def test_kernels_compile_and_load_on_this_gpu() -> None:
    for kernel in _builtin.builtin_kernels():
        kernel.compile()


# -- issue 34: dtypes picked without a dtype argument --------------------------------------
FILL_VALUES: list[tuple[Any, str]] = [
    (False, "bool"),
    (True, "bool"),
    (7, "int64"),
    (-(2**40), "int64"),
]
FILL_VALUES += [(0.5, "float32"), (1 - 2j, "complex64")]
FILL_VALUES += [(np.float64(0.5), "float64"), (np.int8(-3), "int8")]  # a numpy scalar's own


@pytest.mark.parametrize(("value", "dtype"), FILL_VALUES)
def test_full_takes_its_dtype_from_the_fill_value(value: Any, dtype: str) -> None:
    # The standard: without a dtype, a bool fills bool, an int the default int, a float
    # the default float, a complex the default complex (it made float32 for all of them).
    got = host(cuasync.full((2,), value).sync())
    same(got, np.full((2,), value, dtype))
    same(host(cuasync.full((), value).sync()), np.full((), value, dtype))


def test_one_default_float_dtype_float32() -> None:
    # Creation ops made float32, but a Python float uploaded, arange of floats, integer
    # division and integer means made float64: now all float32. Data dtypes still win.
    assert host(cuasync.from_host(0.5).sync()).dtype == np.float32
    same(host(cuasync.from_host([[0.5, 1.0]]).sync()), np.array([[0.5, 1.0]], np.float32))
    assert host(cuasync.from_host([1j]).sync()).dtype == np.complex64
    assert host(cuasync.from_host([1, 2]).sync()).dtype == np.int64
    for data in (np.float64(0.5), np.array([0.5]), np.array(0.5)):
        assert host(cuasync.from_host(data).sync()).dtype == np.float64
    # lists and tuples of data with a dtype keep numpy's float64 (nothing narrowed), as do
    # ints numpy can hold only in a float: the default float is for Python floats
    wide = np.array([0.1, 1e-50, 16777217.0])
    for data in ([np.float64(0.1), np.float64(16777217.0)], (wide, wide), [-1, 2**63 + 1]):
        got = host(cuasync.from_host(data).sync())
        assert got.dtype == np.float64, data
        np.testing.assert_array_equal(got, np.asarray(data))
    assert host(cuasync.asarray([np.float64(0.1)]).sync()).dtype == np.float64
    for empty in ([], [[], []], ()):  # nothing with a dtype of its own: the default float
        assert host(cuasync.from_host(empty).sync()).dtype == np.float32
    with pytest.raises(ArgumentError, match="past float32's range"):
        cuasync.from_host([1e300])
    same(host(cuasync.arange(0.0, 1.0, 0.25).sync()), np.arange(0.0, 1.0, 0.25, dtype=np.float32))
    ints = cuasync.from_host(np.array([1, 2, 4], np.int32)).sync()
    ops = [cuasync.ones(2), cuasync.eye(2), cuasync.linspace(0, 1, 2), cuasync.rand(2)]
    ops += [cuasync.full(2, 0.5), cuasync.arange(0.5), ints / ints, ints * 0.5]
    ops += [cuasync.mean(ints), cuasync.linalg.norm(ints)]
    for op in ops:
        assert op.dtype == np.float32, op
        assert op.sync().dtype == np.float32
    np.testing.assert_allclose(host(cuasync.mean(ints).sync()), np.float32(7 / 3))
