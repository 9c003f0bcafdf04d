"""The array API's elementwise functions (issue 34) vs array-api-strict and numpy.

Each function is an op of the one elementwise machinery: on the emulator its numpy twin
runs, on a GPU its generated kernel does. Results must have the reference's dtype and
shape, over every dtype the function takes, 0-d and empty shapes, broadcasting, strided
views and ``out=``; exact values for the exact functions (rounding, classification,
bitwise, logical, ``square``, ``reciprocal``, ``floor_divide``, ``copysign``,
``nextafter``) with the sign of every zero, and within a few ulp for the transcendental
ones (the device's libm is not the host's). The special values (NaN, ±inf, ±0) are in
every float input.
"""

from __future__ import annotations

from typing import Any

import array_api_strict as xps
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync.errors import DTypeError

pytestmark = pytest.mark.anyio

BF16 = np.dtype(ml_dtypes.bfloat16)
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPLEX = ["complex64", "complex128"]
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 1e-30]

#: name -> (numpy's function, arity, the dtypes tested, exact?)
REAL_MATH = [*FLOATS, "int8", "int32", "uint16", "int64", "bool"]
FUNCTIONS: dict[str, tuple[Any, int, list[str], bool]] = {
    "acos": (np.arccos, 1, REAL_MATH + COMPLEX, False),
    "acosh": (np.arccosh, 1, REAL_MATH + COMPLEX, False),
    "asin": (np.arcsin, 1, REAL_MATH + COMPLEX, False),
    "asinh": (np.arcsinh, 1, REAL_MATH + COMPLEX, False),
    "atan": (np.arctan, 1, REAL_MATH + COMPLEX, False),
    "atanh": (np.arctanh, 1, REAL_MATH + COMPLEX, False),
    "cosh": (np.cosh, 1, REAL_MATH + COMPLEX, False),
    "sinh": (np.sinh, 1, REAL_MATH + COMPLEX, False),
    "tan": (np.tan, 1, REAL_MATH + COMPLEX, False),
    "tanh": (np.tanh, 1, REAL_MATH + COMPLEX, False),
    "log2": (np.log2, 1, REAL_MATH + COMPLEX, False),
    "log10": (np.log10, 1, REAL_MATH + COMPLEX, False),
    "ceil": (np.ceil, 1, FLOATS + INTS + ["bool"], True),
    "floor": (np.floor, 1, FLOATS + INTS + ["bool"], True),
    "trunc": (np.trunc, 1, FLOATS + INTS + ["bool"], True),
    "round": (np.round, 1, FLOATS + INTS + ["bool"] + COMPLEX, True),
    "isfinite": (np.isfinite, 1, FLOATS + INTS + ["bool"] + COMPLEX, True),
    "isinf": (np.isinf, 1, FLOATS + INTS + ["bool"] + COMPLEX, True),
    "isnan": (np.isnan, 1, FLOATS + INTS + ["bool"] + COMPLEX, True),
    "signbit": (np.signbit, 1, [*FLOATS, "int32"], True),
    "positive": (np.positive, 1, FLOATS + INTS + COMPLEX, True),
    "square": (np.square, 1, FLOATS + INTS + ["bool"] + COMPLEX, True),
    "reciprocal": (np.reciprocal, 1, [*FLOATS, "int32", "uint8", *COMPLEX], True),
    "bitwise_invert": (np.invert, 1, [*INTS, "bool"], True),
    "logical_not": (np.logical_not, 1, ["bool", "int32", "float32", *COMPLEX], True),
    # older functions with complex added (issue 34): numpy's formulas, as the others
    "expm1": (np.expm1, 1, REAL_MATH + COMPLEX, False),
    "log1p": (np.log1p, 1, REAL_MATH + COMPLEX, False),
    "sign": (np.sign, 1, FLOATS + INTS + COMPLEX, True),
    "pow": (np.power, 2, FLOATS + COMPLEX, False),
    "atan2": (np.arctan2, 2, REAL_MATH, False),
    "copysign": (np.copysign, 2, FLOATS, True),
    "hypot": (np.hypot, 2, REAL_MATH, False),
    "logaddexp": (np.logaddexp, 2, [*FLOATS, "int32"], False),
    "nextafter": (np.nextafter, 2, FLOATS, True),
    "floor_divide": (np.floor_divide, 2, FLOATS + INTS, True),
    "bitwise_and": (np.bitwise_and, 2, [*INTS, "bool"], True),
    "bitwise_or": (np.bitwise_or, 2, [*INTS, "bool"], True),
    "bitwise_xor": (np.bitwise_xor, 2, [*INTS, "bool"], True),
    "bitwise_left_shift": (np.left_shift, 2, INTS, True),
    "bitwise_right_shift": (np.right_shift, 2, INTS, True),
    "logical_and": (np.logical_and, 2, ["bool", "int32", "float32", *COMPLEX], True),
    "logical_or": (np.logical_or, 2, ["bool", "int32", "float32", *COMPLEX], True),
    "logical_xor": (np.logical_xor, 2, ["bool", "int32", "float32", *COMPLEX], True),
}
#: Relative tolerances of the transcendental functions (a few ulp of the dtype; float16
#: and bfloat16 are computed in float32 and rounded once: one ulp of their own).
RTOL = {"float16": 2**-10, "bfloat16": 2**-7, "float32": 4e-6, "float64": 1e-13}
RTOL |= {"complex64": 4e-6, "complex128": 1e-13}
#: Absolute tolerances: the smallest subnormal of each (a relative ulp is larger there).
ATOL = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149, "float64": 5e-324}
ATOL |= {"complex64": 2.0**-149, "complex128": 5e-324}


