"""``vecdot`` (the array API standard's), numpy's ``dot``, ``inner``, ``outer`` and the
``einsum`` subset (issue 34) against array-api-strict and numpy. Integer results are
exact; float ones within ``RTOL * sum(|products|)`` (the contraction order differs).
"""

from __future__ import annotations

from typing import Any

import array_api_strict as xp
import numpy as np
import pytest
from helpers import on_device
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync.errors import ArgumentError, IndexOutOfRangeError, ShapeError

pytestmark = pytest.mark.anyio

RTOL = {"float32": 1e-5, "float64": 1e-12}


def host(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 5, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def close(got: Any, want: Any, scale: Any = None) -> None:
    got = np.asarray(got.to_host().sync())
    want = np.asarray(want._array if hasattr(want, "_array") else want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want)
        return
    bound = RTOL[str(want.dtype)] * (np.abs(want) if scale is None else scale) + 1e-30
    assert np.all(np.abs(got - want) <= bound)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(["int32", "int64", "float32", "float64"]))
def test_property_vecdot_vs_array_api_strict(data: Any, dtype: str) -> None:
    n = data.draw(st.integers(0, 6))
    lead = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    a, b = host((*lead, n), dtype, 1), host((n,), dtype, 2)
    want = xp.vecdot(xp.asarray(a), xp.asarray(b))
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) if n else 0.0
    close(cuasync.vecdot(on_device(a), on_device(b)), want, scale)
    close(cuasync.vecdot(on_device(a) * 1, on_device(b)), want, scale)  # a fused operand


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
def test_dot_inner_outer_as_numpy(dtype: str) -> None:
    a, b, v, w = (
        host((3, 4), dtype, 1),
        host((4, 5), dtype, 2),
        host((4,), dtype, 3),
        host((5,), dtype, 4),
    )
    c = host((2, 4, 5), dtype, 5)
    s = np.asarray(a.dtype.type(3))
    x, y, u, t, z, k = (
        on_device(a),
        on_device(b),
        on_device(v),
        on_device(w),
        on_device(c),
        on_device(s),
    )

    def scale(p: Any, q: Any, fn: Any) -> Any:
        return fn(np.abs(p).astype(np.float64), np.abs(q).astype(np.float64))

    for p, q, dp, dq in ((a, b, x, y), (a, v, x, u), (v, v, u, u), (a, c, x, z), (s, a, k, x)):
        close(cuasync.dot(dp, dq), np.dot(p, q), scale(p, q, np.dot))
    for p, q, dp, dq in ((a, a, x, x), (a, v, x, u), (c, b, z, y)):
        close(cuasync.inner(dp, dq), np.inner(p, q), scale(p, q, np.inner))
    close(cuasync.outer(u, t), np.outer(v, w))
    close(cuasync.outer(x, z), np.outer(a, c))


@pytest.mark.parametrize(
    "spec,shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("bij,bjk->kib", [(2, 3, 4), (2, 4, 5)]),
        ("ij,kj", [(3, 4), (5, 4)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ij,j->", [(3, 4), (4,)]),
        ("ijk,k->j", [(2, 3, 4), (4,)]),
        ("ij->ji", [(3, 4)]),
        ("ijk->ki", [(2, 3, 4)]),
        ("ij->", [(3, 4)]),
        ("ij", [(3, 4)]),
    ],
)
def test_einsum_as_numpy(spec: str, shapes: list[tuple[int, ...]]) -> None:
    arrays = [host(s, "float64", i) for i, s in enumerate(shapes)]
    want = np.einsum(spec, *arrays)
    scale = np.einsum(spec, *(np.abs(a) for a in arrays))
    close(cuasync.einsum(spec, *(on_device(a) for a in arrays)), want, scale)


def test_outer_flattens_views_as_numpy() -> None:
    a = np.arange(6, dtype="float32").reshape(2, 3)
    x = on_device(a)
    for p, q, u, v in ((a.T, a[0], x.T, x[0]), (a[::-1], a.T, x[::-1], x.T)):
        np.testing.assert_array_equal(cuasync.outer(u, v).sync().to_host().sync(), np.outer(p, q))


def test_bad_arguments_raise_typed_errors() -> None:
    x = on_device(host((3, 4), "float32", 0))
    with pytest.raises(ShapeError, match="differ along axis"):
        cuasync.vecdot(x, on_device(host((3,), "float32", 1)))
    with pytest.raises(IndexOutOfRangeError):
        cuasync.vecdot(x, x, axis=-3)
    with pytest.raises(ArgumentError, match="repeats a letter"):
        cuasync.einsum("ii->i", on_device(host((3, 3), "float32", 0)))
    with pytest.raises(ArgumentError, match="ellipses"):
        cuasync.einsum("...i->i", x)
    with pytest.raises(ArgumentError, match="one or two operands"):
        cuasync.einsum("i,i,i->", x[0], x[0], x[0])
    with pytest.raises(ShapeError, match="names 3 axes"):
        cuasync.einsum("ijk->i", x)
