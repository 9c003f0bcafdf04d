"""Elementwise operands fused into the indexing kernels: the source of ``gather``,
``take_along_axis`` and ``pad`` and the updates of ``scatter``, when an unexecuted
elementwise expression, are computed where the kernel reads them (one launch, no
intermediate tensor), with the values and dtype of the expression run first."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import COMPLETION, on_device, on_host
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._dtypes import SUPPORTED

#: The dtypes elementwise expressions compute in (FP8 is storage only).
DTYPES = [
    "bool",
    "int8",
    "uint32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
LAUNCHES = ("launch_kernel", "queue_launch")


def host(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).integers(1, 5, size=shape)
    return values.astype(SUPPORTED[dtype])


def views(a: np.ndarray, flip: bool, transpose: bool) -> tuple[np.ndarray, cuasync.Tensor]:
    """``a`` uploaded, as a reversed and/or transposed view (the host copy alike)."""
    t = on_device(np.ascontiguousarray(a.T) if transpose else a)
    if transpose:
        t = t.T
    if flip and a.ndim:
        return a[::-1], t[::-1]
    return a, t


def expression(x: Any, y: Any) -> Any:
    """``x * y + x``: no scalar, so numpy's dtype rules and cuasync's agree for every dtype."""
    return x * y + x


def broadcasts(small: tuple[int, ...], to: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(small, to) == to
    except ValueError:
        return False


@pytest.mark.usefixtures("no_emu_compile")
@PROPERTY
@given(data=st.data())
def test_property_fused_operands_match_numpy_and_the_run_first_path(data: Any) -> None:
    dtype = data.draw(st.sampled_from(DTYPES))
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    # a leaf broadcast along some axes (length 1, or fewer axes)
    small = tuple(d if data.draw(st.booleans()) else 1 for d in shape)
    small = small[data.draw(st.integers(0, ndim)) :]
    a, x = views(host(shape, dtype, 1), data.draw(st.booleans()), data.draw(st.booleans()))
    b, y = views(host(small, dtype, 2), data.draw(st.booleans()), False)
    want_x = expression(a, b)
    assert want_x.dtype == SUPPORTED[dtype]

    def both(fn: Any) -> tuple[np.ndarray, np.ndarray]:
        """Fused, and with the expression's tensor (what running it first gives)."""
        return on_host(fn(expression(x, y))), on_host(fn(expression(x, y).sync()))

    axis = data.draw(st.integers(-ndim, ndim - 1))
    dim = shape[axis]
    ishape = [data.draw(st.sampled_from([1, d])) for d in shape]
    ishape[axis] = data.draw(st.integers(1, 4))
    n = int(np.prod(ishape))
    values = data.draw(st.lists(st.integers(-dim, dim - 1), min_size=n, max_size=n))
    idx = np.array(values, np.int64).reshape(ishape)
    full = tuple(ishape[d] if d == axis % ndim else shape[d] for d in range(ndim))
    want = np.take_along_axis(want_x, np.broadcast_to(idx, full), axis=axis)
    for got in both(lambda v: cuasync.take_along_axis(v, on_device(idx), axis=axis)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    flat = idx.ravel().astype(np.int32)
    for got in both(lambda v: cuasync.gather(v, on_device(flat), axis=axis)):
        np.testing.assert_array_equal(got, np.take(want_x, flat, axis=axis))
    for got in both(lambda v: cuasync.take_along_axis(v, on_device(flat), axis=None)):
        np.testing.assert_array_equal(got, np.take(want_x.ravel(), flat))
    width = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 3))) for _ in shape)
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect"]))
    for got in both(lambda v: cuasync.pad(v, width, mode)):
        np.testing.assert_array_equal(got, np.pad(want_x, width, mode))

    # the dynamic slices with device or host starts (clamped): the window of the
    # expression, and an update that is one
    starts = np.array([data.draw(st.integers(-1, d)) for d in shape], np.int64)
    sizes = tuple(data.draw(st.integers(0, d)) for d in shape)
    window = tuple(
        slice(c, c + z)
        for c, z in (
            (min(max(s, 0), d - z), z) for s, d, z in zip(starts, shape, sizes, strict=True)
        )
    )
    host_starts = tuple(int(c) for c in starts)
    for begin in (on_device(starts), host_starts):
        for got in both(lambda v, begin=begin: cuasync.dynamic_slice(v, begin, sizes)):
            np.testing.assert_array_equal(got, want_x[window])
    dst, block = host(shape, dtype, 5), host(sizes, dtype, 6)
    part = on_device(block)
    for update, at in (
        (expression(part, part), on_device(starts)),
        (expression(part, part), host_starts),
        (expression(part, part).sync(), host_starts),
    ):
        got = on_host(cuasync.dynamic_update_slice(on_device(dst), update, at))
        want_u = dst.copy()
        want_u[window] = expression(block, block)
        np.testing.assert_array_equal(got, want_u)

    # scatter: the updates (over the indices' broadcast shape) are an expression
    target = host(shape, dtype, 3)
    combine = "add" if dtype in ("int64", "float16", "bfloat16", "float32", "float64") else "set"
    c, u = views(host(full, dtype, 4), data.draw(st.booleans()), False)
    grids = list(np.indices(full, sparse=True))
    grids[axis] = np.where(idx < 0, idx + shape[axis], idx)  # (-3 and 0 are one position)
    where = tuple(np.broadcast_to(g, full) for g in grids)
    if combine == "set" and len(set(zip(*(w.ravel() for w in where), strict=True))) != c.size:
        return  # which of duplicate updates lands is unspecified
    fit = broadcasts(b.shape, full)
    upd = expression(c, b) if fit else c * c
    want_s = target.copy()
    if combine == "add":
        np.add.at(want_s, where, upd)
    else:
        want_s[where] = upd
    for updates in ((expression(u, y) if fit else u * u) for _ in range(2)):
        got = on_host(
            cuasync.scatter(on_device(target), on_device(idx), updates, axis=axis, mode=combine)
        )
        assert got.dtype == target.dtype
        np.testing.assert_array_equal(got, want_s)
    first = (expression(u, y) if fit else u * u).sync()
    got = on_host(
        cuasync.scatter(on_device(target), on_device(idx), first, axis=axis, mode=combine)
    )
    np.testing.assert_array_equal(got, want_s)


