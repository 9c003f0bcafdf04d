"""``sort``, ``argsort`` and ``searchsorted`` (issue 34) against array-api-strict and numpy.

Exact: values, indices (every sort is stable: equal keys keep their order, ascending
and descending), NaN placement (last; first when descending, as array-api-strict's),
dtypes and shapes. The kernels' NVRTC compile is checked here too (one compile for all).
"""

from __future__ import annotations

from typing import Any, cast

import array_api_strict as xp
import numpy as np
import pytest
from helpers import still_pending
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._dtypes import SUPPORTED
from cuasync._launch.kernel import compile_cubin
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops import codegen, sorting
from cuasync.errors import ArgumentError, DTypeError, ShapeError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_emu_compile")]

DTYPES = ["bool", "int8", "uint8", "int16", "int32", "uint32", "int64", "uint64"]
DTYPES += ["float16", "bfloat16", "float32", "float64"]
NOT_STRICT = {"bool", "float16", "bfloat16"}  # array-api-strict refuses: numpy is the reference


def host(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Values with many ties (and NaNs and signed zeros for floats)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    values = rng.integers(-4, 5, shape).astype(np.float64)
    if np.dtype(SUPPORTED[dtype]).kind == "f":
        values[rng.random(shape) < 0.15] = np.nan
        values[values == 0] = np.where(rng.random(shape) < 0.5, -0.0, 0.0)[values == 0]
        values += rng.integers(0, 2, shape) * 0.5
    elif dtype[0] == "u":
        values += 4
    return values.astype(SUPPORTED[dtype])


def strided(data: Any, dtype: str) -> tuple[np.ndarray, cuasync.Tensor]:
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim)))
    steps = tuple(data.draw(st.sampled_from([1, 2])) for _ in shape)
    base = host(tuple(d * s for d, s in zip(shape, steps, strict=True)), dtype, 2)
    view = tuple(slice(None, None, s) for s in steps)
    a, x = base[view], cuasync.from_host(base).sync()[view]
    if ndim > 1 and data.draw(st.booleans()):
        perm = tuple(data.draw(st.permutations(range(ndim))))
        a, x = a.transpose(perm), x.transpose(perm)
    return a, x


def reference(a: np.ndarray, fn: str, axis: int, descending: bool) -> np.ndarray:
    """array-api-strict's result, or (float16, bfloat16) the same rule in numpy."""
    if str(a.dtype) not in NOT_STRICT:
        want = getattr(xp, fn)(xp.asarray(a), axis=axis, descending=descending)
        return np.asarray(want._array)
    wide = a.astype(np.float64)
    if not descending:
        order = np.argsort(wide, axis=axis, stable=True)
    else:  # as array-api-strict: a stable ascending sort of the flipped axis, flipped back
        n = a.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(wide, axis), axis=axis, stable=True), axis)
    return order if fn == "argsort" else np.take_along_axis(a, order, axis)


def run(op: Any) -> np.ndarray:
    return np.asarray(op.to_host().sync())


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    wide = "float64" if got.dtype.kind == "f" or str(got.dtype) == "bfloat16" else got.dtype
    g, w = got.astype(wide), want.astype(wide)
    np.testing.assert_array_equal(g, w)
    if got.dtype.kind == "f":  # -0.0 and 0.0 are equal keys: they keep their order
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES), fn=st.sampled_from(["sort", "argsort"]))
def test_property_sort_argsort_vs_array_api_strict(data: Any, dtype: str, fn: str) -> None:
    a, x = strided(data, dtype)
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    descending = data.draw(st.booleans())
    stable = data.draw(st.booleans())
    got = run(getattr(cuasync, fn)(x, axis=axis, descending=descending, stable=stable))
    same(got, reference(a, fn, axis, descending))


@pytest.mark.parametrize("n", [1, 2, 1000, 4097])
def test_long_rows_and_fused_operands(n: int) -> None:
    a = host((3, n), "float32", n)
    x = cuasync.from_host(a).sync()
    same(run(cuasync.argsort(x)), np.argsort(a, axis=-1, stable=True))
    same(run(cuasync.sort(x * 2.0, axis=1)), np.sort(a * 2.0, axis=1))
    same(run(cuasync.argsort(x.T, axis=0)), np.argsort(a.T, axis=0, stable=True))


async def test_sort_is_lazy_and_ordered_after_a_gated_write(anyio_backend: str) -> None:
    x = await cuasync.from_host(np.arange(6, dtype=np.float32)[::-1].copy())
    await cuasync.sort(x)  # its kernels loaded before the gate closes
    op = cuasync.sort(x)
    dev0 = cuasync.Device(0)
    s1, s2 = dev0.new_stream(), dev0.new_stream()
    with ct.gate(s1):  # the fill waits at a closed gate on s1: the sort on s2 waits too
        filled = cuasync.fill(x[:3], 9.0).submit_on(s1)
        done = op.submit_on(s2)
        assert still_pending(done.done), "the sort did not wait for the write"
    await filled
    assert (await (await done).to_host()).tolist() == [0, 1, 2, 9, 9, 9]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES), side=st.sampled_from(["left", "right"]))