def sample(shape: tuple[int, ...], dtype: str, seed: int, name: str = "") -> np.ndarray:
    """Values of ``dtype`` with the special values in every float input."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        if name.startswith("bitwise_") and "shift" in name:
            bits = dt.itemsize * 8
            return rng.integers(0 if dt.kind == "u" else -2, bits + 2, shape).astype(dt)
        info = np.iinfo(dt)
        lo, hi = (info.min, info.max) if "bitwise" in name else (max(info.min, -9), 9)
        return rng.integers(lo, hi, shape, endpoint=True, dtype=dt)
    pool = np.concatenate([np.array(SPECIAL), rng.standard_normal(max(n, 1)) * 3])
    re = rng.choice(pool, n)
    if dt.kind == "c":
        with np.errstate(invalid="ignore"):  # (inf * 1j: numpy's NaN real part)
            re = re + 1j * rng.choice(pool, n)
    return re.reshape(shape).astype(dt)


def want(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    """numpy's result with cuasync's one documented difference: float32 where numpy
    computes float64 for operands that have no float (``exp(int32)``); ``reciprocal`` of
    integers computes in a float (numpy's integer reciprocal truncates)."""
    fn = FUNCTIONS[name][0]
    has_float = any(a.dtype.kind in "fc" or a.dtype == BF16 for a in arrays)
    if name in ("ceil", "floor", "trunc", "round") and not has_float:
        return arrays[0].copy()  # the standard: an integer (or bool) x itself
    if name == "reciprocal" and not has_float:
        arrays = [a.astype(np.sqrt(a.reshape(-1)[:0]).dtype) for a in arrays]  # (0-d too)
    with np.errstate(all="ignore"):
        value = np.asarray(fn(*arrays))
        if value.dtype == np.float64 and not has_float:
            value = np.asarray(fn(*(a.astype("float32") for a in arrays)))
    return value


def check(name: str, got: np.ndarray, expected: np.ndarray, host: Any = ()) -> None:
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape), name
    if name == "pow" and expected.dtype.kind == "c":
        return check_complex_power(got, expected, *host)
    exact = FUNCTIONS[name][3]
    if name in ("square", "sign") and expected.dtype.kind == "c":
        # a complex product: numpy's SIMD loops contract it into FMAs for some lengths and
        # CPUs (numpy 2.5 on the H200's host), the kernel rounds each step: within an ulp;
        # sign(z) = z / |z|: |z| is the device's hypot
        exact = False
    if expected.dtype.kind in "biu" or exact:
        if expected.dtype.kind in "fc" or expected.dtype == BF16:
            wide = "complex128" if expected.dtype.kind == "c" else "float64"
            g, w = got.astype(wide), expected.astype(wide)
            np.testing.assert_array_equal(g, w)  # NaN matches NaN
            for part in (np.real, np.imag) if expected.dtype.kind == "c" else (np.real,):
                zero = part(w) == 0
                assert (np.signbit(part(g))[zero] == np.signbit(part(w))[zero]).all(), name
        else:
            np.testing.assert_array_equal(got, expected)
        return
    wide = "complex128" if expected.dtype.kind == "c" else "float64"
    g, w = got.astype(wide), expected.astype(wide)
    name_ = expected.dtype.name if expected.dtype != BF16 else "bfloat16"
    np.testing.assert_allclose(g, w, rtol=RTOL[name_], atol=ATOL[name_])
    assert (np.isnan(g) == np.isnan(w)).all() and (np.isinf(g) == np.isinf(w)).all(), name
    zero = (w == 0) & (g == 0)
    assert (np.signbit(g.real)[zero] == np.signbit(w.real)[zero]).all(), name


