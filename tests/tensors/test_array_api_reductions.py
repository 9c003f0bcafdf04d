"""The array API standard's reductions and scans (issue 34): ``all``, ``any``,
``count_nonzero``, ``var``, ``std``, ``cumulative_sum``, ``cumulative_prod``, ``diff``,
numpy's ``cumsum``/``cumprod``, and the numpy-style methods on tensors and TensorOps.

Compared with array-api-strict (dtypes and shapes: identical) and numpy (values). Exact:
``all``, ``any``, ``count_nonzero``, ``diff`` (each difference is one rounded
subtraction, as numpy's) and integer scans (wrapping as numpy's). Within a tolerance:
``var``/``std`` (two passes, the squares summed in a tree) within ``RTOL[dtype]`` of the
float64 result, relative to ``mean(x**2)``; float scans (the tile scan adds in another
order than numpy's loop) within ``RTOL[dtype] * cumsum(|x|)``, float16 one float16 ulp
of it as well (each output is rounded once from float32).
"""

from __future__ import annotations

import warnings
from typing import Any, cast

import array_api_strict as xp
import ml_dtypes
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
from cuasync._ops import codegen, scan
from cuasync.errors import ArgumentError, DTypeError, OpConsumedError, ShapeError

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("no_emu_compile")]

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
DTYPES = ["bool", *INTS, *FLOATS]
RTOL = {"float16": 2e-3, "float32": 2e-5, "float64": 1e-12}


def host(shape: tuple[int, ...], dtype: str, seed: int = 0, small: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        low = 0 if dtype[0] == "u" else -3
        ints: np.ndarray = rng.integers(low, 4 if small else 100, shape, endpoint=True)
        return ints.astype(dtype)
    values = rng.uniform(0.5, 1.5, shape) if small else rng.standard_normal(shape) * 2
    return values.astype(dtype)


def strided(data: Any, dtype: str, small: bool = False) -> tuple[np.ndarray, cuasync.Tensor]:
    """A host array and the same values on the device as a strided (maybe transposed)
    view, of 0 to 3 dimensions, some empty."""
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    steps = tuple(data.draw(st.sampled_from([1, 2])) for _ in shape)
    base = host(tuple(d * s for d, s in zip(shape, steps, strict=True)), dtype, 3, small)
    view = tuple(slice(None, None, s) for s in steps)
    a, x = base[view], cuasync.from_host(base).sync()[view]
    if ndim > 1 and data.draw(st.booleans()):
        perm = tuple(data.draw(st.permutations(range(ndim))))
        a, x = a.transpose(perm), x.transpose(perm)
    return a, x


def axes_of(data: Any, ndim: int) -> Any:
    axes = (
        data.draw(
            st.lists(st.integers(-ndim, ndim - 1), unique_by=lambda a: a % ndim, max_size=ndim)
        )
        if ndim
        else []
    )
    return data.draw(st.sampled_from([None, tuple(axes), *(axes[:1])]))


def strict(a: np.ndarray) -> Any:
    """``a`` in array-api-strict, or in numpy where that has no such dtype (float16)."""
    return np.asarray(a) if a.dtype == np.float16 else xp.asarray(a)


def strict_fn(a: np.ndarray, name: str) -> Any:
    """The function ``name`` of array-api-strict, or numpy's (float16; ``correction``:
    ``ddof``)."""
    if a.dtype != np.float16:
        return getattr(xp, name)

    def fn(v: Any, correction: Any = None, **kw: Any) -> Any:
        if correction is not None:
            kw["ddof"] = correction
        return np.asarray(getattr(np, name)(v, **kw))

    return fn


def values(want: Any) -> np.ndarray:
    return np.asarray(want if isinstance(want, np.ndarray) else want._array)


def same_kind(got: np.ndarray, want: Any) -> None:
    """dtype and shape as array-api-strict's."""
    assert got.shape == tuple(want.shape)
    assert got.dtype == np.dtype(str(want.dtype).removeprefix("array_api_strict."))


def run(op: Any) -> np.ndarray:
    return np.asarray(op.to_host().sync())


# -- all, any, count_nonzero ----------------------------------------------------------------
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    dtype=st.sampled_from(DTYPES),
    fn=st.sampled_from(["all", "any", "count_nonzero"]),
)
def test_property_all_any_count_nonzero_vs_array_api_strict(data: Any, dtype: str, fn: str) -> None:
    a, x = strided(data, dtype, small=True)
    a = np.where(host(a.shape, "bool", 5), a, np.zeros((), a.dtype))  # zeros too
    x = cuasync.from_host(np.array(a, order="C")).sync()
    axis, keepdims = axes_of(data, a.ndim), data.draw(st.booleans())
    want = strict_fn(a, fn)(strict(a), axis=axis, keepdims=keepdims)
    got = run(getattr(cuasync, fn)(x, axis=axis, keepdims=keepdims))
    same_kind(got, want)
    np.testing.assert_array_equal(got, values(want))


