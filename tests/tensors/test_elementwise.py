"""Elementwise tensor ops (cuasync.add, exp, where, operators, ...) vs numpy.

Each expression is one generated kernel (compiled with NVRTC here too); on the emulator
its numpy twin runs, on a GPU the kernel does: both must give numpy's values.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
from cuasync._launch.nvrtc import nvrtc_problem
from cuasync._ops import codegen
from cuasync.errors import (
    ArgumentError,
    DTypeError,
    OpConsumedError,
    ScalarOverflowError,
    ShapeError,
)

pytestmark = pytest.mark.anyio

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]
TOL = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}


def host(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(
            max(info.min, -100), min(info.max, 100), shape, dtype=dtype, endpoint=True
        )
    return (rng.standard_normal(shape) * 3).astype(dtype)


async def dev(a: np.ndarray) -> cuasync.Tensor:
    return await cuasync.from_host(np.array(order="C", object=a))


def check(got: np.ndarray, want: Any) -> None:
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=TOL[want.dtype.name], atol=TOL[want.dtype.name])
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bool", *INTS, *FLOATS])
async def test_arithmetic_and_comparisons_every_dtype(dtype: str, anyio_backend: str) -> None:
    a, b = host((4, 5), dtype, 1), host((5,), dtype, 2)
    x, y = await dev(a), await dev(b)
    with np.errstate(all="ignore"):
        check(await (await cuasync.add(x, y)).to_host(), np.add(a, b))
        check(await (await cuasync.multiply(x, y)).to_host(), np.multiply(a, b))
        check(await (await (x < y)).to_host(), a < b)
        check(await (await (x == y)).to_host(), a == b)
        check(await (await cuasync.maximum(x, y)).to_host(), np.maximum(a, b))
        if dtype != "bool":
            check(await (await (x - y)).to_host(), a - b)
            check(await (await abs(x)).to_host(), np.abs(a))
            # integers divide in the default float dtype, float32 (numpy: float64)
            quotient = a / b if dtype in FLOATS else (a / b).astype("float32")
            check(await (await (x / y)).to_host(), quotient)
            nz = np.where(b == 0, 1, b).astype(dtype)
            check(await (await (x % (await dev(nz)))).to_host(), a % nz)


@pytest.mark.parametrize("fn", ["exp", "log", "sqrt", "sin", "cos", "tanh", "expm1", "log1p"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int16"])
async def test_analytic(fn: str, dtype: str, anyio_backend: str) -> None:
    a = np.abs(host((33,), dtype, 3)) + (1 if dtype == "int16" else 0.5)
    a = a.astype(dtype)
    got = await (await getattr(cuasync, fn)(await dev(a))).to_host()
    with np.errstate(over="ignore"):  # exp of large float16 values is inf, as on the device
        expected = getattr(np, fn)(a)
    check(got, expected)


async def test_fused_expression_is_one_kernel(anyio_backend: str) -> None:
    a, b, c = host((8, 3), "float32", 1), host((3,), "float32", 2), host((8, 1), "float32", 3)
    x, y, z = await dev(a), await dev(b), await dev(c)
    before = len(codegen._kernels)
    got = await (await cuasync.exp(x * y + z - 1.0)).to_host()
    check(got, np.exp(a * b + c - np.float32(1.0)))
    assert len(codegen._kernels) - before <= 1
    again = await (await cuasync.exp(y * x + z - 2.0)).to_host()  # other order: its own plan
    check(again, np.exp(b * a + c - np.float32(2.0)))


@pytest.mark.parametrize("n", [1, 255, 1023, 1024, 1025, 4097, 300_001])
async def test_contiguous_and_strided_kernels_cover_every_element(n: int, anyio_backend) -> None:
    # Contiguous operands take the unrolled kernel (codegen.UNROLL elements a thread,
    # a block apart), strided ones the unravelling kernel: both must reach each
    # element exactly once, across block, unroll and tail boundaries.
    a, b = host((n,), "float32", 4), host((2 * n,), "float32", 5)
    x, y = await dev(a), await dev(b)
    check(await (await cuasync.exp(x * 0.5 + 1.0)).to_host(), np.exp(a * 0.5 + 1.0))
    check(await (await (x - y[::2])).to_host(), a - b[::2])  # one strided operand
    out = await cuasync.zeros((n + 1,))
    await cuasync.multiply(x, 3.0, out=out[:n])  # aligned: one access per UNROLL elements
    check(await out[:n].to_host(), a * np.float32(3.0))
    await cuasync.multiply(x, 2.0, out=out[1:])  # misaligned: one element an access
    check(await out[1:].to_host(), a * np.float32(2.0))
    h = await cuasync.from_host(a.astype(np.float16))  # mixed widths, vectorized
    check(await (await (h * x)).to_host(), a.astype(np.float16).astype(np.float32) * a)


@pytest.mark.parametrize(("dtype", "width"), [("bfloat16", 8), ("float32", 4), ("float64", 2)])
async def test_aligned_contiguous_operands_take_16_byte_accesses(
    dtype: str, width: int, anyio_backend: str
) -> None:
    # The contiguous kernel moves 16 bytes of each operand an access (8 bfloat16, 4
    # float32) where every pointer is aligned to that, and one element an access where one
    # is not (x[1:] is 2 or 4 bytes past a 16-byte boundary); both cover odd lengths and
    # the tail past the last whole vector, with numpy's values.
    import ml_dtypes

    from cuasync._launch.builtin import storage_view
    from cuasync._ops import tensorop

    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    plan = ("op", "add", (dtype, dtype), dtype, ("x", 0, dtype), ("x", 1, dtype))
    assert codegen.vector_width(plan, dtype) == width
    for n in (1, width - 1, width + 1, width * codegen.VECTORS * 256 + 3):
        rng = np.random.default_rng(n)
        a, b = (rng.standard_normal(n + 1).astype(dt) for _ in range(2))
        x, y = await cuasync.from_host(a), await cuasync.from_host(b)
        out = await cuasync.zeros((n + 1,), dtype)
        for sl, aligned in ((slice(0, n), True), (slice(1, n + 1), False)):
            views = [storage_view(t[sl]) for t in (out, x, y)]
            assert tensorop.vector_access(views, width) is aligned
            await cuasync.add(x[sl], y[sl], out=out[sl])
            got = await out[sl].to_host()
            np.testing.assert_array_equal(
                got.view(f"u{dt.itemsize}"), (a[sl] + b[sl]).view(f"u{dt.itemsize}")
            )


async def test_nep50_python_scalars(anyio_backend: str) -> None:
    a = host((5,), "int8", 1)
    x = await dev(a)
    check(await (await (x + 3)).to_host(), a + 3)  # stays int8
    check(await (await (x * 1.5)).to_host(), (a * 1.5).astype("float32"))  # default float
    h = await dev(a.astype("float16"))
    check(await (await (h + 0.1)).to_host(), a.astype("float16") + 0.1)
    check(await (await (x + np.int16(2))).to_host(), a + np.int16(2))  # numpy scalar: strong
    with pytest.raises(ArgumentError, match="x2=300 does not fit in int8"):
        x + 300


async def test_where_clip_and_operators(anyio_backend: str) -> None:
    a = host((4, 6), "float32", 5)
    x = await dev(a)
    check(await (await cuasync.where(x > 0, x, 0.0)).to_host(), np.where(a > 0, a, 0.0))
    check(await (await cuasync.clip(x, -1.0, 2.0)).to_host(), np.clip(a, -1.0, 2.0))
    check(await (await (-x)).to_host(), -a)
    check(await (await (2.0 - x)).to_host(), 2.0 - a)
    check(await (await (x**2)).to_host(), a**2)
    check(await (await cuasync.rsqrt(abs(x) + 1)).to_host(), 1 / np.sqrt(np.abs(a) + 1))
    check(await (await cuasync.sign(x)).to_host(), np.sign(a))


async def test_integer_semantics(anyio_backend: str) -> None:
    a = np.array([-7, 7, -7, 7, 5, -128, 3], np.int8)
    b = np.array([2, -2, -2, 2, 0, -1, 3], np.int8)
    x, y = await dev(a), await dev(b)
    with np.errstate(all="ignore"):
        check(await (await (x % y)).to_host(), np.remainder(a, b))  # x % 0 is 0
        check(await (await (-x)).to_host(), -a)
        check(await (await abs(x)).to_host(), np.abs(a))
        check(await (await (x * x)).to_host(), a * a)  # wraps
    big = np.array([2**63, 1, 0], np.uint64)
    neg = np.array([-1, 1, 1], np.int64)
    check(await (await (await dev(big) > await dev(neg))).to_host(), big > neg)


def _int_power(base: int, exponent: int, dtype: np.dtype[Any]) -> int:
    """The documented integer power: wrapping as numpy's for ``exponent >= 0``; for a
    negative one 0 (base 0 too), 1 for base 1 and ±1 for base -1."""
    if exponent < 0:
        return {1: 1, -1: -1 if exponent % 2 else 1}.get(base, 0)
    bits = 8 * dtype.itemsize
    value = pow(base, exponent, 1 << bits)
    return value - (1 << bits) if dtype.kind == "i" and value >> (bits - 1) else value


@pytest.mark.parametrize(
    ("base_dtype", "exponent_dtype"),
    [(d, d) for d in ("int8", "int16", "int32", "int64")]
    + [("uint8", "int8"), ("uint32", "int32"), ("int16", "uint8")],
)
async def test_integer_power_of_a_negative_exponent(
    base_dtype: str, exponent_dtype: str, anyio_backend: str
) -> None:
    """Integer ``x ** -n`` is 0 (1 and ±1 for bases 1 and -1; 0 for base 0), where numpy
    raises: the kernel (``ca_ipow``) computes it, and the emulator's twin raised a
    KernelError instead of computing it the same."""
    signed = np.dtype(base_dtype).kind == "i"
    bases = [0, 1, -1, 2, -3, 3, 127] if signed else [0, 1, 2, 3, 255]
    exponents = [-1, -2, -3, -64, 0, 1, 2, 5] if np.dtype(exponent_dtype).kind == "i" else [0, 5]
    a = np.repeat(np.array(bases, base_dtype), len(exponents))
    b = np.tile(np.array(exponents, exponent_dtype), len(bases))
    dt = np.result_type(a, b)
    want = np.array([_int_power(int(p), int(q), dt) for p, q in zip(a, b, strict=True)], dt)
    x, y = await dev(a), await dev(b)
    check(await (await (x**y)).to_host(), want)
    check(await (await cuasync.power(x[::-1], y[::-1])).to_host(), want[::-1])  # strided
    check(await (await cuasync.sum(x**y)).to_host(), np.sum(want))  # fused into a reduction
    if signed and exponent_dtype == base_dtype:
        for n in (-1, -2, -3):  # a weak Python int exponent, and a weak Python int base
            got = await (await (x**n)).to_host()
            check(got, np.array([_int_power(int(p), n, dt) for p in a], dt))
            got = await (await (2**-x)).to_host()
            check(got, np.array([_int_power(2, -int(p), dt) for p in a], dt))


async def test_out_writes_into_a_view(anyio_backend: str) -> None:
    a = host((4, 6), "float32", 1)
    x = await dev(a)
    buf = await cuasync.zeros((4, 12))
    view = buf[:, ::2]
    got = await cuasync.add(x, 1.0, out=view)
    assert got is view
    want = np.zeros((4, 12), np.float32)
    want[:, ::2] = a + 1
    check(await buf.to_host(), want)
    await cuasync.multiply(x, 2.0, out=x)  # in place
    check(await x.to_host(), a * 2)


async def test_out_partly_overlapping_an_operand_is_refused_when_built(anyio_backend) -> None:
    a = host((8,), "float32", 1)
    x = await dev(a)
    with pytest.raises(cuasync.errors.AliasingError, match="out overlaps x1"):
        cuasync.add(x[:-1], 1.0, out=x[1:])  # would read elements already overwritten
    with pytest.raises(cuasync.errors.AliasingError, match="out overlaps x2"):
        cuasync.multiply(2.0, x[2:6], out=x[:4])
    await cuasync.add(x[::2], 1.0, out=x[1::2])  # interleaved: no shared element
    want = a.copy()
    want[1::2] = a[::2] + 1
    check(await x.to_host(), want)
    # the very same elements, an axis of length 1 given another stride: in place
    row = x.reshape((2, 4))[:1]  # (strides (4, 1); its squeezed and expanded view: (0, 1))
    await cuasync.add(cuasync.expand_dims(cuasync.squeeze(row, 0), 0), 1.0, out=row)
    want[:4] += 1
    check(await x.to_host(), want)


async def test_out_partly_overlapping_a_fused_operand_is_refused_when_built(anyio_backend) -> None:
    # The fused kernel reads the inner expression's tensors while it writes out: on a GPU
    # a thread would read elements another one already overwrote.
    a = host((8,), "float32", 1)
    x = await dev(a)
    inner = x[1:] * 2.0
    with pytest.raises(cuasync.errors.AliasingError, match="out overlaps a tensor x1 reads"):
        cuasync.add(inner, 1.0, out=x[:-1])
    reversed_x = x[::-1] + 0.0
    with pytest.raises(cuasync.errors.AliasingError, match="out overlaps a tensor x reads"):
        cuasync.exp(reversed_x, out=x)
    check(await (await reversed_x).to_host(), a[::-1])  # the refusal left it unconsumed
    doubled = x * 2.0  # clip is two ops: refused as one, before either is built
    with pytest.raises(cuasync.errors.AliasingError, match=r"clip: .* from element 7 and"):
        cuasync.clip(doubled, 1.0, 4.0, out=x[::-1])
    check(await (await doubled).to_host(), a * 2)
    await cuasync.add(inner, x[1:], out=x[1:])  # the very same view (in place): allowed
    want = a.copy()
    want[1:] = a[1:] * 2 + a[1:]
    check(await x.to_host(), want)


async def test_bad_inputs_raise_before_running(anyio_backend: str) -> None:
    x = await dev(host((3, 4), "float32"))
    y = await dev(host((5,), "float32"))
    with pytest.raises(ShapeError, match="x1 has shape"):
        cuasync.add(x, y)
    with pytest.raises(DTypeError, match="subtract"):
        cuasync.subtract(await dev(host((3,), "bool")), await dev(host((3,), "bool")))
    with pytest.raises(ShapeError, match="out has shape"):
        cuasync.add(x, 1.0, out=y)
    with pytest.raises(DTypeError, match="out has dtype"):
        cuasync.add(x, 1.0, out=await cuasync.zeros((3, 4), "float64"))
    with pytest.raises(ArgumentError, match="x2 is a numpy array"):
        cuasync.add(x, np.ones(3))  # type: ignore[arg-type]
    # a 0-d array is its (typed) scalar, for the functions as for the operators
    zero_d = np.array(1.0)
    for op in (cuasync.add(x, zero_d), x + zero_d):  # type: ignore[arg-type]
        assert op.dtype == cuasync.float64
        check(await (await op).to_host(), (await x.to_host()) + zero_d)
    with pytest.raises(ArgumentError, match="at least one operand"):
        cuasync.exp(1.0)
    op = x * 2.0
    with pytest.raises(ShapeError):
        op + y  # the failed expression leaves op unconsumed
    check(await (await op).to_host(), (await x.to_host()) * 2)
    with pytest.raises(OpConsumedError):
        op + 1.0


async def test_tensorop_identity_hash_and_bool(anyio_backend: str) -> None:
    x = await dev(host((3,), "float32"))
    op = x * 2.0
    assert (op.shape, op.dtype, op.device) == ((3,), np.dtype("float32"), x.device)
    assert isinstance(op, cuasync.TensorOp) and isinstance(op, cuasync.DeviceOp)
    assert hash(op) == object.__hash__(op) and hash(x) == object.__hash__(x)
    with pytest.raises(TypeError, match="truth value"):
        bool(x == x)
    await op
    a = {x * 2.0: 1}  # hashable: usable as a dict key (asyncio.gather does this)
    for pending in a:
        check(await (await pending).to_host(), (await x.to_host()) * 2)
    assert (x == None) is False  # noqa: E711  (not an operand: identity)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x + 1.0).sync(allow_in_loop=True)


@pytest.mark.skipif(nvrtc_problem() is not None, reason="needs NVRTC")
def test_generated_sources_compile() -> None:

    x = cuasync.zeros((4, 3), "float16").sync()
    i = cuasync.zeros((3,), "int64").sync()
    u = cuasync.zeros((3,), "uint64").sync()
    exprs = [
        cuasync.where(x > 0.5, cuasync.exp(x) % 2, cuasync.rsqrt(x) ** 2.0),
        cuasync.clip(i, -3, 5) ** i + abs(-i) % i - cuasync.sign(i),
        u < i,
        cuasync.tanh(cuasync.log1p(x)) + cuasync.expm1(x) / cuasync.sin(x) - cuasync.cos(x),
    ]
    for op in exprs:
        op.sync()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    dtype=st.sampled_from(["int32", "float32", "float64", "uint8"]),
)
def test_property_broadcast_and_views_vs_numpy(data: Any, dtype: str) -> None:
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    bshape = tuple(d if data.draw(st.booleans()) else 1 for d in shape)[
        data.draw(st.integers(0, ndim)) :
    ]
    a = host(tuple(d * 2 for d in shape), dtype, 1)[tuple(slice(None, None, 2) for _ in shape)]
    b = host(bshape, dtype, 2)
    x = cuasync.from_host(
        np.array(order="C", object=host(tuple(d * 2 for d in shape), dtype, 1))
    ).sync()
    x = x[tuple(slice(None, None, 2) for _ in shape)]  # a strided view
    y = cuasync.from_host(b).sync()
    with np.errstate(all="ignore"):
        want = np.where(a > b, a * b - 1, np.maximum(a, b) + 2)
    got = cuasync.where(x > y, x * y - 1, cuasync.maximum(x, y) + 2).sync().to_host().sync()
    check(got, want)


async def test_creation_ops_are_tensorops_with_reshape_and_to_host(anyio_backend) -> None:
    op = cuasync.arange(12, dtype="float32")
    assert isinstance(op, cuasync.TensorOp)
    assert (op.shape, op.dtype) == ((12,), np.dtype("float32"))
    m = op.reshape((4, -1))
    assert m.shape == (4, 3)
    np.testing.assert_array_equal(await m.to_host(), np.arange(12.0).reshape(4, 3))
    with pytest.raises(OpConsumedError):
        op.reshape(-1)
    t = await cuasync.zeros((2, 6), "int32").reshape((3, 4))
    assert t.shape == (3, 4) and t.is_contiguous
    host = np.arange(6.0).reshape(2, 3)
    up = cuasync.from_host(host)
    assert isinstance(up, cuasync.TensorOp) and up.shape == (2, 3)
    np.testing.assert_array_equal(await up.reshape(-1).to_host(), host.ravel())
    dup = (await cuasync.from_host(host)).dup()
    assert isinstance(dup, cuasync.TensorOp)
    np.testing.assert_array_equal(await (dup * 2.0).to_host(), host * 2)


async def test_tensorop_reshape_checks_the_shape_when_called(anyio_backend) -> None:
    op = cuasync.ones((4,))
    with pytest.raises(ShapeError):
        op.reshape((3, -1))
    with pytest.raises(ShapeError):
        op.reshape((5,))
    assert not op._consumed  # a refused reshape leaves the op usable
    np.testing.assert_array_equal(await op.reshape((2, 2)).to_host(), np.ones((2, 2)))
    x = await cuasync.from_host(np.arange(4.0))
    fused = (x * 2.0).reshape((2, 2))
    np.testing.assert_array_equal(await fused.to_host(), (np.arange(4.0) * 2).reshape(2, 2))
    buf = await cuasync.zeros((4, 2), "float64")
    strided = cuasync.add(x, 1.0, out=buf[:, 0])  # (an out= view: viewed in the new shape)
    viewed = await strided.reshape((2, 2))
    assert viewed.allocation is buf.allocation and viewed.strides == (4, 2)
    np.testing.assert_array_equal(await viewed.to_host(), (np.arange(4.0) + 1).reshape(2, 2))
    m = await cuasync.from_host(np.arange(4.0).reshape(2, 2))
    column = cuasync.add(m, 1.0, out=(await cuasync.zeros((2, 2), "float64")).T)
    copied = await column.reshape((4,))  # (no stride walks a transposed out=: a copy)
    assert copied.is_contiguous
    np.testing.assert_array_equal(await copied.to_host(), np.arange(4.0) + 1)


# -- issue 34: where cuasync disagreed with the array API standard --------------------------
async def test_python_bool_scalar_takes_the_array_dtype(anyio_backend: str) -> None:
    # A Python bool is a bool operand (numpy 2; the standard leaves bool with a numeric
    # array open): any numeric array's dtype wins, for arithmetic and comparisons alike.
    a, i = host((5,), "float32", 1), host((5,), "int8", 2)
    x, y = await dev(a), await dev(i)
    check(await (await cuasync.add(x, True)).to_host(), np.add(a, True))  # float32
    check(await (await (y * False)).to_host(), i * False)  # int8
    check(await (await cuasync.less(x, True)).to_host(), np.less(a, True))
    check(await (await cuasync.where(x > 0, x, True)).to_host(), np.where(a > 0, a, True))
    b = await dev(a > 0)
    check(await (await (b + True)).to_host(), (a > 0) + True)  # bool or bool
    with pytest.raises(DTypeError, match="subtract"):
        b - True  # numpy refuses bool - bool too


async def test_sign_of_zero_is_positive_zero_and_nan_stays_nan(anyio_backend: str) -> None:
    # The standard: sign(±0) is 0 (no sign). The generated kernel returned its input for
    # anything not above or below 0, so -0.0 stayed -0.0 on a GPU (the twin: +0.0).
    for dtype in FLOATS:
        a = np.array([-0.0, 0.0, np.nan, -2.5, 3.0, -np.inf], dtype)
        got = await (await cuasync.sign(await dev(a))).to_host()
        np.testing.assert_array_equal(got, np.array([0.0, 0.0, np.nan, -1.0, 1.0, -1.0], dtype))
        assert not np.signbit(got[:2]).any(), (dtype, got)


async def test_python_int_too_large_raises_overflow_when_built(anyio_backend: str) -> None:
    # numpy 2: an int past an integer array's dtype raises OverflowError; a float array
    # takes any int a float holds (inf past float32's range). Both were LaunchErrors at
    # run time where the int left the kernel's long long parameter.
    i32 = await dev(np.arange(3, dtype="int32"))
    with pytest.raises(OverflowError, match="x2=1099511627776 does not fit in int32"):
        cuasync.add(i32, 2**40)
    with pytest.raises(ScalarOverflowError, match="uint64"):
        cuasync.add(await dev(np.arange(3, dtype="uint64")), 2**64)
    u64 = np.arange(3, dtype="uint64")
    check(await (await cuasync.add(await dev(u64), 2**63)).to_host(), u64 + 2**63)
    for dtype in FLOATS:
        a = np.arange(3, dtype=dtype)
        with np.errstate(over="ignore"):
            check(await (await cuasync.add(await dev(a), 2**70)).to_host(), a + 2**70)
    f64 = await dev(np.arange(3, dtype="float64"))
    with pytest.raises(ScalarOverflowError, match="too large for any float"):
        cuasync.multiply(f64, 2**1030)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint32"])
async def test_comparing_with_an_int_the_dtype_cannot_hold_answers_as_numpy(
    dtype: str, anyio_backend: str
) -> None:
    # numpy 2 compares an integer array with any Python int (int8 == 300: False), where
    # arithmetic with it raises; the operators and the functions, each comparison.
    info = np.iinfo(dtype)
    a = np.array([info.min, 0, 5, info.max], dtype)
    x = await dev(a)
    for value in (info.max + 1, info.min - 1, 2**40, -(2**40), 5, info.max):
        for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
            got = await (await getattr(cuasync, name)(x, value)).to_host()
            check(got, getattr(np, name)(a, value))
        check(await (await (value < x)).to_host(), value < a)  # (reflected)
        check(await (await (x[::-1] == value)).to_host(), a[::-1] == value)  # (strided)
    with pytest.raises(ScalarOverflowError):  # (arithmetic still refuses it)
        cuasync.add(x, info.max + 1)


async def test_integer_division_and_python_floats_make_the_default_float(anyio_backend) -> None:
    # One default float dtype, float32 (the creation ops'), where numpy picks float64
    # for lack of a float operand; a float64 operand still makes float64.
    a, b = np.array([7, -3, 9], "int32"), np.array([2, 4, -5], "int32")
    x, y = await dev(a), await dev(b)
    check(await (await (x / y)).to_host(), (a / b).astype("float32"))
    check(await (await (x * 0.5)).to_host(), (a * 0.5).astype("float32"))
    check(await (await cuasync.exp(x)).to_host(), np.exp(a).astype("float32"))
    check(
        await (await cuasync.where(x > 0, x, 0.5)).to_host(),
        np.where(a > 0, a, 0.5).astype("float32"),
    )
    f = await dev(a.astype("float64"))
    check(await (await (f / y)).to_host(), a.astype("float64") / b)  # data dtype wins
    u, s = np.array([1, 2], "uint64"), np.array([3, -4], "int64")
    check(await (await (await dev(u) + await dev(s))).to_host(), u + s)  # numpy's float64


async def test_clip_takes_int_bounds_an_integer_x_never_passes(anyio_backend: str) -> None:
    # numpy 2: a bound below uint8's least value (or above its largest) clips nothing;
    # one that would clip every element to a value uint8 cannot hold raises.
    a = np.array([0, 5, 200], "uint8")
    x = await dev(a)
    for lo, hi in ((-1, 1000), (-1, None), (None, 1000), (3, 1000), (-(2**70), 7)):
        got = await (await cuasync.clip(x, lo, hi)).to_host()
        check(got, np.clip(a, lo, hi))
    for lo, hi in ((300, 1000), (-5, -1)):
        with pytest.raises(ScalarOverflowError, match=r"clip\(x, lo, hi\)"):
            cuasync.clip(x, lo, hi)
    for lo, hi in ((-1, 1000), (-1, None), (None, 1000)):  # (an op: read once)
        check(await (await cuasync.clip(x + 1, lo, hi)).to_host(), np.clip(a + 1, lo, hi))


async def test_clip_takes_none_for_a_missing_bound(anyio_backend: str) -> None:
    # The standard's clip(x, min=None, max=None); clip(x, None, 3) raised ArgumentError.
    a = np.array([-2.0, 0.5, 4.0, np.nan], "float32")
    x = await dev(a)
    check(await (await cuasync.clip(x, None, 3)).to_host(), np.clip(a, None, 3))
    check(await (await cuasync.clip(x, lo=0.0)).to_host(), np.clip(a, 0.0, None))
    check(await (await cuasync.clip(x)).to_host(), a)
    check(await (await cuasync.clip(x * 2, None, 1.0)).to_host(), np.clip(a * 2, None, 1.0))
    out = await cuasync.zeros((4,))
    await cuasync.clip(x, None, 1.0, out=out)
    check(await out.to_host(), np.clip(a, None, 1.0))
    with pytest.raises(ArgumentError, match="hi must be"):
        cuasync.clip(x, None, "3")  # type: ignore[arg-type]