def check_complex_power(got: np.ndarray, expected: np.ndarray, a: Any, b: Any) -> None:
    """Complex ``a ** b`` is ``exp(b log a)`` beyond small integral ``b``: an ulp of
    ``log a`` (the device's, the host's) grows by ``|b log a|``, and the result's
    relative tolerance with it; NaN and the infinities where numpy has them."""
    g, w = got.astype("complex128"), expected.astype("complex128")
    with np.errstate(all="ignore"):
        grow = np.abs(np.asarray(b, "complex128") * np.log(np.abs(np.asarray(a, "complex128"))))
    tol = RTOL[expected.dtype.name] * (1 + np.where(np.isfinite(grow), grow, 0))
    assert (np.isnan(g) == np.isnan(w)).all() and (np.isinf(g) == np.isinf(w)).all()
    finite = np.isfinite(w) & np.isfinite(g)
    g, w, tol = g[finite], w[finite], tol[finite] if np.ndim(tol) else tol
    assert (np.abs(g - w) <= tol * np.abs(w) + ATOL[expected.dtype.name]).all()


def strict_result(name: str, arrays: list[np.ndarray]) -> np.ndarray | None:
    """array-api-strict's result, or None where it does not define the function for
    these dtypes (float16 and bfloat16; integers for the float functions; ...) or these
    values (a negative shift: ValueError; cuasync's is numpy's, checked against numpy)."""
    if any(a.dtype.name in ("float16", "bfloat16") for a in arrays):
        return None
    try:
        args = [xps.asarray(a) for a in arrays]
        with np.errstate(all="ignore"):
            return np.asarray(getattr(xps, name)(*args))
    except (TypeError, ValueError):
        return None


async def device(a: np.ndarray) -> cuasync.Tensor:
    return await cuasync.from_host(np.array(a, order="C"))


# -- the property test ------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_matches_array_api_strict_and_numpy(name: str, data: Any) -> None:
    _, arity, dtypes, _ = FUNCTIONS[name]
    dtype = data.draw(st.sampled_from(dtypes))
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    view = data.draw(st.booleans()) and ndim > 0
    big = sample(tuple(d * 2 for d in shape) if view else shape, dtype, 1, name)
    host = [big[tuple(slice(None, None, 2) for _ in shape)] if view else big]
    x = cuasync.from_host(np.array(big, order="C")).sync()
    args: list[Any] = [x[tuple(slice(None, None, 2) for _ in shape)] if view else x]
    if arity == 2:  # the second operand broadcasts
        bshape = tuple(d if data.draw(st.booleans()) else 1 for d in shape)
        bshape = bshape[data.draw(st.integers(0, ndim)) :]
        b = sample(bshape, dtype, 2, name)
        host.append(b)
        args.append(cuasync.from_host(b).sync())
    expected = want(name, host)
    fn = getattr(cuasync, name)
    if data.draw(st.booleans()):
        out = cuasync.zeros(expected.shape, expected.dtype).sync()
        assert fn(*args, out=out).sync() is out
        got = out.to_host().sync()
    else:
        got = fn(*args).sync().to_host().sync()
    check(name, got, expected, host)
    reference = strict_result(name, host)
    if reference is not None and name == "sign" and reference.dtype.kind == "c":
        # sign(z) of an infinite part: numpy's ±1 or ±i (cuasync's, docs/tensor-ops.md);
        # the standard's complex division by |z| = inf leaves NaN
        finite = np.isfinite(host[0])
        got, reference = got[finite], reference[finite]
    if reference is not None:
        check(name, got, reference, host)