def test_all_any_on_empty_and_fused_operands() -> None:
    empty = cuasync.zeros((0, 3)).sync()
    assert run(cuasync.all(empty)).item() is True
    assert run(cuasync.any(empty, axis=0)).tolist() == [False] * 3
    a = host((4, 7), "float32", 1)
    x = cuasync.from_host(a).sync()
    np.testing.assert_array_equal(run(cuasync.any(x * 2 > 3, axis=1)), (a * 2 > 3).any(axis=1))
    np.testing.assert_array_equal(run(cuasync.count_nonzero(x > 0, axis=0)), (a > 0).sum(0))


# -- var, std ---------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(FLOATS), fn=st.sampled_from(["var", "std"]))
def test_property_var_std_vs_array_api_strict(data: Any, dtype: str, fn: str) -> None:
    a, x = strided(data, dtype)
    axis, keepdims = axes_of(data, a.ndim), data.draw(st.booleans())
    correction = data.draw(st.sampled_from([0, 1, 0.5]))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy: "Degrees of freedom <= 0"
        want = strict_fn(a, fn)(strict(a), axis=axis, keepdims=keepdims, correction=correction)
        exact = getattr(np, fn)(a.astype(np.float64), axis=axis, keepdims=keepdims, ddof=correction)
        scale = np.mean(a.astype(np.float64) ** 2) if a.size else 1.0
    got = run(getattr(cuasync, fn)(x, axis=axis, keepdims=keepdims, correction=correction))
    same_kind(got, want)
    tol = float(RTOL[dtype] * (scale if fn == "var" else np.sqrt(scale)) + 1e-300)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=RTOL[dtype], atol=tol)


@pytest.mark.parametrize("fn", ["var", "std"])
def test_var_std_of_bfloat16_accumulate_in_float32(fn: str) -> None:
    # (ml_dtypes' numpy answers in bfloat16; cuasync accumulates in float32 and rounds
    # the result once, as for float16: within a bfloat16 ulp of the exact value)
    a = (np.random.default_rng(3).standard_normal((6, 9)) * 3).astype(ml_dtypes.bfloat16)
    x = cuasync.from_host(a).sync()
    for view, axis in ((x, 1), (x[:, ::2], 0), (x.T, None)):
        got = run(getattr(cuasync, fn)(view, axis=axis, correction=1))
        wide = np.asarray(run(view.astype("float64")))
        exact = getattr(np, fn)(wide, axis=axis, ddof=1)
        assert got.dtype == ml_dtypes.bfloat16
        np.testing.assert_allclose(got.astype(np.float64), exact, rtol=2**-7)


def test_var_of_too_few_elements_is_nan_or_inf_as_numpy() -> None:
    ones = cuasync.ones((3,)).sync()
    assert np.isnan(run(cuasync.var(ones, correction=3)))  # 0 / 0
    assert np.isnan(run(cuasync.std(cuasync.zeros((0,)).sync())))
    assert run(cuasync.var(cuasync.ones((2, 5)).sync(), axis=())).shape == (2, 5)


