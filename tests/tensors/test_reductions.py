"""Reductions (cuasync.sum, prod, max, min, mean, argmax, argmin, vdot, linalg.norm) vs numpy.

On the emulator the generated kernels' numpy twins run (the CUDA sources are compiled by
``test_every_reduction_source_compiles``, all in one NVRTC call, instead of one compile
per launch); on a GPU the kernels run. Tolerances: integers, bools, max/min and the
arg ops are exact (complex ones too, ordered as numpy orders complex numbers); float
and complex sums, products, means and norms are within ``RTOL[dtype] * sum(|x|)`` of the
float64 (complex128) result rounded to the dtype. float16 and bfloat16 accumulate in
float32 and round once (numpy accumulates bfloat16 in bfloat16): within one bfloat16
ulp of ``sum(|x|)``, 2**-7.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from helpers import emptied, still_pending
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._dtypes import SUPPORTED
from cuasync._launch.kernel import compile_cubin
from cuasync._launch.nvrtc import nvrtc_problem, nvrtc_version
from cuasync._ops import reduce_codegen as rc
from cuasync.errors import ArgumentError, DTypeError, OpConsumedError, ShapeError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_emu_compile")]

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
DTYPES = ["bool", *INTS, *FLOATS, *COMPLEX]
OPS = ["sum", "prod", "max", "min", "mean", "argmax", "argmin"]
RTOL = {
    "float16": 2e-3,
    "bfloat16": 2.0**-7,
    "float32": 1e-5,
    "float64": 1e-12,
    "complex64": 1e-5,
    "complex128": 1e-12,
}
BF16 = SUPPORTED["bfloat16"]


def host(shape: tuple[int, ...], dtype: str, seed: int = 0, op: str = "sum") -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = SUPPORTED[dtype]
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        low = 0 if dtype[0] == "u" else -100
        return rng.integers(low, 100, shape, endpoint=True).astype(dtype)
    if op == "prod":  # products of many normal numbers overflow or vanish
        values = rng.uniform(0.9, 1.1, shape)
        if dt.kind == "c":  # near the unit circle too
            values = values * np.exp(1j * rng.uniform(-0.2, 0.2, shape))
        return values.astype(dt)
    values = rng.standard_normal(shape) * 3
    if dt.kind == "c":
        values = values + 3j * rng.standard_normal(shape)
    return values.astype(dt)


def is_float(dt: np.dtype[Any]) -> bool:
    """float16/32/64, bfloat16 (numpy's kind "V") and complex: compared with a tolerance."""
    return dt.kind in "fc" or dt == BF16


def numpy_reduce(op: str, a: np.ndarray, **kw: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """numpy's result, and for float and complex results the float64 (complex128)
    reference rounded to the result's dtype, with its error budget."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean of nothing
        want = np.asarray(getattr(np, op)(a, **kw))
        if op == "mean" and "dtype" not in kw and a.dtype.kind in "biu":
            want = want.astype(np.float32)  # cuasync's default float dtype (numpy: float64)
        if not is_float(want.dtype) or op in ("max", "min"):
            return want, None
        # the values are converted to dtype= first, then reduced
        conv = a.astype(kw["dtype"]) if "dtype" in kw else a
        wide = conv.astype(np.complex128 if conv.dtype.kind == "c" else np.float64)
        wkw = {k: v for k, v in kw.items() if k != "dtype"}
        exact = np.asarray(getattr(np, op)(wide, **wkw)).astype(want.dtype)
        budget = np.asarray(np.sum(np.abs(wide), **wkw))
        if op == "prod":  # a product's rounding error is relative: ~ an ulp per factor
            factors = max(1, a.size // max(1, want.size))
            budget = np.abs(exact.astype(np.complex128)) * factors
            # Where the nonzero factors' product overflows the result's dtype, it is
            # +-inf (exactly: the sign is the factors'), unless a factor is zero: then a
            # partial product may reach inf before another meets the zero, inf * 0 is
            # nan, and whether it does depends on the reduction's order (numpy's own
            # float64 reference included). 0 and nan are both correct there: an inf
            # budget marks it for check().
            span = np.asarray(np.prod(np.where(wide == 0, 1, np.abs(wide)), **wkw))
            overflows = np.isinf(span.astype(want.dtype))
            zero = np.asarray(np.any(wide == 0, **wkw))
            budget = np.where(overflows, np.where(zero, np.inf, 0.0), budget)
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
    g, w = got.astype(np.complex128), want.astype(np.complex128)
    with np.errstate(invalid="ignore"):  # inf - inf: compared by g == w below
        err = np.abs(g - w)
    either = np.isinf(budget)  # 0 or nan, by the reduction's order: see numpy_reduce
    budget = np.where(either, 0, budget)
    ok = (err <= tol * (budget + 1)) | (np.isnan(g) & np.isnan(w)) | (g == w)
    ok |= either & (np.isnan(g) | (g == 0))
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


async def test_products_that_overflow_their_dtype(anyio_backend: str) -> None:
    # No zero factor: exactly -inf (the factors' sign), in whatever order the tree goes.
    negative = np.array([-100] + [100] * 20, np.int8)
    got = await (await cuasync.prod(await dev(negative), dtype="float32")).to_host()
    check(got, *numpy_reduce("prod", negative, dtype="float32"))
    assert got == -np.inf
    # A zero factor: 0, or nan where a partial product reached inf before the zero.
    with_zero = np.array([100] * 200 + [0], np.int16)
    got = await (await cuasync.prod(await dev(with_zero), dtype="float32")).to_host()
    check(got, *numpy_reduce("prod", with_zero, dtype="float32"))
    assert got == 0 or np.isnan(got)
    with pytest.raises(AssertionError):  # and a wrong finite product is still caught
        check(np.asarray(np.float32(3.0)), *numpy_reduce("prod", with_zero, dtype="float32"))


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


async def test_out_may_overlap_what_a_reduction_reads(anyio_backend: str) -> None:
    # numpy's answer wherever out overlaps the reduced tensor: each case reads x as it
    # was. (Where an output element lies outside its own reduced row, as x[0, :512] of
    # rows reduced whole does, or in a row every output reads, the blocks of one launch
    # would race on a GPU; such an out is written from a new tensor once the reduction
    # has run.) Each case is called with m = cuasync and m = numpy; many blocks.
    a = np.random.default_rng(4).integers(0, 4, (512, 1024)).astype(np.float32)
    cases = {
        "rows into row 0": lambda m, x: m.sum(x, axis=1, out=x[0, :512]),
        "into the column it reduces": lambda m, x: m.sum(x, axis=1, out=x[:, 0]),
        "columns into row 0": lambda m, x: m.max(x, axis=0, out=x[0]),
        "a fused operand": lambda m, x: m.sum(x * 2.0, axis=1, out=x[1, 1:513]),
        "a broadcast row": lambda m, x: m.sum(x[:, :512] + x[0, :512], axis=1, out=x[0, :512]),
        "mean, keepdims": lambda m, x: m.mean(x, axis=1, keepdims=True, out=x[:, 3:4]),
    }
    for name, reduce in cases.items():
        x, want = await dev(a), a.copy()
        reduce(np, want)
        got = await reduce(cuasync, x)
        assert got.allocation is x.allocation, name  # (out itself)
        np.testing.assert_array_equal(await x.to_host(), want, err_msg=name)
    # out the very same view as an operand every output reads whole (broadcast along
    # the reduced axis), and an operand that is an op's view of out
    for name, reduce in {
        "a broadcast operand that is out": lambda m, y, t: m.sum(y + t, axis=1, out=t),
        "mean of one": lambda m, y, t: m.mean(y - t, axis=-1, out=t),
        "a reshape of out": lambda m, y, t: m.max(m.reshape(t, (512, 1)) * y, axis=1, out=t),
    }.items():
        y, t = await dev(a[:, :512]), await dev(a[0, :512])
        want = a[0, :512].copy()
        reduce(np, a[:, :512], want)
        await reduce(cuasync, y, t)
        np.testing.assert_array_equal(await t.to_host(), want, err_msg=name)


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
    # a view flattened by a copy (x.T), or viewed (x[:, ::2]), as numpy's vdot takes them
    t_budget = np.asarray(np.abs(a.T.ravel() * a.ravel()[::-1]).sum())
    check(
        await cuasync.vdot(x.T, flat).to_host(), np.asarray(np.vdot(a.T, a.ravel()[::-1])), t_budget
    )
    half, c = a[:, ::2], host((75,), "float32", 7)
    h_budget = np.asarray(np.abs(half.ravel() * c).sum())
    got = await cuasync.vdot(x[:, ::2], await dev(c))
    check(await got.to_host(), np.asarray(np.vdot(half, c)), h_budget)
    # ops, one writing an out= view of a transposed tensor (flattened by a copy)
    into = (await cuasync.zeros((50, 3))).T
    got = await cuasync.vdot(x * 2.0, cuasync.add(x.T.T, 1.0, out=into))
    check(
        await got.to_host(),
        np.asarray(np.vdot(a * 2, a + 1)),
        np.asarray(np.abs(a * 2 * (a + 1)).sum()),
    )
    ints = host((7,), "int8", 6)
    i = await dev(ints)
    check(await cuasync.vdot(i, i).to_host(), np.asarray(np.vdot(ints, ints)))  # int8, wraps
    for axis in (None, 1, (0, 1)):
        want = np.linalg.norm(a, axis=axis)
        check(await cuasync.linalg.norm(x, axis=axis).to_host(), np.asarray(want), np.asarray(want))
    want = np.asarray(np.linalg.norm(ints)).astype(np.float32)  # the default float dtype
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
        cuasync.argmax(x, axis=(0, 1))  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="out has shape"):
        cuasync.sum(x, axis=0, out=await cuasync.zeros((3,)))
    with pytest.raises(DTypeError, match="out has dtype"):
        cuasync.sum(x, axis=0, out=await cuasync.zeros((4,), "float64"))
    with pytest.raises(DTypeError, match="storage-only"):
        cuasync.sum(x, dtype="float8_e5m2")
    with pytest.raises(ArgumentError, match="numpy array"):
        cuasync.sum(np.ones(3))  # type: ignore[arg-type]
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


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
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
        choices = ["int64", "float32", "float64", "complex64", "complex128"]
        kw["dtype"] = data.draw(st.sampled_from(choices))
        if a.dtype.kind == "c" and SUPPORTED[kw["dtype"]].kind != "c":
            # numpy warns and drops the imaginary parts; cuasync refuses
            with pytest.raises(DTypeError, match="imaginary"):
                getattr(cuasync, op)(x, **kw)
            return
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
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
    # kept/reduced dims 0-2 (0 and 1: a whole array, with its 16-byte loads), a fused
    # expression with a scalar (norm): each kernel in a namespace of its own, one NVRTC
    # compile in all.
    x = ("x", 0, "float32")
    fused = ("op", "add", ("float32", "float32"), "float32", x, ("s", 0, "float"))
    bodies: list[str] = []
    for i, op in enumerate([*OPS, "norm"]):
        for dtype in (DTYPES[(i + 4 * j) % len(DTYPES)] for j in range(3)):
            spec = rc.ReduceSpec(op, *reversed(rc_dtypes(op, dtype)))
            plan = fused if op == "norm" else ("x", 0, dtype)
            dims = [(1, 1), (0, 2), (2, 0), (0, 1)][len(bodies) % 4]
            bodies.append(f"namespace r{len(bodies)} {{\n{rc.body(plan, spec, *dims)}\n}}")
    # every op over bfloat16 and complex, their vdot products, a complex norm and means,
    # and conversions into complex accumulators
    extra: list[tuple[Any, rc.ReduceSpec]] = []
    for dtype in ("bfloat16", "complex64", "complex128"):
        for op in [*OPS, "norm"]:
            extra.append((("x", 0, dtype), rc.ReduceSpec(op, *reversed(rc_dtypes(op, dtype)))))
    for a, b, acc, out in (
        ("complex64", "complex64", "complex64", "complex64"),
        ("complex128", "float32", "complex128", "complex128"),
        ("bfloat16", "bfloat16", "float32", "bfloat16"),
        ("bfloat16", "float32", "float32", "float32"),
    ):
        vdot = ("op", "vdot", (acc, acc), acc, ("x", 0, a), ("x", 1, b))
        extra.append((vdot, rc.ReduceSpec("sum", acc, out)))
    for dtype in ("int8", "float32", "bool"):
        extra.append((("x", 0, dtype), rc.ReduceSpec("sum", "complex128", "complex128")))
        extra.append((("x", 0, dtype), rc.ReduceSpec("mean", "complex64", "complex64")))
    extra.append((("x", 0, "float64"), rc.ReduceSpec("sum", "float32", "bfloat16")))
    for plan, spec in extra:
        dims = [(1, 1), (0, 2), (2, 0), (0, 1)][len(bodies) % 4]
        bodies.append(f"namespace r{len(bodies)} {{\n{rc.body(plan, spec, *dims)}\n}}")
    source = "\n".join([rc.prelude(), *bodies])
    compiled = compile_cubin(source, "r0::ca_reduce", "sm_90", _check_only())
    assert compiled.image[:4] == b"\x7fELF"


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_float4_reduction_sources_compile() -> None:
    # ca_cols4 and ca_whole4 of every op they serve, in one NVRTC compile (each op's
    # struct in a namespace, each kernel instantiated explicitly).
    parts = [rc.prelude()]
    for op in rc.FLOAT4_OPS:
        parts.append(f"namespace o_{op} {{\n{rc.op4_struct(op)}\n}}")
        parts.append(
            f"template __global__ void ca_cols4<o_{op}::ca_op4>(float*, float*, unsigned*, "
            "const float*, long long, long long, long long, long long, int, unsigned long long);"
        )
        parts.append(
            f"template __global__ void ca_whole4<o_{op}::ca_op4, {rc.WHOLE_LOADS}>(float*, "
            "float*, unsigned*, const float*, long long, unsigned long long);"
        )
    compiled = compile_cubin("\n".join(parts), "ca_cols4<o_max::ca_op4>", "sm_90", _check_only())
    assert compiled.image[:4] == b"\x7fELF"


def _check_only() -> list[str]:
    """NVRTC flags of a compile that only looks for errors (``Kernel.check_compiles``'s):
    the same front end and assembler, a fraction of a full compile's time."""
    return ["--Ofast-compile=max"] if nvrtc_version() >= (12, 8) else []


def rc_dtypes(op: str, dtype: str) -> tuple[str, str]:
    from cuasync._ops.reductions import _result_dtypes

    return _result_dtypes(op, np.dtype(dtype), None, op)


def test_ops_bench_runs_and_checks_its_results() -> None:
    from cuasync.bench import ops
    from cuasync.bench._util import Report

    report = Report()
    ops.run(report, quick=True)
    ours = [r for r in report.rows if r.name.startswith("cuasync ")]
    # 3 sums, 2 max, 2 min, 3 adds (and each submitted alone), scatter, take_along_axis,
    # the add, exp(a*b+c) fused and unfused; CuPy and torch: on GPUs
    assert len(ours) == 18 and all(r.value and r.value > 0 for r in ours)
    targets = {r.name for r in report.rows if "target" in r.name}
    assert "unfused time / fused time (target >= 1.8)" in targets


def test_ops_bench_runs_only_the_parts_asked_for() -> None:
    # python -m cuasync.bench ops --only adds: the three add rows (and their targets on
    # a GPU), nothing else; an unknown part is refused before anything runs.
    from cuasync.bench import ops
    from cuasync.bench.__main__ import main
    from cuasync.bench._util import Report

    report = Report()
    ops.run(report, quick=True, only=("adds",))
    ours = [r.name for r in report.rows if r.name.startswith("cuasync ")]
    # 3 adds, each also submitted alone
    assert len(ours) == 6 and all(name.startswith("cuasync add(a, b, out=c)") for name in ours)
    with pytest.raises(ArgumentError, match="unknown part"):
        ops.run(Report(), quick=True, only=("add",))
    with pytest.raises(SystemExit):
        main(["ops", "--only", "add"])


# -- bfloat16 and complex ---------------------------------------------------------------
async def test_bfloat16_accumulates_in_float32_and_rounds_once(anyio_backend: str) -> None:
    # 1000 ones: numpy's bfloat16 sum sticks at 256 (256 + 1 rounds back to 256 in
    # bfloat16); cuasync accumulates in float32, as torch does, and rounds once.
    a = np.ones((2, 1000), BF16)
    x = await dev(a)
    assert np.sum(a) == 256
    check(await cuasync.sum(x).to_host(), np.asarray(2000.0, BF16))
    check(await cuasync.sum(x, axis=1).to_host(), np.full(2, 1000.0, BF16))
    check(await cuasync.mean(x).to_host(), np.asarray(1.0, BF16))
    check(await cuasync.vdot(x[0], x[1]).to_host(), np.asarray(1000.0, BF16))
    check(await cuasync.linalg.norm(x).to_host(), np.asarray(np.sqrt(2000.0), BF16))
    # the result dtype is bfloat16 (sum's dtype= may ask for float32)
    check(await cuasync.sum(x, dtype="float32").to_host(), np.asarray(2000.0, np.float32))


def same_with_nans(got: np.ndarray, want: np.ndarray) -> None:
    """Equal, except that where numpy's result is a NaN, any NaN will do (which NaN a
    reduction tree meets first is not numpy's order on a GPU)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), (got, want)
    np.testing.assert_array_equal(got[~nan], want[~nan])


COMPLEX_CASES = np.array(
    [
        [1 + 2j, 1 + 3j, 1 - 5j, 0.5 + 9j, 1 + 3j, -2 + 0j],  # ties in the real part
        [2 + 0j, 2 + 0j, 2 - 0j, 1 + 1j, -1 - 1j, 2 + 0j],  # equal values: the first index
        [1 + 2j, complex(np.nan, 0), 3 + 1j, complex(1, np.nan), 5 + 0j, 0j],  # NaNs
        [complex(0, np.nan), 7 + 0j, -7 + 0j, complex(np.nan, np.nan), 1j, -1j],
        [complex(np.inf, 0), complex(np.inf, -1), complex(-np.inf, 5), 0j, 1j, 2j],
    ]
)


@pytest.mark.parametrize("dtype", COMPLEX)
async def test_complex_max_min_and_arg_ops_order_as_numpy(dtype: str, anyio_backend: str) -> None:
    # numpy orders complex numbers by real part, then imaginary part; a NaN in either
    # part wins (argmax/argmin: the first one)
    a = COMPLEX_CASES.astype(dtype)
    x = await dev(a)
    for axis in (None, 1, 0):
        for op in ("max", "min"):
            with np.errstate(invalid="ignore"):
                want = np.asarray(getattr(np, op)(a, axis=axis))
            same_with_nans(await getattr(cuasync, op)(x, axis=axis).to_host(), want)
        for op in ("argmax", "argmin"):
            got = await getattr(cuasync, op)(x, axis=axis).to_host()
            check(got, np.asarray(getattr(np, op)(a, axis=axis)))


@pytest.mark.parametrize("dtype", COMPLEX)
async def test_complex_sum_prod_mean_vdot_and_norm(dtype: str, anyio_backend: str) -> None:
    a, b = host((4, 50), dtype, 7), host((4, 50), dtype, 8)
    x, y = await dev(a), await dev(b)
    for op in ("sum", "mean"):
        for axis in (None, 0, 1):
            check(
                await getattr(cuasync, op)(x, axis=axis).to_host(), *numpy_reduce(op, a, axis=axis)
            )
    p = host((3, 20), dtype, 9, "prod")
    check(await cuasync.prod(await dev(p), axis=1).to_host(), *numpy_reduce("prod", p, axis=1))
    # vdot conjugates its first argument
    want = np.vdot(a, b)
    budget = np.sum(np.abs(a) * np.abs(b))
    check(await cuasync.vdot(x, y).to_host(), np.asarray(want), budget)
    check(await cuasync.vdot(x, x).to_host(), np.asarray(np.vdot(a, a)), np.sum(np.abs(a) ** 2))
    # the norm is real: float32 for complex64, float64 for complex128
    for axis in (None, 1):
        want = np.asarray(np.linalg.norm(a, axis=axis))
        assert want.dtype == (np.float32 if dtype == "complex64" else np.float64)
        check(await cuasync.linalg.norm(x, axis=axis).to_host(), want, want)


async def test_complex_and_bfloat16_dtypes_promote_as_numpy(anyio_backend: str) -> None:
    f = host((30,), "float32", 1)
    c = host((30,), "complex64", 2)
    h = host((30,), "bfloat16", 3)
    xf, xc, xh = await dev(f), await dev(c), await dev(h)
    got = await cuasync.vdot(xc, xf).to_host()  # complex64 with float32: complex64
    check(got, np.asarray(np.vdot(c, f)), np.sum(np.abs(c) * np.abs(f)))
    got = await cuasync.vdot(xh, xf).to_host()  # bfloat16 with float32: float32
    want = np.vdot(h.astype(np.float32), f)
    check(got, np.asarray(want), np.sum(np.abs(h.astype(np.float32) * f)))
    got = await cuasync.sum(xf, dtype="complex128").to_host()
    check(got, *numpy_reduce("sum", f, dtype="complex128"))
    got = await cuasync.sum(xf, dtype="bfloat16").to_host()
    check(got, *numpy_reduce("sum", f.astype(BF16)))
    # bfloat16 with float16: float32 from ml_dtypes 0.7 on; no common dtype before it
    g = host((30,), "float16", 4)
    try:
        common = np.result_type(h.dtype, g.dtype)
    except TypeError:
        with pytest.raises(DTypeError, match="no common dtype"):
            cuasync.vdot(xh, await dev(g))
    else:
        got = await cuasync.vdot(xh, await dev(g)).to_host()
        assert got.dtype == common
        pair = h.astype(common) * g.astype(common)
        check(got, np.asarray(pair.sum()), np.sum(np.abs(pair)))
    with pytest.raises(DTypeError, match="imaginary"):
        cuasync.sum(xc, dtype="float32")
    with pytest.raises(DTypeError, match="imaginary"):
        cuasync.mean(xc, dtype="int64")


@pytest.mark.parametrize("dtype", ["bfloat16", "complex64", "complex128"])
@pytest.mark.parametrize("op", ["sum", "max", "argmin", "mean", "prod"])
@pytest.mark.parametrize(("shape", "axis"), [((70000,), None), ((40, 3000), 0), ((3000, 5), 1)])
async def test_split_rows_and_columns_of_bfloat16_and_complex(
    dtype: str, op: str, shape: Any, axis: Any, anyio_backend: str
) -> None:
    # partials of a split row (float32 or complex workspaces) combined by a second pass
    a = host(shape, dtype, 5, op)
    if op == "prod":
        a = a[..., :40] if a.ndim == 1 else a  # keep products in range
        axis = None if a.ndim == 1 else axis
    got = await getattr(cuasync, op)(await dev(a), axis=axis).to_host()
    check(got, *numpy_reduce(op, a, axis=axis))


@pytest.mark.parametrize("op", ["sum", "max", "min", "argmax"])
async def test_rows_read_in_vectors_where_aligned(op: str, anyio_backend: str) -> None:
    # A whole contiguous float32 array is read 4 elements a load (mode 2) where its
    # start is 16-byte aligned; x[1:] is 4 bytes past that and reads one element a load
    # (as rows do, aligned or not). Lengths around the vector, the block's vectors and split ends:
    # numpy's values either way (NaN first, first index of the maximum).
    from cuasync._launch.builtin import storage_view
    from cuasync._ops.reductions import vector_rows

    assert rc.row_vector_width(("x", 0, "float32"), 0, 1) == 4
    assert rc.row_vector_width(("x", 0, "bfloat16"), 0, 1) == 8
    assert rc.row_vector_width(("x", 0, "float32"), 0, 2) == 0  # several reduced dims
    assert rc.row_vector_width(("x", 0, "float32"), 1, 1) == 0  # rows: not in mode 2
    for n in (3, 4, 5, 4 * 4 * 256 + 7, 70001):
        a = host((n + 1,), "float32", n, op)
        if op in ("max", "min") and n > 4:
            a[n // 2] = np.nan
        x = await dev(a)
        for sl, aligned in ((slice(0, n), True), (slice(1, n + 1), False)):
            assert vector_rows(storage_view(x[sl]), (), (1,), 4) is aligned
            got = await (await getattr(cuasync, op)(x[sl])).to_host()
            check(got, *numpy_reduce(op, a[sl]))
    rows = host((6, 4 * 300), "float32", 1, op)
    y = await dev(rows)
    check(await (await getattr(cuasync, op)(y, axis=1)).to_host(), *numpy_reduce(op, rows, axis=1))
    odd = host((6, 4 * 300 + 1), "float32", 2, op)
    z = await dev(odd)
    check(await (await getattr(cuasync, op)(z, axis=1)).to_host(), *numpy_reduce(op, odd, axis=1))


@pytest.mark.parametrize("op", ["sum", "max", "argmin"])
@pytest.mark.parametrize("shape", [(8192 + 5, 300), (1000, 8192 + 33), (257, 40)])
async def test_first_axis_in_blocks_of_columns(op: str, shape: Any, anyio_backend: str) -> None:
    # The first axis of a row-major matrix: 32 columns a block, each split over rows in
    # 8 groups of threads and blockIdx.y (rows not a multiple of a split, columns not of
    # 32), the partials combined in a second pass: numpy's values.
    a = host(shape, "float32", 4, op)
    got = await (await getattr(cuasync, op)(await dev(a), axis=0)).to_host()
    check(got, *numpy_reduce(op, a, axis=0))


@pytest.fixture
def float4_routes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each reduction launched took a float4 kernel (ca_cols4 / ca_whole4) or
    the generic one, on either path: the long way, or the native launch of a plan made in
    the test (the plans are emptied; the launchers of those made are spied on)."""
    from cuasync._ops import launch_plan, reductions

    routes: list[bool] = []
    float4, generic = reductions.float4_kernel, reductions._generic
    make_plan = launch_plan.LAUNCHES.reduce_plan_for

    def float4_spy(*args: Any, **kwargs: Any) -> Any:
        routes.append(True)
        return float4(*args, **kwargs)

    def generic_spy(*args: Any) -> Any:
        routes.append(False)
        return generic(*args)

    def spied(launcher: Any) -> Any:
        def launch(*args: Any) -> Any:
            routes.append(False)
            return launcher(*args)

        return None if launcher is None else launch

    def plan_spy(work: Any, _: None, key: Any, tensors: Any) -> Any:
        plan = make_plan(work, _, key, tensors)
        if plan is not None:
            plan = plan._replace(launch=spied(plan.launch), vec_launch=spied(plan.vec_launch))
            launch_plan._plans[key] = plan
        return plan

    emptied(monkeypatch, launch_plan._plans)
    monkeypatch.setattr(reductions, "float4_kernel", float4_spy)
    monkeypatch.setattr(reductions, "_generic", generic_spy)
    monkeypatch.setattr(launch_plan.LAUNCHES, "reduce_plan_for", plan_spy)
    return routes


FLOAT4_OPS = ["sum", "mean", "prod", "max", "min"]


@pytest.mark.parametrize("op", FLOAT4_OPS)
@pytest.mark.parametrize("shape", [(8192 + 5, 300), (1, 260), (3, 128), (70, 4096 + 4)])
async def test_first_axis_of_float32_in_float4_columns(
    op: str, shape: Any, float4_routes: list[bool], anyio_backend: str
) -> None:
    # float32 over the first axis, columns a multiple of 4 (of 128 or not), one row or
    # many (split, the last block of each column strip combining in the same launch;
    # one row is a copy, by the generic kernel):
    # numpy's values; NaN propagates through max/min, zeros of either sign compare equal.
    a = host(shape, "float32", 5, op)
    if op in ("max", "min"):
        a[shape[0] // 2, 7] = np.nan
        a[:, 9] = 0.0
        a[::2, 9] = -0.0
    got = await (await getattr(cuasync, op)(await dev(a), axis=0)).to_host()
    check(got, *numpy_reduce(op, a, axis=0))
    assert float4_routes == [shape[0] > 1]  # (one row: no reduced axis is left)


@pytest.mark.parametrize("op", ["sum", "mean", "prod"])
async def test_first_axis_of_no_rows_in_float4_columns(
    op: str, float4_routes: list[bool], anyio_backend: str
) -> None:
    a = np.zeros((0, 256), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's mean of nothing
        want = numpy_reduce(op, a, axis=0)
    check(await (await getattr(cuasync, op)(await dev(a), axis=0)).to_host(), *want)
    assert float4_routes == [True]


@pytest.mark.parametrize("op", ["sum", "max"])
async def test_float4_columns_only_where_aligned(
    op: str, float4_routes: list[bool], anyio_backend: str
) -> None:
    # Views whose rows start 16 bytes apart (a column slice of 260 of 264) take the
    # float4 kernel; a view 4 bytes off, columns not a multiple of 4, fewer than 128
    # columns, a kept axis that is not contiguous, float64 and argmax fall back to the
    # generic kernel: numpy's values every time.
    a = host((300, 264), "float32", 6, op)
    x = await dev(a)
    cases = [
        (x[:, :260], a[:, :260], True),
        (x[:, 1:261], a[:, 1:261], False),
        (x[:, :258], a[:, :258], False),
        (x[:, :124], a[:, :124], False),
        (x[:, ::2], a[:, ::2], False),
    ]
    for view, want, fast in cases:
        float4_routes.clear()
        got = await (await getattr(cuasync, op)(view, axis=0)).to_host()
        check(got, *numpy_reduce(op, want, axis=0))
        assert float4_routes == [fast], view.shape
    wide = await dev(a.astype(np.float64))
    float4_routes.clear()
    check(
        await (await getattr(cuasync, op)(wide, axis=0)).to_host(),
        *numpy_reduce(op, a.astype(np.float64), axis=0),
    )
    float4_routes.clear()
    check(await (await cuasync.argmax(x, axis=0)).to_host(), *numpy_reduce("argmax", a, axis=0))
    assert float4_routes in ([], [False])


@pytest.mark.parametrize("op", ["max", "min"])
async def test_whole_array_max_min_in_float4_blocks(
    op: str, float4_routes: list[bool], anyio_backend: str
) -> None:
    # max/min of a whole contiguous float32 array, 16-byte aligned: one launch of 8
    # float4 loads in flight a thread (lengths around a vector and a block's share, the
    # grid of 8 blocks an SM); a NaN anywhere wins; x[1:] falls back.
    for n in (5, 4 * 256 * 8 + 3, 70001, 1 << 20):
        a = host((n + 1,), "float32", n, op)
        x = await dev(a)
        float4_routes.clear()
        check(await (await getattr(cuasync, op)(x[:n])).to_host(), *numpy_reduce(op, a[:n]))
        check(await (await getattr(cuasync, op)(x[1:])).to_host(), *numpy_reduce(op, a[1:]))
        assert float4_routes == [True, False]
        a[n // 3] = np.nan
        x = await dev(a)
        got = await (await getattr(cuasync, op)(x[:n])).to_host()
        assert np.isnan(got)


async def test_float4_reductions_on_several_streams_at_once(anyio_backend: str) -> None:
    # Each launch has a workspace (partials, last-block counters) of its own: first-axis
    # sums and whole-array maxima in flight on four streams together give each its own
    # result.
    dev0 = cuasync.Device(0)
    streams = [dev0.new_stream() for _ in range(4)]
    arrays = [host((4096, 512), "float32", 20 + i) for i in range(4)]
    xs = [await dev(a) for a in arrays]
    sums = [cuasync.sum(x, axis=0).submit_on(s) for x, s in zip(xs, streams, strict=True)]
    tops = [cuasync.max(x).submit_on(s) for x, s in zip(xs, streams, strict=True)]
    for a, op in zip(arrays, sums, strict=True):
        check(await (await op).to_host(), *numpy_reduce("sum", a, axis=0))
    for a, op in zip(arrays, tops, strict=True):
        check(await (await op).to_host(), *numpy_reduce("max", a))


async def test_float4_columns_in_graph_capture(anyio_backend: str) -> None:
    # A first-axis reduction of one split (few rows) allocates nothing: a graph node,
    # replayed on new values. Split ones allocate their partials and counters, which a
    # graph cannot replay: CaptureError, as for every allocating op.
    from cuasync.errors import CaptureError

    a = host((40, 256), "float32", 8)
    x = await dev(a)
    out = await cuasync.zeros((256,))
    graph = cuasync.max(x, axis=0, out=out).graph()
    await cuasync.fill(x, -3.0)
    await graph.launch()
    check(await out.to_host(), np.full(256, -3.0, np.float32))
    big = await dev(host((4096, 256), "float32", 9))
    with pytest.raises(CaptureError):
        cuasync.sum(big, axis=0, out=out).graph()


async def test_a_seen_reduction_layout_keeps_no_tensor_alive(anyio_backend: Any) -> None:
    """The layouts reductions keep per seen shape hold no operand: a tensor reduced
    (the first time and again) is freed once the caller drops it."""
    import gc
    import weakref

    refs = []
    for k in range(3):  # the first (the layout worked out and kept), then seen ones
        x = await cuasync.asarray(np.full((4, 8), k + 1, np.float32))
        got = await (await cuasync.sum(x, axis=1)).to_host()
        np.testing.assert_array_equal(got, np.full(4, 8 * (k + 1), np.float32))
        refs.append(weakref.ref(x))
        del x
    ct.settle()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