# -- special values, explicitly ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
async def test_special_cases_of_the_standard(dtype: str, anyio_backend: str) -> None:
    nan, inf = float("nan"), float("inf")
    x = await device(np.array([nan, inf, -inf, 0.0, -0.0, 2.5, -2.5, 0.5, -1.5], dtype))

    async def got(op: Any) -> list[float]:
        return [float(v) for v in await (await op).to_host()]

    def same(a: list[float], b: list[float]) -> None:
        def key(v: float) -> Any:
            return "nan" if np.isnan(v) else (v, bool(np.signbit(v)))

        assert [key(v) for v in a] == [key(v) for v in b]

    same(await got(cuasync.round(x)), [nan, inf, -inf, 0.0, -0.0, 2.0, -2.0, 0.0, -2.0])
    same(await got(cuasync.ceil(x)), [nan, inf, -inf, 0.0, -0.0, 3.0, -2.0, 1.0, -1.0])
    same(await got(cuasync.floor(x)), [nan, inf, -inf, 0.0, -0.0, 2.0, -3.0, 0.0, -2.0])
    same(await got(cuasync.trunc(x)), [nan, inf, -inf, 0.0, -0.0, 2.0, -2.0, 0.0, -1.0])
    same((await got(cuasync.reciprocal(x)))[:5], [nan, 0.0, -0.0, inf, -inf])
    assert await got(cuasync.signbit(x)) == [0, 0, 1, 0, 1, 0, 1, 0, 1]
    same((await got(cuasync.asin(x)))[:5], [nan, nan, nan, 0.0, -0.0])
    same((await got(cuasync.atanh(x)))[:5], [nan, nan, nan, 0.0, -0.0])
    same((await got(cuasync.tan(x)))[:5], [nan, nan, nan, 0.0, -0.0])
    same((await got(cuasync.sinh(x)))[:5], [nan, inf, -inf, 0.0, -0.0])
    same((await got(cuasync.cosh(x)))[:5], [nan, inf, inf, 1.0, 1.0])
    same((await got(cuasync.log2(x)))[:5], [nan, inf, nan, -inf, -inf])
    one = await device(np.array([1.0, -1.0], dtype))
    same(await got(cuasync.atanh(one)), [inf, -inf])
    same(await got(cuasync.acosh(one)), [0.0, nan])
    # binary: the signs of zeros and infinities
    pz, nz = await device(np.array([0.0], dtype)), await device(np.array([-0.0], dtype))
    pi = float(np.array(np.pi, dtype))  # pi rounded to the dtype
    same(await got(cuasync.atan2(pz, nz)), [pi])
    same(await got(cuasync.atan2(nz, nz)), [-pi])
    same(await got(cuasync.atan2(nz, pz)), [-0.0])
    signed = await got(cuasync.copysign(x, nz))  # -|x|, the NaN's sign bit set too
    same(signed[1:], [-inf, -inf, -0.0, -0.0, -2.5, -2.5, -0.5, -1.5])
    assert all(np.signbit(v) for v in signed)
    same(await got(cuasync.hypot(x, nan)), [nan, inf, inf, nan, nan, nan, nan, nan, nan])
    same((await got(cuasync.logaddexp(x, inf)))[1:3], [inf, inf])
    same(
        (await got(cuasync.logaddexp(x, -inf)))[1:5], [inf, -inf, 0.0, 0.0]
    )  # (-0.0 + log1p(0): +0, numpy's)
    same((await got(cuasync.floor_divide(x, 0.0)))[1:], [inf, -inf, nan, nan, inf, -inf, inf, -inf])
    same((await got(cuasync.floor_divide(x, inf)))[3:7], [0.0, -0.0, 0.0, -1.0])
    tiny = float(np.nextafter(np.array(0.0, dtype), np.array(1.0, dtype)))
    same(await got(cuasync.nextafter(pz, 1.0)), [tiny])
    same(await got(cuasync.nextafter(pz, -1.0)), [-tiny])
    same(await got(cuasync.nextafter(nz, nz)), [-0.0])
    assert np.isnan(await got(cuasync.nextafter(x, nan))).all()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