# -- scans ------------------------------------------------------------------------------------
def check_scan(got: np.ndarray, a: np.ndarray, want: np.ndarray, op: str, axis: int) -> None:
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    wide = a.astype(np.float64)
    if op == "sum":
        bound = np.cumsum(np.abs(wide), axis=axis)
        exact: np.ndarray = np.cumsum(wide, axis=axis)
    else:  # factors in [0.5, 1.5]: products stay normal
        bound = exact = np.cumprod(wide, axis=axis)
    if got.shape != exact.shape:  # include_initial
        lead = [(0, 0)] * got.ndim
        lead[axis] = (1, 0)
        ident = 0.0 if op == "sum" else 1.0
        bound = np.pad(bound, lead, constant_values=ident)
        exact = np.pad(exact, lead, constant_values=ident)
    rtol = RTOL[str(got.dtype)] * (4 if op == "prod" else 1)
    assert np.all(np.abs(got.astype(np.float64) - exact) <= rtol * np.abs(bound) + 1e-300)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES), op=st.sampled_from(["sum", "prod"]))
def test_property_cumulative_sum_prod_vs_array_api_strict(data: Any, dtype: str, op: str) -> None:
    a, x = strided(data, dtype, small=op == "prod")
    if a.ndim == 0:
        return
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    include_initial = data.draw(st.booleans())
    kw: dict[str, Any] = {"axis": axis, "include_initial": include_initial}
    if data.draw(st.booleans()):  # a wider dtype of the same kind (the standard's)
        kind = np.dtype(dtype).kind
        kw["dtype"] = {"f": "float64", "u": "uint64"}.get(kind, "int64")
    fn = f"cumulative_{op}"
    got = run(getattr(cuasync, fn)(x, **kw))
    if dtype in ("float16", "bool"):  # (array-api-strict refuses these): as numpy's
        shape = list(a.shape)
        shape[axis] += include_initial
        want: Any = np.empty(shape, kw.get("dtype", "int64" if dtype == "bool" else dtype))
        if dtype == "bool":  # (the integer values are compared)
            want = (
                np.cumsum(a, axis=axis, dtype=want.dtype)
                if op == "sum"
                else np.cumprod(a, axis=axis, dtype=want.dtype)
            )
            if include_initial:
                want = np.concatenate(
                    [
                        np.full(
                            [*a.shape[:axis], 1, *a.shape[axis + 1 :]], op == "prod", want.dtype
                        ),
                        want,
                    ],
                    axis,
                )
    else:
        strict_kw = {**kw, "dtype": getattr(xp, kw["dtype"]) if "dtype" in kw else None}
        with np.errstate(all="ignore"):
            want = getattr(xp, fn)(strict(a), **strict_kw)
    same_kind(got, want)
    check_scan(got, a.astype(got.dtype), values(want), op, axis % a.ndim)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    dtype=st.sampled_from(["complex64", "complex128"]),
    op=st.sampled_from(["sum", "prod"]),
)
def test_property_complex_cumulative_sum_prod(data: Any, dtype: str, op: str) -> None:
    """The standard's cumulative sums and products of complex tensors (issue 34), strided
    views and empty shapes, ``include_initial``, a real tensor scanned with a complex
    ``dtype``: array-api-strict's values within rounding (the tile scan adds in another
    order), numpy's (complex) arithmetic."""
    ndim = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    big = tuple(2 * d for d in shape)
    mag = rng.uniform(0.5, 1.5, big) if op == "prod" else rng.standard_normal(big) * 2
    base = (mag * np.exp(1j * rng.uniform(-3, 3, big))).astype(dtype)
    real = data.draw(st.booleans())
    if real:  # float64 values, scanned in dtype
        base = base.real.copy()
    view = tuple(slice(None, None, 2) for _ in shape)
    a, x = base[view], cuasync.from_host(base).sync()[view]
    axis = data.draw(st.integers(-ndim, ndim - 1))
    include_initial = data.draw(st.booleans())
    kw: dict[str, Any] = {"axis": axis, "include_initial": include_initial}
    if real:
        kw["dtype"] = dtype
    fn = f"cumulative_{op}"
    got = run(getattr(cuasync, fn)(x, **kw))
    strict_kw = {**kw, "dtype": getattr(xp, dtype) if real else None}
    want = np.asarray(getattr(xp, fn)(strict(a), **strict_kw))
    same_kind(got, want)
    assert got.dtype == np.dtype(dtype)
    rtol = {"complex64": 2e-5, "complex128": 1e-12}[dtype] * (4 if op == "prod" else 1)
    scale = np.abs(want).max(initial=0.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale * max(shape) + 1e-300)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float32", "float16", "bfloat16"])
