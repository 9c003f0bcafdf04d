"""Data-dependent output shapes (issue 34): ``nonzero`` and ``unique_values``,
``unique_counts``, ``unique_inverse``, ``unique_all`` against array-api-strict and numpy
(exact: values, indices, counts, dtypes, shapes; NaNs distinct, -0.0 and 0.0 one value),
and their contract: coroutine functions that await the count they read back, never
blocking the event loop while their kernels are held.
"""

from __future__ import annotations

from typing import Any

import anyio
import array_api_strict as xp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._launch.kernel import compile_cubin
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops import sets
from cuasync.errors import ArgumentError, DTypeError

pytestmark = pytest.mark.anyio

DTYPES = ["bool", "int8", "uint16", "int32", "int64", "float32", "float64"]


def host(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    values = rng.integers(0, 4, shape).astype(np.float64)
    if np.dtype(dtype).kind == "f":
        values[rng.random(shape) < 0.2] = np.nan
        values[values == 0] = -0.0
        values[rng.random(shape) < 0.2] = 0.0
    return values.astype(dtype)


def draw(data: Any, dtype: str) -> tuple[np.ndarray, cuasync.Tensor]:
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    a = host(shape, dtype, data.draw(st.integers(0, 1000)))
    x = cuasync.from_host(a).sync()
    if ndim > 1 and data.draw(st.booleans()):  # a transposed (non-contiguous) view
        a, x = a.T, x.T
    return a, x


def host_of(t: Any) -> np.ndarray:
    return np.asarray(t.to_host().sync())


def same(got: np.ndarray, want: Any) -> None:
    want = np.asarray(want._array if hasattr(want, "_array") else want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def inverse_ok(values: np.ndarray, inverse: np.ndarray, a: np.ndarray) -> None:
    """``values[inverse]`` is ``a``, each NaN its own value (which of the equal NaN
    values one gets is unspecified: numpy's order of NaNs is not stable, cuasync's is)."""
    assert (inverse.dtype, inverse.shape) == (np.dtype(np.int64), a.shape)
    np.testing.assert_array_equal(values[inverse], a)
    nans = inverse[np.isnan(a)] if a.dtype.kind == "f" else np.zeros(0, np.int64)
    assert len(set(nans.tolist())) == nans.size


def run(coro: Any) -> Any:
    async def main() -> Any:
        return await coro

    return anyio.run(main)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_property_unique_vs_array_api_strict(data: Any, dtype: str) -> None:
    a, x = draw(data, dtype)
    ref = xp.asarray(a)
    want = xp.unique_all(ref)
    got = run(cuasync.unique_all(x))
    for field in ("values", "indices", "counts"):
        same(host_of(getattr(got, field)), getattr(want, field))
    inverse_ok(host_of(got.values), host_of(got.inverse_indices), a)
    same(host_of(run(cuasync.unique_values(x))), xp.unique_values(ref))
    values, counts = run(cuasync.unique_counts(x))
    want_c = xp.unique_counts(ref)
    same(host_of(values), want_c.values)
    same(host_of(counts), want_c.counts)
    values, inverse = run(cuasync.unique_inverse(x))
    want_i = xp.unique_inverse(ref)
    same(host_of(values), want_i.values)
    inverse_ok(host_of(values), host_of(inverse), a)
    if not np.isnan(a).any() if a.dtype.kind == "f" else True:
        same(host_of(inverse), want_i.inverse_indices)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_property_nonzero_vs_array_api_strict(data: Any, dtype: str) -> None:
    a, x = draw(data, dtype)
    if a.ndim == 0:
        with pytest.raises(ArgumentError, match="0-d"):
            run(cuasync.nonzero(x))
        return
    got = run(cuasync.nonzero(x))
    want = xp.nonzero(xp.asarray(a))
    assert len(got) == a.ndim
    for g, w in zip(got, want, strict=True):
        same(host_of(g), w)


async def test_nonzero_awaits_its_count_without_blocking_the_loop(anyio_backend: str) -> None:
    a = np.array([[0, 1, 0], [2, 0, 3]], np.int32)
    x = await cuasync.from_host(a)
    await cuasync.nonzero(x)  # its kernels loaded before the gate closes
    await cuasync.unique_values(x)
    found: dict[str, Any] = {}

    async def count() -> None:
        found["nonzero"] = await cuasync.nonzero(x)
        found["unique"] = await cuasync.unique_values(x)

    async with anyio.create_task_group() as tg:
        with ct.gate():  # the policy's streams held: the scan's count cannot land
            tg.start_soon(count)
            turns = 0
            while turns < 50:  # the loop keeps running other tasks meanwhile
                await anyio.sleep(0)
                turns += 1
            assert not found, "the count was read before its kernels ran"
    rows, cols = found["nonzero"]
    assert (await rows.to_host()).tolist() == [0, 1, 1]
    assert (await cols.to_host()).tolist() == [1, 0, 2]
    assert (await found["unique"].to_host()).tolist() == [0, 1, 2, 3]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_property_one_argument_where_is_numpys(data: Any, dtype: str) -> None:
    a, x = draw(data, dtype)
    if a.ndim == 0:  # as nonzero: the standard refuses 0-d
        with pytest.raises(ArgumentError, match="0-d"):
            run(cuasync.where(x))
        return
    want = np.where(a)
    for condition in (x, x != 0):  # a tensor, or a TensorOp awaited first
        got = run(cuasync.where(condition))
        assert len(got) == a.ndim
        for g, w in zip(got, want, strict=True):
            same(host_of(g), w)


async def test_one_argument_where_awaits_its_count_without_blocking_the_loop(
    anyio_backend: str,
) -> None:
    x = await cuasync.from_host(np.array([[0.0, 1.5], [2.0, 0.0]], np.float32))
    await cuasync.where(x > 1.0)  # its kernels loaded before the gate closes
    found: list[tuple[cuasync.Tensor, ...]] = []

    async def indices() -> None:
        found.append(await cuasync.where(x > 1.0))

    async with anyio.create_task_group() as tg:
        with ct.gate():  # the policy's streams held: the count cannot land
            tg.start_soon(indices)
            for _ in range(50):  # the loop keeps running other tasks meanwhile
                await anyio.sleep(0)
            assert not found, "the count was read before its kernels ran"
    rows, cols = found[0]
    assert ((await rows.to_host()).tolist(), (await cols.to_host()).tolist()) == ([0, 1], [1, 0])
    # three arguments: still the elementwise op, lazy and fusable
    op = cuasync.where(x > 1.0, x, 0.0)
    assert isinstance(op, cuasync.TensorOp)
    assert (await op.to_host()).tolist() == [[0.0, 1.5], [2.0, 0.0]]


def test_where_takes_both_choices_or_neither() -> None:
    x = cuasync.zeros((3,)).sync()
    with pytest.raises(ArgumentError, match="both x1 and x2"):
        cuasync.where(x, x)  # type: ignore[call-overload]
    with pytest.raises(ArgumentError, match="both x1 and x2"):
        cuasync.where(x, x2=x)  # type: ignore[call-overload]
    with pytest.raises(ArgumentError, match="must be a cuasync.Tensor or TensorOp"):
        cuasync.where(np.zeros(3))  # type: ignore[call-overload]
    with pytest.raises(ArgumentError, match="out="):
        cuasync.where(x, out=x)  # type: ignore[call-overload]


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(DTypeError, match="float8_e4m3fn"):
        run(cuasync.unique_values(cuasync.zeros((3,), dtype="float8_e4m3fn").sync()))
    with pytest.raises(ArgumentError, match="must be a cuasync.Tensor"):
        run(cuasync.nonzero(np.zeros(3)))  # type: ignore[arg-type]


def complex_host(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Complex values whose parts are drawn from a few, NaN and -0.0 among them: every
    one of numpy's complex orderings (NaN real, NaN imaginary, both) is hit."""
    rng = np.random.default_rng(seed)
    parts = np.array([0.0, -0.0, 1.0, -2.0, np.inf, np.nan])
    p = [0.25, 0.15, 0.2, 0.2, 0.05, 0.15]
    out = np.zeros(shape, dtype)
    out.real = rng.choice(parts, shape, p=p)  # (real + imag * 1j would make 0 * NaN parts)
    out.imag = rng.choice(parts, shape, p=p)
    return out


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(["complex64", "complex128"]))
def test_property_complex_unique_vs_array_api_strict(data: Any, dtype: str) -> None:
    """Complex ``unique_*`` (issue 34): numpy's order of complex values (lexicographic,
    then NaN imaginary, NaN real, both NaN), each value with a NaN part distinct."""
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    a = complex_host(shape, dtype, data.draw(st.integers(0, 1000)))
    x = cuasync.from_host(a).sync()
    if ndim > 1 and data.draw(st.booleans()):  # a transposed (non-contiguous) view
        a, x = a.T, x.T
    ref = xp.asarray(a)
    want = xp.unique_all(ref)
    got = run(cuasync.unique_all(x))
    for field in ("values", "indices", "counts"):
        same(host_of(getattr(got, field)), getattr(want, field))
    same(host_of(got.inverse_indices), want.inverse_indices)  # (stable: the same)
    same(host_of(run(cuasync.unique_values(x))), xp.unique_values(ref))
    values, counts = run(cuasync.unique_counts(x))
    same(host_of(values), xp.unique_counts(ref).values)
    same(host_of(counts), xp.unique_counts(ref).counts)
    values, inverse = run(cuasync.unique_inverse(x))
    same(host_of(values), xp.unique_inverse(ref).values)
    inverse_ok(host_of(values), host_of(inverse), a)


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_the_compaction_kernel_compiles() -> None:
    bodies = [f"namespace c{n} {{\n{sets.compact_body(n)}\n}}" for n in (1, 2, 3, 8)]
    assert compile_cubin("\n".join(bodies), "c1::ca_compact", "sm_90", []) is not None