@pytest.mark.usefixtures("no_emu_compile")
def test_narrow_floats_are_rounded_once_as_the_expression_stores_them() -> None:
    # float16 and bfloat16: each op rounded to the dtype (numpy's and ml_dtypes' rules);
    # the value the indexing kernel reads is the expression's stored value, bit for bit
    for dtype in ("float16", "bfloat16"):
        a = (np.random.default_rng(5).standard_normal((4, 33)) * 1000).astype(SUPPORTED[dtype])
        x = on_device(a)
        idx = np.random.default_rng(6).integers(-33, 33, size=(4, 7))
        want = on_host(cuasync.take_along_axis((x * 1.001 + 0.1).sync(), on_device(idx), axis=1))
        got = on_host(cuasync.take_along_axis(x * 1.001 + 0.1, on_device(idx), axis=1))
        assert got.dtype == want.dtype == SUPPORTED[dtype]
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_a_fused_operand_is_one_launch_and_no_intermediate(enqueued: list[str]) -> None:
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    rows = np.array([[7, 0, 3]] * 4)
    x, idx = on_device(a), on_device(rows)
    cuasync.take_along_axis(x * 2.0 + 1.0, idx, axis=1).sync()  # compiled and loaded

    def work(op: Any) -> tuple[list[str], cuasync.Tensor]:
        start = len(enqueued)
        t = op.sync()
        return [c for c in enqueued[start:] if c not in COMPLETION], t

    fused, t = work(cuasync.take_along_axis(x * 2.0 + 1.0, idx, axis=1))
    np.testing.assert_array_equal(t.to_host().sync(), np.take_along_axis(a * 2 + 1, rows, 1))
    assert len([c for c in fused if c in LAUNCHES]) == 1  # one kernel
    assert fused.count("mem_alloc_async") == 1  # the result only
    # scatter's updates: one kernel too (beside copying x into the result); updates of
    # another dtype than x run first: their own kernel and tensor, then a conversion
    for target, fused_launches in ((np.float32, 1), (np.float64, 3)):
        z = on_device(np.zeros(8, target))
        cuasync.scatter(z, idx[0], x[0, :3] * 2.0, axis=0).sync()
        done, t = work(cuasync.scatter(z, idx[0], x[0, :3] * 2.0, axis=0))
        launches = [c for c in done if c in LAUNCHES]
        assert len(launches) == fused_launches, done
        want = np.zeros(8, target)
        want[[7, 0, 3]] = a[0, :3] * 2
        np.testing.assert_array_equal(t.to_host().sync(), want)


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "bfloat16", "float64", "complex64"])
def test_fused_kernels_compile_and_run(dtype: str) -> None:
    # the emulator compiles each kernel's CUDA C++ (NVRTC, where installed) before running
    # its twin: every family's fused kernel, with a weak scalar and a broadcast leaf
    a, b = host((3, 4), dtype, 7), host((4,), dtype, 8)
    x, y = on_device(a), on_device(b)
    scalar = True if dtype == "bool" else 2
    want_x = a * b + scalar
    idx = np.array([[3, 0], [1, 1], [2, -1]])
    got = on_host(cuasync.take_along_axis(x * y + scalar, on_device(idx), axis=1))
    np.testing.assert_array_equal(got, np.take_along_axis(want_x, idx, 1))
    got = on_host(cuasync.gather(x * y + scalar, on_device(np.array([2, 0], np.int32)), axis=0))
    np.testing.assert_array_equal(got, want_x[[2, 0]])
    np.testing.assert_array_equal(on_host(cuasync.pad(x * y + scalar, 1)), np.pad(want_x, 1))
    pos = on_device(np.array([1, 1], np.int32))
    got = on_host(cuasync.dynamic_slice(x * y + scalar, pos, (2, 2)))
    np.testing.assert_array_equal(got, want_x[1:3, 1:3])
    got = on_host(cuasync.dynamic_update_slice(x, y[:2].reshape((1, 2)) * y[:2], pos))
    want = a.copy()
    want[1:2, 1:3] = b[:2] * b[:2]
    np.testing.assert_array_equal(got, want)
    mode = "add" if dtype in ("float16", "bfloat16", "float64", "complex64") else "set"
    got = on_host(
        cuasync.scatter(x, on_device(np.array([[2], [0], [1]])), y[:1] * y[:1], mode=mode)
    )
    want = a.copy()
    if mode == "add":
        want[[0, 1, 2], [2, 0, 1]] += b[0] * b[0]
    else:
        want[[0, 1, 2], [2, 0, 1]] = b[0] * b[0]
    np.testing.assert_array_equal(got, want)