def test_long_rows_carry_across_tiles(dtype: str) -> None:
    # 5 rows of 3000 elements (three 1024-element tiles) along a strided axis
    a = host((3000, 5), "float32" if dtype == "bfloat16" else dtype, 7, small=True)
    a = a.astype(SUPPORTED[dtype])
    got = run(cuasync.cumulative_sum(cuasync.from_host(a).sync(), axis=0))
    if dtype in ("int32", "uint8"):
        assert got.dtype == np.dtype("uint64" if dtype == "uint8" else "int64")
        np.testing.assert_array_equal(got, np.cumsum(a, axis=0))
        return
    assert got.dtype == a.dtype
    want = np.cumsum(a.astype(np.float64), axis=0)
    # rounded once to the dtype (float16, bfloat16: from float32), plus float32 sums
    ulp = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}[dtype]
    assert np.all(np.abs(got.astype(np.float64) - want) <= np.abs(want) * (ulp + 3000 * 2.0**-24))


def test_cumsum_cumprod_flatten_as_numpy() -> None:
    a = host((3, 4), "int16", 2, small=True)
    x = cuasync.from_host(a).sync()
    for view, av in ((x, a), (x.T, a.T), (x[:, ::2], a[:, ::2])):
        np.testing.assert_array_equal(run(cuasync.cumsum(view)), np.cumsum(av))
        np.testing.assert_array_equal(run(cuasync.cumprod(view, axis=1)), np.cumprod(av, axis=1))
    np.testing.assert_array_equal(run(cuasync.cumsum(x * 2)), np.cumsum(a * 2))
    zero_d = cuasync.from_host(np.float32(2.5)).sync()
    assert run(cuasync.cumsum(zero_d)).tolist() == [2.5]


async def test_scan_is_lazy_and_ordered_after_a_gated_write(anyio_backend: str) -> None:
    x = await cuasync.zeros((4, 3))
    await cuasync.cumulative_sum(x, axis=0)  # its kernel loaded before the gate closes
    op = cuasync.cumulative_sum(x, axis=0)
    assert isinstance(op, cuasync.TensorOp) and op.shape == (4, 3)
    dev0 = cuasync.Device(0)
    s1, s2 = dev0.new_stream(), dev0.new_stream()
    with ct.gate(s1):  # the fill waits at a closed gate on s1: the scan on s2 waits too
        filled = cuasync.fill(x, 1.0).submit_on(s1)
        total = op.submit_on(s2)
        assert still_pending(total.done), "the scan did not wait for the fill"
    await filled
    got = await (await total).to_host()
    np.testing.assert_array_equal(got[:, 0], [1, 2, 3, 4])