async def test_nextafter_steps_the_dtypes_own_bits(dtype: str, anyio_backend: str) -> None:
    """float16 and bfloat16 are computed in float32: nextafter steps their own bits,
    not float32's (which would round back to the same value)."""
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    a = np.array([1.0, 1.0, 0.0, -0.0, -2.0, 65504.0 if dtype == "float16" else 1e38], dt)
    b = np.array([2.0, 0.0, -1.0, 1.0, -3.0, np.inf], dt)
    got = await (await cuasync.nextafter(await device(a), await device(b))).to_host()
    with np.errstate(over="ignore"):
        expected = np.nextafter(a, b)
    assert got.dtype == dt
    np.testing.assert_array_equal(got.view(np.uint16), expected.view(np.uint16))
    assert got[0] > 1.0 and got[1] < 1.0


async def test_integer_floor_divide_and_shift_edges(anyio_backend: str) -> None:
    """numpy's: floor toward -inf, ``x // 0`` is 0, ``MIN // -1`` wraps to MIN; shifts
    by the width or more give 0 (or -1 for a negative value shifted right)."""
    a = np.array([-7, 7, -7, 7, 5, -128], "int8")
    b = np.array([2, -2, -2, 0, -1, -1], "int8")
    x, y = await device(a), await device(b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(await (await (x // y)).to_host(), a // b)
    s = await device(np.array([1, -1, 64, -64, 3], "int8"))
    n = await device(np.array([7, 8, 9, -1, 1], "int8"))
    got = await (await (s << n)).to_host()
    np.testing.assert_array_equal(got, [-128, 0, 0, 0, 6])
    hs, hn = np.array([1, -1, 64, -64, 3], "int8"), np.array([7, 8, 9, -1, 1], "int8")
    np.testing.assert_array_equal(got, np.left_shift(hs, hn))
    np.testing.assert_array_equal(await (await (s >> n)).to_host(), np.right_shift(hs, hn))
    got = await (await (s >> n)).to_host()
    np.testing.assert_array_equal(got, [0, -1, 0, -1, 1])


async def test_rounding_integers_returns_them_unchanged(anyio_backend: str) -> None:
    """The standard: ceil, floor, round and trunc of an integer are the integer itself,
    in its dtype (int64 beyond float64's precision too)."""
    a = np.array([2**62 + 1, -(2**62) - 1, 7], "int64")
    x = await device(a)
    for fn in (cuasync.ceil, cuasync.floor, cuasync.round, cuasync.trunc):
        got = await (await fn(x)).to_host()
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, a)


#: The complex functions with branch cuts or poles, and numpy's functions.
COMPLEX_CUTS = {
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atanh": np.arctanh,
    "cosh": np.cosh,
    "sinh": np.sinh,
    "tanh": np.tanh,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
}


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", sorted(COMPLEX_CUTS))
async def test_complex_functions_take_numpys_branch_cuts(
    anyio_backend: str, name: str, dtype: str
) -> None:
    """On and beside the cuts (the real axis outside [-1, 1] for asin, acos and atanh,
    below 1 for acosh; the imaginary axis outside [-i, i] for asinh and atan), the sign
    of a zero part picks the side, as numpy's; every part's sign matches numpy's (zeros
    too), with the infinities and NaNs of C99's tables."""
    parts = [-np.inf, -3.0, -1.5, -1.0, -0.5, -1e-30, -0.0, 0.0, 1e-30, 0.5, 1.0, 1.5, 3.0]
    parts += [np.inf, np.nan, 40.0, -40.0]
    re, im = np.meshgrid(parts, parts)
    z = np.empty(re.size, dtype)
    z.real, z.imag = re.ravel(), im.ravel()
    with np.errstate(all="ignore"):
        expected = COMPLEX_CUTS[name](z)
    got = await (await getattr(cuasync, name)(await device(z))).to_host()
    assert got.dtype == expected.dtype
    for part in (np.real, np.imag):
        g, w = part(got).astype("float64"), part(expected).astype("float64")
        np.testing.assert_allclose(g, w, rtol=RTOL[dtype], atol=ATOL[dtype], err_msg=name)
        numbers = ~np.isnan(w)
        bad = numbers & (np.signbit(g) != np.signbit(w))
        assert not bad.any(), (name, z[bad], got[bad], expected[bad])


# -- dtypes and operators ------------------------------------------------------------------------
async def test_bad_dtypes_raise_a_typed_error_when_the_op_is_built(anyio_backend: str) -> None:
    f = await device(np.zeros(3, "float32"))
    z = await device(np.zeros(3, "complex64"))
    m = await device(np.zeros(3, "bool"))
    for op in (
        lambda: cuasync.bitwise_and(f, f),
        lambda: cuasync.bitwise_invert(f),
        lambda: cuasync.bitwise_left_shift(f, 1),
        lambda: cuasync.floor(z),
        lambda: cuasync.atan2(z, z),
        lambda: cuasync.copysign(z, z),
        lambda: cuasync.remainder(z, 2),  # (real only in the standard, as numpy)
        lambda: cuasync.floor_divide(z, z),
        lambda: cuasync.maximum(z, 1j),
        lambda: cuasync.less(f, 1j),  # a weak complex has no order either
        lambda: f // 1j,
        lambda: cuasync.positive(m),  # bool is not numeric
        lambda: cuasync.signbit(z),
        lambda: f & 1,
        lambda: ~f,
    ):
        with pytest.raises(DTypeError):
            op()


@pytest.mark.parametrize(
    "name",
    [
        *("remainder", "floor_divide", "maximum", "minimum", "less", "greater_equal", "atan2"),
        *("copysign", "hypot", "logaddexp", "nextafter", "ceil", "floor", "trunc", "signbit"),
    ],
)
async def test_real_only_functions_refuse_complex_saying_so(anyio_backend: str, name: str) -> None:
    """The functions the standard defines for real numbers only raise DTypeError when the
    op is built, naming the operands and why (not numpy's loop-resolution message)."""
    z = await device(np.ones(3, "complex128"))
    fn = getattr(cuasync, name)
    arity = FUNCTIONS[name][1] if name in FUNCTIONS else 2
    for args in ([z] * arity, [z, 2.0][:arity], [1j, await device(np.ones(3))][:arity]):
        if arity == 1 and not isinstance(args[0], cuasync.Tensor):
            continue
        with pytest.raises(DTypeError, match=rf"{name} is not defined for complex operands"):
            fn(*args)


async def test_clip_refuses_complex_naming_itself(anyio_backend: str) -> None:
    z = await device(np.ones(3, "complex64"))
    with pytest.raises(DTypeError, match=r"clip\(x, lo, hi\).*no order"):
        cuasync.clip(z, 0, 1)
    with pytest.raises(DTypeError, match=r"clip\(x, lo, hi\).*no order"):
        cuasync.clip(await device(np.ones(3, "float32")), None, 1j)


async def test_complex_functions_of_issue_34_special_values(anyio_backend: str) -> None:
    """sign(z) = z/|z| (0 for either zero, ±1 along one infinite part); expm1 and log1p
    keep tiny values; z ** n for small integral n is repeated multiplication; 0 ** b is 0
    for re(b) > 0; logical functions take a complex's truth (NaN is true)."""
    inf, nan = np.inf, np.nan
    z = np.array([3 + 4j, -0.0 - 0j, complex(-inf, 2), complex(1, inf), 1e-30j], "complex128")
    x = await device(z)

    async def got(op: Any) -> np.ndarray:
        return await (await op).to_host()

    np.testing.assert_array_equal(await got(cuasync.sign(x)), [0.6 + 0.8j, 0, -1, 1j, 1j])
    assert not np.signbit((await got(cuasync.sign(x)))[1].real)
    tiny = await got(cuasync.expm1(x[4:]))
    np.testing.assert_allclose(tiny, [1e-30j], rtol=1e-15)
    np.testing.assert_allclose(await got(cuasync.log1p(x[4:])), [1e-30j], rtol=1e-15)
    np.testing.assert_array_equal(await got(cuasync.pow(x[:1], 2)), [-7 + 24j])
    np.testing.assert_allclose(await got(x[:1] ** -1), [0.12 - 0.16j], rtol=1e-15)
    zero = await device(np.zeros(2, "complex64"))
    b = await device(np.array([1 + 5j, -1 + 0j], "complex64"))
    assert np.isnan((await got(zero**b))[1]) and (await got(zero**b))[0] == 0
    w = np.array([0j, complex(nan, 0), 1j], "complex64")
    np.testing.assert_array_equal(await got(cuasync.logical_not(await device(w))), [1, 0, 0])
    np.testing.assert_array_equal(await got(cuasync.logical_and(await device(w), 1j)), [0, 1, 1])


async def test_operators_build_the_array_api_functions(anyio_backend: str) -> None:
    a = np.array([-7, 0, 5, 100], "int32")
    b = np.array([3, 2, 1, 4], "int32")
    x, y = await device(a), await device(b)

    async def got(op: Any) -> np.ndarray:
        return await (await op).to_host()

    np.testing.assert_array_equal(await got(x & y), a & b)
    np.testing.assert_array_equal(await got(x | 6), a | 6)
    np.testing.assert_array_equal(await got(6 ^ x), 6 ^ a)
    np.testing.assert_array_equal(await got(~x), ~a)
    np.testing.assert_array_equal(await got(x << y), a << b)
    np.testing.assert_array_equal(await got(1 << y), 1 << b)
    np.testing.assert_array_equal(await got(x >> 1), a >> 1)
    np.testing.assert_array_equal(await got(x // y), a // b)
    np.testing.assert_array_equal(await got(100 // y), 100 // b)
    np.testing.assert_array_equal(await got(+x), a)
    np.testing.assert_array_equal(await got(np.int32(5) & x), 5 & a)
    np.testing.assert_array_equal(await got((x > 0) & (y > 1)), (a > 0) & (b > 1))
    np.testing.assert_array_equal(await got(~(x > 0)), ~(a > 0))
    # fused: one expression of several new functions
    f = await device(np.array([0.25, -1.5, 3.75], "float32"))
    h = np.array([0.25, -1.5, 3.75], "float32")
    np.testing.assert_array_equal(
        await got(cuasync.where(cuasync.isfinite(f), cuasync.floor(f) + cuasync.square(f), 0.0)),
        np.where(np.isfinite(h), np.floor(h) + np.square(h), np.float32(0)),
    )
    assert cuasync.arccos is cuasync.acos
    np.testing.assert_array_equal(await got(cuasync.pow(x, 2)), a**2)
    assert cuasync.left_shift is cuasync.bitwise_left_shift


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
@pytest.mark.parametrize("name", sorted(FUNCTIONS))  # (a case each: the workers share them)
def test_generated_sources_of_the_array_api_functions_compile(name: str) -> None:
    """Every function's kernel compiles with NVRTC, for each dtype it takes (strided and
    contiguous kernels alike), so a CUDA error fails here without a GPU: one NVRTC
    program a function, each kernel in a namespace of its own after the prelude they
    share, with the emulator's fast check's flags (the same front end and assembler)."""
    from cuasync._launch.kernel import CompileOptions, _check_flags
    from cuasync._launch.nvrtc import compile_cubin
    from cuasync._ops import codegen
    from cuasync.errors import KernelCompileError

    prelude = codegen._prelude()
    bodies: list[str] = []
    names: list[str] = []
    _, arity, dtypes, _ = FUNCTIONS[name]
    for dtype in dict.fromkeys(
        ["bool", "int8", "uint64", "float16", "bfloat16", "float64", "complex64", *dtypes]
    ):
        if dtype not in dtypes:
            continue
        x = cuasync.zeros((3, 2), BF16 if dtype == "bfloat16" else dtype).sync()
        op = getattr(cuasync, name)(*([x] * arity if arity == 1 else [x, x[::-1]]))
        plan, _, _ = codegen.make_plan(op._node)
        out = codegen.dtype_name(op._node.dtype)
        for ndim in (0, 1):
            source = codegen.source(plan, out, ndim)
            assert source.startswith(prelude)
            space = f"k{len(names)}"
            bodies.append(f"namespace {space} {{\n{source[len(prelude) :]}\n}}")
            names.append(f"{space}::ca_elementwise")
        op.close()  # (built for its source only: consumed without running)
    flags = _check_flags(CompileOptions()) or CompileOptions().flags()
    try:
        compile_cubin("\n".join([prelude, *bodies]), names, "sm_90", flags)
    except KernelCompileError as exc:
        pytest.fail(f"{name}'s kernels do not compile:\n{exc.log}")
    assert len(names) == 2 * len(set(dtypes)) > 0