def test_property_searchsorted_vs_array_api_strict(data: Any, dtype: str, side: str) -> None:
    n = data.draw(st.integers(0, 12))
    base = host((n,), dtype, 3)
    use_sorter = data.draw(st.booleans())
    edges = base if use_sorter else np.sort(base)
    vshape = tuple(data.draw(st.lists(st.integers(0, 4), max_size=3)))
    values = host(vshape, dtype, 4)
    x1, x2 = cuasync.from_host(edges).sync(), cuasync.from_host(values).sync()
    kw: dict[str, Any] = {"side": side}
    if use_sorter:
        kw["sorter"] = cuasync.argsort(x1).sync()
    got = run(cuasync.searchsorted(x1, x2, **kw))
    wide = np.float64 if edges.dtype.kind == "f" or dtype == "bfloat16" else edges.dtype
    order = np.argsort(edges.astype(wide), stable=True) if use_sorter else None
    want = np.searchsorted(
        edges.astype(wide), values.astype(wide), side=cast(Any, side), sorter=order
    )
    if dtype not in NOT_STRICT and not use_sorter and values.ndim:
        strict = xp.searchsorted(xp.asarray(edges), xp.asarray(values), side=cast(Any, side))
        np.testing.assert_array_equal(want, np.asarray(strict._array))
    same(got, want.astype(np.int64))


def test_bad_arguments_raise_typed_errors() -> None:
    x = cuasync.zeros((2, 3)).sync()
    with pytest.raises(ArgumentError, match="axis 2 is out of range"):
        cuasync.sort(x, axis=2)
    with pytest.raises(ArgumentError, match="0-d"):
        cuasync.argsort(cuasync.zeros(()).sync())
    with pytest.raises(DTypeError, match="complex64"):
        cuasync.sort(cuasync.zeros((3,), dtype="complex64").sync())
    with pytest.raises(ArgumentError, match="descending must be a bool"):
        cuasync.sort(x, descending="yes")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="x1 must be 1-d"):
        cuasync.searchsorted(x, x)
    # (the advice is the common dtype: x2 converted to x1's would truncate 2.5 to 2)
    with pytest.raises(DTypeError, match=r"to float64 first: x1.astype\('float64'\) and x2"):
        cuasync.searchsorted(x[0], cuasync.zeros((2,), dtype="int32").sync())
    with pytest.raises(DTypeError, match=r"to float64 first: x1.astype\('float64'\)$"):
        cuasync.isin(x[0], cuasync.zeros((2,), dtype="float64").sync())
    with pytest.raises(ArgumentError, match="axis must be an int for a 2-d tensor, got None"):
        cuasync.diff(x, axis=None)
    # (int64 with uint64: numpy's float64 rounds past 2**53; complex: no order to sort by)
    big = cuasync.from_host(np.array([2**53 + 1])).sync()
    with pytest.raises(DTypeError, match="no common integer dtype"):
        cuasync.isin(big, big.astype("uint64").sync())
    with pytest.raises(DTypeError, match="convert them to one dtype isin takes"):
        cuasync.isin(big, cuasync.zeros((2,), dtype="complex64").sync())
    with pytest.raises(ArgumentError, match="side"):
        cuasync.searchsorted(x[0], x[0], side="middle")
    with pytest.raises(ArgumentError, match="sorter"):
        cuasync.searchsorted(x[0], x[0], sorter=x[1])


async def test_axis_none_sorts_x_flattened_as_numpy(anyio_backend: Any) -> None:
    a = np.array([[3.0, np.nan, 1.0], [2.0, 0.0, 1.0]], "float32")
    x = await cuasync.from_host(a)
    for view, host_view in ((x, a), (x.T, a.T), (x[::-1], a[::-1])):
        got = await (await cuasync.sort(view, axis=None)).to_host()
        np.testing.assert_array_equal(got, np.sort(host_view, axis=None))
        order = await (await cuasync.argsort(view, axis=None)).to_host()
        np.testing.assert_array_equal(order, np.argsort(host_view, axis=None, stable=True))
    zero_d = await cuasync.from_host(np.array(3.0))
    assert (await (await cuasync.argsort(zero_d, axis=None)).to_host()).tolist() == [0]
    flat = await (await cuasync.sort(x * 2.0, axis=None, descending=True)).to_host()
    np.testing.assert_array_equal(flat, np.sort(a * 2, axis=None)[::-1])  # (NaN first)


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_every_sort_and_search_source_compiles() -> None:
    # each dtype's sort (values and indices, 0-2 kept dims) and search, one NVRTC compile
    bodies: list[str] = []
    for i, dt in enumerate(sorted(sorting.SORT_DTYPES)):
        for values in (True, False):
            bodies.append(f"namespace s{len(bodies)} {{\n{sorting.body(dt, i % 3, values)}\n}}")
        bodies.append(f"namespace s{len(bodies)} {{\n{sorting.search_body(dt, i % 3)}\n}}")
    source = "\n".join([codegen._prelude(), *bodies])
    assert compile_cubin(source, "s0::ca_sort_step", "sm_90", []) is not None


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(["int8", "uint32", "int64", "float32", "float64"]))
def test_property_isin_vs_array_api_strict(data: Any, dtype: str) -> None:
    a, x = strided(data, dtype)
    b, y = strided(data, dtype)
    invert = data.draw(st.booleans())
    if a.dtype.kind == "f" or invert:
        # numpy's (NaN in nothing): array-api-strict 2.6 takes integers only, and its
        # invert=True is wrong (isin([3], [3], invert=True) is True there, and
        # isin([3], [], invert=True) False)
        want = np.isin(a, b, invert=invert)
    else:  # the 2025.12 revision's
        want = np.asarray(xp.isin(xp.asarray(a), xp.asarray(b), invert=invert)._array)
    same(run(cuasync.isin(x, y, invert=invert)), want)