# -- diff -------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), dtype=st.sampled_from(DTYPES))
def test_property_diff_vs_array_api_strict(data: Any, dtype: str) -> None:
    a, x = strided(data, dtype)
    if a.ndim == 0:
        with pytest.raises(ArgumentError, match="0-d"):
            cuasync.diff(x)
        return
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    n = data.draw(st.integers(0, 3))
    with np.errstate(all="ignore"):
        want = np.diff(a, axis=axis, n=n)
        if dtype not in ("bool", "float16") and n == 1:
            same_kind(run(cuasync.diff(x, axis=axis)), xp.diff(strict(a), axis=axis))
    got = run(cuasync.diff(x, axis=axis, n=n))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_diff_prepend_append_and_fused_operand() -> None:
    a = host((3, 4), "int32", 4)
    x = cuasync.from_host(a).sync()
    edge = cuasync.from_host(a[:, :1]).sync()
    want = np.diff(a, axis=1, prepend=a[:, :1], append=a[:, :1])
    np.testing.assert_array_equal(run(cuasync.diff(x, axis=1, prepend=edge, append=edge)), want)
    np.testing.assert_array_equal(
        run(cuasync.diff(x * 3, axis=0, n=2)), np.diff(a * 3, axis=0, n=2)
    )


# -- errors -----------------------------------------------------------------------------------
def test_bad_arguments_raise_typed_errors() -> None:
    x = cuasync.zeros((2, 3)).sync()
    i = cuasync.zeros((2, 3), dtype="int32").sync()
    with pytest.raises(ArgumentError, match="axis 2 is out of range"):
        cuasync.all(x, axis=2)
    with pytest.raises(ArgumentError, match="axis -3 is out of range"):
        cuasync.var(x, axis=-3)
    with pytest.raises(DTypeError, match="var: x has dtype int32"):
        cuasync.var(i)
    with pytest.raises(DTypeError, match="std: x has dtype int32"):
        cuasync.std(i)
    with pytest.raises(ArgumentError, match="correction must be >= 0"):
        cuasync.var(x, correction=-1)
    with pytest.raises(ArgumentError, match="axis is required"):
        cuasync.cumulative_sum(x)
    with pytest.raises(ArgumentError, match="axis 2 is out of range"):
        cuasync.cumulative_prod(x, axis=2)
    with pytest.raises(DTypeError, match="would drop the imaginary parts"):
        cuasync.cumulative_sum(cuasync.zeros((3,), dtype="complex64").sync(), dtype="float32")
    with pytest.raises(ArgumentError, match="n must be an int >= 0"):
        cuasync.diff(x, n=-1)
    # prepend= and append= are worded as diff's, not as the concatenate it calls
    with pytest.raises(ArgumentError, match="diff: prepend must be a cuasync.Tensor"):
        cuasync.diff(x, prepend=cast(Any, 0.0))
    with pytest.raises(ShapeError, match="diff: append has shape"):
        cuasync.diff(x, append=cuasync.zeros((3, 3)).sync())
    with pytest.raises(ArgumentError, match="numpy array"):
        cuasync.any(cast(Any, np.zeros(3)))
    op = x * 2
    cuasync.sum(op).sync()
    with pytest.raises(OpConsumedError):
        cuasync.var(op)


# -- methods ----------------------------------------------------------------------------------
def test_methods_are_the_functions() -> None:
    a = host((3, 1, 4), "float32", 6)
    x = cuasync.from_host(a).sync()
    with np.errstate(all="ignore"):
        for name, kw, want in [
            ("sum", {"axis": 0}, a.sum(axis=0)),
            ("prod", {}, a.prod()),
            ("mean", {"axis": (0, 2), "keepdims": True}, a.mean(axis=(0, 2), keepdims=True)),
            ("max", {"axis": -1}, a.max(axis=-1)),
            ("min", {}, a.min()),
            ("argmax", {"axis": 2}, a.argmax(axis=2)),
            ("argmin", {}, a.argmin()),
            ("var", {"ddof": 1}, a.var(ddof=1)),
            ("std", {"axis": 0, "correction": 1}, a.std(axis=0, ddof=1)),
            ("cumsum", {"axis": 2}, a.cumsum(axis=2)),
            ("cumprod", {}, a.cumprod()),
        ]:
            for operand in (x, x * 1):  # a tensor, and a TensorOp (fused)
                got = run(getattr(operand, name)(**cast(dict[str, Any], kw)))
                assert got.dtype == want.dtype and got.shape == want.shape, name
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    b = a > 0
    assert (
        run((x > 0).all()).item() == b.all()
        and run((x > 0).any(axis=1)).tolist() == b.any(axis=1).tolist()
    )
    for fresh in (lambda: x, lambda: x * 1):
        np.testing.assert_array_equal(run(fresh().copy()), a)
        np.testing.assert_array_equal(run(fresh().flatten()), a.flatten())
        np.testing.assert_array_equal(run(fresh().ravel()), a.ravel())
    assert x.squeeze().shape == (3, 4) and run((x * 1).squeeze(1)).shape == (3, 4)
    t = x.transpose(2, 0, 1)
    np.testing.assert_array_equal(run(t.flatten()), a.transpose(2, 0, 1).flatten())
    assert x.tolist().sync() == a.tolist() and (x * 2).tolist().sync() == (a * 2).tolist()
    assert cuasync.sum(x).tolist().sync() == pytest.approx(float(a.sum()), rel=1e-5)
    assert x[1, 0, 2].item().sync() == a[1, 0, 2].item()


