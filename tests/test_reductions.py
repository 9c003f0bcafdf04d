"""Reductions (cuasync.sum, prod, max, min, mean, argmax, argmin, vdot, linalg.norm) vs numpy.

On the emulator the generated kernels' numpy twins run (the CUDA sources are compiled by
``test_every_reduction_source_compiles``, all in one NVRTC call, instead of one compile
per launch); on a GPU the kernels run. Tolerances: integers, bools, max/min and the
arg ops are exact; float sums, means and norms are within ``RTOL[dtype] * sum(|x|)`` of
the float64 sum (float16 accumulates in float32, numpy sometimes in float16).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import still_pending
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._kernel import compile_cubin
from cuasync._nvrtc import nvrtc_problem
from cuasync._ops import reduce_codegen as rc
from cuasync.errors import ArgumentError, DTypeError, OpConsumedError, ShapeError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_emu_compile")]

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
DTYPES = ["bool", *INTS, *FLOATS]
OPS = ["sum", "prod", "max", "min", "mean", "argmax", "argmin"]
RTOL = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}


def host(shape: tuple[int, ...], dtype: str, seed: int = 0, op: str = "sum") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        low = 0 if dtype[0] == "u" else -100
        return rng.integers(low, 100, shape, endpoint=True).astype(dtype)
    if op == "prod":  # products of many normal numbers overflow or vanish
        return rng.uniform(0.9, 1.1, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def numpy_reduce(op: str, a: np.ndarray, **kw: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """numpy's result, and for float sums the float64 reference with its error budget."""
    with np.errstate(all="ignore"):
        want = np.asarray(getattr(np, op)(a, **kw))
        if want.dtype.kind != "f" or op in ("max", "min"):
            return want, None
        exact = np.asarray(getattr(np, op)(a.astype(np.float64), **kw)).astype(want.dtype)
        budget = np.asarray(np.sum(np.abs(a.astype(np.float64)), **kw))
        if op == "prod":  # a product's rounding error is relative: ~ an ulp per factor
            factors = max(1, a.size // max(1, want.size))
            budget = np.abs(exact.astype(np.float64)) * factors
        if op == "mean":
            budget = budget / max(1, a.size // max(1, want.size))
    return exact, budget


def check(got: np.ndarray, want: Any, budget: np.ndarray | None = None) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if budget is None:
        np.testing.assert_array_equal(got, want)
        return
    tol = RTOL[want.dtype.name]
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    ok = (err <= tol * (budget + 1)) | (np.isnan(got) & np.isnan(want)) | (got == want)
    assert ok.all(), f"got {got}, want {want}"


async def dev(a: np.ndarray) -> cuasync.Tensor:
    return await cuasync.from_host(np.array(a, order="C"))


@pytest.mark.parametrize("dtype", DTYPES)
async def test_every_op_and_dtype(dtype: str, anyio_backend: str) -> None:
    for op in OPS:
        a = host((5, 37), dtype, 1, op)
        x = await dev(a)
        for axis in (None, 0, 1, -1):
            got = await (await getattr(cuasync, op)(x, axis=axis)).to_host()
            check(got, *numpy_reduce(op, a, axis=axis))


@pytest.mark.parametrize("op", ["sum", "max", "argmin", "mean"])
@pytest.mark.parametrize(
    ("shape", "axis"),
    [
        ((70000,), None),  # one long row, split over blocks
        ((3, 20000), 1),  # short of rows: split too
        ((40, 3000), 0),  # a thread per output, each column split in two
        ((3000, 5), 1),  # many short rows: a thread per output
        ((300, 20, 9), (0, 2)),
    ],
)
async def test_split_rows_and_column_layouts(op: str, shape: Any, axis: Any, anyio_backend) -> None:
    # Long rows split over several blocks (a second pass combines them); reducing the
    # strided axis, or many short rows, runs a thread per output.
    if op.startswith("arg") and isinstance(axis, tuple):
        axis = 0
    a = host(shape, "float32", 2)
    a.flat[len(a.flat) // 3] = 50.0  # one clear maximum, ties elsewhere are unlikely
    got = await (await getattr(cuasync, op)(await dev(a), axis=axis)).to_host()
    check(got, *numpy_reduce(op, a, axis=axis))


async def test_nan_and_ties_follow_numpy(anyio_backend: str) -> None:
    a = np.array([[1.0, np.nan, 3.0, np.nan], [2.0, 5.0, 5.0, -1.0]], np.float32)
    x = await dev(a)
    for op in ("max", "min", "argmax", "argmin"):
        for axis in (None, 1):
            check(
                await (await getattr(cuasync, op)(x, axis=axis)).to_host(),
                getattr(np, op)(a, axis=axis),
            )


async def test_dtype_keepdims_and_out(anyio_backend: str) -> None:
    a = host((4, 6), "int8", 3)
    x = await dev(a)
    check(await cuasync.sum(x, dtype="int8").to_host(), np.sum(a, dtype=np.int8))  # wraps
    check(await cuasync.sum(x, axis=1, dtype="float32").to_host(), np.sum(a, 1, np.float32))
    check(await cuasync.mean(x, axis=0, dtype="int32").to_host(), np.mean(a, 0, np.int32))
    check(
        await cuasync.max(x, axis=(0, 1), keepdims=True).to_host(), np.max(a, (0, 1), keepdims=True)
    )
    check(await cuasync.argmax(x, axis=0, keepdims=True).to_host(), np.argmax(a, 0, keepdims=True))
    buf = await cuasync.zeros((4, 2), "int64")
    got = await cuasync.sum(x, axis=1, out=buf[:, 1])
    assert got.shape == (4,)
    want = np.zeros((4, 2), np.int64)
    want[:, 1] = a.sum(axis=1)
    check(await buf.to_host(), want)
    check(await cuasync.sum(x, axis=()).to_host(), np.sum(a, axis=()))


async def test_fused_input_vdot_and_norm(anyio_backend: str) -> None:
    a, b = host((3, 50), "float32", 4), host((50,), "float32", 5)
    x, y = await dev(a), await dev(b)
    check(await cuasync.sum(x * y + 1.0, axis=1).to_host(), *numpy_reduce("sum", a * b + 1, axis=1))
    d = await cuasync.vdot(x[0], y)
    assert d.shape == ()
    check(await d.to_host(), np.asarray(np.vdot(a[0], b)), np.asarray(np.abs(a[0] * b).sum()))
    flat = await dev(a.ravel()[::-1].copy())
    budget = np.asarray(np.abs(a.ravel() * a.ravel()[::-1]).sum())
    check(await cuasync.vdot(x, flat).to_host(), np.asarray(np.vdot(a, a.ravel()[::-1])), budget)
    ints = host((7,), "int8", 6)
    i = await dev(ints)
    check(await cuasync.vdot(i, i).to_host(), np.asarray(np.vdot(ints, ints)))  # int8, wraps
    for axis in (None, 1, (0, 1)):
        want = np.linalg.norm(a, axis=axis)
        check(await cuasync.linalg.norm(x, axis=axis).to_host(), np.asarray(want), np.asarray(want))
    want = np.asarray(np.linalg.norm(ints))
    check(await cuasync.linalg.norm(i).to_host(), want, want)
    with pytest.raises(ArgumentError, match="ord=2 over 2 axes"):
        cuasync.linalg.norm(x, ord=2)


async def test_empty_and_zero_d(anyio_backend: str) -> None:
    z = await cuasync.zeros((0, 3))
    check(await cuasync.sum(z, axis=0).to_host(), np.zeros(3, np.float32))
    check(await cuasync.prod(z).to_host(), np.asarray(np.float32(1)))
    check(await cuasync.max(z, axis=1).to_host(), np.zeros(0, np.float32))
    assert np.isnan(await cuasync.mean(z).to_host())
    for op in ("max", "min", "argmax", "argmin"):
        with pytest.raises(ArgumentError, match="empty"):
            getattr(cuasync, op)(z, axis=0)
    s = await dev(np.asarray(np.float64(2.5)))
    check(await cuasync.sum(s).to_host(), np.asarray(2.5))
    check(await cuasync.argmax(s).to_host(), np.asarray(0))


async def test_errors_raise_when_built(anyio_backend: str) -> None:
    x = await dev(host((3, 4), "float32"))
    with pytest.raises(ArgumentError, match="axis 2 is out of range"):
        cuasync.sum(x, axis=2)
    with pytest.raises(ArgumentError, match="repeats axis 1"):
        cuasync.sum(x, axis=(1, -1))
    with pytest.raises(ArgumentError, match="axis must be None or an int"):
        cuasync.argmax(x, axis=(0, 1))
    with pytest.raises(ShapeError, match="out has shape"):
        cuasync.sum(x, axis=0, out=await cuasync.zeros((3,)))
    with pytest.raises(DTypeError, match="out has dtype"):
        cuasync.sum(x, axis=0, out=await cuasync.zeros((4,), "float64"))
    with pytest.raises(DTypeError):
        cuasync.sum(x, dtype="complex64")
    with pytest.raises(ArgumentError, match="numpy array"):
        cuasync.sum(np.ones(3))
    with pytest.raises(ShapeError, match="same number"):
        cuasync.vdot(x, x[0])
    op = x * 2.0
    with pytest.raises(ArgumentError):
        cuasync.sum(op, axis=5)
    check(await cuasync.sum(op).to_host(), *numpy_reduce("sum", (await x.to_host()) * 2))
    with pytest.raises(OpConsumedError):
        cuasync.sum(op)


async def test_lazy_until_awaited_and_ordered_across_streams(anyio_backend: str) -> None:
    x = await cuasync.zeros((64,))
    op = cuasync.sum(x)
    assert isinstance(op, cuasync.TensorOp) and (op.shape, op.dtype) == ((), np.dtype("float32"))
    await cuasync.fill(x, 1.0)  # after building, before running: the sum sees it
    check(await op.to_host(), np.asarray(np.float32(64)))
    dev0 = cuasync.Device(0)
    s1, s2 = dev0.new_stream(), dev0.new_stream()
    with ct.gate(s1):  # the fill waits at a closed gate on s1: the sum on s2 must wait too
        filled = cuasync.fill(x, 2.0).submit_on(s1)
        total = cuasync.sum(x).submit_on(s2)
        assert still_pending(total.done), "the sum did not wait for the fill on another stream"
    await filled
    check(await (await total).to_host(), np.asarray(np.float32(128)))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES), op=st.sampled_from(OPS))
def test_property_shapes_axes_and_views_vs_numpy(data: Any, dtype: str, op: str) -> None:
    ndim = data.draw(st.integers(0, 4))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    steps = tuple(data.draw(st.sampled_from([1, 2])) for _ in shape)
    base = host(tuple(d * s for d, s in zip(shape, steps, strict=True)), dtype, 1, op)
    view = tuple(slice(None, None, s) for s in steps)
    a = base[view]
    x = cuasync.from_host(base).sync()[view]  # a strided view
    if ndim and data.draw(st.booleans()):  # a transposed view too
        perm = tuple(data.draw(st.permutations(range(ndim))))
        a, x = a.transpose(perm), x.transpose(perm)
    if op.startswith("arg"):
        axis = data.draw(st.one_of(st.none(), st.integers(-ndim, ndim - 1))) if ndim else None
    else:
        axes = data.draw(st.lists(st.integers(0, max(ndim - 1, 0)), unique=True, max_size=ndim))
        axis = data.draw(st.sampled_from([None, tuple(axes), *(axes[:1] if axes else [])]))
    kw: dict[str, Any] = {"axis": axis, "keepdims": data.draw(st.booleans())}
    if op in ("sum", "prod", "mean") and data.draw(st.booleans()):
        kw["dtype"] = data.draw(st.sampled_from(["int64", "float32", "float64"]))
    try:
        with np.errstate(all="ignore"):
            getattr(np, op)(a, **kw)
    except ValueError:  # numpy refuses (an empty max): so does cuasync, when building
        with pytest.raises(ArgumentError):
            getattr(cuasync, op)(x, **kw)
        return
    got = getattr(cuasync, op)(x, **kw).to_host().sync()
    check(got, *numpy_reduce(op, a, **kw))


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_every_reduction_source_compiles() -> None:
    # Every op, each with three dtypes (rotating, so each dtype comes twice or more),
    # kept/reduced dims 0-2, a fused expression with a scalar (norm): each kernel in a
    # namespace of its own, one NVRTC compile in all.
    x = ("x", 0, "float32")
    fused = ("op", "add", ("float32", "float32"), "float32", x, ("s", 0, "float"))
    bodies: list[str] = []
    for i, op in enumerate([*OPS, "norm"]):
        for dtype in (DTYPES[(i + 4 * j) % len(DTYPES)] for j in range(3)):
            spec = rc.ReduceSpec(op, *reversed(rc_dtypes(op, dtype)))
            plan = fused if op == "norm" else ("x", 0, dtype)
            dims = [(1, 1), (0, 2), (2, 0)][len(bodies) % 3]
            bodies.append(f"namespace r{len(bodies)} {{\n{rc.body(plan, spec, *dims)}\n}}")
    source = "\n".join([rc.prelude(), *bodies])
    compiled = compile_cubin(source, "r0::ca_reduce", "sm_90", [])
    assert compiled.image[:4] == b"\x7fELF"


def rc_dtypes(op: str, dtype: str) -> tuple[str, str]:
    from cuasync._ops.reductions import _result_dtypes

    return _result_dtypes(op, np.dtype(dtype), None, op)


def test_ops_bench_runs_and_checks_its_results() -> None:
    from cuasync.bench import ops
    from cuasync.bench._util import Report

    report = Report()
    ops.run(report, quick=True)
    ours = [r for r in report.rows if r.name.startswith("cuasync ")]
    # 3 reductions, the add, exp(a*b+c) fused and unfused; CuPy and torch: on GPUs
    assert len(ours) == 6 and all(r.value and r.value > 0 for r in ours)
    targets = {r.name for r in report.rows if "target" in r.name}
    assert "unfused time / fused time (target >= 1.8)" in targets
