"""``astype``/``convert`` with numpy's ``casting`` names, and ``casting="checked"``
(issue 33 item 2): refused casts raise ``DTypeError`` when the op is built; a checked
cast raises ``CastOverflowError`` when it lands if a value did not fit, on both backends
(the kernel raises a device flag, read back with the op's completion)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from helpers import still_pending
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cuasync
import cuasync.testing as ct
from cuasync._launch.twins import overflows
from cuasync.errors import ArgumentError, CastOverflowError, DTypeError, KernelError

pytestmark = pytest.mark.anyio

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
DTYPES += ["float16", "float32", "float64", "complex64", "complex128"]
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("casting", ["no", "equiv", "safe", "same_kind", "unsafe"])
async def test_casting_names_allow_what_numpy_can_cast_allows(
    casting: str, anyio_backend: str
) -> None:
    x = await cuasync.from_host(np.arange(3, dtype="int16"))
    for name in [*DTYPES, BF16]:
        dt = np.dtype(name)
        if np.can_cast(np.int16, dt, casting):  # type: ignore[arg-type]
            got = await (await x.astype(dt, casting=casting)).to_host()
            np.testing.assert_array_equal(got, np.arange(3, dtype="int16").astype(dt))
        else:
            with pytest.raises(DTypeError, match=f"cannot cast int16 to .* casting='{casting}'"):
                x.astype(dt, casting=casting)


async def test_a_bad_casting_name_is_an_argument_error(anyio_backend: str) -> None:
    x = await cuasync.zeros((2,))
    with pytest.raises(ArgumentError, match="casting must be one of"):
        x.astype("int8", casting="wrap")
    doubled = x * 2.0
    with pytest.raises(DTypeError, match="casting='safe'"):
        doubled.astype("int8", casting="safe")  # a TensorOp's astype checks too, when built
    await doubled  # and leaves the op unconsumed


async def test_checked_cast_raises_on_overflow_and_nan_to_int(anyio_backend: str) -> None:
    big = await cuasync.from_host(np.array([1.0, 1e10, 3.5]))
    assert isinstance(CastOverflowError("x"), KernelError)
    unchecked = await (await big.astype("int8")).to_host()  # numpy's (undefined) values
    assert unchecked[0] == 1 and unchecked[2] == 3
    with pytest.raises(CastOverflowError, match="does not fit in int8"):
        await big.astype("int8", casting="checked")
    nan = await cuasync.from_host(np.array([0.0, np.nan], "float32"))
    with pytest.raises(CastOverflowError):
        await nan.astype("int32", casting="checked")
    with pytest.raises(CastOverflowError):  # finite float32 past float16's range
        await (await cuasync.from_host(np.array([7e4], "float32"))).astype(
            "float16", casting="checked"
        )
    with pytest.raises(CastOverflowError):  # an integer out of range
        await (await cuasync.from_host(np.array([-1], "int64"))).astype("uint64", casting="checked")
    fits = await cuasync.from_host(np.array([-128.9, 127.9, np.inf, np.nan]))
    got = await (await fits[:2].astype("int8", casting="checked")).to_host()
    np.testing.assert_array_equal(got, np.array([-128, 127], "int8"))  # truncated: fits
    inf = await (await fits[2:].astype("float16", casting="checked")).to_host()
    assert np.isinf(inf[0]) and np.isnan(inf[1])  # inf and NaN stay: not an overflow


async def test_checked_cast_fails_the_op_that_fuses_it(anyio_backend: str) -> None:
    # The checked cast runs inside the consumer's submission: the flag is read when that
    # lands, and the consumer fails; a shared op fails for every awaiter.
    x = await cuasync.from_host(np.array([100, 300], "int32"))
    with pytest.raises(CastOverflowError, match="uint8"):
        await (x.astype("uint8", casting="checked") + 1)
    shared = x.astype("int8", casting="checked").shared()
    for _ in range(2):
        with pytest.raises(CastOverflowError):
            await shared
    ok = await (x.astype("int16", casting="checked") * 2)
    np.testing.assert_array_equal(await ok.to_host(), np.array([200, 600], "int16"))


async def test_checked_cast_never_blocks_and_raises_when_it_lands(anyio_backend: str) -> None:
    # The flag is read back with the op's completion: submitting behind a closed gate
    # returns at once (no host sync), the op stays pending, and fails once the gate opens.
    x = await cuasync.from_host(np.array([1e10], "float32"))
    with ct.gate() as gate:
        pending = x.astype("int8", casting="checked").submit()
        assert still_pending(pending.done)
        gate.open()
        with pytest.raises(CastOverflowError):
            await pending


def test_checked_cast_of_bfloat16_and_complex() -> None:
    b = cuasync.from_host(np.array([3e38, 1.0], BF16)).sync()
    with pytest.raises(CastOverflowError):
        b.astype("float16", casting="checked").sync()
    c = cuasync.from_host(np.array([1 + 5j, 3e9 + 0j], "complex64")).sync()
    with pytest.raises(CastOverflowError):
        c.astype("int32", casting="checked").sync()
    got = c[:1].astype("int32", casting="checked").sync().to_host().sync()
    np.testing.assert_array_equal(got, np.array([1], "int32"))  # the real part fits


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=st.data(),
    src=st.sampled_from(["float64", "float32", "int64", "int16", "uint32", "float16"]),
    dst=st.sampled_from(["int8", "uint8", "int32", "uint64", "float16", "bool"]),
)
def test_property_checked_cast_vs_numpy(data: Any, src: str, dst: str) -> None:
    ndim = data.draw(st.integers(0, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    scale = data.draw(st.sampled_from([10.0, 200.0, 1e5, 1e12]))
    values = rng.standard_normal(tuple(2 * d for d in shape)) * scale
    if data.draw(st.booleans()) and values.size:
        values.flat[0] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, 0.0]))
    with np.errstate(all="ignore"):
        host = values.astype(src)
    view = host[tuple(slice(None, None, 2) for _ in shape)]
    x = cuasync.from_host(host).sync()[tuple(slice(None, None, 2) for _ in shape)]
    with np.errstate(all="ignore"):
        want = view.astype(dst)
    if overflows(np.ascontiguousarray(view), want, np.dtype(dst)):
        with pytest.raises(CastOverflowError):
            x.astype(dst, casting="checked").sync()
        return
    got = x.astype(dst, casting="checked").sync().to_host().sync()
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


def test_overflows_twin_matches_the_ranges() -> None:
    i8 = np.dtype("int8")
    assert overflows(np.array([127.99, -128.99]), np.zeros(2, i8), i8) is False
    assert overflows(np.array([128.0]), np.zeros(1, i8), i8) is True
    assert overflows(np.array([-129.0]), np.zeros(1, i8), i8) is True
    i64 = np.dtype("int64")
    assert overflows(np.array([-(2.0**63)]), np.zeros(1, i64), i64) is False
    assert overflows(np.array([2.0**63]), np.zeros(1, i64), i64) is True
    u64 = np.dtype("uint64")
    assert overflows(np.array([2**63], "uint64"), np.zeros(1, u64), u64) is False
    assert overflows(np.array([-1], "int64"), np.zeros(1, u64), u64) is True
    assert overflows(np.array([-0.9]), np.zeros(1, u64), u64) is False