def test_copy_is_a_new_tensor() -> None:
    x = cuasync.ones((3,)).sync()
    y = x.copy().sync()
    cuasync.fill(x, 2.0).sync()
    assert y.to_host().sync().tolist() == [1.0, 1.0, 1.0]


# -- the kernels compile ------------------------------------------------------------------------
@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_every_scan_source_compiles() -> None:
    # sum and prod over each dtype the scans take (their accumulators as sum picks them),
    # 0 to 2 kept dimensions: each kernel in a namespace of its own, one NVRTC compile.
    from cuasync._ops.reductions import _result_dtypes

    bodies: list[str] = []
    for i, dtype in enumerate([*DTYPES, "bfloat16", "complex64", "complex128"]):
        for op in ("sum", "prod"):
            res, acc = _result_dtypes(op, np.dtype(SUPPORTED[dtype]), None, op)
            body = scan.body(op, dtype, acc, res, (i + len(bodies)) % 3)
            bodies.append(f"namespace s{len(bodies)} {{\n{body}\n}}")
    for dt, acc in (("int8", "float32"), ("float16", "complex64"), ("bool", "complex128")):
        body = scan.body("sum", dt, acc, acc, 1)  # (a dtype= wider or complex)
        bodies.append(f"namespace s{len(bodies)} {{\n{body}\n}}")
    compiled = compile_cubin("\n".join([codegen._prelude(), *bodies]), "s0::ca_scan", "sm_90", [])
    assert compiled is not None


# -- the existing reductions, against the standard ----------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    dtype=st.sampled_from(["int8", "uint16", "int32", "int64", "float32", "float64"]),
    fn=st.sampled_from(["sum", "prod", "max", "min", "mean", "argmax", "argmin"]),
)
def test_property_existing_reductions_match_array_api_strict(
    data: Any, dtype: str, fn: str
) -> None:
    a, x = strided(data, dtype, small=True)
    if fn == "mean" and a.dtype.kind != "f":
        return  # (the standard's mean takes floats; cuasync's of integers is float32)
    if fn.startswith("arg"):
        axis = data.draw(st.sampled_from([None, *range(-a.ndim, a.ndim)]))
    else:
        axis = axes_of(data, a.ndim)
    keepdims = data.draw(st.booleans())
    reduced = a.shape if axis is None else [a.shape[j] for j in np.atleast_1d(axis)]
    if fn in ("max", "min", "argmax", "argmin") and 0 in (a.shape if axis is None else reduced):
        with pytest.raises(ArgumentError, match="empty"):
            getattr(cuasync, fn)(x, axis=axis, keepdims=keepdims)
        return
    with np.errstate(all="ignore"):
        want = getattr(xp, fn)(strict(a), axis=axis, keepdims=keepdims)
    got = run(getattr(cuasync, fn)(x, axis=axis, keepdims=keepdims))
    same_kind(got, want)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, values(want), rtol=RTOL[str(got.dtype)])
    else:
        np.testing.assert_array_equal(got, values(want))
